#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include "core/error.h"
#include "tokenizer/text_pipeline.h"

namespace pagoda {

namespace {

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  void apply(std::string& text) const override {
    for (const auto& p : parts_) p->apply(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void apply(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::string from, std::string to)
      : from_(std::move(from)), to_(std::move(to)) {}
  void apply(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    size_t i = 0;
    for (size_t hit; (hit = text.find(from_, i)) != std::string::npos; i = hit + from_.size()) {
      out.append(text, i, hit - i).append(to_);
    }
    out.append(text, i, std::string::npos);
    text.swap(out);
  }

 private:
  std::string from_, to_;
};

class NfcNormalizer : public Normalizer {
 public:
  void apply(std::string& text) const override {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
    if (U_FAILURE(status)) throw InternalError("ICU NFC normalizer unavailable");
    const icu::UnicodeString in = icu::UnicodeString::fromUTF8(text);
    if (nfc->isNormalized(in, status) && U_SUCCESS(status)) return;
    status = U_ZERO_ERROR;
    const icu::UnicodeString out = nfc->normalize(in, status);
    if (U_FAILURE(status)) return;
    text.clear();
    out.toUTF8String(text);
  }
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& p : j.at("normalizers")) {
      if (auto n = make_normalizer(p, where)) parts.push_back(std::move(n));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  if (type == "Prepend")
    return std::make_unique<PrependNormalizer>(j.at("prepend").get<std::string>());
  if (type == "Replace") {
    if (!j.at("pattern").contains("String")) {
      throw_input_error("{}: Replace normalizer with a regex pattern is not supported", where);
    }
    return std::make_unique<ReplaceNormalizer>(j["pattern"]["String"].get<std::string>(),
                                               j.at("content").get<std::string>());
  }
  if (type == "NFC") return std::make_unique<NfcNormalizer>();
  throw_input_error("{}: normalizer type '{}' is not supported", where, type);
}

}  // namespace pagoda
