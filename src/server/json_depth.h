// A bound on how deeply a request body's JSON nests, checked before any
// parser sees it. nlohmann's parser, its copies, its dump and the chat
// template's value conversion all recurse once per level, so one 200 KB
// body of nested arrays would overflow the stack; with the depth bounded
// here, nothing downstream recurses on client data without a bound.
#pragma once

#include <cstddef>
#include <string_view>

namespace pagoda::server {

// Deepest nesting of arrays/objects a request body may have. Real requests
// (JSON-schema tools included) stay far below; 128 frames of any recursive
// JSON walk are a few KB of stack.
inline constexpr size_t kMaxJsonDepth = 128;

// True when `body` opens more than `limit` arrays/objects at once. A single
// iterative pass that skips string contents (escapes included); it does not
// validate the JSON, the parser does that afterwards.
bool json_exceeds_depth(std::string_view body, size_t limit = kMaxJsonDepth);

}  // namespace pagoda::server
