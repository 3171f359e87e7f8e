#include "parallel/communicator.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace pagoda::parallel {

namespace {

class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(float*, int64_t) override {}
  void all_gather(const float* send, int64_t n, float* recv) override {
    if (recv != send && n > 0) std::memcpy(recv, send, static_cast<size_t>(n) * sizeof(float));
  }
  void gather(const float* send, int64_t n, float* recv, int root) override {
    PAGODA_CHECK(root == 0, "gather root {} of a single-process group", root);
    all_gather(send, n, recv);
  }
  void broadcast(void*, int64_t, int root) override {
    PAGODA_CHECK(root == 0, "broadcast root {} of a single-process group", root);
  }
  bool all_ok(bool ok) override { return ok; }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }
  std::string name() const override { return "single-process"; }
};

std::unique_ptr<Communicator>& world_ptr() {
  static std::unique_ptr<Communicator> w = make_single_process_communicator();
  return w;
}

}  // namespace

// Defined in mpi_communicator.cpp when built with MPI.
#ifdef PAGODA_WITH_MPI
std::unique_ptr<Communicator> make_mpi_communicator_if_launched(int* argc, char*** argv);
void finalize_mpi();
bool built_with_mpi() { return true; }
#else
bool built_with_mpi() { return false; }
#endif

std::unique_ptr<Communicator> make_single_process_communicator() {
  return std::make_unique<SingleProcessCommunicator>();
}

Communicator& single_process() {
  static SingleProcessCommunicator comm;
  return comm;
}

void init(int* argc, char*** argv) {
#ifdef PAGODA_WITH_MPI
  if (auto mpi = make_mpi_communicator_if_launched(argc, argv)) world_ptr() = std::move(mpi);
#endif
}

Communicator& world() { return *world_ptr(); }

void finalize() {
#ifdef PAGODA_WITH_MPI
  finalize_mpi();
#endif
}

EvenSplit split_evenly(int64_t total, const char* what, int rank, int size) {
  if (total % size != 0) {
    throw ParallelConfigError(fmt::format(
        "tensor parallel size {} does not fit this model: {} {} is not divisible by {}", size,
        what, total, size));
  }
  return {rank * (total / size), total / size};
}

void check_tensor_parallel_size(int tensor_parallel_size, const Communicator& comm) {
  if (tensor_parallel_size < 1) {
    throw ParallelConfigError(
        fmt::format("--tensor-parallel-size must be >= 1, got {}", tensor_parallel_size));
  }
  if (tensor_parallel_size == comm.size()) return;
  if (comm.size() == 1 && !built_with_mpi()) {
    throw ParallelConfigError(fmt::format(
        "--tensor-parallel-size {} needs MPI, and this pagoda was built without MPI (install "
        "libopenmpi-dev and openmpi-bin, then rebuild)",
        tensor_parallel_size));
  }
  throw ParallelConfigError(fmt::format(
      "--tensor-parallel-size {} does not match the {} process(es) launched; start one process "
      "per rank: mpirun -np {} pagoda ... --tensor-parallel-size {}",
      tensor_parallel_size, comm.size(), tensor_parallel_size, tensor_parallel_size));
}

namespace {
std::atomic<bool> g_exit_agreed{false};
}

void mark_exit_agreed() { g_exit_agreed = true; }
bool exit_agreed() { return g_exit_agreed; }

int cpus_in_affinity_mask() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

}  // namespace pagoda::parallel
