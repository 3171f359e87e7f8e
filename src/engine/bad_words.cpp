#include "engine/bad_words.h"

#include <algorithm>

namespace pagoda {

std::vector<std::vector<int32_t>> bad_words_token_ids(const Tokenizer& tok,
                                                      const std::vector<std::string>& words) {
  std::vector<std::vector<int32_t>> out;
  for (const std::string& word : words) {
    const std::string stripped = word.substr(std::min(word.find_first_not_of(' '), word.size()));
    if (stripped.empty()) continue;
    std::vector<int32_t> plain = tok.encode(stripped, false);
    if (plain.empty()) continue;
    std::vector<int32_t> spaced = tok.encode(" " + stripped, false);
    out.push_back(plain);
    if (!spaced.empty() && spaced.size() == plain.size() && spaced.front() != plain.front())
      out.push_back(std::move(spaced));
  }
  return out;
}

}  // namespace pagoda
