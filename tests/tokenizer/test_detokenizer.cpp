// Incremental detokenization: pieces are valid UTF-8 and add up to
// decode(prompt + output) minus decode(prompt), as the goldens define.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace pagoda {
namespace {

TEST(Detokenizer, StreamsGoldenTextExactly) {
  const std::string dir = PAGODA_MODELS_DIR "/stories260k";
  const auto tok = Tokenizer::load(dir);
  std::ifstream in(dir + "/golden.jsonl");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    const std::vector<int32_t> prompt = j["prompt_token_ids"], output = j["greedy_token_ids"];
    IncrementalDetokenizer detok(*tok, prompt);
    std::string streamed;
    for (int32_t id : output) streamed += detok.push(id);
    streamed += detok.flush();
    EXPECT_EQ(streamed, j["text"].get<std::string>());
    EXPECT_EQ(detok.text(), streamed);
    ++n;
  }
  EXPECT_EQ(n, 3);
}

bool valid_utf8(const std::string& s) { return utf8::lossy(s) == s; }

TEST(Detokenizer, NeverSplitsMultibyteCharacters) {
  const auto tok = Tokenizer::load(PAGODA_TEST_DATA_DIR "/tokenizers/qwen3");
  const std::string text =
      "你好，世界！😀👍🏽 家族👨‍👩‍👧‍👦 café ١٢٣ done";
  const auto prompt = tok->encode("Say:", false);
  const auto ids = tok->encode(text, false);
  IncrementalDetokenizer detok(*tok, prompt);
  std::string streamed;
  int empty_pieces = 0;
  for (int32_t id : ids) {
    const std::string piece = detok.push(id);
    EXPECT_TRUE(valid_utf8(piece)) << "piece splits a character";
    EXPECT_EQ(piece.find(utf8::kReplacement), std::string::npos);
    empty_pieces += piece.empty();
    streamed += piece;
  }
  streamed += detok.flush();
  EXPECT_EQ(streamed, text);
  EXPECT_GT(empty_pieces, 0);  // some ids were byte pieces that had to wait
}

TEST(Detokenizer, FlushReplacesAnIncompleteTail) {
  const auto tok = Tokenizer::load(PAGODA_TEST_DATA_DIR "/tokenizers/qwen3");
  // A character rare enough to be spelled as several byte tokens.
  auto ids = tok->encode("\xF0\x93\x82\x80", false);  // U+13080 EGYPTIAN HIEROGLYPH D010
  ASSERT_GT(ids.size(), 1u);
  ids.pop_back();  // the emoji's bytes are now incomplete
  IncrementalDetokenizer detok(*tok, std::vector<int32_t>{});
  std::string streamed;
  for (int32_t id : ids) streamed += detok.push(id);
  EXPECT_EQ(streamed, "");
  EXPECT_EQ(detok.flush(), std::string(utf8::kReplacement));
}

TEST(Tokenizer, Utf8Lossy) {
  EXPECT_EQ(utf8::lossy("ok"), "ok");
  EXPECT_EQ(utf8::lossy("a\xFF"
                        "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(utf8::lossy("\xE4\xBD"), "\xEF\xBF\xBD");  // truncated 3-byte char: one U+FFFD
  EXPECT_EQ(utf8::lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_TRUE(utf8::ends_incomplete("x\xE4\xBD"));
  EXPECT_FALSE(utf8::ends_incomplete("x\xE4\xBD\xA0"));
}

TEST(Tokenizer, InvalidUtf8InputIsReplacedNotFatal) {
  const auto tok = Tokenizer::load(PAGODA_TEST_DATA_DIR "/tokenizers/qwen3");
  const auto ids = tok->encode("bad \xFF\xFE bytes", false);
  EXPECT_EQ(tok->decode(ids), "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes");
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("pagoda_tok_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
             "_" + std::to_string(reinterpret_cast<uintptr_t>(this)));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name, const std::string& content) const {
    std::ofstream(path_ / name) << content;
    return path_.string();
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

void expect_input_error(const std::string& dir, const std::string& needle) {
  try {
    Tokenizer::load(dir);
    ADD_FAILURE() << "expected InputError containing '" << needle << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, BadFilesAreRefusedWithTheFileName) {
  TempDir missing;
  expect_input_error(missing.path(), "tokenizer.json");
  TempDir bad_json;
  bad_json.file("tokenizer.json", "{ not json");
  expect_input_error(bad_json.path(), "invalid JSON");
  TempDir wordpiece;
  wordpiece.file("tokenizer.json", R"({"model": {"type": "WordPiece", "vocab": {}}})");
  expect_input_error(wordpiece.path(), "WordPiece");
  TempDir bad_merge;
  bad_merge.file("tokenizer.json",
                 R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})");
  expect_input_error(bad_merge.path(), "merge #0");
  TempDir bad_regex;
  bad_regex.file("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
      "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"}})");
  expect_input_error(bad_regex.path(), "regex");
}

}  // namespace
}  // namespace pagoda
