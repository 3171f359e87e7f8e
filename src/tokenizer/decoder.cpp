#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/text_pipeline.h"
#include "tokenizer/utf8.h"

namespace pagoda {

namespace {

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->apply(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      for (size_t i = 0; (i = t.find(from_, i)) != std::string::npos; i += to_.size()) {
        t.replace(i, from_.size(), to_);
      }
    }
  }

 private:
  std::string from_, to_;
};

// Runs of <0xNN> tokens become the bytes they name: valid UTF-8 text, or
// one U+FFFD per byte when the run is not valid UTF-8 (HF behaviour).
class ByteFallbackDecoder : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t run = 0;
    auto flush = [&] {
      if (run == 0) return;
      const std::string text = utf8::lossy(bytes);
      if (text.find(utf8::kReplacement) == std::string::npos) {
        out.push_back(text);
      } else {
        for (size_t i = 0; i < run; ++i) out.emplace_back(utf8::kReplacement);
      }
      bytes.clear();
      run = 0;
    };
    for (std::string& t : tokens) {
      unsigned value;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
          std::sscanf(t.c_str() + 3, "%2X", &value) == 1) {
        bytes += static_cast<char>(value);
        ++run;
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens.swap(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing copies of `content`
// from every token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      for (size_t i = 0; i < start_ && t.compare(0, content_.size(), content_) == 0; ++i) {
        t.erase(0, content_.size());
      }
      for (size_t i = 0; i < stop_ && t.size() >= content_.size() &&
                         t.compare(t.size() - content_.size(), content_.size(), content_) == 0;
           ++i) {
        t.erase(t.size() - content_.size());
      }
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class ByteLevelDecoder : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, utf8::lossy(byte_level::decode(all)));
  }
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const auto& p : j.at("decoders")) {
      if (auto d = make_decoder(p, where)) parts.push_back(std::move(d));
    }
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  if (type == "Replace") {
    if (!j.at("pattern").contains("String")) {
      throw_input_error("{}: Replace decoder with a regex pattern is not supported", where);
    }
    return std::make_unique<ReplaceDecoder>(j["pattern"]["String"].get<std::string>(),
                                            j.at("content").get<std::string>());
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    return std::make_unique<StripDecoder>(j.at("content").get<std::string>(), j.value("start", 0),
                                          j.value("stop", 0));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  throw_input_error("{}: decoder type '{}' is not supported", where, type);
}

}  // namespace pagoda
