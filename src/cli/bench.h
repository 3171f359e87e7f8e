// `pagoda bench` subcommands (one file each) and what they share: peak
// memory, medians, the roofline as JSON.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "engine/llm_engine.h"
#include "ops/roofline.h"

namespace pagoda::cli {

Runner add_bench_throughput(CLI::App& bench);
Runner add_bench_roofline(CLI::App& bench);
Runner add_bench_latency(CLI::App& bench);
Runner add_bench_structured(CLI::App& bench);

// The model and engine options of the benchmarks that run the engine
// (latency, throughput). A command's own arguments derive from it; it may
// change a default before the flags are added (help shows the default).
struct BenchModelArgs {
  std::string model;
  int input_len = 128;
  int output_len = 128;
  uint64_t seed = 0;
  bool json = false;
  EngineOptions engine;
};
// --model, --input-len, --output-len, --seed and --json. The command adds
// its own flags next, then the engine flags (add_engine_flags), so that
// they come last in --help as in every other command.
void add_bench_model_flags(CLI::App* cmd, BenchModelArgs* args);

// Peak resident set of this process so far (VmHWM), and the current one.
int64_t peak_rss_bytes();
int64_t current_rss_bytes();
// Restarts the peak from the current resident set (Linux clear_refs), so
// that memory a benchmark used for itself and freed (the roofline probe's
// read buffer) is not reported as the engine's; false if the kernel refused.
bool restart_peak_rss();

// Median of a non-empty list.
double median(std::vector<double> v);

nlohmann::json roofline_json(const ops::Roofline& r);

// FLOPs of one token through a dense Llama-style model: every layer matrix
// once (2 per weight) and attention over `keys` keys per layer (q.k and
// p.v, 2 FLOPs each per q element), plus `lm_head_rows` rows of the LM head.
double token_flops(const ModelConfig& c, double keys, double lm_head_rows);
// A prompt token sees (input_len + 1) / 2 keys on average; the LM head runs
// once per prompt.
double prefill_flops_per_token(const ModelConfig& c, int input_len);

// The peak the engine's linears run at (ops/roofline.h, for the selected
// ISA): int8 dot products for --quantization int8, the bf16 linears' (a
// native bf16 dot product, or bf16 widened to f32 + FMA) for bf16 weights,
// else f32 FMA.
struct LinearPeak {
  double gflops = 0;
  const char* kind = "";   // "int8", "bf16", "fp32"
  const char* probe = "";  // the instruction mix measured
};
LinearPeak linear_peak(const ops::Roofline& roof, const LLMEngine& engine);

}  // namespace pagoda::cli
