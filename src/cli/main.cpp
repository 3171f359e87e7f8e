// pagoda: run and serve LLMs. Subcommands live in cli/*_command.cpp.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <map>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "parallel/communicator.h"

namespace {

// Under mpirun every rank gets here. An error that all ranks raised alike
// (bad flags, a tensor-parallel mismatch, an agreed start-up failure) ends
// each rank cleanly; any other error on one rank aborts the whole job, since
// the others may be waiting in a collective for it.
int finish(int code) {
  pagoda::parallel::Communicator& world = pagoda::parallel::world();
  if (world.size() > 1 && code != 0 && !pagoda::parallel::exit_agreed()) {
    std::fflush(stdout);
    std::fflush(stderr);
    world.abort(code);
  }
  pagoda::parallel::finalize();
  return code;
}

std::string where() {
  const pagoda::parallel::Communicator& world = pagoda::parallel::world();
  if (world.size() == 1) return "";
  return " (rank " + std::to_string(world.rank()) + " of " + std::to_string(world.size()) + ")";
}

}  // namespace

int main(int argc, char** argv) {
  // Open MPI starts helper threads in init. A process-directed SIGINT or
  // SIGTERM goes to any thread that does not block it, and would kill the
  // process through one of those (default action) instead of reaching
  // `serve`'s sigwait: they are started with the signals blocked, and only
  // this thread gets its mask back.
  sigset_t stop_signals, old_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);
  pagoda::parallel::init(&argc, &argv);
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
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
  add(pagoda::cli::add_kv_plan_command);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; bad flags exit 2 with CLI11's message.
    const int code = app.exit(e);
    pagoda::parallel::mark_exit_agreed();  // every rank parsed the same flags
    return finish(code == 0 ? 0 : 2);
  } catch (const pagoda::InputError& e) {
    // A flag callback that rejected its value without apply_flag: still a
    // bad flag (exit 2), never an uncaught exception.
    pagoda::parallel::mark_exit_agreed();
    std::fprintf(stderr, "error%s: %s\n", where().c_str(), e.what());
    return finish(2);
  }
  try {
    for (const auto& [cmd, run] : runners) {
      if (cmd->parsed()) return finish(run());
    }
  } catch (const pagoda::parallel::ParallelConfigError& e) {
    pagoda::parallel::mark_exit_agreed();
    std::fprintf(stderr, "error%s: %s\n", where().c_str(), e.what());
    return finish(2);
  } catch (const pagoda::InputError& e) {
    std::fprintf(stderr, "error%s: %s\n", where().c_str(), e.what());
    return finish(2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error%s: %s\n", where().c_str(), e.what());
    return finish(1);
  }
  return finish(0);
}
