// Prometheus text-format metrics (exposition format 0.0.4), hand-rolled:
// Debian has no prometheus-cpp. Thread-safe.
//
// Every metric is exported twice: under Pagoda's own names (pagoda_*,
// unlabelled) and under vLLM's (vllm:*, labelled model_name and engine as
// vLLM's V1 engine labels them), so Grafana dashboards and autoscalers
// built for vLLM work unchanged.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "engine/llm_engine.h"

namespace pagoda::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void observe(double v);
  // `labels`: "" or label pairs without braces ("model_name=\"m\"").
  void render(std::string& out, const std::string& name, const std::string& help,
              const std::string& labels = "") const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (last: +Inf)
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  // A finished request (any reason).
  void record_request(const RequestOutput& out);
  // Requests aborted before their final output was read (client gone).
  void record_aborted() {
    std::lock_guard lock(mu_);
    ++requests_aborted_;
  }
  void record_http_error() {
    std::lock_guard lock(mu_);
    ++http_errors_;
  }
  // `model_name`: the served name, vLLM's model_name label.
  std::string render(const EngineStats& stats, const std::string& model_name) const;

 private:
  mutable std::mutex mu_;
  uint64_t requests_stop_ = 0, requests_length_ = 0, requests_aborted_ = 0, prompt_tokens_ = 0,
           generation_tokens_ = 0, cached_tokens_ = 0, http_errors_ = 0;
  Histogram ttft_, tpot_, e2e_, prompt_len_, output_len_;
};

}  // namespace pagoda::server
