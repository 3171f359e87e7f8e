// paged_attention on every supported ISA against the reference, and the
// reference against a dense (non-paged) attention written here, on batches
// mixing prefill with a cached prefix, plain prefill and decode, over
// shuffled non-contiguous block tables; with f32 and bf16 KV caches (the
// dense attention then sees the same bf16-rounded K/V).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "ops/ops.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {
namespace {

class PagedAttention : public IsaTest {};

// Runs a scope with the flash path on or off, restoring the old setting.
// The tests of the f32 path's exact promises (bits equal across caches,
// tight tolerances) turn it off: every row over a bf16 cache would take the
// flash path on avx512bf16 (tested below).
class ScopedFlash {
 public:
  explicit ScopedFlash(bool on) : old_(flash_attention_enabled()) {
    set_flash_attention(on);
  }
  ~ScopedFlash() { set_flash_attention(old_); }

 private:
  bool old_;
};

// Dense causal attention of one sequence over contiguous K/V rows
// (keys[t]: [kv_heads * hd]), written from the definition.
void dense_attention(const float* q, const std::vector<std::vector<float>>& keys,
                     const std::vector<std::vector<float>>& values, int64_t num_new, int q_heads,
                     int kv_heads, int hd, int window, float scale, float* out) {
  const auto len = static_cast<int64_t>(keys.size());
  for (int64_t j = 0; j < num_new; ++j) {
    const int64_t pos = len - num_new + j;  // this query's own position
    for (int h = 0; h < q_heads; ++h) {
      const int kvh = h * kv_heads / q_heads;  // consecutive q heads share a kv head
      std::vector<double> w(len, 0.0);
      double mx = -INFINITY;
      for (int64_t t = 0; t <= pos; ++t) {
        if (window > 0 && pos - t >= window) continue;
        double dot = 0;
        for (int d = 0; d < hd; ++d)
          dot += double{q[(j * q_heads + h) * hd + d]} * keys[t][kvh * hd + d];
        w[t] = dot * scale;
        mx = std::max(mx, w[t]);
      }
      double sum = 0;
      for (int64_t t = 0; t <= pos; ++t) {
        const bool visible = !(window > 0 && pos - t >= window);
        w[t] = visible ? std::exp(w[t] - mx) : 0.0;
        sum += w[t];
      }
      for (int d = 0; d < hd; ++d) {
        double acc = 0;
        for (int64_t t = 0; t <= pos; ++t) acc += w[t] * values[t][kvh * hd + d];
        out[(j * q_heads + h) * hd + d] = static_cast<float>(acc / sum);
      }
    }
  }
}

struct Case {
  int q_heads, kv_heads, head_dim, block_size, window;
  DType kv = DType::F32;  // KV cache element type
};

Case with_kv(Case c, DType kv) {
  c.kv = kv;
  return c;
}

std::string describe(const Case& c) {
  return "heads " + std::to_string(c.q_heads) + "/" + std::to_string(c.kv_heads) + " hd " +
         std::to_string(c.head_dim) + " bs " + std::to_string(c.block_size) + " window " +
         std::to_string(c.window) + " kv " + std::string(dtype_name(c.kv));
}

const DType kKvDtypes[] = {DType::F32, DType::BF16};

// A step's sequences: {cached tokens, new tokens}. Prefill with a cached
// prefix, plain prefill, decode, a long prefill, a sequence with no new
// tokens this step, and tiny ones.
const std::vector<std::pair<int, int>> kSeqs = {{10, 5}, {0, 9}, {23, 1}, {1, 1},
                                                {40, 3}, {7, 0}, {0, 1},  {35, 40}};

// One step's paged cache (filled through write_kv, random shuffled block
// ids), queries and batch description, with the keys and values of each
// sequence kept in order for the dense attention (as the cache holds them:
// bf16-rounded for a bf16 cache).
struct Step {
  KVLayout layout;
  int max_blocks = 0;
  std::vector<float> k_cache, v_cache, q;  // f32 cache
  std::vector<uint16_t> k_bf16, v_bf16;    // bf16 cache
  const void* k() const {
    return layout.dtype == DType::BF16 ? (const void*)k_bf16.data() : k_cache.data();
  }
  const void* v() const {
    return layout.dtype == DType::BF16 ? (const void*)v_bf16.data() : v_cache.data();
  }
  std::vector<int32_t> tables, qsl = {0}, seq_lens;
  std::vector<std::vector<std::vector<float>>> keys, values;

  AttentionBatch batch(int window) const {
    return {static_cast<int>(seq_lens.size()),
            qsl.data(),
            seq_lens.data(),
            tables.data(),
            max_blocks,
            window};
  }
};

using Seqs = std::vector<std::pair<int, int>>;

Step build_step(const Case& c, std::mt19937& rng, const Seqs& seqs = kSeqs) {
  Step st;
  const int row = c.kv_heads * c.head_dim;
  st.layout = KVLayout{c.block_size, c.kv_heads, c.head_dim, c.kv};
  int total_blocks = 0;
  for (auto [cached, fresh] : seqs) {
    const int blocks = (cached + fresh + c.block_size - 1) / c.block_size;
    st.max_blocks = std::max(st.max_blocks, blocks);
    total_blocks += blocks;
  }
  const int num_blocks = total_blocks + 7;  // some blocks stay unused (NaN)
  // NaN everywhere no sequence wrote: reading a wrong slot poisons the output.
  const int64_t cache_elems = int64_t{num_blocks} * c.block_size * row;
  if (c.kv == DType::BF16) {
    st.k_bf16.assign(cache_elems, f32_to_bf16(NAN));
    st.v_bf16 = st.k_bf16;
  } else {
    st.k_cache.assign(cache_elems, NAN);
    st.v_cache = st.k_cache;
  }
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);

  st.tables.assign(seqs.size() * st.max_blocks, -1);
  st.keys.resize(seqs.size());
  st.values.resize(seqs.size());
  size_t next = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int len = seqs[s].first + seqs[s].second;
    for (int b = 0; b < (len + c.block_size - 1) / c.block_size; ++b) {
      st.tables[s * st.max_blocks + b] = ids[next++];
    }
    std::vector<float> k_rows, v_rows;
    std::vector<int64_t> slots;
    for (int t = 0; t < len; ++t) {
      st.keys[s].push_back(random_vec(row, rng));
      st.values[s].push_back(random_vec(row, rng));
      k_rows.insert(k_rows.end(), st.keys[s][t].begin(), st.keys[s][t].end());
      v_rows.insert(v_rows.end(), st.values[s][t].begin(), st.values[s][t].end());
      slots.push_back(int64_t{st.tables[s * st.max_blocks + t / c.block_size]} * c.block_size +
                      t % c.block_size);
    }
    write_kv(k_rows.data(), v_rows.data(), slots.data(), len, st.layout, const_cast<void*>(st.k()),
             const_cast<void*>(st.v()));
    if (c.kv == DType::BF16) {  // what the cache holds, by an independent rounding
      for (auto& key : st.keys[s]) key = bf16_rounded(key);
      for (auto& value : st.values[s]) value = bf16_rounded(value);
    }
    const auto qs = random_vec(size_t(seqs[s].second) * c.q_heads * c.head_dim, rng);
    st.q.insert(st.q.end(), qs.begin(), qs.end());
    st.qsl.push_back(st.qsl.back() + seqs[s].second);
    st.seq_lens.push_back(len);
  }
  return st;
}

float scale_of(const Case& c) { return 1.0f / std::sqrt(static_cast<float>(c.head_dim)); }

// Runs the kernel, the reference and the dense attention on one step and
// compares them. Returns the kernel's output.
std::vector<float> run_case(const Case& c, std::mt19937& rng, const Seqs& seqs = kSeqs) {
  const Step st = build_step(c, rng, seqs);
  const AttentionBatch batch = st.batch(c.window);
  const float scale = scale_of(c);
  std::vector<float> out(st.q.size(), NAN), out_ref(st.q.size(), NAN), out_dense(st.q.size(), NAN);
  paged_attention(st.q.data(), st.k(), st.v(), st.layout, batch, c.q_heads, scale, out.data());
  ref::paged_attention(st.q.data(), st.k(), st.v(), st.layout, batch, c.q_heads, scale,
                       out_ref.data());
  const int64_t token_elems = int64_t{c.q_heads} * c.head_dim;
  for (size_t s = 0; s < seqs.size(); ++s) {
    dense_attention(st.q.data() + st.qsl[s] * token_elems, st.keys[s], st.values[s], seqs[s].second,
                    c.q_heads, c.kv_heads, c.head_dim, c.window, scale,
                    out_dense.data() + st.qsl[s] * token_elems);
  }
  expect_close(out_ref, out_dense, 1e-5f, "reference vs dense, " + describe(c));
  expect_close(out, out_ref, 1e-5f, "kernel vs reference, " + describe(c));
  return out;
}

TEST_P(PagedAttention, MatchesReferenceAndDense) {
  const ScopedFlash f32_path(false);
  std::mt19937 rng(5);
  // GQA ratios 1, 2, 4; head dims 8, 64, 40, 12 (not a multiple of 8) and
  // one above the kernels' stack scratch; block sizes 1, 3, 16 and 48 (a
  // block longer than the kernels' score chunk); sliding windows.
  const std::vector<Case> cases = {{4, 4, 8, 16, 0},   {8, 4, 64, 1, 0},  {8, 2, 40, 3, 0},
                                   {4, 1, 64, 16, 0},  {8, 2, 8, 3, 5},   {4, 4, 40, 1, 1},
                                   {4, 1, 40, 16, 20}, {2, 1, 64, 3, 17}, {2, 2, 12, 48, 0},
                                   {4, 2, 64, 48, 33}, {2, 1, 520, 16, 0}};
  for (DType kv : kKvDtypes) {
    for (const Case& c : cases) {
      SCOPED_TRACE(describe(with_kv(c, kv)));
      run_case(with_kv(c, kv), rng);
    }
  }
}

TEST_P(PagedAttention, Bf16CacheEqualsF32CacheOfTheRoundedValues) {
  const ScopedFlash f32_path(false);
  // Widening bf16 to f32 is exact, so a bf16 cache must give the very bits
  // an f32 cache holding the same (bf16-rounded) values gives: same rng
  // seed, same data, the f32 run fed the rounded K/V through a second
  // write_kv.
  const std::vector<Case> cases = {{8, 2, 64, 16, 0}, {4, 4, 40, 3, 5}, {2, 1, 12, 48, 0}};
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    std::mt19937 rng_b(11), rng_f(11);
    const Step bf = build_step(with_kv(c, DType::BF16), rng_b);
    Step f32 = build_step(c, rng_f);
    for (size_t s = 0; s < kSeqs.size(); ++s) {
      std::vector<float> k_rows, v_rows;
      std::vector<int64_t> slots;
      for (size_t t = 0; t < f32.keys[s].size(); ++t) {
        const auto k = bf16_rounded(f32.keys[s][t]), v = bf16_rounded(f32.values[s][t]);
        k_rows.insert(k_rows.end(), k.begin(), k.end());
        v_rows.insert(v_rows.end(), v.begin(), v.end());
        slots.push_back(int64_t{f32.tables[s * f32.max_blocks + t / c.block_size]} * c.block_size +
                        static_cast<int64_t>(t) % c.block_size);
      }
      write_kv(k_rows.data(), v_rows.data(), slots.data(), static_cast<int64_t>(slots.size()),
               f32.layout, f32.k_cache.data(), f32.v_cache.data());
    }
    ASSERT_EQ(bf.q, f32.q);
    std::vector<float> out_b(bf.q.size(), NAN), out_f(bf.q.size(), NAN);
    paged_attention(bf.q.data(), bf.k(), bf.v(), bf.layout, bf.batch(c.window), c.q_heads,
                    scale_of(c), out_b.data());
    paged_attention(f32.q.data(), f32.k(), f32.v(), f32.layout, f32.batch(c.window), c.q_heads,
                    scale_of(c), out_f.data());
    EXPECT_EQ(out_b, out_f);
  }
}

TEST_P(PagedAttention, DecodeBatchesMatchTheReference) {
  const ScopedFlash f32_path(false);  // decode rows over a bf16 cache: FlashMatches... below
  // A batch of decode rows only: few queries per kv head, so the kernel
  // takes several kv heads per work item (their blocks' rows read as one
  // run); one thread and two (other item counts), bf16 and f32 caches.
  const Seqs decode = {{23, 1}, {40, 1}, {5, 1}, {70, 1}};
  std::mt19937 rng(8);
  for (int threads : {1, 2}) {
    ScopedThreads scoped(threads);
    for (DType kv : kKvDtypes) {
      for (const Case& c : {Case{8, 4, 64, 16, 0}, Case{16, 8, 128, 16, 0}, Case{8, 8, 40, 3, 0},
                            Case{4, 2, 64, 48, 30}, Case{8, 4, 12, 16, 9}}) {
        SCOPED_TRACE(describe(with_kv(c, kv)) + " threads " + std::to_string(threads));
        run_case(with_kv(c, kv), rng, decode);
      }
    }
  }
}

TEST_P(PagedAttention, TwoThreadsEqualOne) {
  const ScopedFlash f32_path(false);
  // Same seed, same data; each (row, head) item is computed whole by one
  // thread, so the split cannot change a bit.
  for (DType kv : kKvDtypes) {
    const Case c{4, 2, 64, 16, 0, kv};
    std::vector<float> one, two;
    {
      ScopedThreads threads(1);
      std::mt19937 rng(6);
      one = run_case(c, rng);
    }
    {
      ScopedThreads threads(2);
      std::mt19937 rng(6);
      two = run_case(c, rng);
    }
    EXPECT_EQ(one, two) << describe(c);
  }
}

TEST_P(PagedAttention, EachRowAloneEqualsItsRowInTheBatch) {
  for (bool flash : {false, true}) {
  const ScopedFlash path(flash);
  SCOPED_TRACE(flash ? "flash path on" : "flash path off");
  // The kernels tile query rows and the q heads of a kv head together; a
  // row's output must not depend on its tile: every new row of the batch,
  // run alone as a one-token decode step over the same cache, gives the
  // same bits (what makes greedy outputs independent of batching).
  std::vector<Case> cases;
  for (DType kv : kKvDtypes) {
    for (const Case& c : {Case{8, 2, 64, 16, 0}, Case{4, 4, 40, 3, 0}, Case{4, 1, 12, 48, 20},
                          Case{2, 1, 64, 16, 7}})
      cases.push_back(with_kv(c, kv));
  }
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    const Step st = build_step(c, rng);
    std::vector<float> out(st.q.size(), NAN);
    paged_attention(st.q.data(), st.k(), st.v(), st.layout, st.batch(c.window), c.q_heads,
                    scale_of(c), out.data());
    const int64_t token_elems = int64_t{c.q_heads} * c.head_dim;
    int mismatches = 0;
    for (size_t s = 0; s < kSeqs.size(); ++s) {
      for (int32_t row = st.qsl[s]; row < st.qsl[s + 1]; ++row) {
        const int32_t qsl[2] = {0, 1};
        const int32_t seq_len = st.seq_lens[s] - (st.qsl[s + 1] - 1 - row);
        const AttentionBatch one{
            1, qsl, &seq_len, st.tables.data() + s * st.max_blocks, st.max_blocks, c.window};
        std::vector<float> alone(token_elems, NAN);
        paged_attention(st.q.data() + row * token_elems, st.k(), st.v(), st.layout, one, c.q_heads,
                        scale_of(c), alone.data());
        const std::vector<float> in_batch(out.begin() + row * token_elems,
                                          out.begin() + (row + 1) * token_elems);
        mismatches += alone != in_batch;
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
  }
}

// ---- The flash path (ops.h paged_attention, Numerics) ------------------
// A prompt from scratch (odd length), chunks after a cached prefix, a
// decode row and a short chunk: all take the flash path when it applies.
const Seqs kFlashSeqs = {{0, 77}, {45, 33}, {23, 1}, {150, 40}, {10, 5}, {0, 32}};

// Whatever the sequence's row count: the choice must not depend on it.
bool takes_flash(Isa isa, const Case& c) {
  return isa == Isa::Avx512Bf16 && c.kv == DType::BF16 && c.head_dim % 32 == 0;
}

std::vector<float> rows_of(const std::vector<float>& v, int64_t r0, int64_t r1, int64_t width) {
  return {v.begin() + r0 * width, v.begin() + r1 * width};
}

TEST_P(PagedAttention, FlashMatchesTheDenseAttentionOfBf16Queries) {
  // Flash rows against the dense attention (double) of the bf16-rounded
  // queries, the path's first rounding, so the tolerance is that of the
  // softmax weights' bf16 rounding (relative 2^-9 each); they must also
  // differ from the f32 path (the flash path did run). Every other row
  // gives the f32 path's bits. GQA 1, 2, 4, 8; head_dim 64 and 128; block
  // sizes 16, 3 and 48; sliding windows.
  const std::vector<Case> cases = {{16, 8, 128, 16, 0},  {8, 8, 64, 16, 0},  {8, 2, 64, 3, 0},
                                   {16, 4, 128, 48, 37}, {4, 1, 64, 16, 19}, {16, 2, 64, 16, 0}};
  std::mt19937 rng(21);
  for (DType kv : kKvDtypes) {
    for (const Case& base : cases) {
      const Case c = with_kv(base, kv);
      SCOPED_TRACE(describe(c));
      const Step st = build_step(c, rng, kFlashSeqs);
      const AttentionBatch batch = st.batch(c.window);
      std::vector<float> out(st.q.size(), NAN), out_f32(st.q.size(), NAN);
      paged_attention(st.q.data(), st.k(), st.v(), st.layout, batch, c.q_heads, scale_of(c),
                      out.data());
      {
        const ScopedFlash off(false);
        paged_attention(st.q.data(), st.k(), st.v(), st.layout, batch, c.q_heads, scale_of(c),
                        out_f32.data());
      }
      const std::vector<float> q_bf16 = bf16_rounded(st.q);
      const int64_t width = int64_t{c.q_heads} * c.head_dim;
      for (size_t s = 0; s < kFlashSeqs.size(); ++s) {
        const int fresh = kFlashSeqs[s].second;
        if (fresh == 0) continue;
        const int64_t r0 = st.qsl[s], r1 = st.qsl[s + 1];
        const bool flash = takes_flash(GetParam(), c);
        std::vector<float> dense(fresh * width, NAN);
        dense_attention((flash ? q_bf16 : st.q).data() + r0 * width, st.keys[s], st.values[s],
                        fresh, c.q_heads, c.kv_heads, c.head_dim, c.window, scale_of(c),
                        dense.data());
        const auto got = rows_of(out, r0, r1, width), f32 = rows_of(out_f32, r0, r1, width);
        const std::string what = "sequence " + std::to_string(s);
        if (flash) {
          expect_close(got, dense, 4e-3f, what + " (flash) vs dense of bf16 q");
          EXPECT_NE(got, f32) << what << ": the flash path did not run";
        } else {
          EXPECT_EQ(got, f32) << what;
          expect_close(got, dense, 1e-5f, what + " (f32 path) vs dense");
        }
      }
    }
  }
}

TEST_P(PagedAttention, FlashDecodeRowsOfSeveralKvHeadsPerItem) {
  // Decode rows only: the flash path gives a work item several kv heads in
  // lockstep (how many depends on the batch and the threads). Each row must
  // match the dense attention of its bf16 q, and equal bit for bit the row
  // computed alone on one thread (another number of kv heads per item).
  const Seqs decode = {{23, 1}, {40, 1}, {5, 1}, {70, 1}, {0, 1}, {33, 1}};
  for (const Case& base : {Case{16, 8, 128, 16, 0}, Case{8, 4, 64, 3, 0}, Case{16, 8, 64, 16, 19},
                           Case{8, 2, 64, 48, 0}, Case{4, 4, 64, 16, 0}}) {
    const Case c = with_kv(base, DType::BF16);
    SCOPED_TRACE(describe(c));
    std::mt19937 rng(41);
    const Step st = build_step(c, rng, decode);
    const int64_t width = int64_t{c.q_heads} * c.head_dim;
    const std::vector<float> q_bf16 = bf16_rounded(st.q);
    // 5 threads: fewer kv heads per item than the row alone on one thread
    // gets (2 vs 8, 1 vs 4), so the bits of two item shapes are compared.
    for (int threads : {1, 2, 5}) {
      const ScopedThreads scoped(threads);
      std::vector<float> out(st.q.size(), NAN);
      paged_attention(st.q.data(), st.k(), st.v(), st.layout, st.batch(c.window), c.q_heads,
                      scale_of(c), out.data());
      for (size_t s = 0; s < decode.size(); ++s) {
        const std::string what = "sequence " + std::to_string(s) + ", threads " +
                                 std::to_string(threads);
        const int32_t qsl[2] = {0, 1}, len = st.seq_lens[s];
        const AttentionBatch one{1, qsl, &len, st.tables.data() + s * st.max_blocks,
                                 st.max_blocks, c.window};
        std::vector<float> alone(width, NAN);
        {
          const ScopedThreads single(1);
          paged_attention(st.q.data() + s * width, st.k(), st.v(), st.layout, one, c.q_heads,
                          scale_of(c), alone.data());
        }
        const auto got = rows_of(out, static_cast<int64_t>(s), static_cast<int64_t>(s) + 1, width);
        EXPECT_EQ(got, alone) << what;
        std::vector<float> dense(width, NAN);
        dense_attention((takes_flash(GetParam(), c) ? q_bf16 : st.q).data() + s * width,
                        st.keys[s], st.values[s], 1, c.q_heads, c.kv_heads, c.head_dim, c.window,
                        scale_of(c), dense.data());
        expect_close(got, dense, takes_flash(GetParam(), c) ? 4e-3f : 1e-5f, what + " vs dense");
      }
    }
  }
}

TEST_P(PagedAttention, FlashPrefillRowsDoNotDependOnTheBatch) {
  // A 150-token prompt computed in one step alone, on one thread, equals,
  // bit for bit, the same prompt in two chunks (37 + 113 rows, split off
  // the kernel's key and tile grids) batched with a decode row and another
  // prompt, on two threads: a flash row depends on its q and keys only.
  for (const Case& base : {Case{8, 2, 64, 16, 0}, Case{16, 8, 128, 16, 40}, Case{4, 4, 64, 3, 0}}) {
    const Case c = with_kv(base, DType::BF16);
    SCOPED_TRACE(describe(c));
    std::mt19937 rng(31);
    const Step st = build_step(c, rng, {{0, 150}, {20, 1}, {0, 60}});
    const int64_t width = int64_t{c.q_heads} * c.head_dim;
    std::vector<float> alone(150 * width, NAN);
    {
      const ScopedThreads one(1);
      const int32_t qsl[2] = {0, 150}, len = 150;
      const AttentionBatch b{1, qsl, &len, st.tables.data(), st.max_blocks, c.window};
      paged_attention(st.q.data(), st.k(), st.v(), st.layout, b, c.q_heads, scale_of(c),
                      alone.data());
    }
    // Query rows: the prompt's 150, then the decode row and the other
    // prompt's 60 (their q after the prompt's in st.q).
    std::vector<float> out(st.q.size(), NAN);
    {
      const ScopedThreads two(2);
      const int32_t qsl[5] = {0, 37, 150, 151, 211}, lens[4] = {37, 150, 21, 60};
      const int32_t rows[4] = {0, 0, 1, 2};  // both chunks read the prompt's blocks
      AttentionBatch b{4, qsl, lens, st.tables.data(), st.max_blocks, c.window};
      b.block_table_rows = rows;
      paged_attention(st.q.data(), st.k(), st.v(), st.layout, b, c.q_heads, scale_of(c),
                      out.data());
    }
    EXPECT_EQ(rows_of(out, 0, 150, width), alone);
  }
}

// Rows [r0, r1) of the step's one sequence as a chunk after the keys
// before r0 (cached), into out's rows [r0, r1).
void run_rows(const Step& st, const Case& c, int r0, int r1, std::vector<float>& out) {
  const int64_t width = int64_t{c.q_heads} * c.head_dim;
  const int32_t qsl[2] = {0, r1 - r0}, seq_len = r1;
  const AttentionBatch b{1, qsl, &seq_len, st.tables.data(), st.max_blocks, c.window};
  paged_attention(st.q.data() + r0 * width, st.k(), st.v(), st.layout, b, c.q_heads, scale_of(c),
                  out.data() + r0 * width);
}

TEST_P(PagedAttention, ChunksAndCachedPrefixesGiveTheRowsOfOneChunk) {
  // A 101-token sequence computed in one step equals, bit for bit, the same
  // sequence computed in chunks of 1, 5, 31 and 64 rows (a decode-sized,
  // a short and a long chunk, as a chunked-prefill scheduler may cut it)
  // and as a 10-row remainder after a cached 91-token prefix (a prefix-cache
  // hit): a row's path and bits depend on its q and keys only, not on how
  // many rows its sequence computes in the step (what keeps greedy outputs
  // independent of --max-num-batched-tokens and prefix caching). Both
  // paths: flash (bf16 cache, avx512bf16) and f32.
  constexpr int kLen = 101;
  const std::vector<std::vector<int>> splits = {{1, 5, 31, 64}, {64, 31, 5, 1}, {91, 10}};
  std::mt19937 rng(41);
  for (DType kv : kKvDtypes) {
    for (const Case& base : {Case{16, 8, 128, 16, 0}, Case{8, 2, 64, 16, 0}, Case{4, 4, 64, 3, 0},
                             Case{16, 4, 128, 48, 37}}) {
      const Case c = with_kv(base, kv);
      SCOPED_TRACE(describe(c));
      const Step st = build_step(c, rng, {{0, kLen}});
      const int64_t width = int64_t{c.q_heads} * c.head_dim;
      std::vector<float> whole(kLen * width, NAN);
      run_rows(st, c, 0, kLen, whole);
      for (const std::vector<int>& split : splits) {
        std::vector<float> chunked(kLen * width, NAN);
        int r0 = 0;
        for (int rows : split) run_rows(st, c, r0, r0 + rows, chunked), r0 += rows;
        ASSERT_EQ(r0, kLen);
        for (int r = 0; r < kLen; ++r) {
          ASSERT_EQ(rows_of(chunked, r, r + 1, width), rows_of(whole, r, r + 1, width))
              << "row " << r << ", chunks of " << ::testing::PrintToString(split);
        }
      }
    }
  }
}

TEST_P(PagedAttention, DecodeRowsOfShortAndLongContextsEqualTheirPromptRows) {
  // Decode rows (one-row chunks) take the flash kernel's decode path (keys
  // across the lanes, each key block asked for during the arithmetic of the
  // one before) over any context length; each must equal, bit for bit, the
  // same row computed in one prompt-sized chunk (queries across the lanes),
  // from one key to a context of many key blocks. With a sliding window
  // every row is short. The f32 path is held to the same rule.
  constexpr int len = 424;
  std::mt19937 rng(43);
  for (DType kv : kKvDtypes) {
    for (const Case& base : {Case{16, 8, 128, 16, 0}, Case{8, 2, 64, 16, 0},
                             Case{16, 4, 128, 48, 37}}) {
      const Case c = with_kv(base, kv);
      SCOPED_TRACE(describe(c));
      const Step st = build_step(c, rng, {{0, len}});
      const int64_t width = int64_t{c.q_heads} * c.head_dim;
      std::vector<float> whole(len * width, NAN), alone(len * width, NAN);
      run_rows(st, c, 0, len, whole);
      for (int r : {0, 1, 30, 31, 32, 33, 63, 64, 381, 382, 383, 384, 385, 386, len - 1}) {
        run_rows(st, c, r, r + 1, alone);
        ASSERT_EQ(rows_of(alone, r, r + 1, width), rows_of(whole, r, r + 1, width))
            << "row " << r << " (" << r + 1 << " keys)";
      }
    }
  }
}

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> bits(v.size());
  if (!v.empty()) std::memcpy(bits.data(), v.data(), v.size() * sizeof(float));  // else null
  return bits;
}

TEST_P(PagedAttention, WithInputsEqualsPrepareThenAttention) {
  // paged_attention(AttentionInputs) against prepare_attention_inputs then
  // paged_attention: the same q, k, cache and output bits. Decode batches
  // (each work item prepares its own rows and kv heads; a GQA group of 64
  // is two work items per kv head on the f32 path, so prepared whole
  // first), and the mixed batch (prepared whole first), with and without
  // qk-norm, on 1, 2 and 5 threads, both flash settings.
  const Seqs decode = {{23, 1}, {40, 1}, {5, 1}, {70, 1}, {0, 1}, {7, 0}, {33, 1}};
  for (bool flash : {true, false}) {
    const ScopedFlash path(flash);
    for (const Seqs& seqs : {decode, kSeqs}) {
      for (DType kv : kKvDtypes) {
        for (const Case& base : {Case{16, 8, 128, 16, 0}, Case{8, 2, 64, 3, 5},
                                 Case{64, 1, 32, 16, 0}}) {
          const Case c = with_kv(base, kv);
          std::mt19937 rng(47);
          const Step st = build_step(c, rng, seqs);
          const int64_t tokens = st.qsl.back(), row = int64_t{c.kv_heads} * c.head_dim;
          const auto k0 = random_vec(tokens * row, rng), v = random_vec(tokens * row, rng);
          const auto q_norm = random_vec(c.head_dim, rng), k_norm = random_vec(c.head_dim, rng);
          std::vector<int32_t> positions;
          std::vector<int64_t> slots;
          for (size_t s = 0; s < seqs.size(); ++s) {
            for (int j = 0; j < seqs[s].second; ++j) {
              const int p = seqs[s].first + j;
              positions.push_back(p);
              slots.push_back(int64_t{st.tables[s * st.max_blocks + p / c.block_size]} *
                                  c.block_size +
                              p % c.block_size);
            }
          }
          std::vector<float> inv_freq(c.head_dim / 2);
          for (int i = 0; i < c.head_dim / 2; ++i)
            inv_freq[i] = std::pow(10000.0f, -2.0f * i / c.head_dim);
          for (bool qk_norm : {false, true}) {
            for (int threads : {1, 2, 5}) {
              const ScopedThreads scoped(threads);
              const std::string what = describe(c) + (qk_norm ? " qk-norm" : "") + " threads " +
                                       std::to_string(threads) + " seqs " +
                                       std::to_string(seqs.size()) + (flash ? "" : " no flash");
              // Each way's q, k and caches, from the same start.
              struct Way {
                std::vector<float> q, k, kf, vf, out;
                std::vector<uint16_t> kb, vb;
                AttentionInputs in;
              } sep, fused;
              for (Way* w : {&sep, &fused}) {
                w->q = st.q, w->k = k0, w->kf = st.k_cache, w->vf = st.v_cache;
                w->kb = st.k_bf16, w->vb = st.v_bf16;
                w->out.assign(st.q.size(), NAN);
                AttentionInputs& in = w->in;
                in.q = w->q.data();
                in.k = w->k.data();
                in.v = v.data();
                in.num_tokens = tokens;
                in.num_q_heads = c.q_heads;
                in.q_norm = qk_norm ? q_norm.data() : nullptr;
                in.k_norm = qk_norm ? k_norm.data() : nullptr;
                in.positions = positions.data();
                in.inv_freq = inv_freq.data();
                in.rot_dim = c.head_dim;
                in.slot_mapping = slots.data();
              }
              auto k_of = [&](Way& w) -> void* {
                return kv == DType::BF16 ? (void*)w.kb.data() : w.kf.data();
              };
              auto v_of = [&](Way& w) -> void* {
                return kv == DType::BF16 ? (void*)w.vb.data() : w.vf.data();
              };
              const AttentionBatch batch = st.batch(c.window);
              prepare_attention_inputs(sep.in, st.layout, k_of(sep), v_of(sep));
              paged_attention(sep.q.data(), k_of(sep), v_of(sep), st.layout, batch, c.q_heads,
                              scale_of(c), sep.out.data());
              paged_attention(fused.in, k_of(fused), v_of(fused), st.layout, batch, scale_of(c),
                              fused.out.data());
              EXPECT_EQ(bits_of(fused.q), bits_of(sep.q)) << what;
              EXPECT_EQ(bits_of(fused.k), bits_of(sep.k)) << what;
              // Unwritten cache slots are NaN: compared as bits.
              EXPECT_TRUE(bits_of(fused.kf) == bits_of(sep.kf) &&
                          bits_of(fused.vf) == bits_of(sep.vf) && fused.kb == sep.kb &&
                          fused.vb == sep.vb)
                  << what;
              EXPECT_EQ(bits_of(fused.out), bits_of(sep.out)) << what;
            }
          }
        }
      }
    }
  }
}

TEST(PagedAttentionChecks, WithInputsRefusesBadInputsBeforeWritingTheCache) {
  // The fused op checks what prepare_attention_inputs checks (an odd
  // rot_dim here) before any q, k or cache element changes.
  const Case c{4, 2, 8, 4, 0};
  std::mt19937 rng(49);
  const Step st = build_step(c, rng, {{3, 1}});
  auto q = st.q;
  auto k = random_vec(int64_t{c.kv_heads} * c.head_dim, rng);
  const auto k0 = k, v = k, inv_freq = std::vector<float>(4, 1.0f);
  const std::vector<int32_t> positions = {3};
  const std::vector<int64_t> slots = {3};
  auto kc = st.k_cache, vc = st.v_cache;
  AttentionInputs in;
  in.q = q.data();
  in.k = k.data();
  in.v = v.data();
  in.num_tokens = 1;
  in.num_q_heads = c.q_heads;
  in.positions = positions.data();
  in.inv_freq = inv_freq.data();
  in.rot_dim = 3;
  in.slot_mapping = slots.data();
  std::vector<float> out(q.size(), 7.0f);
  try {
    paged_attention(in, kc.data(), vc.data(), st.layout, st.batch(0), scale_of(c), out.data());
    ADD_FAILURE() << "an odd rot_dim was accepted";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("rot_dim 3 must be even"), std::string::npos) << e.what();
  }
  EXPECT_EQ(bits_of(q), bits_of(st.q));
  EXPECT_EQ(bits_of(k), bits_of(k0));
  EXPECT_EQ(bits_of(kc), bits_of(st.k_cache));
  EXPECT_EQ(out, std::vector<float>(q.size(), 7.0f));
}

INSTANTIATE_TEST_SUITE_P(AllSupported, PagedAttention, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

}  // namespace
}  // namespace pagoda::ops::testing
