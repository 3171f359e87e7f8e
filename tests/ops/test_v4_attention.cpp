// DeepSeek V4 sparse attention with a sink (ops.h v4_sparse_attention) on
// every supported ISA: against the double scalar twin for every pair of
// window / compressed cache formats; sink = -inf equals plain softmax
// (mla_sparse_attention over the same entries as an F32 latent cache); fp8
// and bf16 caches equal f32 caches of their dequantised values bit for bit;
// list
// order and -1 padding change results by f32 reassociation only; a token
// alone, in a batch, on 1 or 2 threads, with its segments split across
// threads or not: the same bits; empty lists give zeros.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {
namespace {

class V4Attention : public IsaTest {};

// One cache of `entries` random entries in a layout (NaN-filled elsewhere
// for f32: a stray read shows).
struct Cache {
  V4EntryLayout layout;
  std::vector<uint8_t> bytes;
  int entries = 0;
};

Cache make_cache(DType dt, int head_dim, int rope, int per_page, int entries, std::mt19937& rng,
                 float stddev = 1.0f) {
  Cache c;
  c.layout = V4EntryLayout{per_page, head_dim, rope, dt, 0};
  c.entries = entries;
  const int pages = (entries + per_page - 1) / per_page;
  c.bytes.assign(size_t(pages) * c.layout.page_stride(), 0xFF);  // f32 NaN, bf16 NaN
  const auto x = random_vec(size_t(entries) * head_dim, rng, stddev);
  std::vector<int64_t> slots(entries);
  for (int i = 0; i < entries; ++i) slots[i] = i;
  write_v4_entries(x.data(), slots.data(), entries, c.layout, c.bytes.data());
  return c;
}

// Lists of `count` positions per token: `valid` distinct random slots of
// [0, entries), the rest -1, shuffled.
std::vector<int32_t> random_lists(int64_t tokens, int count, int valid, int entries,
                                  std::mt19937& rng) {
  std::vector<int32_t> out;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> all(entries);
    for (int i = 0; i < entries; ++i) all[i] = i;
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int32_t> l(all.begin(), all.begin() + std::min(valid, entries));
    l.resize(count, -1);
    std::shuffle(l.begin(), l.end(), rng);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_P(V4Attention, MatchesReferenceForEveryFormatPair) {
  std::mt19937 rng(11);
  const int D = 512, R = 64, H = 12, T = 3;
  const int wc = 40, cc = 300;  // comp list past one 256-position segment
  for (DType wd : {DType::F32, DType::BF16, DType::F8E4M3}) {
    for (DType cd : {DType::F32, DType::BF16, DType::F8E4M3}) {
      const Cache win = make_cache(wd, D, R, 64, 64, rng);
      const Cache comp = make_cache(cd, D, R, 64, 400, rng);
      const auto q = random_vec(size_t(T) * H * D, rng);
      auto sink = random_vec(H, rng, 2.0f);
      sink[1] = -INFINITY;
      sink[2] = 30.0f;  // a sink that dominates the denominator
      const auto wl = random_lists(T, wc, 30, win.entries, rng);
      const auto cl = random_lists(T, cc, 250, comp.entries, rng);
      const float scale = 1.0f / std::sqrt(float(D));
      std::vector<float> out(size_t(T) * H * D, NAN), want(out.size());
      v4_sparse_attention(q.data(), T, H, win.bytes.data(), win.layout, wl.data(), wc,
                          comp.bytes.data(), comp.layout, cl.data(), cc, sink.data(), scale,
                          out.data());
      ref::v4_sparse_attention(q.data(), T, H, win.bytes.data(), win.layout, wl.data(), wc,
                               comp.bytes.data(), comp.layout, cl.data(), cc, sink.data(), scale,
                               want.data());
      expect_close(out, want, 2e-5f,
                   std::string(dtype_name(wd)) + " window, " + std::string(dtype_name(cd)) + " compressed");
    }
  }
}

TEST_P(V4Attention, QuantisedCachesEqualF32CachesOfTheirValuesBitForBit) {
  // The kernel reads fp8 and bf16 entries as exactly the f32 values
  // read_v4_entry gives (fp8 through bf16 rows, which hold them exactly).
  std::mt19937 rng(17);
  for (int D : {512, 64}) {
    const int R = D / 8, H = 6, T = 2, wc = 50, cc = 200;
    for (DType dt : {DType::F8E4M3, DType::BF16}) {
      const Cache win = make_cache(dt, D, R, 16, 64, rng, 3.0f);
      const Cache comp = make_cache(dt, D, R, 16, 256, rng, 0.01f);
      auto widened = [&](const Cache& c) {
        std::vector<float> x(size_t(c.entries) * D);
        for (int i = 0; i < c.entries; ++i) read_v4_entry(c.bytes.data(), c.layout, i, &x[size_t(i) * D]);
        Cache f;
        f.layout = V4EntryLayout{c.layout.entries_per_page, D, R, DType::F32, 0};
        f.entries = c.entries;
        f.bytes.resize(size_t(c.entries) * D * 4);
        std::memcpy(f.bytes.data(), x.data(), f.bytes.size());
        return f;
      };
      const Cache win32 = widened(win), comp32 = widened(comp);
      const auto q = random_vec(size_t(T) * H * D, rng);
      const auto sink = random_vec(H, rng);
      const auto wl = random_lists(T, wc, 40, win.entries, rng);
      const auto cl = random_lists(T, cc, 180, comp.entries, rng);
      std::vector<float> a(size_t(T) * H * D, NAN), b(a.size(), NAN);
      v4_sparse_attention(q.data(), T, H, win.bytes.data(), win.layout, wl.data(), wc,
                          comp.bytes.data(), comp.layout, cl.data(), cc, sink.data(), 0.05f,
                          a.data());
      v4_sparse_attention(q.data(), T, H, win32.bytes.data(), win32.layout, wl.data(), wc,
                          comp32.bytes.data(), comp32.layout, cl.data(), cc, sink.data(), 0.05f,
                          b.data());
      EXPECT_TRUE(bits_equal(a, b)) << dtype_name(dt) << " D " << D;
    }
  }
}

TEST_P(V4Attention, SmallHeadDimAndWindowOnly) {
  // The tiny model's 64-dim entries (48 nope: one partial fp8 group), no
  // compressed cache (null, count 0).
  std::mt19937 rng(12);
  const int D = 64, R = 16, H = 5, T = 4, wc = 20;
  for (DType wd : {DType::F32, DType::BF16, DType::F8E4M3}) {
    const Cache win = make_cache(wd, D, R, 16, 48, rng);
    const auto q = random_vec(size_t(T) * H * D, rng);
    const auto sink = random_vec(H, rng);
    const auto wl = random_lists(T, wc, 17, win.entries, rng);
    std::vector<float> out(size_t(T) * H * D, NAN), want(out.size());
    v4_sparse_attention(q.data(), T, H, win.bytes.data(), win.layout, wl.data(), wc, nullptr, {},
                        nullptr, 0, sink.data(), 0.125f, out.data());
    ref::v4_sparse_attention(q.data(), T, H, win.bytes.data(), win.layout, wl.data(), wc, nullptr,
                             {}, nullptr, 0, sink.data(), 0.125f, want.data());
    expect_close(out, want, 2e-5f, std::string(dtype_name(wd)));
  }
}

TEST_P(V4Attention, MinusInfSinkIsPlainSoftmax) {
  // The same entries as an F32 latent cache (kv_lora = head_dim, no rope):
  // mla_sparse_attention is plain softmax attention with K = V = entry.
  std::mt19937 rng(13);
  const int D = 128, H = 9, T = 2, wc = 70;
  const Cache win = make_cache(DType::F32, D, 32, 16, 96, rng);
  const auto q = random_vec(size_t(T) * H * D, rng);
  const std::vector<float> sink(H, -INFINITY);
  const auto wl = random_lists(T, wc, 60, win.entries, rng);
  std::vector<float> out(size_t(T) * H * D, NAN), plain(out.size(), NAN);
  v4_sparse_attention(q.data(), T, H, win.bytes.data(), win.layout, wl.data(), wc, nullptr, {},
                      nullptr, 0, sink.data(), 0.09f, out.data());
  const MLALayout mla{16, D, 0, DType::F32};
  const int32_t qsl[3] = {0, 1, 2}, lens[2] = {1, 1}, table[1] = {0};
  const AttentionBatch batch{2, qsl, lens, table, 1, 0};
  mla_sparse_attention(q.data(), win.bytes.data(), mla, batch, wl.data(), wc, H, 0.09f,
                       plain.data());
  expect_close(out, plain, 1e-5f, "sink -inf vs mla_sparse_attention");
}

TEST_P(V4Attention, ListOrderAndPaddingOnlyReassociate) {
  std::mt19937 rng(14);
  const int D = 512, R = 64, H = 8, T = 2;
  const Cache win = make_cache(DType::BF16, D, R, 64, 128, rng);
  const Cache comp = make_cache(DType::F8E4M3, D, R, 64, 600, rng);
  const auto q = random_vec(size_t(T) * H * D, rng);
  const auto sink = random_vec(H, rng);
  const auto wl = random_lists(T, 128, 100, win.entries, rng);
  const auto cl = random_lists(T, 520, 500, comp.entries, rng);
  std::vector<float> base(size_t(T) * H * D, NAN);
  v4_sparse_attention(q.data(), T, H, win.bytes.data(), win.layout, wl.data(), 128,
                      comp.bytes.data(), comp.layout, cl.data(), 520, sink.data(), 0.044f,
                      base.data());
  // The same sets, reshuffled and padded to other lengths.
  auto repad = [&](const std::vector<int32_t>& l, int count, int new_count) {
    std::vector<int32_t> out;
    for (int t = 0; t < T; ++t) {
      std::vector<int32_t> v;
      for (int i = 0; i < count; ++i)
        if (l[t * count + i] >= 0) v.push_back(l[t * count + i]);
      v.resize(new_count, -1);
      std::shuffle(v.begin(), v.end(), rng);
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  };
  const auto wl2 = repad(wl, 128, 150), cl2 = repad(cl, 520, 777);
  std::vector<float> other(base.size(), NAN);
  v4_sparse_attention(q.data(), T, H, win.bytes.data(), win.layout, wl2.data(), 150,
                      comp.bytes.data(), comp.layout, cl2.data(), 777, sink.data(), 0.044f,
                      other.data());
  expect_close(other, base, 1e-5f, "reordered and repadded");
}

TEST_P(V4Attention, BatchThreadsAndSegmentSplitsDoNotChangeBits) {
  std::mt19937 rng(15);
  const int D = 512, R = 64, H = 40, T = 5, wc = 128, cc = 700;
  const Cache win = make_cache(DType::F8E4M3, D, R, 64, 128, rng);
  const Cache comp = make_cache(DType::BF16, D, R, 64, 900, rng);
  const auto q = random_vec(size_t(T) * H * D, rng);
  const auto sink = random_vec(H, rng);
  const auto wl = random_lists(T, wc, 100, win.entries, rng);
  auto cl = random_lists(T, cc, 600, comp.entries, rng);
  // Token 3: a segment of padding only (positions 384..639 all -1).
  for (int i = 384 - wc; i < 640 - wc; ++i) cl[3 * cc + i] = -1;
  const int64_t row = int64_t{H} * D;
  auto run = [&](int64_t t0, int64_t n, int threads) {
    ScopedThreads st(threads);
    std::vector<float> out(size_t(n * row), NAN);
    v4_sparse_attention(q.data() + t0 * row, n, H, win.bytes.data(), win.layout,
                        wl.data() + t0 * wc, wc, comp.bytes.data(), comp.layout,
                        cl.data() + t0 * cc, cc, sink.data(), 0.044f, out.data());
    return out;
  };
  const auto batch1 = run(0, T, 1);  // one tile per (token, head block), no split
  EXPECT_TRUE(bits_equal(batch1, run(0, T, 2)));
  for (int64_t t = 0; t < T; ++t) {
    // One token on 1 thread (whole range) and on 2 and 16 threads (segments
    // split into partial states, heads into smaller blocks).
    for (int threads : {1, 2, 16}) {
      const auto alone = run(t, 1, threads);
      EXPECT_EQ(0, std::memcmp(alone.data(), batch1.data() + t * row, row * sizeof(float)))
          << "token " << t << " threads " << threads;
    }
  }
}

TEST_P(V4Attention, EmptyListsGiveZeros) {
  std::mt19937 rng(16);
  const int D = 64, H = 3;
  const Cache win = make_cache(DType::F32, D, 16, 16, 16, rng);
  const auto q = random_vec(size_t(H) * D, rng);
  const std::vector<float> sink = {-INFINITY, 0.5f, 80.0f};
  const std::vector<int32_t> wl(300, -1);  // two segments of padding
  std::vector<float> out(size_t(H) * D, NAN);
  v4_sparse_attention(q.data(), 1, H, win.bytes.data(), win.layout, wl.data(), 300, nullptr, {},
                      nullptr, 0, sink.data(), 0.1f, out.data());
  EXPECT_EQ(out, std::vector<float>(out.size(), 0.0f));
}

INSTANTIATE_TEST_SUITE_P(AllSupported, V4Attention, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

}  // namespace
}  // namespace pagoda::ops::testing
