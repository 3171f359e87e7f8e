#include "core/parallel.h"

#include <omp.h>

#include <algorithm>
#include <thread>

namespace pagoda {

namespace {
int g_num_threads = std::max(1u, std::thread::hardware_concurrency());
}

void set_num_threads(int n) {
  g_num_threads = std::max(1, n);
  omp_set_num_threads(g_num_threads);
}

int num_threads() { return g_num_threads; }

}  // namespace pagoda
