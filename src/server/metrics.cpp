#include "server/metrics.h"

#include <fmt/format.h>

namespace pagoda::server {

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i]++;
  sum_ += v;
  count_++;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name,
                     sum_, name, count_);
}

Metrics::Metrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      tpot_({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}),
      e2e_({0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}) {}

void Metrics::record_request(const RequestOutput& out) {
  std::lock_guard lock(mu_);
  const RequestMetrics& m = out.metrics;
  if (out.finish_reason == FinishReason::Abort) {
    ++requests_aborted_;
  } else {
    ++requests_ok_;
  }
  prompt_tokens_ += m.num_prompt_tokens;
  generation_tokens_ += m.num_output_tokens;
  cached_tokens_ += m.num_cached_tokens;
  if (m.num_output_tokens > 0) ttft_.observe(m.time_to_first_token_s);
  if (m.num_output_tokens > 1) tpot_.observe(m.time_per_output_token_s);
  e2e_.observe(m.e2e_latency_s);
}

std::string Metrics::render(const EngineStats& s) const {
  std::lock_guard lock(mu_);
  std::string out;
  auto gauge = [&](const char* name, const char* help, double v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, v);
  };
  auto counter = [&](const char* name, const char* help, double v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
  };
  gauge("pagoda_num_requests_running", "Requests in the running batch.",
        static_cast<double>(s.num_running));
  gauge("pagoda_num_requests_waiting", "Requests waiting to be scheduled.",
        static_cast<double>(s.num_waiting));
  gauge("pagoda_kv_cache_blocks_total", "KV-cache blocks in the pool.", s.kv_blocks_total);
  gauge("pagoda_kv_cache_blocks_free", "KV-cache blocks no request holds.", s.kv_blocks_free);
  gauge("pagoda_kv_cache_usage_perc", "Fraction of KV-cache blocks in use.",
        s.kv_blocks_total ? 1.0 - static_cast<double>(s.kv_blocks_free) / s.kv_blocks_total : 0.0);
  gauge("pagoda_prefix_cache_hit_rate", "Prompt tokens served from the prefix cache / looked up.",
        s.prefix_cache_hit_rate());
  counter("pagoda_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          static_cast<double>(s.prefix_cache_queried_tokens));
  counter("pagoda_prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
          static_cast<double>(s.prefix_cache_hit_tokens));
  counter("pagoda_requests_finished_total", "Requests that finished (stop or length).",
          static_cast<double>(requests_ok_));
  counter("pagoda_requests_aborted_total", "Requests aborted (client gone, shutdown).",
          static_cast<double>(requests_aborted_));
  counter("pagoda_prompt_tokens_total", "Prompt tokens of finished requests.",
          static_cast<double>(prompt_tokens_));
  counter("pagoda_generation_tokens_total", "Generated tokens.",
          static_cast<double>(generation_tokens_));
  counter("pagoda_http_errors_total", "Requests answered with a 4xx/5xx error.",
          static_cast<double>(http_errors_));
  ttft_.render(out, "pagoda_time_to_first_token_seconds", "Time to first token.");
  tpot_.render(out, "pagoda_time_per_output_token_seconds",
               "Time per output token after the first.");
  e2e_.render(out, "pagoda_e2e_request_latency_seconds", "End-to-end request latency.");
  return out;
}

}  // namespace pagoda::server
