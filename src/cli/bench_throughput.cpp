// `pagoda bench throughput`: offline serving throughput of the engine on
// synthetic prompts (random, or a shared system prompt + distinct
// questions), with prefix caching on or off.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/bench.h"
#include "core/error.h"
#include "core/parallel.h"
#include "engine/llm_engine.h"

namespace pagoda::cli {

namespace {

struct ThroughputArgs : BenchModelArgs {
  ThroughputArgs() { output_len = 64; }  // its own default (latency: 128)
  int num_prompts = 64;
  int shared_prefix_len = 0;
  bool no_roofline = false;
};

int run_throughput(ThroughputArgs& a) {
  if (a.shared_prefix_len >= a.input_len) {
    throw_input_error("--shared-prefix-len ({}) must be smaller than --input-len ({})",
                      a.shared_prefix_len, a.input_len);
  }
  a.engine.prefault_kv_cache = true;  // time the steady state (engine/llm_engine.h)
  LLMEngine engine(a.model, a.engine);
  print_engine_summary(engine);
  // Measured before the run (its read buffer freed again), as bench latency.
  // The peak RSS reported is the engine's: the load's, then the run's.
  const int64_t load_peak_rss = peak_rss_bytes();
  ops::Roofline roof;
  bool probe_in_peak = false;
  if (!a.no_roofline) {
    roof = ops::measure_roofline(num_threads(), 0.25);
    probe_in_peak = !restart_peak_rss();
  }
  const int64_t vocab = engine.model_config().vocab_size;
  std::mt19937_64 rng(a.seed);
  // Ids from the middle of the vocabulary: ordinary tokens, not specials.
  auto token = [&] { return static_cast<int32_t>(3 + rng() % (vocab - 3)); };
  std::vector<int32_t> prefix(a.shared_prefix_len);
  for (int32_t& t : prefix) t = token();

  SamplingParams params;
  params.temperature = 0;
  params.max_tokens = a.output_len;
  params.ignore_eos = true;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < a.num_prompts; ++i) {
    std::vector<int32_t> prompt = prefix;
    while (static_cast<int>(prompt.size()) < a.input_len) prompt.push_back(token());
    engine.add_request("bench-" + std::to_string(i), std::move(prompt), params);
  }
  int64_t output_tokens = 0, cached_tokens = 0, steps = 0;
  int32_t peak_blocks = 0;
  while (engine.has_unfinished()) {
    for (const RequestOutput& out : engine.step()) {
      output_tokens += static_cast<int64_t>(out.new_token_ids.size());
      if (out.finished) cached_tokens += out.metrics.num_cached_tokens;
    }
    peak_blocks = std::max(peak_blocks, engine.num_kv_blocks() - engine.num_free_kv_blocks());
    ++steps;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t prompt_tokens = int64_t{a.num_prompts} * a.input_len;
  nlohmann::json result = {
      {"num_prompts", a.num_prompts},
      {"input_len", a.input_len},
      {"output_len", a.output_len},
      {"shared_prefix_len", a.shared_prefix_len},
      {"prefix_caching", a.engine.enable_prefix_caching},
      {"seconds", seconds},
      {"steps", steps},
      {"requests_per_s", a.num_prompts / seconds},
      {"output_tokens_per_s", static_cast<double>(output_tokens) / seconds},
      {"total_tokens_per_s", static_cast<double>(prompt_tokens + output_tokens) / seconds},
      {"prompt_tokens", prompt_tokens},
      {"cached_prompt_tokens", cached_tokens},
      {"kv_blocks_total", engine.num_kv_blocks()},
      {"kv_blocks_peak_used", peak_blocks},
      {"kv_peak_usage", static_cast<double>(peak_blocks) / engine.num_kv_blocks()},
      {"peak_rss_bytes", std::max(load_peak_rss, peak_rss_bytes())},
      {"peak_rss_includes_roofline_probe", probe_in_peak}};
  // The work done against the linears' peak: every computed prompt token at
  // the prefill FLOPs of its prompt, every output token (after a request's
  // first, which ends its prefill) at a decode token's FLOPs at the mean
  // context of the decode. Tokens served from the prefix cache are not
  // computed. Dense Llama-style models only (token_flops), as bench latency.
  const LinearPeak peak = linear_peak(roof, engine);
  double flops = 0, fraction = 0;
  if (!a.no_roofline) {
    const ModelConfig& c = engine.model_config();
    const double decode_tokens = static_cast<double>(output_tokens - a.num_prompts);
    flops = static_cast<double>(prompt_tokens - cached_tokens) *
                prefill_flops_per_token(c, a.input_len) +
            decode_tokens * token_flops(c, a.input_len + a.output_len / 2.0, 1.0);
    fraction = flops / seconds / (peak.gflops * 1e9);
    result["roofline"] = roofline_json(roof);
    result["flops"] = flops;
    result["linear_peak"] = peak.kind;
    result["linear_peak_probe"] = peak.probe;
    result["fraction_of_linear_peak"] = fraction;
  }
  if (a.json) {
    std::printf("%s\n", result.dump().c_str());
    return 0;
  }
  std::printf("requests: %d x (%d in, %d out), shared prefix %d, prefix caching %s\n",
              a.num_prompts, a.input_len, a.output_len, a.shared_prefix_len,
              a.engine.enable_prefix_caching ? "on" : "off");
  std::printf("time: %.3f s in %lld steps\n", seconds, static_cast<long long>(steps));
  std::printf("throughput: %.2f requests/s, %.1f output tokens/s, %.1f total tokens/s\n",
              a.num_prompts / seconds, output_tokens / seconds,
              (prompt_tokens + output_tokens) / seconds);
  std::printf("prefix cache: %lld of %lld prompt tokens served from cache\n",
              static_cast<long long>(cached_tokens), static_cast<long long>(prompt_tokens));
  std::printf("KV cache: peak %d of %d blocks (%.1f%%)\n", peak_blocks, engine.num_kv_blocks(),
              100.0 * peak_blocks / engine.num_kv_blocks());
  std::printf("peak RSS: %.1f MiB\n", std::max(load_peak_rss, peak_rss_bytes()) / 1048576.0);
  if (!a.no_roofline) {
    std::printf("compute: %.1f GFLOP/s, %.1f%% of the %s peak (%.0f G/s, %s, %s kernels)\n",
                flops / seconds * 1e-9, 100 * fraction, peak.kind, peak.gflops, peak.probe,
                ops::isa_name(roof.isa));
  }
  return 0;
}

}  // namespace

Runner add_bench_throughput(CLI::App& bench) {
  auto args = std::make_shared<ThroughputArgs>();
  CLI::App* cmd =
      bench.add_subcommand("throughput", "Offline serving throughput on synthetic prompts");
  add_bench_model_flags(cmd, args.get());
  cmd->add_option("--num-prompts", args->num_prompts, "Number of requests")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--shared-prefix-len", args->shared_prefix_len,
                  "Tokens of a system prompt shared by every request")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("--no-roofline", args->no_roofline, "Skip measuring the roofline");
  add_engine_flags(*cmd, args->engine);
  return [args] {
    return run_on_rank0(args->model, args->engine, [&] { return run_throughput(*args); });
  };
}

}  // namespace pagoda::cli
