#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "cli/bench.h"

namespace pagoda::cli {

int64_t peak_rss_bytes() {
  // VmHWM rather than getrusage's ru_maxrss: only the former restarts with
  // clear_refs (ru_maxrss also keeps the peak of threads that have exited).
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f) {
    char line[256];
    long kib = -1;
    while (std::fgets(line, sizeof line, f)) {
      if (std::sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
    }
    std::fclose(f);
    if (kib >= 0) return int64_t{kib} * 1024;
  }
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return int64_t{u.ru_maxrss} * 1024;  // Linux reports KiB
}

bool restart_peak_rss() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool written = std::fputs("5", f) >= 0;  // 5: reset the peak RSS
  return std::fclose(f) == 0 && written;
}

int64_t current_rss_bytes() {
  long pages_total = 0, pages_resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  const int got = std::fscanf(f, "%ld %ld", &pages_total, &pages_resident);
  std::fclose(f);
  return got == 2 ? int64_t{pages_resident} * sysconf(_SC_PAGESIZE) : 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

nlohmann::json roofline_json(const ops::Roofline& r) {
  return {{"threads", r.threads},
          {"isa", ops::isa_name(r.isa)},
          {"read_gb_per_s", r.read_gb_per_s},
          {"fp32_gflops", r.fp32_gflops},
          {"bf16_gflops", r.bf16_gflops},
          {"int8_gops", r.int8_gops},
          {"fp32_probe", r.fp32_probe},
          {"bf16_probe", r.bf16_probe},
          {"int8_probe", r.int8_probe}};
}

double token_flops(const ModelConfig& c, double keys, double lm_head_rows) {
  const double h = c.hidden_size, hd = c.head_dim, inter = c.intermediate_size;
  const double q = c.num_attention_heads * hd, kv = c.num_key_value_heads * hd;
  const double layer_weights = h * (q + 2 * kv) + q * h + 3 * h * inter;
  return c.num_hidden_layers * (2 * layer_weights + 4 * q * keys) +
         2.0 * c.vocab_size * h * lm_head_rows;
}

double prefill_flops_per_token(const ModelConfig& c, int input_len) {
  return token_flops(c, (input_len + 1) / 2.0, 1.0 / input_len);
}

LinearPeak linear_peak(const ops::Roofline& roof, const LLMEngine& engine) {
  if (engine.options().quantization == Quantization::Int8)
    return {roof.int8_gops, "int8", roof.int8_probe};
  if (engine.model().weight_dtype() == DType::BF16) return {roof.bf16_gflops, "bf16", roof.bf16_probe};
  return {roof.fp32_gflops, "fp32", roof.fp32_probe};
}

}  // namespace pagoda::cli
