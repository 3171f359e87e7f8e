// vLLM's bad_words tokenization with the real Qwen3 tokenizer. The expected
// ids were taken from @huggingface/tokenizers (tests/js) on the same
// tokenizer.json, not from Pagoda's tokenizer.
#include <gtest/gtest.h>

#include "engine/bad_words.h"

namespace pagoda {
namespace {

TEST(BadWords, EachWordAloneAndAfterASpace) {
  const auto tok = Tokenizer::load(PAGODA_TEST_DATA_DIR "/tokenizers/qwen3");
  using Ids = std::vector<std::vector<int32_t>>;
  // "hello" = [14990], " hello" = [23811]: both banned.
  EXPECT_EQ(bad_words_token_ids(*tok, {"hello"}), (Ids{{14990}, {23811}}));
  // Leading spaces are stripped first (vLLM's lstrip), so this is the same.
  EXPECT_EQ(bad_words_token_ids(*tok, {"   hello"}), (Ids{{14990}, {23811}}));
  // Multi-token words: "Paris weather" = [59604, 9104], " Paris weather" =
  // [12095, 9104]; "get_weather" = [455, 69364], " get_weather" = [633, 69364].
  EXPECT_EQ(bad_words_token_ids(*tok, {"Paris weather", "get_weather"}),
            (Ids{{59604, 9104}, {12095, 9104}, {455, 69364}, {633, 69364}}));
  EXPECT_EQ(bad_words_token_ids(*tok, {}), Ids{});
}

}  // namespace
}  // namespace pagoda
