// apply_flag: a value rejected by a flag's callback with InputError (as
// --isa does for kernels the CPU lacks) becomes CLI11's usage error naming
// the flag, which main turns into the message and exit code 2. Without it
// the InputError escapes App::parse, which main only guarded for CLI11's
// own errors (the "terminate called ... InputError", exit 134, of --isa
// avx512bf16 on an AVX2-only CPU).
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "cli/flag_errors.h"
#include "core/error.h"

namespace pagoda::cli {
namespace {

void reject(const std::string&) { throw_input_error("this CPU does not support the x kernels"); }

TEST(FlagErrors, RejectedValueIsAUsageErrorNamingTheFlag) {
  CLI::App app;
  app.add_option_function<std::string>(
      "--isa", [](const std::string& v) { apply_flag("--isa", [&] { reject(v); }); }, "");
  std::vector<std::string> args = {"x", "--isa"};  // CLI11 parses a reversed vector
  try {
    app.parse(args);
    FAIL() << "parse accepted a rejected value";
  } catch (const CLI::ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("--isa"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("does not support the x kernels"), std::string::npos)
        << e.what();
    std::ostringstream out, err;
    EXPECT_NE(app.exit(e, out, err), 0);  // main maps every non-zero exit to 2
  }
}

TEST(FlagErrors, AcceptedValueIsApplied) {
  CLI::App app;
  std::string applied;
  app.add_option_function<std::string>(
      "--isa", [&](const std::string& v) { apply_flag("--isa", [&] { applied = v; }); }, "");
  std::vector<std::string> args = {"avx2", "--isa"};
  app.parse(args);
  EXPECT_EQ(applied, "avx2");
}

// Why apply_flag exists: CLI11 lets other exceptions out of parse unchanged.
TEST(FlagErrors, RawInputErrorEscapesParse) {
  CLI::App app;
  app.add_option_function<std::string>("--isa", reject, "");
  std::vector<std::string> args = {"x", "--isa"};
  EXPECT_THROW(app.parse(args), InputError);
}

}  // namespace
}  // namespace pagoda::cli
