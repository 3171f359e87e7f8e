// Finding a marker in text that arrives in pieces: what may be emitted now
// and what must wait because it could be the start of the marker.
#pragma once

#include <cstddef>
#include <string_view>

namespace pagoda::server {

// The length of the longest suffix of `text` that is a proper prefix of
// `marker` (0 when none): that many bytes must be held back until more
// text says whether the marker is there.
size_t partial_marker_suffix(std::string_view text, std::string_view marker);

}  // namespace pagoda::server
