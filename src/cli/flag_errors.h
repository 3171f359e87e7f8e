// Applying a flag's value from its CLI11 callback. CLI11 runs option
// callbacks inside App::parse and only turns its own exceptions into a
// usage error (message + exit 2); anything else escapes parse. A value the
// callback rejects with pagoda's InputError (--isa naming kernels this CPU
// lacks) is therefore rethrown as CLI::ValidationError naming the flag, so
// it ends like every other bad flag instead of in std::terminate.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <utility>

#include "core/error.h"

namespace pagoda::cli {

template <typename Apply>
void apply_flag(const std::string& flag, Apply&& apply) {
  try {
    std::forward<Apply>(apply)();
  } catch (const InputError& e) {
    throw CLI::ValidationError(flag, e.what());
  }
}

}  // namespace pagoda::cli
