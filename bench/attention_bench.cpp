// Micro-benchmark of ops::paged_attention: one decode step (or a batch of
// decode rows) over long contexts in a shuffled paged KV cache, as the
// Qwen3-0.6B shape (16 q / 8 kv heads, head_dim 128); prints ms per layer
// and the KV bytes streamed per second. Like a real step it runs `layers`
// layers in turn, each over its own cache, so the KV comes from memory
// rather than the last level cache (28 layers of 128 keys x 32 sequences
// are 470 MB).
// Not wired into CMake; build against a build tree's libraries, e.g.
//   g++ -O2 -std=c++20 -fopenmp -Isrc bench/attention_bench.cpp \
//       build/libpagoda_ops.a build/libpagoda_core.a -lfmt -o /tmp/attention_bench
//   /tmp/attention_bench [context] [seqs] [bf16|f32] [threads] [layers]
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/parallel.h"
#include "ops/ops.h"

using namespace pagoda;

namespace {

// Bytes on transparent huge pages where the kernel grants them.
struct HugeBuffer {
  uint8_t* bytes;
  size_t n;
  explicit HugeBuffer(size_t size) : n(size) {
    constexpr size_t kHuge = size_t{2} << 20;
    bytes = static_cast<uint8_t*>(std::aligned_alloc(kHuge, (size + kHuge - 1) / kHuge * kHuge));
    madvise(bytes, (size + kHuge - 1) / kHuge * kHuge, MADV_HUGEPAGE);
  }
  ~HugeBuffer() { std::free(bytes); }
  size_t size() const { return n; }
  uint8_t& operator[](size_t i) { return bytes[i]; }
  uint8_t* data() { return bytes; }
};

}  // namespace

int main(int argc, char** argv) {
  const int context = argc > 1 ? std::atoi(argv[1]) : 8192;
  const int seqs = argc > 2 ? std::atoi(argv[2]) : 1;
  const bool bf16 = argc > 3 ? std::string(argv[3]) != "f32" : true;
  set_num_threads(argc > 4 ? std::atoi(argv[4]) : 2);
  const int layers = argc > 5 ? std::max(1, std::atoi(argv[5])) : 28;
  const int q_heads = 16, kv_heads = 8, hd = 128, bs = 16;
  ops::KVLayout layout{bs, kv_heads, hd, bf16 ? DType::BF16 : DType::F32};
  const int blocks_per_seq = (context + bs - 1) / bs;
  const int64_t num_blocks = int64_t{blocks_per_seq} * seqs;
  const size_t elems = static_cast<size_t>(num_blocks) * kv_heads * bs * hd;
  const size_t esize = bf16 ? 2 : 4;
  // The engine's KV pool lies on 2 MiB pages (kv/kv_storage.cpp); so do these.
  HugeBuffer k(elems * esize * layers), v(elems * esize * layers);
  std::mt19937 rng(0);
  for (size_t i = 0; i < k.size(); i += 2) {  // small random bf16/f32 bit patterns
    const uint16_t b = 0x3c00 + (rng() & 0x3ff);
    std::memcpy(&k[i], &b, 2);
    std::memcpy(&v[i], &b, 2);
  }
  std::vector<int32_t> table(num_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<int32_t> qsl(seqs + 1), lens(seqs, context);
  for (int s = 0; s <= seqs; ++s) qsl[s] = s;
  std::vector<float> q(static_cast<size_t>(seqs) * q_heads * hd), out(q.size());
  std::normal_distribution<float> d;
  for (float& x : q) x = d(rng);
  ops::AttentionBatch b;
  b.num_seqs = seqs;
  b.query_start_loc = qsl.data();
  b.seq_lens = lens.data();
  b.block_tables = table.data();
  b.max_blocks_per_seq = blocks_per_seq;
  const float scale = 1.0f / std::sqrt(128.0f);
  auto run = [&] {
    for (int l = 0; l < layers; ++l) {
      const size_t at = elems * esize * l;
      ops::paged_attention(q.data(), k.data() + at, v.data() + at, layout, b, q_heads, scale,
                           out.data());
    }
  };
  run();
  // CPU time as well as wall time: on a shared machine the process's CPU
  // seconds per layer (over its threads) say what the kernel costs when the
  // wall clock also counts other jobs' turns.
  auto cpu_seconds = [] {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  int reps = 1;
  double s = 0, cpu = 0;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_seconds();
    for (int r = 0; r < reps; ++r) run();
    s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cpu = cpu_seconds() - c0;
    if (s > 0.5) break;
    reps *= 2;
  }
  const double per = s / reps / layers, cpu_per = cpu / reps / layers;
  const double bytes = 2.0 * elems * esize;
  std::printf(
      "context %d x %d seqs, %s KV, %d threads, %d layers: %.3f ms per layer (%.3f ms CPU), "
      "%.1f GB/s of KV, %d runs (checksum %g)\n",
      context, seqs, bf16 ? "bf16" : "f32", num_threads(), layers, per * 1e3, cpu_per * 1e3,
      bytes / per * 1e-9, reps,
      static_cast<double>(out[0] + out[out.size() - 1]));
}
