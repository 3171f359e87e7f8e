// Micro-benchmark: how fast the paged KV cache's rows come in with no
// arithmetic between the reads, in three orders, with or without a
// software prefetch of the next block: the ceiling decode attention reads
// against (bench/batched_decode.md, session 19). Layout as the pool's: a
// block is kv heads x 16 rows x head_dim 128 bf16 (32 KiB of K, 32 KiB of
// V); each sequence's blocks in order or shuffled over the pool; two
// threads split the sequences. Patterns: 0 = the queries-across-lanes
// kernel's (per 32-key grid block and kv head, K rows 4 at a time line by
// line, then V), 1 = each cache block's K of all kv heads in address
// order, then its V, 2 = the keys-across-lanes transpose's (16 rows x one
// line at a time).
// Not wired into CMake:
//   g++ -O2 -march=native -fopenmp -std=c++20 bench/kv_read_bench.cpp -o /tmp/kv_read_bench
//   /tmp/kv_read_bench SEQS BLOCKS LAYERS SHUFFLED PATTERN [PREFETCH]
//   e.g. /tmp/kv_read_bench 32 10 28 0 1 0
#include <immintrin.h>
#include <sys/mman.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>
#include <algorithm>
#include <omp.h>
constexpr int kHeads = 8, kBs = 16, kHd = 128;
constexpr size_t kHeadBytes = kBs * kHd * 2;            // 4 KiB
constexpr size_t kBlockBytes = kHeads * kHeadBytes;      // 32 KiB
static uint8_t* huge(size_t n) {
  void* p = aligned_alloc(2 << 20, (n + (2 << 20) - 1) / (2 << 20) * (2 << 20));
  madvise(p, n, MADV_HUGEPAGE);
  memset(p, 1, n);
  return (uint8_t*)p;
}
__attribute__((target("avx512f"))) static inline __m512i rd(const uint8_t* p) { return _mm512_loadu_si512(p); }
int main(int argc, char** argv) {
  const int seqs = atoi(argv[1]), blocks = atoi(argv[2]), layers = atoi(argv[3]);
  const bool shuffled = atoi(argv[4]);
  const int pattern = atoi(argv[5]);
  const int pf = argc > 6 ? atoi(argv[6]) : 0;
  const size_t nb = (size_t)seqs * blocks * layers;
  uint8_t* K = huge(nb * kBlockBytes);
  uint8_t* V = huge(nb * kBlockBytes);
  std::vector<int> table(nb);
  std::iota(table.begin(), table.end(), 0);
  if (shuffled) std::shuffle(table.begin(), table.end(), std::mt19937(1));
  double best = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    long long sinkv = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (int l = 0; l < layers; ++l) {
#pragma omp parallel for schedule(static) reduction(^:sinkv) num_threads(2)
      for (int s = 0; s < seqs; ++s) {
        __m512i acc = _mm512_setzero_si512();
        const int* bt = table.data() + ((size_t)l * seqs + s) * blocks;
        auto kb = [&](int b) { return K + (size_t)bt[b] * kBlockBytes; };
        auto vb = [&](int b) { return V + (size_t)bt[b] * kBlockBytes; };
        if (pattern == 0) {
          // old-like: grid of 2 blocks, per head: K rows of b, b+1 (4 rows by line), then V.
          for (int b = 0; b < blocks; b += 2) {
            for (int h = 0; h < kHeads; ++h) {
              for (int c = 0; c < 2 && b + c < blocks; ++c) {
                if (pf && b + 2 + c < blocks) for (size_t o = 0; o < kHeadBytes; o += 64) { _mm_prefetch((const char*)kb(b + 2 + c) + h * kHeadBytes + o, _MM_HINT_T1); _mm_prefetch((const char*)vb(b + 2 + c) + h * kHeadBytes + o, _MM_HINT_T1);}
                const uint8_t* k = kb(b + c) + h * kHeadBytes;
                for (int r = 0; r < kBs; r += 4)
                  for (int line = 0; line < 4; ++line)
                    for (int rr = 0; rr < 4; ++rr) acc = _mm512_xor_si512(acc, rd(k + (r + rr) * 256 + line * 64));
              }
              for (int c = 0; c < 2 && b + c < blocks; ++c) {
                const uint8_t* v = vb(b + c) + h * kHeadBytes;
                for (size_t o = 0; o < kHeadBytes; o += 64) acc = _mm512_xor_si512(acc, rd(v + o));
              }
            }
          }
        } else if (pattern == 1) {
          // per cache block: all heads' K in address order, then V.
          for (int b = 0; b < blocks; ++b) {
            if (pf && b + 1 < blocks) for (size_t o = 0; o < kBlockBytes; o += 64) { _mm_prefetch((const char*)kb(b + 1) + o, _MM_HINT_T1); _mm_prefetch((const char*)vb(b + 1) + o, _MM_HINT_T1);}
            for (size_t o = 0; o < kBlockBytes; o += 64) acc = _mm512_xor_si512(acc, rd(kb(b) + o));
            for (size_t o = 0; o < kBlockBytes; o += 64) acc = _mm512_xor_si512(acc, rd(vb(b) + o));
          }
        } else {
          // strided 16 rows by line (the transpose's order), per head, grid of 2.
          for (int b = 0; b < blocks; b += 2) {
            for (int h = 0; h < kHeads; ++h) {
              for (int c = 0; c < 2 && b + c < blocks; ++c) {
                if (pf && b + 2 + c < blocks) for (size_t o = 0; o < kHeadBytes; o += 64) { _mm_prefetch((const char*)kb(b + 2 + c) + h * kHeadBytes + o, _MM_HINT_T1); _mm_prefetch((const char*)vb(b + 2 + c) + h * kHeadBytes + o, _MM_HINT_T1);}
                const uint8_t* k = kb(b + c) + h * kHeadBytes;
                for (int line = 0; line < 4; ++line)
                  for (int r = 0; r < kBs; ++r) acc = _mm512_xor_si512(acc, rd(k + r * 256 + line * 64));
              }
              for (int c = 0; c < 2 && b + c < blocks; ++c) {
                const uint8_t* v = vb(b + c) + h * kHeadBytes;
                for (size_t o = 0; o < kHeadBytes; o += 64) acc = _mm512_xor_si512(acc, rd(v + o));
              }
            }
          }
        }
        sinkv ^= _mm512_reduce_or_epi64(acc);
      }
    }
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, dt);
    volatile long long x = sinkv; (void)x;
  }
  const double bytes = 2.0 * nb * kBlockBytes;
  printf("seqs %d blocks %d layers %d shuffled %d pattern %d pf %d: %.1f GB/s (%.3f ms/layer)\n", seqs, blocks, layers, shuffled, pattern, pf, bytes / best / 1e9, best / layers * 1e3);
}
