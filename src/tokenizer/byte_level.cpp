#include "tokenizer/byte_level.h"

#include <array>
#include <unordered_map>

#include "tokenizer/utf8.h"

namespace pagoda::byte_level {

namespace {

struct Tables {
  std::array<std::string, 256> byte_to_char;
  std::unordered_map<uint32_t, unsigned char> char_to_byte;

  Tables() {
    // Printable bytes map to themselves; the rest to 256, 257, ... in order.
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const uint32_t cp = printable ? b : next++;
      utf8::append(byte_to_char[b], cp);
      char_to_byte[cp] = static_cast<unsigned char>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

std::string encode(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += t.byte_to_char[b];
  return out;
}

std::string decode(std::string_view text) {
  const Tables& t = tables();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto b0 = static_cast<unsigned char>(text[i]);
    const int len = utf8::sequence_length(b0);
    uint32_t cp = b0;
    if (len > 1 && i + len <= text.size()) {
      cp = b0 & (0x7F >> len);
      for (int k = 1; k < len; ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    }
    const auto it = t.char_to_byte.find(cp);
    if (it != t.char_to_byte.end() && (len == 1 ? b0 < 0x80 : true)) {
      out += static_cast<char>(it->second);
    } else {
      out.append(text.substr(i, std::min<size_t>(len, text.size() - i)));
    }
    i += std::min<size_t>(len, text.size() - i);
  }
  return out;
}

}  // namespace pagoda::byte_level
