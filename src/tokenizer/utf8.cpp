#include "tokenizer/utf8.h"

namespace pagoda::utf8 {

int sequence_length(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) return 2;
  if ((b & 0xF0) == 0xE0) return 3;
  if ((b & 0xF8) == 0xF0) return 4;
  return 1;
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

// Length of the valid sequence at s[i], or 0 if it is invalid/incomplete;
// *valid_prefix gets how many bytes form a valid prefix of some sequence.
size_t valid_sequence(std::string_view s, size_t i, size_t* valid_prefix) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  *valid_prefix = 0;
  if (b0 < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  *valid_prefix = 1;
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= s.size()) return 0;
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
    *valid_prefix = k + 1;
  }
  return len;
}

}  // namespace

std::string lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t prefix;
    const size_t n = valid_sequence(s, i, &prefix);
    if (n) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append(kReplacement);
      i += prefix > 0 ? prefix : 1;
    }
  }
  return out;
}

bool ends_incomplete(std::string_view s) {
  // Look back over at most 3 bytes for a lead byte whose sequence runs past the end.
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const size_t i = s.size() - back;
    const auto b = static_cast<unsigned char>(s[i]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking
    size_t prefix;
    return valid_sequence(s, i, &prefix) == 0 && prefix == back;
  }
  return false;
}

}  // namespace pagoda::utf8
