// `pagoda bench latency`: prefill and decode speed of a batch of B
// identical-length synthetic requests (median of --repeats runs), next to
// the machine's roofline measured in the same run: a decode step cannot be
// faster than its bytes (weights + KV read) over the read bandwidth nor
// than its FLOPs over the linears' peak (the bound of a large batch), a
// prefill token not faster than its FLOPs over the peak.
// The read bandwidth a decode step is judged by is probed between the
// decode steps (a pass over a buffer the size of the step's bytes before
// every step, outside its time): on a shared host the bandwidth moves by
// half within seconds, so a probe taken once before the runs may see
// another machine than the steps do.
//
// --context-len N times decode at a long context without prefilling it
// (a 64k-token prefill of a wide model takes far too long on a small CPU):
// each request's first N positions are taken as computed
// (LLMEngine::add_request_with_context: blocks from the KV-cache manager as
// a prefill would take them, pages of pseudo-random valid elements), then
// the engine runs its normal steps (scheduler -> model runner -> forward),
// one token per request each. The values do not change the time: every
// kernel reads every key it would read for real text (attention over the
// whole context, or the V3.2 indexer scoring every key before its top-k),
// and random keys make the top-k a scattered set of positions, as real ones
// are (all-zero keys would tie and pick the first index_topk positions, a
// contiguous, cache-friendly read). Reported: ms per decode step; the KV
// bytes per sequence at N, the request's pages (LLMEngine::kv_bytes_held)
// and the pools' used blocks x page bytes x slots, next to `pagoda
// kv-plan`'s two figures (which are the most a sequence holds at once: a
// sliding group's window + 2 pages, where at rest it holds its window);
// and the step's bytes (weights + the KV the model says a token reads)
// against the read bandwidth.
//
// With --speculative-config, decode tokens/s counts the tokens emitted
// (a verify step emits 1 + accepted drafts per request) and the draft
// acceptance of the measured runs is reported (acceptance rate, mean
// acceptance length, per position). --prompt-period P makes each prompt a
// random sequence of P tokens repeated: text that an n-gram proposer can
// look up (an editing-like workload) where the model repeats it.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <cstdio>
#include <memory>
#include <random>
#include <string>

#include "cli/bench.h"
#include "core/error.h"
#include "core/meminfo.h"
#include "core/parallel.h"
#include "engine/llm_engine.h"
#include "kv/kv_cache_plan.h"
#include "ops/ops.h"

namespace pagoda::cli {

namespace {

struct LatencyArgs : BenchModelArgs {
  int batch = 1;
  int repeats = 5;
  int warmup = 1;
  bool no_roofline = false;
  bool probe_every_step = false;  // read probe before every decode step, whatever its bytes
  int64_t context_len = 0;  // 0: prefill --input-len; N: N positions taken as computed
  int prompt_period = 0;    // > 0: the prompt repeats a random sequence of this many tokens
  float temperature = 0;    // 0: greedy; else sampled (seeded per request)
  int prompt_alphabet = 0;  // > 0: prompt tokens drawn from this many distinct random ids
  RequestOutputKind output_kind = RequestOutputKind::Delta;
};

struct Run {
  double prefill_s = 0, decode_s = 0;
  // CPU time of every thread of the process in the same spans: on a shared
  // host, what the run cost however often it was descheduled (a waiting
  // kernel thread spins for a while, so gaps between ops count too).
  double prefill_cpu_s = 0, decode_cpu_s = 0;
  double decode_model_s = 0;  // of decode_s, in the model's forward passes
  double decode_proposer_s = 0;  // of decode_model_s, in the proposer's passes (draft model or MTP layer)
  int64_t decode_steps = 0;
  int64_t decode_tokens = 0;      // emitted in the decode steps (several a step when speculating)
  int64_t kv_bytes_held = 0;      // --context-len: the requests' pages once the contexts are in
  int64_t kv_bytes_reserved = 0;  // ... and the pools' used blocks x page bytes x slots
  std::vector<double> read_gb_per_s;  // the read probe before each decode step (if probing)
};

// Bytes of the pages in use in every pool: used blocks x page bytes x slots
// (a pool's block id takes a page in each of its slots).
int64_t kv_bytes_in_use(const LLMEngine& engine) {
  const KVCacheManager& kv = engine.kv_cache();
  int64_t bytes = 0;
  for (size_t p = 0; p < kv.pools().size(); ++p) {
    const BlockPool& pool = kv.pools()[p];
    bytes += int64_t{pool.num_blocks() - pool.num_free()} * kv.plan().pools[p].page_bytes *
             kv.plan().pools[p].num_slots;
  }
  return bytes;
}

using Clock = std::chrono::steady_clock;

ops::PeakKind peak_kind(const std::string& linear_peak_kind) {
  return linear_peak_kind == "int8"   ? ops::PeakKind::Int8Dot
         : linear_peak_kind == "bf16" ? ops::PeakKind::Bf16Dot
                                      : ops::PeakKind::Fp32Fma;
}

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// One batch: B requests queued at once; prefill ends when every request
// has its first token, decode covers the remaining steps. With a `probe`,
// the read bandwidth is measured before every decode step (or, unless
// `probe_every_step`, before the first only), outside the steps' time
// (wall and CPU).
Run run_once(LLMEngine& engine, const LatencyArgs& a, std::mt19937_64& rng, int tag,
             ops::ReadProbe* probe, bool probe_every_step) {
  const int64_t vocab = engine.model_config().vocab_size;
  SamplingParams params;
  params.temperature = a.temperature;
  params.max_tokens = a.output_len;
  params.ignore_eos = true;
  params.output_kind = a.output_kind;
  for (int i = 0; i < a.batch; ++i) {
    std::vector<int32_t> prompt(a.input_len);
    for (int32_t& t : prompt) t = static_cast<int32_t>(3 + rng() % (vocab - 3));
    if (a.prompt_alphabet > 0) {
      for (size_t k = static_cast<size_t>(a.prompt_alphabet); k < prompt.size(); ++k)
        prompt[k] = prompt[rng() % static_cast<size_t>(a.prompt_alphabet)];
    }
    if (a.prompt_period > 0) {
      for (size_t k = static_cast<size_t>(a.prompt_period); k < prompt.size(); ++k)
        prompt[k] = prompt[k - static_cast<size_t>(a.prompt_period)];
    }
    const std::string id = "lat-" + std::to_string(tag) + "-" + std::to_string(i);
    if (a.temperature > 0) params.seed = rng();
    if (a.context_len > 0) {
      engine.add_request_with_context(id, std::move(prompt), params, a.context_len, rng());
    } else {
      engine.add_request(id, std::move(prompt), params);
    }
  }
  Run r;
  if (a.context_len > 0) {
    for (int i = 0; i < a.batch; ++i) {
      r.kv_bytes_held +=
          engine.kv_bytes_held("lat-" + std::to_string(tag) + "-" + std::to_string(i));
    }
    r.kv_bytes_reserved = kv_bytes_in_use(engine);
  }
  const auto t0 = Clock::now();
  const double cpu0 = process_cpu_seconds();
  double cpu_first = cpu0;
  int started = 0;
  auto t_first = t0;
  const bool speculating = engine.options().speculative_config.has_value();
  double model_s_first = engine.model_seconds();
  double proposer_s_first = engine.proposer_model_seconds();
  double probe_s = 0, probe_cpu_s = 0;  // in the probes between decode steps
  while (engine.has_unfinished()) {
    int64_t emitted = 0;
    for (const RequestOutput& out : engine.step()) {
      const auto num_new = static_cast<int64_t>(out.new_token_ids.size());
      if (num_new > 0 && out.metrics.num_output_tokens == num_new) ++started;
      emitted += num_new;
    }
    if (r.prefill_s > 0) r.decode_tokens += emitted;
    // A context taken as computed is never recomputed: a step of more than
    // one token per request (a preemption's recompute) would time a prefill.
    // (Speculation computes drafts next to each token.)
    if (a.context_len > 0 && !speculating && engine.last_batch().num_tokens() > a.batch) {
      throw InternalError(fmt::format("bench latency --context-len: a step computed {} tokens for "
                                      "{} request(s) (recomputed after a preemption?)",
                                      engine.last_batch().num_tokens(), a.batch));
    }
    if (started < a.batch) {
      t_first = Clock::now();
      cpu_first = process_cpu_seconds();
      model_s_first = engine.model_seconds();
      proposer_s_first = engine.proposer_model_seconds();
    } else if (r.prefill_s == 0) {
      t_first = Clock::now();
      cpu_first = process_cpu_seconds();
      model_s_first = engine.model_seconds();
      proposer_s_first = engine.proposer_model_seconds();
      r.prefill_s = std::chrono::duration<double>(t_first - t0).count();
      r.prefill_cpu_s = cpu_first - cpu0;
    } else {
      ++r.decode_steps;
    }
    if (probe != nullptr && r.prefill_s > 0 && engine.has_unfinished() &&
        (probe_every_step || r.read_gb_per_s.empty())) {
      const auto p0 = Clock::now();
      const double cpu_p0 = process_cpu_seconds();
      r.read_gb_per_s.push_back(probe->measure() * 1e-9);
      probe_s += std::chrono::duration<double>(Clock::now() - p0).count();
      probe_cpu_s += process_cpu_seconds() - cpu_p0;
    }
  }
  r.decode_s = std::chrono::duration<double>(Clock::now() - t_first).count() - probe_s;
  r.decode_cpu_s = process_cpu_seconds() - cpu_first - probe_cpu_s;
  r.decode_model_s = engine.model_seconds() - model_s_first;
  r.decode_proposer_s = engine.proposer_model_seconds() - proposer_s_first;
  return r;
}

// KV bytes a decode token reads at a mean context that may be fractional,
// interpolated between the whole lengths around it (exact for caches read
// in full, which grow linearly).
double kv_read_bytes(const LLMEngine& engine, double context) {
  const auto lo = static_cast<int64_t>(context);
  const double b0 = static_cast<double>(
      engine.model().kv_bytes_read_per_token(lo, engine.kv_cache_dtype()));
  const double b1 = static_cast<double>(
      engine.model().kv_bytes_read_per_token(lo + 1, engine.kv_cache_dtype()));
  return b0 + (context - static_cast<double>(lo)) * (b1 - b0);
}

// Mean context over the decode steps (--context-len: steps at N + 1 ..
// N + output_len - 1).
double mean_decode_context(const LatencyArgs& a) {
  return a.context_len > 0 ? static_cast<double>(a.context_len) + a.output_len / 2.0
                           : a.input_len + a.output_len / 2.0;
}

// Bytes a decode step reads: the weights once, plus every sequence's K/V
// (of the cache's dtype) at its mean context length over the decode. (What
// a token reads is the model's to say: all of a dense cache, a sliding
// window, V3.2's top-k latents plus every indexer key.)
double decode_step_bytes(const LLMEngine& engine, const LatencyArgs& a) {
  return static_cast<double>(engine.model().weight_bytes_per_step()) +
         a.batch * kv_read_bytes(engine, mean_decode_context(a));
}

int run_latency(LatencyArgs& a) {
  const bool with_context = a.context_len > 0;
  if (with_context) {
    // The context's pages hold no token's K/V: they must never be a
    // prefix-cache hit (LLMEngine::add_request_with_context). Decode steps
    // lose only the hashing of each newly full block, a few microseconds.
    a.engine.enable_prefix_caching = false;
    a.input_len = static_cast<int>(a.context_len + 1);  // the last prompt token is computed
  }
  if (int64_t{a.batch} > a.engine.max_num_seqs) a.engine.max_num_seqs = a.batch;
  a.engine.prefault_kv_cache = true;  // time the steady state (engine/llm_engine.h)
  LLMEngine engine(a.model, a.engine);
  print_engine_summary(engine);
  const ModelConfig& c = engine.model_config();
  // Every output token must fit under the maximum length, or the request
  // stops early and fewer steps are timed than asked for.
  if (with_context && a.context_len + a.output_len >= engine.max_model_len()) {
    throw_input_error(
        "bench latency: --context-len {} + --output-len {} must stay below the maximum model "
        "length {} (--max-model-len, default the model's max_position_embeddings)",
        a.context_len, a.output_len, engine.max_model_len());
  }
  // kv-plan's figure: the specs from the config alone, planned at the
  // engine's block size (what `pagoda kv-plan --context N` prints). An
  // architecture kv-plan cannot size yet is reported as such, not fatal:
  // the timing does not depend on it.
  // plan_bytes: what a decoding sequence holds between steps (what is
  // measured here); plan_peak: the most it holds during a step.
  int64_t plan_bytes = -1, plan_peak = -1, plan_reserved = -1;
  std::string plan_error;
  if (with_context) {
    try {
      // A speculative proposer's caches (a draft model's layers, an MTP
      // layer) share the pools and each request's pages.
      std::vector<LayerKVCache> specs = kv_cache_specs_of_config(a.model, engine.kv_cache_dtype());
      append_proposer_caches(specs, engine.proposer_kv_cache_specs());
      const KVCachePlan plan = plan_kv_cache(specs, engine.options().block_size);
      plan_bytes = plan.bytes_held_between_steps(a.context_len);
      plan_peak = plan.bytes_per_sequence(a.context_len);
      plan_reserved = plan.reserved_bytes_per_sequence(a.context_len);
    } catch (const InputError& e) {
      plan_error = e.what();
    }
  }
  // The whole batch must be resident at once: otherwise later requests
  // start as earlier ones finish, and "decode" would time a smaller batch
  // while counting every request's tokens.
  const int32_t block_size = engine.options().block_size;  // resolved
  const int64_t slots = engine.stats().kv_token_capacity;
  const int64_t per_request =
      (a.input_len + a.output_len + block_size - 1) / block_size * block_size;
  if (slots < a.batch * per_request) {
    throw_input_error(
        "bench latency: --batch {} x ({} in + {} out) needs {} KV slots, the cache holds {}: raise "
        "--kv-cache-memory (or use --kv-cache-dtype bf16)",
        a.batch, a.input_len, a.output_len, a.batch * per_request, slots);
  }
  // The peak so far is the engine's load (mapping, repacking, KV pool). The
  // roofline probe then reads a buffer of its own (measure_roofline's
  // read_bytes, 512 MiB by default) and frees it: its peak is forgotten,
  // so the one reported is the engine's alone.
  const int64_t load_peak_rss = peak_rss_bytes();
  ops::Roofline roof;
  bool probe_in_peak = false;
  if (!a.no_roofline) {
    roof = ops::measure_roofline(num_threads(), 0.25);
    probe_in_peak = !restart_peak_rss();
  }
  // The read bandwidth a decode step is judged by, measured between the
  // decode steps (run_once): the roofline's probe above ran seconds before,
  // and a shared host's bandwidth moves by half within that. The buffer is
  // a decode step's bytes (weights + KV; at least 256 MiB, 8x this CPU
  // class's L3, so a tiny model's probe still streams from memory, and at
  // most 1 GiB, a stream far beyond any cache), within a quarter of the
  // memory available: the same stream, not a cached toy. A step of fewer
  // bytes than kProbeEveryStepBytes may run from the caches, which a probe
  // before it would empty: its runs are probed once, before their decode.
  // The buffer stays resident through the runs; the peak RSS reported
  // leaves it out.
  constexpr int64_t kProbeEveryStepBytes = int64_t{256} << 20;
  std::unique_ptr<ops::ReadProbe> read_probe;
  const auto probe_step_bytes = static_cast<int64_t>(decode_step_bytes(engine, a));
  if (!a.no_roofline && a.output_len > 1) {
    int64_t bytes = std::clamp(probe_step_bytes, int64_t{256} << 20, int64_t{1} << 30);
    if (const int64_t avail = available_memory_bytes(); avail > 0)
      bytes = std::max(std::min(bytes, avail / 4), int64_t{64} << 20);
    read_probe = std::make_unique<ops::ReadProbe>(bytes);
  }
  const bool probe_every_step = a.probe_every_step || probe_step_bytes >= kProbeEveryStepBytes;

  std::mt19937_64 rng(a.seed);
  std::vector<double> prefill_tps, decode_tps, step_ms, first_step_ms, engine_ms;
  std::vector<double> prefill_cpu_s, step_cpu_ms;  // per run, as prefill_tps / step_ms
  std::vector<double> target_ms, proposer_ms;  // per decode step, in each model's passes
  std::vector<double> decode_read_gb_per_s;  // the interleaved probes of the measured runs
  int64_t kv_bytes_held = 0, kv_bytes_reserved = 0;
  SpecDecodeStats spec_before;
  for (int i = 0; i < a.warmup + a.repeats; ++i) {
    if (i == a.warmup) spec_before = engine.stats().spec_decode;
    Run r = run_once(engine, a, rng, i, read_probe.get(), probe_every_step);
    if (with_context && !a.engine.speculative_config && r.decode_steps != a.output_len - 1) {
      throw InternalError(fmt::format("bench latency --context-len: {} decode steps, expected {}",
                                      r.decode_steps, a.output_len - 1));
    }
    kv_bytes_held = r.kv_bytes_held;
    kv_bytes_reserved = r.kv_bytes_reserved;
    if (i < a.warmup) continue;
    decode_read_gb_per_s.insert(decode_read_gb_per_s.end(), r.read_gb_per_s.begin(),
                                r.read_gb_per_s.end());
    // With --context-len the first step computes one token per request (the
    // last prompt token at the context): no prefill speed.
    first_step_ms.push_back(1e3 * r.prefill_s);
    prefill_tps.push_back(static_cast<double>(a.batch) * a.input_len / r.prefill_s);
    prefill_cpu_s.push_back(r.prefill_cpu_s);
    if (r.decode_steps > 0) {
      decode_tps.push_back(static_cast<double>(r.decode_tokens) / r.decode_s);
      step_ms.push_back(1e3 * r.decode_s / r.decode_steps);
      step_cpu_ms.push_back(1e3 * r.decode_cpu_s / r.decode_steps);
      engine_ms.push_back(1e3 * (r.decode_s - r.decode_model_s) / r.decode_steps);
      target_ms.push_back(1e3 * (r.decode_model_s - r.decode_proposer_s) / r.decode_steps);
      proposer_ms.push_back(1e3 * r.decode_proposer_s / r.decode_steps);
    }
  }
  const int64_t probe_bytes = read_probe ? read_probe->bytes() : 0;
  const int64_t peak_rss = std::max(load_peak_rss, peak_rss_bytes() - probe_bytes);
  read_probe.reset();  // (the RSS reported below is the engine's)
  const double med_prefill = with_context ? 0 : median(prefill_tps);
  // --output-len 1 has no decode step: its decode speed is not measured
  // (null in JSON), rather than 0 or a division by 0.
  const bool decoded = !decode_tps.empty();
  const double med_decode = decoded ? median(decode_tps) : 0;
  const double med_step_ms = decoded ? median(step_ms) : 0;
  // The step's time outside the model's forward pass (LLMEngine::model_seconds).
  const double med_engine_ms = decoded ? median(engine_ms) : 0;
  auto if_decoded = [decoded](double v) { return decoded ? nlohmann::json(v) : nlohmann::json(); };

  const double weight_bytes = static_cast<double>(engine.model().weight_bytes_per_step());
  const double mean_context = mean_decode_context(a);
  const double step_bytes = decode_step_bytes(engine, a);
  // ...and its FLOPs: a batched step (B rows through every matrix) is bound
  // by arithmetic rather than by bytes once B is large.
  const double step_flops = a.batch * token_flops(c, mean_context, 1.0);
  const double flops_per_token = prefill_flops_per_token(c, a.input_len);
  nlohmann::json j = {{"model", a.model},
                      {"batch", a.batch},
                      {"input_len", a.input_len},
                      {"output_len", a.output_len},
                      {"repeats", a.repeats},
                      {"threads", num_threads()},
                      {"quantization", quantization_name(a.engine.quantization)},
                      {"weights", weights_summary(engine)},
                      {"prefill_tokens_per_s", med_prefill},
                      {"decode_tokens_per_s", if_decoded(med_decode)},
                      {"decode_ms_per_step", if_decoded(med_step_ms)},
                      {"decode_engine_ms_per_step", if_decoded(med_engine_ms)},
                      {"weight_bytes_per_step", weight_bytes},
                      {"decode_bytes_per_step", step_bytes},
                      {"decode_flops_per_step", step_flops},
                      {"prefill_flops_per_token", flops_per_token},
                      {"kv_cache_bytes", engine.kv_cache_bytes()},
                      {"kv_cache_dtype", std::string(kv_dtype_label(engine.kv_cache_dtype()))},
                      {"peak_rss_bytes", peak_rss},
                      {"peak_rss_includes_roofline_probe", probe_in_peak},
                      {"rss_bytes", current_rss_bytes()},
                      {"prefill_tokens_per_s_runs", prefill_tps},
                      {"decode_tokens_per_s_runs", decode_tps}};
  // The decode roofline is the larger of the step's time at the read
  // bandwidth and its time at the linears' peak.
  double decode_roof_ms = 0, decode_memory_ms = 0, decode_compute_ms = 0;
  double prefill_roof_bf16 = 0, prefill_roof_fp32 = 0, prefill_roof_linear = 0;
  const LinearPeak peak = linear_peak(roof, engine);
  // The read bandwidth of the decode steps: the median of the probes taken
  // between them (median against median step time: like with like), or
  // the roofline's best pass when there were none.
  const bool interleaved = !decode_read_gb_per_s.empty();
  const double decode_read_gb_per_s_med =
      interleaved ? median(decode_read_gb_per_s) : roof.read_gb_per_s;
  if (!a.no_roofline) {
    decode_memory_ms = step_bytes / (decode_read_gb_per_s_med * 1e9) * 1e3;
    // token_flops models dense Llama-style layers only: with --context-len
    // (meant for any model, DeepSeek's MLA and MoE included) the decode is
    // judged by its bytes alone, as a batch-1 decode is bound.
    decode_compute_ms = with_context ? 0 : step_flops / (peak.gflops * 1e9) * 1e3;
    decode_roof_ms = std::max(decode_memory_ms, decode_compute_ms);
    prefill_roof_bf16 = roof.bf16_gflops * 1e9 / flops_per_token;
    prefill_roof_fp32 = roof.fp32_gflops * 1e9 / flops_per_token;
    prefill_roof_linear = peak.gflops * 1e9 / flops_per_token;
    j["roofline"] = roofline_json(roof);
    // The peak the linears of these weights run at, and its instructions.
    j["linear_peak"] = peak.kind;
    j["linear_peak_probe"] = peak.probe;
    j["prefill_roofline_tokens_per_s"] = prefill_roof_linear;
    j["prefill_fraction_of_linear_peak"] = med_prefill / prefill_roof_linear;
    // Decode's FLOPs over its time, against the same peak (what a batched
    // decode, bound by arithmetic, is judged by).
    j["decode_fraction_of_linear_peak"] =
        if_decoded(med_step_ms > 0 ? decode_compute_ms / med_step_ms : 0);
    // The same two on the CPU clock: FLOPs per CPU-second of the process
    // against one thread's peak per CPU-second. Unlike the wall-clock
    // fractions these hold on a loaded host (the probe and the run need not
    // get the same share of the cores); on an idle one they are the same up
    // to the gaps a thread sleeps through rather than spins.
    const double per_cpu_s = ops::peak_per_cpu_second(peak_kind(peak.kind));
    j["linear_peak_per_cpu_second"] = per_cpu_s * 1e-9;
    const double med_prefill_cpu_s = with_context ? 0 : median(prefill_cpu_s);
    j["prefill_cpu_seconds"] = med_prefill_cpu_s;
    j["prefill_fraction_of_linear_peak_cpu_clock"] =
        med_prefill_cpu_s > 0
            ? a.batch * a.input_len * flops_per_token / med_prefill_cpu_s / per_cpu_s
            : 0;
    const double med_step_cpu_ms = decoded ? median(step_cpu_ms) : 0;
    j["decode_cpu_ms_per_step"] = if_decoded(med_step_cpu_ms);
    j["decode_fraction_of_linear_peak_cpu_clock"] =
        if_decoded(med_step_cpu_ms > 0 ? step_flops / (med_step_cpu_ms * 1e-3) / per_cpu_s : 0);
    j["decode_roofline_ms_per_step"] = decode_roof_ms;
    j["decode_bandwidth_ms_per_step"] = decode_memory_ms;
    // The read probes taken before every measured decode step (their
    // median is what decode_bandwidth_ms_per_step divides by), their
    // buffer, and the decode's bytes per second against it.
    j["decode_read_gb_per_s"] = if_decoded(decode_read_gb_per_s_med);
    j["decode_read_gb_per_s_probes"] = decode_read_gb_per_s;
    j["decode_read_probe_bytes"] = probe_bytes;
    j["decode_read_probe_every_step"] = probe_every_step;
    j["decode_fraction_of_read_bandwidth"] =
        if_decoded(med_step_ms > 0 ? decode_memory_ms / med_step_ms : 0);
    j["decode_compute_ms_per_step"] = decode_compute_ms;
    j["decode_fraction_of_roofline"] =
        if_decoded(med_step_ms > 0 ? decode_roof_ms / med_step_ms : 0);
    j["prefill_roofline_tokens_per_s_bf16"] = prefill_roof_bf16;
    j["prefill_fraction_of_bf16_peak"] =
        prefill_roof_bf16 > 0 ? med_prefill / prefill_roof_bf16 : 0;
    j["prefill_fraction_of_fp32_peak"] =
        prefill_roof_fp32 > 0 ? med_prefill / prefill_roof_fp32 : 0;
  }
  if (with_context) {
    j["context_len"] = a.context_len;
    j["kv_bytes_per_sequence"] = kv_bytes_held / a.batch;
    j["kv_plan_bytes_per_sequence"] = plan_bytes >= 0 ? nlohmann::json(plan_bytes) : nlohmann::json();
    if (plan_bytes < 0) j["kv_plan_error"] = plan_error;
    j["kv_plan_peak_bytes_per_sequence"] =
        plan_peak >= 0 ? nlohmann::json(plan_peak) : nlohmann::json();
    // What the pools set aside for them: a page in every slot of a pool per
    // block id, also the slots a smaller group of a shared pool leaves empty.
    j["kv_reserved_bytes_per_sequence"] = kv_bytes_reserved / a.batch;
    j["kv_plan_reserved_bytes_per_sequence"] =
        plan_reserved >= 0 ? nlohmann::json(plan_reserved) : nlohmann::json();
    j["kv_read_bytes_per_token"] = kv_read_bytes(engine, mean_context);
    j["first_step_ms"] = median(first_step_ms);
    j["prefix_caching"] = false;
    // No prefill ran: its figures would divide N context tokens by the
    // time of one decode-like step.
    for (const char* k : {"prefill_tokens_per_s", "prefill_flops_per_token",
                          "prefill_roofline_tokens_per_s_bf16", "prefill_fraction_of_bf16_peak",
                          "prefill_roofline_tokens_per_s", "prefill_fraction_of_linear_peak",
                          "decode_fraction_of_linear_peak",
                          "prefill_fraction_of_fp32_peak", "prefill_tokens_per_s_runs",
                          "prefill_cpu_seconds", "prefill_fraction_of_linear_peak_cpu_clock",
                          "decode_fraction_of_linear_peak_cpu_clock",
                          "decode_flops_per_step"}) {
      j.erase(k);
    }
    if (!a.no_roofline) j["decode_compute_ms_per_step"] = nullptr;  // not modelled (above)
  }
  // Acceptance over the measured runs only.
  SpecDecodeStats spec = engine.stats().spec_decode;
  spec.num_drafts -= spec_before.num_drafts;
  spec.num_draft_tokens -= spec_before.num_draft_tokens;
  spec.num_accepted_tokens -= spec_before.num_accepted_tokens;
  for (size_t p = 0; p < spec_before.num_accepted_tokens_per_pos.size(); ++p)
    spec.num_accepted_tokens_per_pos[p] -= spec_before.num_accepted_tokens_per_pos[p];
  std::vector<double> per_pos;
  for (int64_t n : spec.num_accepted_tokens_per_pos)
    per_pos.push_back(spec.num_drafts ? static_cast<double>(n) / spec.num_drafts : 0.0);
  if (a.engine.speculative_config) {
    const SpeculativeConfig& sc = *a.engine.speculative_config;
    j["speculative"] = {{"method", speculative_method_name(sc.method)},
                        {"num_speculative_tokens", sc.num_speculative_tokens},
                        {"num_drafts", spec.num_drafts},
                        {"num_draft_tokens", spec.num_draft_tokens},
                        {"num_accepted_tokens", spec.num_accepted_tokens},
                        {"acceptance_rate", spec.acceptance_rate()},
                        {"mean_acceptance_length", spec.mean_acceptance_length()},
                        {"acceptance_per_position", per_pos},
                        // Tokens per verify step of k drafts below which
                        // the adaptive switch stops drafting.
                        {"break_even_tokens_per_step",
                         engine.speculation_break_even(sc.num_speculative_tokens)},
                        // Each decode step's forward time: the target's
                        // (a verify pass) and the proposer's own model's
                        // (a draft model's k passes; 0 for n-gram).
                        {"target_ms_per_step", if_decoded(decoded ? median(target_ms) : 0)},
                        {"proposer_ms_per_step", if_decoded(decoded ? median(proposer_ms) : 0)}};
  }
  if (a.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  if (with_context) {
    std::printf("batch %d x (context %lld, %d out), %d thread(s), median of %d\n", a.batch,
                static_cast<long long>(a.context_len), a.output_len, num_threads(), a.repeats);
    std::printf("first step: %.2f ms (one token per request at the context)\n",
                median(first_step_ms));
    const std::string plan =
        plan_bytes >= 0 ? fmt::format("{:.2f} MiB", plan_bytes / 1048576.0)
                        : "unavailable (" + plan_error + ")";
    std::printf(
        "KV per sequence at %lld: %.2f MiB held in the pools, kv-plan %s; a decode token reads "
        "%.2f MiB\n",
        static_cast<long long>(a.context_len), kv_bytes_held / a.batch / 1048576.0, plan.c_str(),
        kv_read_bytes(engine, mean_context) / 1048576.0);
  } else {
    std::printf("batch %d x (%d in, %d out), %d thread(s), median of %d\n", a.batch, a.input_len,
                a.output_len, num_threads(), a.repeats);
    std::printf("prefill: %.1f tokens/s (%.2f GFLOP/token)\n", med_prefill,
                flops_per_token * 1e-9);
  }
  std::printf("weights: %s, %.1f MB read per decode step\n", weights_summary(engine).c_str(),
              weight_bytes * 1e-6);
  if (decoded) {
    std::printf("engine outside the model: %.3f ms per decode step\n", med_engine_ms);
  }
  if (decoded && with_context) {
    std::printf("decode:  %.1f tokens/s, %.2f ms/step (%.1f MB/step)\n", med_decode, med_step_ms,
                step_bytes * 1e-6);
  } else if (decoded) {
    std::printf("decode:  %.1f tokens/s, %.2f ms/step (%.1f MB, %.1f GFLOP/step)\n", med_decode,
                med_step_ms, step_bytes * 1e-6, step_flops * 1e-9);
  } else {
    std::printf("decode:  not measured (no decode step with --output-len 1)\n");
  }
  if (!a.no_roofline) {
    std::printf(
        "roofline (%s kernels): read %.1f GB/s, fp32 %.0f GFLOP/s (%s), bf16 %.0f GFLOP/s (%s), "
        "int8 %.0f GOP/s (%s)\n",
        ops::isa_name(roof.isa), roof.read_gb_per_s, roof.fp32_gflops, roof.fp32_probe,
        roof.bf16_gflops, roof.bf16_probe, roof.int8_gops, roof.int8_probe);
    if (interleaved) {
      const auto [lo, hi] =
          std::minmax_element(decode_read_gb_per_s.begin(), decode_read_gb_per_s.end());
      std::printf(
          "read bandwidth between the decode steps: median %.1f GB/s (%zu probes of %.0f MiB, "
          "%.1f-%.1f GB/s)\n",
          decode_read_gb_per_s_med, decode_read_gb_per_s.size(), probe_bytes / 1048576.0,
          *lo, *hi);
    }
    if (decoded && with_context) {
      std::printf("decode at %.1f%% of the bandwidth roofline (bytes at the read bandwidth %.2f "
                  "ms/step)\n",
                  100 * decode_roof_ms / med_step_ms, decode_memory_ms);
    } else if (decoded) {
      std::printf(
          "decode at %.1f%% of the roofline (%.2f ms/step: %s-bound; bytes at the read bandwidth "
          "%.2f ms, FLOPs at the linears' peak %.2f ms)\n",
          100 * decode_roof_ms / med_step_ms, decode_roof_ms,
          decode_memory_ms >= decode_compute_ms ? "bandwidth" : "compute", decode_memory_ms,
          decode_compute_ms);
      std::printf("decode at %.1f%% of the %s peak (%.0f G/s), %.1f%% of the read bandwidth\n",
                  100 * decode_compute_ms / med_step_ms, peak.kind, peak.gflops,
                  100 * decode_memory_ms / med_step_ms);
    }
    if (!with_context) {
      std::printf(
          "prefill at %.1f%% of the %s peak (%.0f tokens/s; %.1f%% of bf16 peak, %.1f%% of fp32 "
          "peak)\n",
          100 * med_prefill / prefill_roof_linear, peak.kind, prefill_roof_linear,
          100 * med_prefill / prefill_roof_bf16, 100 * med_prefill / prefill_roof_fp32);
    }
    if (!with_context) {  // (--context-len: no prefill, decode judged by bytes)
      std::printf("on the CPU clock (%.0f G/s per thread-second, %s): prefill at %.1f%%",
                  j["linear_peak_per_cpu_second"].get<double>(), peak.probe,
                  100 * j["prefill_fraction_of_linear_peak_cpu_clock"].get<double>());
      if (decoded) {
        std::printf(", decode at %.1f%% (%.2f CPU-ms/step)",
                    100 * j["decode_fraction_of_linear_peak_cpu_clock"].get<double>(),
                    j["decode_cpu_ms_per_step"].get<double>());
      }
      std::printf(" of the %s peak\n", peak.kind);
    }
  }
  if (a.engine.speculative_config) {
    std::string positions;
    for (double v : per_pos) positions += fmt::format("{}{:.2f}", positions.empty() ? "" : " ", v);
    std::printf(
        "speculative (%s, k %d): %lld drafts, acceptance rate %.1f%%, mean acceptance length "
        "%.2f tokens/step (break-even %.2f), per position [%s]; forward per decode step: target "
        "%.2f ms, proposer %.2f ms\n",
        speculative_method_name(a.engine.speculative_config->method),
        a.engine.speculative_config->num_speculative_tokens,
        static_cast<long long>(spec.num_drafts), 100 * spec.acceptance_rate(),
        spec.mean_acceptance_length(),
        engine.speculation_break_even(a.engine.speculative_config->num_speculative_tokens),
        positions.c_str(), decoded ? median(target_ms) : 0.0,
        decoded ? median(proposer_ms) : 0.0);
  }
  std::printf(
      "memory: peak RSS %.1f MiB%s, RSS %.1f MiB, weights %.1f MiB, KV pool %.1f MiB (%s)\n",
      peak_rss / 1048576.0, probe_in_peak ? " (with the roofline probe's buffer)" : "",
      current_rss_bytes() / 1048576.0, weight_bytes / 1048576.0,
      engine.kv_cache_bytes() / 1048576.0,
      std::string(kv_dtype_label(engine.kv_cache_dtype())).c_str());
  return 0;
}

}  // namespace

Runner add_bench_latency(CLI::App& bench) {
  auto args = std::make_shared<LatencyArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "latency", "Prefill and decode speed of one batch, against the machine's roofline");
  add_bench_model_flags(cmd, args.get());
  cmd->add_option("--batch", args->batch, "Requests run together")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--repeats", args->repeats, "Measured runs (the median is reported)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "Unmeasured runs first")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  cmd->add_flag("--no-roofline", args->no_roofline, "Skip measuring the roofline");
  cmd->add_flag("--probe-every-step", args->probe_every_step,
                "Probe the read bandwidth before every decode step even when a step's bytes "
                "(under 256 MiB) may stay in the caches (default: then once per run)");
  cmd->add_option("--context-len", args->context_len,
                  "Decode at a context of N positions taken as computed, without prefilling "
                  "them (their KV blocks allocated and filled with pseudo-random values); "
                  "times --output-len - 1 decode steps after the first")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->excludes(cmd->get_option("--input-len"));
  cmd->add_option("--prompt-period", args->prompt_period,
                  "Make each prompt a random sequence of N tokens repeated to its length (text "
                  "an n-gram proposer finds again: --speculative-config)")
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--prompt-alphabet", args->prompt_alphabet,
                  "Draw each prompt's tokens from N random ids (in random order: every short "
                  "n-gram recurs with varying continuations, so n-gram drafts are mostly wrong)")
      ->check(CLI::Range(1, 1 << 24))
      ->excludes(cmd->get_option("--prompt-period"));
  cmd->add_option("--temperature", args->temperature,
                  "Sampling temperature of the requests (0: greedy), seeded from --seed")
      ->check(CLI::Range(0.0f, 100.0f))
      ->capture_default_str();
  cmd->add_option("--output-kind", args->output_kind,
                  "What the engine's per-step outputs carry (vLLM's RequestOutputKind): delta "
                  "(the step's new tokens) or cumulative (everything so far, copied every step); "
                  "the engine time per decode step includes building them")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, RequestOutputKind>{
              {"delta", RequestOutputKind::Delta},
              {"cumulative", RequestOutputKind::Cumulative}},
          CLI::ignore_case))
      ->default_str("delta");
  add_engine_flags(*cmd, args->engine);
  return [args] {
    return run_on_rank0(args->model, args->engine, [&] { return run_latency(*args); });
  };
}

}  // namespace pagoda::cli
