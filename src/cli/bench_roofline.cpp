// `pagoda bench roofline`: the machine's limits measured with our own
// loops (read bandwidth, peak f32 / bf16 / int8 throughput of the
// instructions the selected ISA's kernels run), on one thread and on all
// kernel threads.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/bench.h"
#include "cli/commands.h"
#include "core/parallel.h"

namespace pagoda::cli {

namespace {

struct RooflineArgs {
  int threads = 0;  // 0 = all cores
  double seconds = 0.3;
  int64_t read_mib = 512;
  bool json = false;
};

int run_roofline(const RooflineArgs& a) {
  const int all = a.threads > 0 ? a.threads : num_threads();
  std::vector<int> counts = {1};
  if (all > 1) counts.push_back(all);
  nlohmann::json rows = nlohmann::json::array();
  for (int t : counts) {
    const ops::Roofline r = ops::measure_roofline(t, a.seconds, a.read_mib << 20);
    rows.push_back(roofline_json(r));
    if (!a.json) {
      if (t == 1) {
        std::printf("%s kernels: fp32 = %s, bf16 = %s, int8 = %s\n", ops::isa_name(r.isa),
                    r.fp32_probe, r.bf16_probe, r.int8_probe);
      }
      std::printf(
          "threads %2d: read %6.1f GB/s | fp32 FMA %7.1f GFLOP/s | bf16 dot %7.1f GFLOP/s | "
          "int8 dot %7.1f GOP/s\n",
          r.threads, r.read_gb_per_s, r.fp32_gflops, r.bf16_gflops, r.int8_gops);
    }
  }
  if (a.json) std::printf("%s\n", nlohmann::json{{"roofline", rows}}.dump().c_str());
  return 0;
}

}  // namespace

Runner add_bench_roofline(CLI::App& bench) {
  auto args = std::make_shared<RooflineArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "roofline", "Read bandwidth and peak f32/bf16/int8 throughput, 1 and all threads");
  cmd->add_option("--threads", args->threads, "Threads of the second row (default: all cores)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--seconds", args->seconds, "Time spent on each figure")
      ->check(CLI::Range(0.01, 60.0))
      ->capture_default_str();
  cmd->add_option("--read-mib", args->read_mib, "Buffer streamed by the bandwidth probe (MiB)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print one JSON object");
  // The peaks are those of the selected kernels' instructions
  // (ops/roofline.h): --isa avx2 measures what the AVX2 kernels can reach.
  add_isa_flag(*cmd);
  return [args] { return run_roofline(*args); };
}

}  // namespace pagoda::cli
