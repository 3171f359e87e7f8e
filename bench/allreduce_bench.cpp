// Latency of the tensor-parallel all-reduce (the one after each attention
// block and MLP) through Pagoda's MPI communicator, ranks in step (an
// agreement before each timed batch, so rank skew is not counted).
// Not wired into CMake; build against a build tree's libraries, e.g.
//   mpicxx -O2 -std=c++20 -DOMPI_SKIP_MPICXX=1 -Isrc bench/allreduce_bench.cpp \
//       build/libpagoda_parallel.a build/libpagoda_core.a -lfmt -o /tmp/allreduce_bench
//   mpirun -np 2 /tmp/allreduce_bench [--mca btl tcp,self before -np for TCP]
#include <chrono>
#include <cstdio>
#include <vector>

#include "parallel/communicator.h"

int main(int argc, char** argv) {
  using namespace pagoda::parallel;
  init(&argc, &argv);
  Communicator& comm = world();
  // hidden 1024 x {1, 8, 256, 1024} tokens: decode, batched decode, prefill.
  for (const long floats : {1024L, 8L * 1024, 256L * 1024, 1024L * 1024}) {
    std::vector<float> x(static_cast<size_t>(floats), 1.0f);
    const int iters = floats <= 8 * 1024 ? 2000 : 50;
    for (int i = 0; i < 10; ++i) comm.all_reduce_sum(x.data(), floats);
    comm.all_ok(true);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) comm.all_reduce_sum(x.data(), floats);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        iters;
    if (comm.rank() == 0) {
      std::printf("%d ranks (%s): all-reduce of %7.1f KiB: %8.1f us  (%.2f GB/s)\n", comm.size(),
                  comm.name().c_str(), floats * 4 / 1024.0, us, floats * 4 / us / 1e3);
    }
  }
  finalize();
  return 0;
}
