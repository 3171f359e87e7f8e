// Micro-benchmark of ops::mla_paged_attention: one decode step (or a batch
// of decode rows) over a shuffled paged latent cache, DeepSeek V3's shape
// (128 heads, entries of 512 latent + 64 rope values). Runs `layers`
// layers in turn, each over its own cache, so entries come from memory
// rather than the last level cache. Prints ms per layer, the cache bytes
// read per second and the f32 arithmetic rate, next to this machine's read
// and f32 FMA rooflines (ops/roofline.h): with 128 heads a key costs
// 128 x 2 x (576 + 512) flops for 1152 bytes (bf16), so decode is bound by
// arithmetic, not by the cache read.
// Not wired into CMake; build against a build tree's libraries, e.g.
//   g++ -O2 -std=c++20 -fopenmp -Isrc bench/mla_attention_bench.cpp \
//       build/libpagoda_ops.a build/libpagoda_core.a -lfmt -o /tmp/mla_bench
//   /tmp/mla_bench [context] [seqs] [bf16|f32] [threads] [layers] [heads]
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
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
#include "ops/roofline.h"

using namespace pagoda;

int main(int argc, char** argv) {
  const int context = argc > 1 ? std::atoi(argv[1]) : 4096;
  const int seqs = argc > 2 ? std::atoi(argv[2]) : 1;
  const bool bf16 = argc > 3 ? std::string(argv[3]) != "f32" : true;
  const int threads = argc > 4 ? std::atoi(argv[4]) : 2;
  set_num_threads(threads);
  const int layers = argc > 5 ? std::max(1, std::atoi(argv[5])) : 8;
  const int heads = argc > 6 ? std::atoi(argv[6]) : 128;
  const int bs = 64;
  const ops::MLALayout layout{bs, 512, 64, bf16 ? DType::BF16 : DType::F32};
  const int ed = layout.entry_dim();
  const int blocks_per_seq = (context + bs - 1) / bs;
  const int64_t num_blocks = int64_t{blocks_per_seq} * seqs;
  const size_t esize = bf16 ? 2 : 4;
  const size_t layer_bytes = static_cast<size_t>(num_blocks) * bs * ed * esize;
  constexpr size_t kHuge = size_t{2} << 20;  // the engine's pool lies on 2 MiB pages
  const size_t total = (layer_bytes * layers + kHuge - 1) / kHuge * kHuge;
  auto* cache = static_cast<uint8_t*>(std::aligned_alloc(kHuge, total));
  madvise(cache, total, MADV_HUGEPAGE);
  std::mt19937 rng(0);
  for (size_t i = 0; i < total; i += 2) {  // small random bf16 / f32 bit patterns
    const uint16_t b = 0x3c00 + (rng() & 0x3ff);
    std::memcpy(cache + i, &b, 2);
  }
  std::vector<int32_t> table(num_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<int32_t> qsl(seqs + 1), lens(seqs, context);
  for (int s = 0; s <= seqs; ++s) qsl[s] = s;
  std::vector<float> q(static_cast<size_t>(seqs) * heads * ed), out(size_t(seqs) * heads * 512);
  std::normal_distribution<float> d;
  for (float& x : q) x = d(rng);
  ops::AttentionBatch b;
  b.num_seqs = seqs;
  b.query_start_loc = qsl.data();
  b.seq_lens = lens.data();
  b.block_tables = table.data();
  b.max_blocks_per_seq = blocks_per_seq;
  const float scale = 1.0f / std::sqrt(192.0f);
  auto run = [&] {
    for (int l = 0; l < layers; ++l)
      ops::mla_paged_attention(q.data(), cache + layer_bytes * l, layout, b, heads, scale,
                               out.data());
  };
  run();
  int reps = 1;
  double s = 0;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) run();
    s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 1.0) break;
    reps *= 2;
  }
  const double per = s / reps / layers;
  const double flops = 2.0 * seqs * context * heads * (ed + 512.0);
  const ops::Roofline roof = ops::measure_roofline(threads);
  std::printf(
      "MLA decode: context %d x %d seqs, %d heads, entry 512+64 %s, %d threads, %d layers: %.3f "
      "ms per layer; cache read %.1f GB/s (roofline %.1f GB/s, %.0f%%); f32 math %.1f GFLOP/s "
      "(FMA roofline %.1f, %.0f%%) (checksum %g)\n",
      context, seqs, heads, bf16 ? "bf16" : "f32", threads, layers, per * 1e3,
      layer_bytes / per * 1e-9, roof.read_gb_per_s,
      100.0 * layer_bytes / per * 1e-9 / roof.read_gb_per_s, flops / per * 1e-9, roof.fp32_gflops,
      100.0 * flops / per * 1e-9 / roof.fp32_gflops,
      static_cast<double>(out[0] + out[out.size() - 1]));
  std::free(cache);
}
