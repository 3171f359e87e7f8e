// Collectives between the ranks of a tensor-parallel group. Rank 0 owns the
// scheduler, tokenizer and sampling; every rank runs the model on its shard.
// The single-process communicator (size 1) is always available; the MPI one
// exists when Pagoda is built with MPI (PAGODA_WITH_MPI) and the process was
// started by mpirun.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/error.h"

namespace pagoda::parallel {

// A tensor-parallel setup that cannot work (size mismatch, heads that do not
// divide). Every rank detects it the same way, so every rank reports it and
// exits cleanly, without a collective that could hang.
class ParallelConfigError : public InputError {
 public:
  using InputError::InputError;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: data[i] = sum over ranks of data[i].
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  // recv[r * n .. (r + 1) * n) = rank r's send[0 .. n); recv holds size() * n.
  virtual void all_gather(const float* send, int64_t n, float* recv) = 0;
  // Like all_gather, but only `root` receives (recv may be null elsewhere).
  virtual void gather(const float* send, int64_t n, float* recv, int root) = 0;
  // Root's bytes to every rank. Ranks that wait here for long (a worker
  // waiting for the next step while the server is idle) sleep between polls
  // instead of spinning a core.
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  // True on every rank iff `ok` was true on every rank.
  virtual bool all_ok(bool ok) = 0;
  // Ends every rank of the job at once (a rank failed mid-collective).
  [[noreturn]] virtual void abort(int code) = 0;
  // "single-process" or "mpi".
  virtual std::string name() const = 0;
};

// Size 1: every collective is a copy or nothing.
std::unique_ptr<Communicator> make_single_process_communicator();
// A process-wide size-1 communicator (stateless; lives until exit), for
// models loaded outside any tensor-parallel group.
Communicator& single_process();

// The process-wide communicator. init() picks MPI when built with it and
// launched by mpirun (or another MPI launcher), else single-process;
// world() before init() is single-process.
void init(int* argc, char*** argv);
Communicator& world();
// MPI_Finalize when MPI was initialised; safe to call more than once.
void finalize();
// Whether this build can run across processes.
bool built_with_mpi();

// This rank's share of `total` items split evenly over `size` ranks (heads,
// output groups, intermediate features): [begin, begin + count).
// ParallelConfigError naming `what` when total is not divisible by size.
struct EvenSplit {
  int64_t begin = 0, count = 0;
};
EvenSplit split_evenly(int64_t total, const char* what, int rank, int size);

// Throws ParallelConfigError unless `tensor_parallel_size` equals the
// number of processes launched (the same check, and message, on every rank).
void check_tensor_parallel_size(int tensor_parallel_size, const Communicator& comm);

// Set when every rank knows the job is ending (an agreed failure, or a
// ParallelConfigError): ranks then finalize and exit instead of aborting.
void mark_exit_agreed();
bool exit_agreed();

// CPUs this process may run on (mpirun binds each rank to its cores).
int cpus_in_affinity_mask();

}  // namespace pagoda::parallel
