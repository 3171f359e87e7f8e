// Byte-level BPE tokenizers (Qwen3, Llama-3) against Hugging Face's own
// JavaScript implementation, run by the tokenizer_oracle_setup CTest
// fixture (tests/js/tokenizer_oracle.mjs) over tests/data/tokenizer_corpus.jsonl.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

void check_against_oracle(const std::string& name) {
  const std::string oracle_path = std::string(PAGODA_ORACLE_DIR) + "/" + name + ".jsonl";
  std::ifstream in(oracle_path);
  ASSERT_TRUE(in) << oracle_path
                  << " is missing: run the tokenizer_oracle_setup test (ctest) first";
  const auto tok = Tokenizer::load(std::string(PAGODA_TEST_DATA_DIR) + "/tokenizers/" + name);
  std::string line;
  int cases = 0, normalized = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    const std::string text = j["text"];
    const std::vector<int32_t> ids = j["ids"], ids_with_special = j["ids_with_special"];
    EXPECT_EQ(tok->encode(text, false), ids) << name << " text: " << text;
    EXPECT_EQ(tok->encode(text, true), ids_with_special) << name << " text: " << text;
    const std::string decoded = j["decoded"];
    EXPECT_EQ(tok->decode(ids, /*skip_special_tokens=*/false), decoded)
        << name << " decode: " << text;
    // Round trip: exact, except where the normalizer (NFC) changed the text.
    if (decoded != text) {
      ++normalized;
    } else {
      EXPECT_EQ(tok->decode(tok->encode(text, false), false), text) << name << " round trip";
    }
    ++cases;
  }
  EXPECT_GE(cases, 60);
  EXPECT_LE(normalized, 3);  // only the NFC cases of the corpus
}

TEST(Oracle, Qwen3MatchesHuggingFace) { check_against_oracle("qwen3"); }
TEST(Oracle, Llama3MatchesHuggingFace) { check_against_oracle("llama3"); }

}  // namespace
}  // namespace pagoda
