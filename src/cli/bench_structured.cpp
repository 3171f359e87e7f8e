// `pagoda bench structured`: what constrained decoding costs, next to the
// decode step it rides on. For a few constraints over the model's
// vocabulary (151,936 ids for Qwen3), the per-row, per-step cost of the
// token mask (GrammarMatcher::mask: cache lookup or trie walk), applying
// it to a logits row, and advancing the matcher by the chosen token, over
// random walks that sample uniformly among the allowed tokens (as random
// weights do); the first walk starts with an empty mask cache (cold).
// Then the batch-B decode step of the same model, unconstrained and with
// every row constrained (the mask work shares the sampler's threads), so
// the ratio per row and the end-to-end overhead come from the same run.
// --mixed-pairs N adds the check that a constrained request slows the
// unconstrained ones beside it by no more than its mask cost: N
// interleaved pairs of batches, all rows free vs one row constrained,
// whose step-time difference is printed next to that row's mask cost.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "cli/bench.h"
#include "core/error.h"
#include "core/parallel.h"
#include "engine/llm_engine.h"
#include "structured/gbnf_parser.h"
#include "structured/grammar_compiler.h"

namespace pagoda::cli {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct StructuredArgs : BenchModelArgs {
  int batch = 32;
  int walks = 6;
  int max_steps = 256;
  int mixed_pairs = 0;
  std::vector<std::string> schema_files;
};

struct Constraint {
  std::string name;
  structured::OutputSpec spec;
};

std::vector<Constraint> default_constraints() {
  using K = structured::OutputSpec::Kind;
  return {
      {"person", {K::JsonSchema, R"({"type":"object","properties":{"name":{"type":"string","maxLength":20},
        "age":{"type":"integer","minimum":0,"maximum":150},"email":{"type":"string","format":"email"},
        "tags":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":4}},"required":["name","age"]})"}},
      {"records", {K::JsonSchema, R"({"type":"array","minItems":1,"maxItems":8,"items":{"type":"object",
        "properties":{"id":{"type":"string","pattern":"^[A-Z]{2}-[0-9]{4}$"},"score":{"type":"number","minimum":0,"maximum":100},
        "note":{"type":"string","maxLength":40}},"required":["id","score"]}})"}},
      {"free_string", {K::JsonSchema, R"({"type":"object","properties":{"text":{"type":"string"}},"required":["text"]})"}},
      {"json_object", {K::JsonObject, ""}},
      {"regex_phone", {K::Regex, R"((\+\d{1,3} )?\(\d{3}\) \d{3}-\d{4})"}},
  };
}

struct MaskStats {
  std::string name;
  double compile_ms = 0;
  int64_t steps = 0;
  double mean_us = 0, p50_us = 0, p99_us = 0, max_us = 0, cold_mean_us = 0;
  double accept_mean_us = 0;  // of mean_us: advancing the matcher by the chosen token
};

MaskStats time_masks(const Constraint& c, const std::shared_ptr<const structured::TokenVocab>& vocab,
                     const StructuredArgs& a) {
  MaskStats s;
  s.name = c.name;
  const auto t0 = Clock::now();
  // A compiler of its own: the walks start with an empty mask cache.
  structured::GrammarCompiler compiler(vocab);
  const auto grammar = compiler.compile(c.spec);
  s.compile_ms = 1e3 * seconds_since(t0);
  std::vector<float> logits(static_cast<size_t>(vocab->size()));
  std::vector<double> us, cold, accept;
  std::mt19937_64 rng(a.seed);
  std::vector<int32_t> allowed;
  for (int w = 0; w < a.walks; ++w) {
    structured::GrammarMatcher m(grammar);
    for (int step = 0; step < a.max_steps && !m.is_terminated(); ++step) {
      std::fill(logits.begin(), logits.end(), 0.0f);
      const auto t = Clock::now();
      const auto mask = m.mask();
      structured::apply_token_mask(*mask, vocab->size(), logits);
      const double mask_s = seconds_since(t);
      // The choice (not timed): uniform over the allowed ids, EOS a
      // quarter of the time once allowed, so walks end.
      allowed.clear();
      for (int32_t id = 0; id < vocab->size(); ++id)
        if (logits[id] == 0.0f) allowed.push_back(id);
      if (allowed.empty()) throw InternalError("bench structured: a state with no allowed token");
      int32_t id = allowed[rng() % allowed.size()];
      if (m.is_complete() && rng() % 4 == 0) id = vocab->eos_ids().front();
      const auto t2 = Clock::now();
      if (!m.accept_token(id)) throw InternalError("bench structured: an allowed token was refused");
      const double accept_s = seconds_since(t2);
      const double total_us = 1e6 * (mask_s + accept_s);
      us.push_back(total_us);
      accept.push_back(1e6 * accept_s);
      if (w == 0) cold.push_back(total_us);
    }
  }
  s.steps = static_cast<int64_t>(us.size());
  double sum = 0;
  for (double v : us) sum += v;
  s.mean_us = sum / static_cast<double>(us.size());
  double cold_sum = 0;
  for (double v : cold) cold_sum += v;
  s.cold_mean_us = cold_sum / static_cast<double>(cold.size());
  double accept_sum = 0;
  for (double v : accept) accept_sum += v;
  s.accept_mean_us = accept_sum / static_cast<double>(accept.size());
  std::sort(us.begin(), us.end());
  s.p50_us = us[us.size() / 2];
  s.p99_us = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  s.max_us = us.back();
  return s;
}

// Median decode step (ms) of a batch of B requests, the first
// `constrained_rows` of them constrained by `grammar`.
double decode_step_ms(LLMEngine& engine, const StructuredArgs& a,
                      std::shared_ptr<const structured::CompiledGrammar> grammar, int constrained_rows,
                      int tag) {
  const int64_t vocab = engine.model_config().vocab_size;
  std::mt19937_64 rng(a.seed + static_cast<uint64_t>(tag));
  for (int i = 0; i < a.batch; ++i) {
    SamplingParams params;
    params.temperature = 1.0f;
    params.seed = a.seed + static_cast<uint64_t>(i);
    params.max_tokens = a.output_len;
    params.ignore_eos = true;
    if (i < constrained_rows) params.grammar = grammar;
    std::vector<int32_t> prompt(static_cast<size_t>(a.input_len));
    for (int32_t& t : prompt) t = static_cast<int32_t>(3 + rng() % static_cast<uint64_t>(vocab - 3));
    engine.add_request("st-" + std::to_string(tag) + "-" + std::to_string(constrained_rows) + "-" +
                           std::to_string(i),
                       std::move(prompt), params);
  }
  std::vector<double> steps;
  while (engine.has_unfinished()) {
    const bool decoding = engine.num_waiting() == 0 && engine.last_batch().num_tokens() > 0;
    const auto t = Clock::now();
    engine.step();
    // Only full-batch decode steps: one token per request.
    if (decoding && engine.last_batch().num_tokens() == a.batch) steps.push_back(1e3 * seconds_since(t));
  }
  if (steps.empty()) throw InternalError("bench structured: no full decode step");
  return median(steps);
}

// The acceptance check "a constrained request never slows the
// unconstrained requests in its batch by more than the mask cost":
// interleaved pairs of batch-B runs (ABBA), every row free vs row 0 constrained
// by `grammar` (the others free), each run's median full-batch decode
// step; the median of the pairs' differences (a paired design: one slow
// moment of the machine moves one pair, not the verdict) is what the free
// rows lost, printed beside the constrained row's mask cost per step
// (`mask`: the same grammar's walks above, cache warm as in serving).
nlohmann::json mixed_batch(LLMEngine& engine, const StructuredArgs& a,
                           const std::shared_ptr<const structured::CompiledGrammar>& grammar,
                           const MaskStats& mask) {
  std::vector<double> plain, mixed;
  for (int p = 0; p < a.mixed_pairs; ++p) {
    // In ABBA order, so a drift of the machine's speed within a pair
    // favours neither side.
    // Both runs of a pair decode the same prompts (the tag seeds them), so
    // they differ only by the constraint on row 0.
    if (p % 2 == 0) plain.push_back(decode_step_ms(engine, a, nullptr, 0, 100 + p));
    mixed.push_back(decode_step_ms(engine, a, grammar, 1, 100 + p));
    if (p % 2 == 1) plain.push_back(decode_step_ms(engine, a, nullptr, 0, 100 + p));
    std::printf("mixed-batch pair %d: all %d rows free %.2f ms/step | 1 row constrained (%s) %.2f ms/step\n",
                p + 1, a.batch, plain.back(), mask.name.c_str(), mixed.back());
  }
  const double plain_ms = median(plain), mixed_ms = median(mixed);
  std::vector<double> differences;
  for (size_t i = 0; i < plain.size(); ++i) differences.push_back(mixed[i] - plain[i]);
  const double slowdown_ms = median(differences);
  std::printf(
      "mixed batch-%d, %d pairs: free rows' step %.2f ms -> %.2f ms (medians) with one constrained "
      "row; median of the pairs' differences %+.3f ms (%+.2f%%) | mask cost per constrained row per "
      "step: mean %.3f ms, p99 %.3f ms%s\n",
      a.batch, a.mixed_pairs, plain_ms, mixed_ms, slowdown_ms, 100.0 * slowdown_ms / plain_ms,
      mask.mean_us / 1e3, mask.p99_us / 1e3,
      slowdown_ms <= mask.mean_us / 1e3 ? " (slowdown within the mean mask cost)"
                                        : " (slowdown ABOVE the mean mask cost)");
  return {{"pairs", a.mixed_pairs},         {"constraint", mask.name},
          {"free_ms_per_step", plain},      {"one_constrained_ms_per_step", mixed},
          {"free_ms_median", plain_ms},     {"one_constrained_ms_median", mixed_ms},
          {"slowdown_ms", slowdown_ms},     {"mask_ms_mean", mask.mean_us / 1e3},
          {"mask_ms_p99", mask.p99_us / 1e3}};
}

int run_bench(StructuredArgs& a) {
  if (int64_t{a.batch} > a.engine.max_num_seqs) a.engine.max_num_seqs = a.batch;
  a.engine.prefault_kv_cache = true;
  LLMEngine engine(a.model, a.engine);
  print_engine_summary(engine);
  std::vector<Constraint> constraints = default_constraints();
  for (const std::string& path : a.schema_files) {
    std::ifstream in(path);
    if (!in) throw_input_error("bench structured: cannot read --json-schema {}", path);
    std::stringstream ss;
    ss << in.rdbuf();
    constraints.push_back({path, {structured::OutputSpec::Kind::JsonSchema, ss.str()}});
  }
  const auto t0 = Clock::now();
  std::vector<int32_t> eos = engine.model_config().eos_token_ids;
  if (eos.empty() && engine.tokenizer().eos_token_id()) eos.push_back(*engine.tokenizer().eos_token_id());
  const auto vocab = std::make_shared<const structured::TokenVocab>(
      engine.tokenizer(), static_cast<int32_t>(engine.model_config().vocab_size), eos);
  const double vocab_ms = 1e3 * seconds_since(t0);

  std::vector<MaskStats> stats;
  for (const Constraint& c : constraints) stats.push_back(time_masks(c, vocab, a));

  decode_step_ms(engine, a, nullptr, 0, 0);  // warm-up
  const double plain_ms = decode_step_ms(engine, a, nullptr, 0, 1);
  const auto person = engine.grammar_compiler().compile(constraints[0].spec);
  const double constrained_ms = decode_step_ms(engine, a, person, a.batch, 2);
  const double plain_ms2 = decode_step_ms(engine, a, nullptr, 0, 3);  // interleaved: noise check
  const double step_ms = std::min(plain_ms, plain_ms2);

  nlohmann::json j = {{"model", a.model}, {"batch", a.batch}, {"threads", num_threads()},
                      {"vocab_size", vocab->size()}, {"vocab_build_ms", vocab_ms},
                      {"decode_ms_per_step", step_ms}, {"decode_ms_per_step_runs", {plain_ms, plain_ms2}},
                      {"decode_ms_per_step_all_rows_constrained", constrained_ms}};
  std::printf("vocabulary: %d ids, trie and token bytes built in %.0f ms\n", vocab->size(), vocab_ms);
  std::printf("batch-%d decode step: %.1f ms (runs %.1f, %.1f); every row constrained (person): %.1f ms (%+.1f%%)\n",
              a.batch, step_ms, plain_ms, plain_ms2, constrained_ms, 100.0 * (constrained_ms / step_ms - 1));
  std::printf("%-14s %8s %6s %9s %9s %9s %9s %9s %9s %9s\n", "constraint", "compile", "steps", "mean_us",
              "accept_us", "cold_us", "p50_us", "p99_us", "max_us", "mean/step");
  nlohmann::json rows = nlohmann::json::array();
  for (const MaskStats& s : stats) {
    const double ratio = s.mean_us / (1e3 * step_ms);
    std::printf("%-14s %6.0fms %6lld %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %8.2f%%\n", s.name.c_str(),
                s.compile_ms, static_cast<long long>(s.steps), s.mean_us, s.accept_mean_us, s.cold_mean_us,
                s.p50_us, s.p99_us, s.max_us, 100 * ratio);
    rows.push_back({{"constraint", s.name}, {"compile_ms", s.compile_ms}, {"steps", s.steps},
                    {"mask_us_mean", s.mean_us}, {"accept_us_mean", s.accept_mean_us}, {"mask_us_cold_mean", s.cold_mean_us}, {"mask_us_p50", s.p50_us},
                    {"mask_us_p99", s.p99_us}, {"mask_us_max", s.max_us}, {"fraction_of_decode_step", ratio}});
  }
  j["constraints"] = rows;
  if (a.mixed_pairs > 0) j["mixed_batch"] = mixed_batch(engine, a, person, stats[0]);
  if (a.json) std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

}  // namespace

Runner add_bench_structured(CLI::App& bench) {
  auto a = std::make_shared<StructuredArgs>();
  a->input_len = 32;
  a->output_len = 24;
  CLI::App* cmd = bench.add_subcommand(
      "structured", "Token-mask cost of constrained decoding per row and step, next to a decode step");
  add_bench_model_flags(cmd, a.get());
  cmd->add_option("--batch", a->batch, "Requests decoded together for the step time")->check(CLI::Range(1, 4096));
  cmd->add_option("--walks", a->walks, "Random walks per constraint (the first with a cold mask cache)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--max-steps", a->max_steps, "Tokens per walk at most")->check(CLI::Range(1, 100000));
  cmd->add_option("--mixed-pairs", a->mixed_pairs,
                  "Also time N interleaved pairs of batches, all rows free vs one row constrained, "
                  "against the mask cost (0: skip)")
      ->check(CLI::Range(0, 100));
  cmd->add_option("--json-schema", a->schema_files, "Also time this JSON schema (file; repeatable)");
  add_engine_flags(*cmd, a->engine);
  return [a] { return run_bench(*a); };
}

}  // namespace pagoda::cli
