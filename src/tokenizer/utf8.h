// Small UTF-8 helpers shared by the tokenizer pieces.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pagoda::utf8 {

// Length of the UTF-8 sequence starting with byte b (1 for invalid lead bytes).
int sequence_length(unsigned char b);
// Appends the UTF-8 encoding of code point cp.
void append(std::string& out, uint32_t cp);
// Replaces every maximal invalid subsequence with U+FFFD (like Rust's
// String::from_utf8_lossy, which HF tokenizers use when decoding).
std::string lossy(std::string_view bytes);
// True when `s` ends with an incomplete (but so far valid) UTF-8 sequence.
bool ends_incomplete(std::string_view s);

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace pagoda::utf8
