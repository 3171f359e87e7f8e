// GPT-2's reversible byte <-> printable-unicode map used by byte-level BPE
// (Qwen2/3, Llama-3): every byte becomes one visible character so merges can
// work on text.
#pragma once

#include <string>
#include <string_view>

namespace pagoda::byte_level {

// Each byte of `bytes` replaced by its mapped character (UTF-8 encoded).
std::string encode(std::string_view bytes);
// Inverse: mapped characters back to bytes; characters outside the map keep
// their own UTF-8 bytes.
std::string decode(std::string_view text);

}  // namespace pagoda::byte_level
