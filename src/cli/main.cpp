// pagoda: run and serve LLMs. Subcommands live in cli/*_command.cpp.
#include <cstdio>
#include <map>
#include <string>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"Pagoda: run and serve large language models on CPU", "pagoda"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "pagoda 0.1.0");
  std::map<CLI::App*, pagoda::cli::Runner> runners;
  auto add = [&](pagoda::cli::Runner (*fn)(CLI::App&)) {
    const size_t before = app.get_subcommands({}).size();
    pagoda::cli::Runner run = fn(app);
    runners[app.get_subcommands({})[before]] = std::move(run);
  };
  add(pagoda::cli::add_generate_command);
  add(pagoda::cli::add_logits_command);
  add(pagoda::cli::add_bench_command);
  add(pagoda::cli::add_serve_command);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; bad flags exit 2 with CLI11's message.
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    for (const auto& [cmd, run] : runners) {
      if (cmd->parsed()) return run();
    }
  } catch (const pagoda::InputError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
