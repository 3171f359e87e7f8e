// Encode/decode against goldens produced by independent implementations
// (llama2.c's run.c encoder for both files; see their READMEs).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

void check_golden_file(const std::string& model_dir, const std::string& golden_path) {
  const auto tok = Tokenizer::load(model_dir);
  std::ifstream in(golden_path);
  ASSERT_TRUE(in) << golden_path;
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    const std::string text = j["text"];
    const std::vector<int32_t> ids = j["ids"];
    EXPECT_EQ(tok->encode(text), ids) << "text: " << text;
    EXPECT_EQ(tok->decode(ids), j["decoded"].get<std::string>()) << "text: " << text;
    ++cases;
  }
  EXPECT_EQ(cases, 48);
}

TEST(TokenizerGoldens, Stories260k) {
  check_golden_file(PAGODA_MODELS_DIR "/stories260k",
                    PAGODA_MODELS_DIR "/stories260k/tokenizer_golden.jsonl");
}

TEST(TokenizerGoldens, Llama2Sp32k) {
  check_golden_file(PAGODA_TEST_DATA_DIR "/tokenizers/llama2-sp32k",
                    PAGODA_TEST_DATA_DIR "/tokenizers/llama2-sp32k/encode_golden.jsonl");
}

TEST(TokenizerGoldens, SpecialTokensAndIds) {
  const auto tok = Tokenizer::load(PAGODA_MODELS_DIR "/stories260k");
  EXPECT_EQ(tok->bos_token_id(), 1);
  EXPECT_EQ(tok->eos_token_id(), 2);
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_TRUE(tok->is_special(1));
  EXPECT_FALSE(tok->is_special(300));
  // Without special tokens no BOS is added; literal "</s>" is the special token.
  const auto ids = tok->encode("Hi</s>", /*add_special_tokens=*/false);
  ASSERT_FALSE(ids.empty());
  EXPECT_NE(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  EXPECT_EQ(tok->decode(ids, /*skip_special_tokens=*/false), "Hi</s>");
  EXPECT_EQ(tok->decode(ids, /*skip_special_tokens=*/true), "Hi");
}

}  // namespace
}  // namespace pagoda
