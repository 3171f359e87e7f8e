// Prometheus text-format metrics (exposition format 0.0.4), hand-rolled:
// Debian has no prometheus-cpp. Thread-safe.
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
  void render(std::string& out, const std::string& name, const std::string& help) const;

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
  std::string render(const EngineStats& stats) const;

 private:
  mutable std::mutex mu_;
  uint64_t requests_ok_ = 0, requests_aborted_ = 0, prompt_tokens_ = 0, generation_tokens_ = 0,
           cached_tokens_ = 0, http_errors_ = 0;
  Histogram ttft_, tpot_, e2e_;
};

}  // namespace pagoda::server
