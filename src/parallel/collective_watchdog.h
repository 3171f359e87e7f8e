// Ends this process when one collective waits too long for the other ranks
// (a rank stopped, or a machine vanished without closing its connections),
// so a tensor-parallel job fails instead of hanging forever. mpirun then
// ends the remaining ranks. A worker waiting for rank 0's next step is not
// a collective in this sense (the server may idle for hours): callers guard
// only waits that must end soon.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

namespace pagoda::parallel {

class CollectiveWatchdog {
 public:
  // timeout_s <= 0 disables the watchdog.
  CollectiveWatchdog(int rank, double timeout_s);
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Brackets one guarded wait; `what` must outlive it (a string literal).
  void enter(const char* what);
  void leave();

  // PAGODA_COLLECTIVE_TIMEOUT_S, else 300 s (a step's skew between ranks is
  // normally micro- to milliseconds).
  static double timeout_from_env();

 private:
  void watch();

  int rank_;
  double timeout_s_;
  std::atomic<int64_t> entered_ns_{0};  // 0: not inside a guarded wait
  std::atomic<const char*> what_{""};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// RAII form of enter/leave.
class GuardedWait {
 public:
  GuardedWait(CollectiveWatchdog& w, const char* what) : w_(w) { w_.enter(what); }
  ~GuardedWait() { w_.leave(); }
  GuardedWait(const GuardedWait&) = delete;
  GuardedWait& operator=(const GuardedWait&) = delete;

 private:
  CollectiveWatchdog& w_;
};

}  // namespace pagoda::parallel
