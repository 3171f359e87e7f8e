// The MPI communicator (Open MPI: shared memory inside a machine, TCP
// between machines). Compiled only when CMake found MPI (PAGODA_WITH_MPI).
#ifdef PAGODA_WITH_MPI

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "parallel/collective_watchdog.h"
#include "parallel/communicator.h"

namespace pagoda::parallel {

namespace {

bool g_initialized_here = false;

// Time spent inside collectives (PAGODA_REPORT_COMM_TIME=1 prints it per
// rank at exit): what tensor parallelism costs on top of the shard's math.
struct CollectiveTimes {
  double all_reduce_s = 0, gather_s = 0, broadcast_s = 0;
  int64_t all_reduces = 0, gathers = 0, broadcasts = 0;
  int64_t all_reduce_floats = 0;
};
CollectiveTimes g_times;

class Stopwatch {
 public:
  Stopwatch(double& total, int64_t& count) : total_(total), start_(MPI_Wtime()) { ++count; }
  ~Stopwatch() { total_ += MPI_Wtime() - start_; }

 private:
  double& total_;
  double start_;
};

// Started by mpirun / srun / a PMI launcher? (A plain `pagoda` run must not
// pay for, or depend on, MPI's singleton start-up.)
bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (std::getenv(v)) return true;
  }
  return false;
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    // Errors come back as codes that check() turns into an abort of the
    // whole job with a message, instead of a silent hang or a bare exit.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    watchdog_ = std::make_unique<CollectiveWatchdog>(rank_, CollectiveWatchdog::timeout_from_env());
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(float* data, int64_t n) override {
    Stopwatch w(g_times.all_reduce_s, g_times.all_reduces);
    GuardedWait g(*watchdog_, "all-reduce");
    g_times.all_reduce_floats += n;
    check(MPI_Allreduce(MPI_IN_PLACE, data, count(n), MPI_FLOAT, MPI_SUM, comm_), "all-reduce");
  }
  void all_gather(const float* send, int64_t n, float* recv) override {
    GuardedWait g(*watchdog_, "all-gather");
    check(MPI_Allgather(send, count(n), MPI_FLOAT, recv, count(n), MPI_FLOAT, comm_), "all-gather");
  }
  void gather(const float* send, int64_t n, float* recv, int root) override {
    Stopwatch w(g_times.gather_s, g_times.gathers);
    GuardedWait g(*watchdog_, "gather");
    check(MPI_Gather(send, count(n), MPI_FLOAT, recv, count(n), MPI_FLOAT, root, comm_), "gather");
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    Stopwatch w(g_times.broadcast_s, g_times.broadcasts);
    // Only the sender's wait is bounded: a worker waits for the next step
    // as long as rank 0 idles.
    if (rank_ == root) watchdog_->enter("broadcast");
    MPI_Request req;
    check(MPI_Ibcast(data, count(bytes), MPI_BYTE, root, comm_, &req), "broadcast");
    wait(req, "broadcast");
    watchdog_->leave();
  }
  bool all_ok(bool ok) override {
    int v = ok ? 1 : 0;
    GuardedWait g(*watchdog_, "agreement");
    check(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, comm_), "agreement");
    return v == 1;
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }
  std::string name() const override { return "mpi"; }

 private:
  int count(int64_t n) {
    if (n < 0 || n > INT_MAX) {
      std::fprintf(stderr, "pagoda[rank %d]: collective of %lld elements is too large\n", rank_,
                   static_cast<long long>(n));
      abort(1);
    }
    return static_cast<int>(n);
  }
  void check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    std::fprintf(stderr, "pagoda[rank %d]: MPI %s failed: %.*s; aborting the job\n", rank_, what,
                 len, msg);
    std::fflush(stderr);
    abort(1);
  }
  // Spins briefly (a step message normally arrives within microseconds),
  // then sleeps between polls so an idle worker does not burn a core.
  void wait(MPI_Request& req, const char* what) {
    const auto start = std::chrono::steady_clock::now();
    int polls = 0;
    for (;;) {
      int done = 0;
      check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), what);
      if (done) return;
      if (++polls < 2000) continue;
      const auto waited = std::chrono::steady_clock::now() - start;
      std::this_thread::sleep_for(waited < std::chrono::milliseconds(50)
                                      ? std::chrono::microseconds(50)
                                      : std::chrono::microseconds(500));
    }
  }

  std::unique_ptr<CollectiveWatchdog> watchdog_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator_if_launched(int* argc, char*** argv) {
  if (!launched_by_mpi()) return nullptr;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // The engine thread (not main) makes the collectives in `serve`, one
    // thread at a time: SERIALIZED is what we need.
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    g_initialized_here = true;
    if (provided < MPI_THREAD_SERIALIZED) {
      std::fprintf(stderr, "pagoda: the MPI library does not support MPI_THREAD_SERIALIZED\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  return std::make_unique<MpiCommunicator>();
}

void report_collective_times() {
  const char* v = std::getenv("PAGODA_REPORT_COMM_TIME");
  if (!v || std::string(v) != "1") return;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const CollectiveTimes& t = g_times;
  std::fprintf(stderr,
               "pagoda[rank %d]: all-reduce %lld calls %.3f s (%.1f us each, %.1f KiB avg); "
               "gather %lld calls %.3f s; broadcast %lld calls %.3f s (includes idle waits)\n",
               rank, static_cast<long long>(t.all_reduces), t.all_reduce_s,
               t.all_reduces ? 1e6 * t.all_reduce_s / t.all_reduces : 0.0,
               t.all_reduces ? 4.0 * t.all_reduce_floats / t.all_reduces / 1024 : 0.0,
               static_cast<long long>(t.gathers), t.gather_s, static_cast<long long>(t.broadcasts),
               t.broadcast_s);
  std::fflush(stderr);
}

void finalize_mpi() {
  if (!g_initialized_here) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    report_collective_times();
    MPI_Finalize();
  }
}

}  // namespace pagoda::parallel

#endif  // PAGODA_WITH_MPI
