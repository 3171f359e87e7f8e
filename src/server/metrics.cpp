#include "server/metrics.h"

#include <fmt/format.h>

namespace pagoda::server {

namespace {

// A Prometheus label value: backslash, double quote and newline escaped.
std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// 1, 2, 5, 10, 20, 50, ... up to `max`: token-count buckets as vLLM builds them.
std::vector<double> one_two_five(double max) {
  std::vector<double> b;
  for (double scale = 1; scale <= max; scale *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * scale <= max) b.push_back(m * scale);
    }
  }
  return b;
}

}  // namespace

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i]++;
  sum_ += v;
  count_++;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help,
                       const std::string& labels) const {
  const std::string sep = labels.empty() ? "" : ",";
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out +=
        fmt::format("{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep, bounds_[i], cumulative);
  }
  out += fmt::format("{}_bucket{{{}{}le=\"+Inf\"}} {}\n{}_sum{} {}\n{}_count{} {}\n", name, labels,
                     sep, count_, name, braces, sum_, name, braces, count_);
}

Metrics::Metrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      tpot_({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}),
      e2e_({0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}),
      prompt_len_(one_two_five(1e6)),
      output_len_(one_two_five(1e6)) {}

void Metrics::record_request(const RequestOutput& out) {
  std::lock_guard lock(mu_);
  const RequestMetrics& m = out.metrics;
  switch (out.finish_reason) {
    case FinishReason::Abort:
      ++requests_aborted_;
      break;
    case FinishReason::Length:
      ++requests_length_;
      break;
    default:
      ++requests_stop_;
      break;
  }
  prompt_tokens_ += m.num_prompt_tokens;
  generation_tokens_ += m.num_output_tokens;
  cached_tokens_ += m.num_cached_tokens;
  if (m.num_output_tokens > 0) ttft_.observe(m.time_to_first_token_s);
  if (m.num_output_tokens > 1) tpot_.observe(m.time_per_output_token_s);
  e2e_.observe(m.e2e_latency_s);
  prompt_len_.observe(static_cast<double>(m.num_prompt_tokens));
  output_len_.observe(static_cast<double>(m.num_output_tokens));
}

std::string Metrics::render(const EngineStats& s, const std::string& model_name) const {
  std::lock_guard lock(mu_);
  std::string out;
  // vLLM's labels: one engine (data parallelism is not a thing here).
  const std::string labels = "model_name=\"" + label_value(model_name) + "\",engine=\"0\"";
  auto family = [&](const char* type, const std::string& name, const char* help,
                    const std::vector<std::pair<std::string, double>>& samples) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    for (const auto& [lbl, v] : samples) {
      out += lbl.empty() ? fmt::format("{} {}\n", name, v)
                         : fmt::format("{}{{{}}} {}\n", name, lbl, v);
    }
  };
  // One quantity under both names: ours unlabelled, vLLM's labelled.
  auto both = [&](const char* type, const char* ours, const char* vllm, const char* help,
                  double v) {
    family(type, ours, help, {{"", v}});
    family(type, vllm, help, {{labels, v}});
  };
  const double usage =
      s.kv_blocks_total ? 1.0 - static_cast<double>(s.kv_blocks_free) / s.kv_blocks_total : 0.0;
  both("gauge", "pagoda_num_requests_running", "vllm:num_requests_running",
       "Requests in the running batch.", static_cast<double>(s.num_running));
  both("gauge", "pagoda_num_requests_waiting", "vllm:num_requests_waiting",
       "Requests waiting to be scheduled.", static_cast<double>(s.num_waiting));
  family("gauge", "pagoda_kv_cache_blocks_total",
         "KV-cache blocks in the pools (summed over page-size pools).",
         {{"", s.kv_blocks_total}});
  family("gauge", "pagoda_kv_cache_blocks_free", "KV-cache blocks no request holds.",
         {{"", s.kv_blocks_free}});
  family("gauge", "pagoda_kv_cache_token_capacity",
         "Token positions the KV cache holds: full-length sequences its scarcest pool holds "
         "x max_model_len (blocks x block size for a single pool).",
         {{"", static_cast<double>(s.kv_token_capacity)}});
  both("gauge", "pagoda_kv_cache_usage_perc", "vllm:kv_cache_usage_perc",
       "Fraction of KV-cache blocks in use.", usage);
  // vLLM's older name, still used by its example Grafana dashboard.
  family("gauge", "vllm:gpu_cache_usage_perc", "Fraction of KV-cache blocks in use.",
         {{labels, usage}});
  family("gauge", "pagoda_prefix_cache_hit_rate",
         "Prompt tokens served from the prefix cache / looked up.",
         {{"", s.prefix_cache_hit_rate()}});
  both("counter", "pagoda_prefix_cache_queries_total", "vllm:prefix_cache_queries_total",
       "Prompt tokens looked up in the prefix cache.",
       static_cast<double>(s.prefix_cache_queried_tokens));
  both("counter", "pagoda_prefix_cache_hits_total", "vllm:prefix_cache_hits_total",
       "Prompt tokens found in the prefix cache.", static_cast<double>(s.prefix_cache_hit_tokens));
  both("counter", "pagoda_num_preemptions_total", "vllm:num_preemptions_total",
       "Requests preempted (KV blocks freed, recomputed later) since start.",
       static_cast<double>(s.num_preemptions));
  // Speculative decoding (vLLM's spec_decode counters; all 0 when off).
  const SpecDecodeStats& sd = s.spec_decode;
  both("counter", "pagoda_spec_decode_num_drafts_total", "vllm:spec_decode_num_drafts",
       "Verify steps of a request with draft tokens.", static_cast<double>(sd.num_drafts));
  both("counter", "pagoda_spec_decode_num_draft_tokens_total",
       "vllm:spec_decode_num_draft_tokens", "Draft tokens verified.",
       static_cast<double>(sd.num_draft_tokens));
  both("counter", "pagoda_spec_decode_num_accepted_tokens_total",
       "vllm:spec_decode_num_accepted_tokens", "Draft tokens accepted.",
       static_cast<double>(sd.num_accepted_tokens));
  {
    std::vector<std::pair<std::string, double>> ours, vllm;
    for (size_t p = 0; p < sd.num_accepted_tokens_per_pos.size(); ++p) {
      const auto v = static_cast<double>(sd.num_accepted_tokens_per_pos[p]);
      ours.emplace_back(fmt::format("position=\"{}\"", p), v);
      vllm.emplace_back(fmt::format("{},position=\"{}\"", labels, p), v);
    }
    const char* help = "Draft tokens accepted at each position of the draft (0 = first).";
    family("counter", "pagoda_spec_decode_num_accepted_tokens_per_pos_total", help, ours);
    family("counter", "vllm:spec_decode_num_accepted_tokens_per_pos", help, vllm);
  }
  family("gauge", "pagoda_spec_decode_acceptance_rate",
         "Accepted / verified draft tokens since start.", {{"", sd.acceptance_rate()}});
  family("gauge", "pagoda_spec_decode_mean_acceptance_length",
         "Tokens a verify step emitted on average (1 + accepted drafts).",
         {{"", sd.mean_acceptance_length()}});
  family("counter", "pagoda_requests_finished_total", "Requests that finished (stop or length).",
         {{"", static_cast<double>(requests_stop_ + requests_length_)}});
  family("counter", "pagoda_requests_aborted_total", "Requests aborted (client gone, shutdown).",
         {{"", static_cast<double>(requests_aborted_)}});
  family("counter", "vllm:request_success_total", "Finished requests, by finish reason.",
         {{labels + ",finished_reason=\"stop\"", static_cast<double>(requests_stop_)},
          {labels + ",finished_reason=\"length\"", static_cast<double>(requests_length_)},
          {labels + ",finished_reason=\"abort\"", static_cast<double>(requests_aborted_)}});
  both("counter", "pagoda_prompt_tokens_total", "vllm:prompt_tokens_total",
       "Prompt tokens of finished requests.", static_cast<double>(prompt_tokens_));
  both("counter", "pagoda_generation_tokens_total", "vllm:generation_tokens_total",
       "Generated tokens.", static_cast<double>(generation_tokens_));
  family("counter", "pagoda_http_errors_total", "Requests answered with a 4xx/5xx error.",
         {{"", static_cast<double>(http_errors_)}});
  const struct {
    const Histogram& h;
    const char *ours, *vllm, *help;
  } histograms[] = {
      {ttft_, "pagoda_time_to_first_token_seconds", "vllm:time_to_first_token_seconds",
       "Time to first token."},
      // Per request: the mean gap between its tokens after the first.
      {tpot_, "pagoda_time_per_output_token_seconds", "vllm:time_per_output_token_seconds",
       "Time per output token after the first."},
      {e2e_, "pagoda_e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds",
       "End-to-end request latency."},
      {prompt_len_, "pagoda_request_prompt_tokens", "vllm:request_prompt_tokens",
       "Prompt tokens per finished request."},
      {output_len_, "pagoda_request_generation_tokens", "vllm:request_generation_tokens",
       "Generated tokens per finished request."},
  };
  for (const auto& h : histograms) {
    h.h.render(out, h.ours, h.help);
    h.h.render(out, h.vllm, h.help, labels);
  }
  return out;
}

}  // namespace pagoda::server
