#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "cli/bench.h"

namespace pagoda::cli {

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return int64_t{u.ru_maxrss} * 1024;  // Linux reports KiB
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
          {"read_gb_per_s", r.read_gb_per_s},
          {"fp32_gflops", r.fp32_gflops},
          {"bf16_gflops", r.bf16_gflops},
          {"int8_gops", r.int8_gops}};
}

}  // namespace pagoda::cli
