#include "structured/utf8_ranges.h"

#include <algorithm>

#include "structured/grammar.h"
#include "tokenizer/utf8.h"

namespace pagoda::structured {

size_t utf8_decode_one(std::string_view s, uint32_t* cp) {
  if (s.empty()) return 0;
  const auto b0 = static_cast<unsigned char>(s[0]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t n;
  uint32_t v, min;
  if ((b0 & 0xE0) == 0xC0) n = 2, v = b0 & 0x1F, min = 0x80;
  else if ((b0 & 0xF0) == 0xE0) n = 3, v = b0 & 0x0F, min = 0x800;
  else if ((b0 & 0xF8) == 0xF0) n = 4, v = b0 & 0x07, min = 0x10000;
  else return 0;
  if (s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if ((b & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3F);
  }
  if (v < min || v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return n;
}

std::string utf8_encode(uint32_t cp) {
  std::string out;
  utf8::append(out, cp);
  return out;
}

CodePointRanges normalize_ranges(CodePointRanges ranges) {
  std::sort(ranges.begin(), ranges.end());
  CodePointRanges out;
  for (const auto& r : ranges) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

CodePointRanges complement_ranges(const CodePointRanges& ranges) {
  CodePointRanges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

}  // namespace pagoda::structured
