// `pagoda bench`: the subcommands of bench_*.cpp under one command.
#include <utility>
#include <vector>

#include "cli/bench.h"

namespace pagoda::cli {

Runner add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  std::vector<std::pair<CLI::App*, Runner>> runners;
  for (auto add : {add_bench_throughput, add_bench_roofline, add_bench_latency,
                    add_bench_structured}) {
    Runner run = add(*bench);
    runners.emplace_back(bench->get_subcommands({}).back(), std::move(run));
  }
  return [runners] {
    for (const auto& [cmd, run] : runners) {
      if (cmd->parsed()) return run();
    }
    return 2;
  };
}

}  // namespace pagoda::cli
