#include "parallel/collective_watchdog.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace pagoda::parallel {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

double CollectiveWatchdog::timeout_from_env() {
  const char* v = std::getenv("PAGODA_COLLECTIVE_TIMEOUT_S");
  if (!v || !*v) return 300;
  char* end = nullptr;
  const double t = std::strtod(v, &end);
  if (*end != '\0' || !(t >= 0)) {
    std::fprintf(stderr,
                 "pagoda: PAGODA_COLLECTIVE_TIMEOUT_S='%s' is not a number of seconds; "
                 "using 300\n",
                 v);
    return 300;
  }
  return t;
}

CollectiveWatchdog::CollectiveWatchdog(int rank, double timeout_s)
    : rank_(rank), timeout_s_(timeout_s) {
  if (timeout_s_ > 0) thread_ = std::thread([this] { watch(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void CollectiveWatchdog::enter(const char* what) {
  what_.store(what, std::memory_order_relaxed);
  entered_ns_.store(now_ns(), std::memory_order_release);
}

void CollectiveWatchdog::leave() { entered_ns_.store(0, std::memory_order_release); }

void CollectiveWatchdog::watch() {
  const auto limit_ns = static_cast<int64_t>(timeout_s_ * 1e9);
  const auto period =
      std::chrono::milliseconds(std::min<int64_t>(200, std::max<int64_t>(1, limit_ns / 4000000)));
  while (!stop_) {
    std::this_thread::sleep_for(period);
    const int64_t since = entered_ns_.load(std::memory_order_acquire);
    if (since == 0 || now_ns() - since <= limit_ns) continue;
    std::fprintf(stderr,
                 "pagoda[rank %d]: error: %s has waited %.1f s for the other ranks (one died or "
                 "stalls); exiting so the job ends (PAGODA_COLLECTIVE_TIMEOUT_S=%g)\n",
                 rank_, what_.load(std::memory_order_relaxed), (now_ns() - since) / 1e9,
                 timeout_s_);
    std::fflush(stderr);
    std::_Exit(3);
  }
}

}  // namespace pagoda::parallel
