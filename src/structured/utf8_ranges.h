// Code point helpers for character classes: UTF-8 decoding of one
// character, encoding, and sorted range sets (normalize, complement).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda::structured {

using CodePointRanges = std::vector<std::pair<uint32_t, uint32_t>>;

// Decodes the character at the start of s into *cp; returns its byte
// length, or 0 when s does not start with a complete valid character.
size_t utf8_decode_one(std::string_view s, uint32_t* cp);
std::string utf8_encode(uint32_t cp);
// Sorted, merged, disjoint.
CodePointRanges normalize_ranges(CodePointRanges ranges);
// [0, U+10FFFF] minus the (normalized) ranges.
CodePointRanges complement_ranges(const CodePointRanges& ranges);

}  // namespace pagoda::structured
