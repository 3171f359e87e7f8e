// Finds stop strings in a request's growing output text, and tells a
// streaming caller how much of the tail to hold back because it could be
// the start of a stop string.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

class StopChecker {
 public:
  StopChecker() = default;
  explicit StopChecker(std::vector<std::string> stops);

  // `text` is the whole output so far, whose last `num_new_bytes` bytes were
  // just appended. Returns where to cut the text (the start of the earliest
  // stop string that the new bytes completed), or nullopt. Only the region a
  // new match can touch is searched.
  std::optional<size_t> find(std::string_view text, size_t num_new_bytes) const;

  // Number of bytes at the end of `text` that are a proper prefix of some
  // stop string (and so must not be streamed yet).
  size_t hold_back(std::string_view text) const;

 private:
  std::vector<std::string> stops_;
  size_t longest_ = 0;
};

}  // namespace pagoda
