#include "server/prompt_logprobs_json.h"

#include <cmath>
#include <string>
#include <vector>

namespace pagoda::server {

namespace {

double finite_logprob(float v) { return std::isfinite(v) ? v : -9999.0; }

}  // namespace

nlohmann::json prompt_logprobs_json(const PromptLogprobs& lp, const Tokenizer& tok) {
  // vLLM decodes each id alone, specials included (HF's decode default).
  auto decoded = [&](int32_t id) { return tok.decode(std::vector<int32_t>{id}, false); };
  nlohmann::json list = nlohmann::json::array();
  list.push_back(nullptr);
  for (size_t i = 0; i < lp.size(); ++i) {
    nlohmann::json entry = nlohmann::json::object();
    const int32_t token = lp.token(i);
    entry[std::to_string(token)] = {{"logprob", finite_logprob(lp.logprob(i))},
                                    {"rank", lp.rank(i)},
                                    {"decoded_token", decoded(token)}};
    const auto ids = lp.top_ids(i);
    const auto logprobs = lp.top_logprobs(i);
    for (size_t k = 0; k < ids.size(); ++k) {
      if (ids[k] < 0) break;  // a vocabulary smaller than N
      entry[std::to_string(ids[k])] = {{"logprob", finite_logprob(logprobs[k])},
                                       {"rank", static_cast<int32_t>(k + 1)},
                                       {"decoded_token", decoded(ids[k])}};
    }
    list.push_back(std::move(entry));
  }
  return list;
}

}  // namespace pagoda::server
