// Micro-benchmark of DeepSeek V3.2 sparse attention's ops for one decode
// token at 4k / 16k / 64k context, real widths:
//  * ops::indexer_topk: 64 index heads x 128, topk 2048, over a bf16 and an
//    fp8 (132 B per token, per-page) key cache: ms per call, key-cache GB/s
//    next to the read roofline, f32 GFLOP/s next to the FMA roofline (a key
//    costs 64 x 2 x 128 flops for 256 / 132 bytes, so the CPU indexer is
//    bound by arithmetic, not by the read);
//  * ops::mla_sparse_attention (2048 listed slots) vs the dense
//    ops::mla_paged_attention over the whole context, 128 heads, 512 + 64
//    entries, bf16 and fp8_ds_mla (656 B) latent caches.
// Each op runs over `layers` caches in turn, so entries come from memory.
// Not wired into CMake; build against a build tree's libraries, e.g.
//   g++ -O2 -std=c++20 -fopenmp -Isrc bench/dsa_bench.cpp \
//       build/libpagoda_ops.a build/libpagoda_core.a -lfmt -o /tmp/dsa_bench
//   /tmp/dsa_bench [threads] [layers] [contexts...]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/parallel.h"
#include "ops/ops.h"
#include "ops/roofline.h"

using namespace pagoda;

namespace {

// Seconds per call of fn (at least ~0.3 s of calls after one warm-up).
template <typename Fn>
double time_per_call(Fn&& fn) {
  fn();
  int reps = 1;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) fn();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0.3) return s / reps;
    reps *= 2;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int layers = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  std::vector<int> contexts;
  for (int i = 3; i < argc; ++i) contexts.push_back(std::atoi(argv[i]));
  if (contexts.empty()) contexts = {4096, 16384, 65536};
  set_num_threads(threads);
  const ops::Roofline roof = ops::measure_roofline(threads);
  std::printf("%d threads; roofline: read %.1f GB/s, f32 FMA %.1f GFLOP/s\n", threads,
              roof.read_gb_per_s, roof.fp32_gflops);
  const int bs = 64, hi = 64, dim = 128, topk = 2048, heads = 128, lora = 512, rope = 64;
  std::mt19937 rng(0);
  std::normal_distribution<float> nd;
  for (int context : contexts) {
    const int blocks = (context + bs - 1) / bs;
    std::vector<int32_t> table(blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    const int32_t qsl[2] = {0, 1}, len = context;
    const ops::AttentionBatch batch{1, qsl, &len, table.data(), blocks, 0};
    std::vector<int64_t> slots(context);
    for (int t = 0; t < context; ++t) slots[t] = int64_t{table[t / bs]} * bs + t % bs;

    // ---- indexer
    std::vector<float> keys(size_t(context) * dim);
    for (float& x : keys) x = nd(rng);
    std::vector<float> q(size_t(hi) * dim), w(hi);
    for (float& x : q) x = nd(rng);
    for (float& x : w) x = nd(rng) * 0.01f;
    std::vector<int32_t> picked(topk);
    for (DType dt : {DType::BF16, DType::F8E4M3}) {
      const ops::IndexerLayout layout{bs, dim, dt};
      const size_t bytes = size_t(blocks) * layout.page_bytes();
      std::vector<std::vector<uint8_t>> caches(layers, std::vector<uint8_t>(bytes));
      for (auto& c : caches) ops::write_indexer_k(keys.data(), slots.data(), context, layout, c.data());
      const double s = time_per_call([&] {
        for (auto& c : caches)
          ops::indexer_topk(q.data(), w.data(), c.data(), layout, batch, hi, topk, picked.data());
      }) / layers;
      const double read = double(context) * layout.page_bytes() / bs;
      const double flops = 2.0 * context * hi * dim;
      std::printf(
          "indexer top-%d, context %6d, %s keys (%lld B/token): %8.3f ms; key read %6.2f GB/s "
          "(%4.1f%% of read roofline); %6.1f GFLOP/s (%4.1f%% of FMA roofline)\n",
          topk, context, dt == DType::BF16 ? "bf16" : "fp8 ", (long long)(layout.page_bytes() / bs),
          s * 1e3, read / s * 1e-9, 100 * read / s * 1e-9 / roof.read_gb_per_s, flops / s * 1e-9,
          100 * flops / s * 1e-9 / roof.fp32_gflops);
    }

    // ---- sparse vs dense MLA decode
    std::vector<float> latent(size_t(context) * lora), pe(size_t(context) * rope);
    for (float& x : latent) x = nd(rng);
    for (float& x : pe) x = nd(rng);
    std::vector<float> mq(size_t(heads) * (lora + rope)), out(size_t(heads) * lora);
    for (float& x : mq) x = nd(rng);
    // topk slots: a random causal subset (the indexer's picks), -1 past the context.
    std::vector<int32_t> list(slots.begin(), slots.end());
    std::shuffle(list.begin(), list.end(), rng);
    list.resize(topk, -1);
    const float scale = 1.0f / std::sqrt(192.0f);
    for (DType dt : {DType::BF16, DType::F8E4M3}) {
      const ops::MLALayout layout{bs, lora, rope, dt};
      const size_t bytes = size_t(blocks) * bs * layout.entry_bytes();
      std::vector<std::vector<uint8_t>> caches(layers, std::vector<uint8_t>(bytes));
      for (auto& c : caches)
        ops::write_mla_kv(latent.data(), pe.data(), slots.data(), context, layout, c.data());
      const double sparse = time_per_call([&] {
        for (auto& c : caches)
          ops::mla_sparse_attention(mq.data(), c.data(), layout, batch, list.data(), topk, heads,
                                    scale, out.data());
      }) / layers;
      const double dense = time_per_call([&] {
        for (auto& c : caches)
          ops::mla_paged_attention(mq.data(), c.data(), layout, batch, heads, scale, out.data());
      }) / layers;
      std::printf(
          "MLA decode, context %6d, %s cache (%lld B/token), 128 heads: sparse top-%d %8.3f ms, "
          "dense %8.3f ms (%.1fx)\n",
          context, dt == DType::BF16 ? "bf16" : "fp8 ", (long long)layout.entry_bytes(), topk,
          sparse * 1e3, dense * 1e3, dense / sparse);
    }
  }
}
