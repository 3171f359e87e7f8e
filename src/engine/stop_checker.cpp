#include "engine/stop_checker.h"

#include <algorithm>

namespace pagoda {

StopChecker::StopChecker(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& s : stops_) longest_ = std::max(longest_, s.size());
}

std::optional<size_t> StopChecker::find(std::string_view text, size_t num_new_bytes) const {
  if (stops_.empty()) return std::nullopt;
  const size_t old_len = text.size() - std::min(num_new_bytes, text.size());
  // A new match must end inside the new bytes, so it starts at or after:
  const size_t from = old_len + 1 > longest_ ? old_len + 1 - longest_ : 0;
  std::optional<size_t> earliest;
  for (const std::string& s : stops_) {
    const size_t pos = text.find(s, from);
    if (pos != std::string_view::npos && (!earliest || pos < *earliest)) earliest = pos;
  }
  return earliest;
}

size_t StopChecker::hold_back(std::string_view text) const {
  size_t hold = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, text.size());
    for (size_t len = max_len; len > hold; --len) {
      if (text.substr(text.size() - len) == std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  return hold;
}

}  // namespace pagoda
