// Errors raised inside the library. Edges (CLI, server) turn them into
// user-facing messages; nothing below catches them silently.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace pagoda {

// A problem with user-supplied input: a flag, a prompt, a checkpoint file.
// The message is meant for the user and names what is wrong and where.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A broken internal invariant (a bug in Pagoda, not in the input).
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

template <typename... Args>
[[noreturn]] void throw_input_error(fmt::format_string<Args...> f, Args&&... args) {
  throw InputError(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace pagoda

#define PAGODA_CHECK(cond, ...)                                                               \
  do {                                                                                        \
    if (!(cond))                                                                              \
      throw ::pagoda::InternalError(std::string(__FILE__ ":") + std::to_string(__LINE__) +    \
                                    ": check failed: " #cond " " + fmt::format(__VA_ARGS__)); \
  } while (0)
