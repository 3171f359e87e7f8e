// MLA (absorbed form) over a paged latent cache: write_mla_kv against its
// reference, the reference against a dense MQA attention written here from
// the definition, mla_paged_attention on every supported ISA against the
// reference (batches mixing prefill chunks with a cached prefix, plain
// prefill and decode, over shuffled block tables with NaN in every slot
// nobody wrote), and the determinism rules: a row alone == its row in the
// batch, 1 thread == 2 threads, a bf16 cache == an f32 cache of the same
// rounded values, all bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ops/ops.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace pagoda::ops::testing {
namespace {

class MlaAttention : public IsaTest {};

struct Case {
  int heads, lora, rope, block_size;
  DType dtype = DType::F32;
};

std::string describe(const Case& c) {
  return "heads " + std::to_string(c.heads) + " entry " + std::to_string(c.lora) + "+" +
         std::to_string(c.rope) + " bs " + std::to_string(c.block_size) + " " +
         std::string(dtype_name(c.dtype));
}

using Seqs = std::vector<std::pair<int, int>>;  // {cached tokens, new tokens}
const Seqs kSeqs = {{10, 5}, {0, 9}, {23, 1}, {1, 1}, {40, 3}, {7, 0}, {0, 1}, {35, 40}};

// One step: the paged latent cache (written through write_mla_kv, shuffled
// block ids, NaN elsewhere), the queries, the batch, and each sequence's
// entries in key order as the cache holds them (bf16-rounded for bf16).
struct Step {
  MLALayout layout;
  int max_blocks = 0;
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  std::vector<float> q;
  std::vector<int32_t> tables, qsl = {0}, seq_lens;
  std::vector<std::vector<std::vector<float>>> entries;
  void* cache() { return layout.dtype == DType::BF16 ? (void*)bf16.data() : f32.data(); }
  const void* cache() const {
    return layout.dtype == DType::BF16 ? (const void*)bf16.data() : f32.data();
  }
  AttentionBatch batch() const {
    return {static_cast<int>(seq_lens.size()),
            qsl.data(),
            seq_lens.data(),
            tables.data(),
            max_blocks,
            0};
  }
};

Step build_step(const Case& c, std::mt19937& rng, const Seqs& seqs = kSeqs) {
  Step st;
  st.layout = MLALayout{c.block_size, c.lora, c.rope, c.dtype};
  const int ed = st.layout.entry_dim();
  int total_blocks = 0;
  for (auto [cached, fresh] : seqs) {
    const int blocks = (cached + fresh + c.block_size - 1) / c.block_size;
    st.max_blocks = std::max(st.max_blocks, blocks);
    total_blocks += blocks;
  }
  const int num_blocks = total_blocks + 5;
  const size_t elems = size_t(num_blocks) * c.block_size * ed;
  if (c.dtype == DType::BF16) {
    st.bf16.assign(elems, f32_to_bf16(NAN));
  } else {
    st.f32.assign(elems, NAN);
  }
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  st.tables.assign(seqs.size() * st.max_blocks, -1);
  st.entries.resize(seqs.size());
  size_t next = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int len = seqs[s].first + seqs[s].second;
    for (int b = 0; b < (len + c.block_size - 1) / c.block_size; ++b)
      st.tables[s * st.max_blocks + b] = ids[next++];
    const auto latent = random_vec(size_t(len) * c.lora, rng);
    const auto pe = random_vec(size_t(len) * c.rope, rng);
    std::vector<int64_t> slots;
    for (int t = 0; t < len; ++t) {
      slots.push_back(int64_t{st.tables[s * st.max_blocks + t / c.block_size]} * c.block_size +
                      t % c.block_size);
      std::vector<float> e(latent.begin() + t * c.lora, latent.begin() + (t + 1) * c.lora);
      e.insert(e.end(), pe.begin() + t * c.rope, pe.begin() + (t + 1) * c.rope);
      st.entries[s].push_back(c.dtype == DType::BF16 ? bf16_rounded(e) : e);
    }
    write_mla_kv(latent.data(), pe.data(), slots.data(), len, st.layout, st.cache());
    const auto qs = random_vec(size_t(seqs[s].second) * c.heads * ed, rng);
    st.q.insert(st.q.end(), qs.begin(), qs.end());
    st.qsl.push_back(st.qsl.back() + seqs[s].second);
    st.seq_lens.push_back(len);
  }
  return st;
}

float scale_of(const Case& c) { return 1.0f / std::sqrt(static_cast<float>(c.lora / 4 + c.rope)); }

// Dense MQA of one sequence from the definition: every head against the
// same entries, value = the entry's first lora values.
void dense_mla(const float* q, const std::vector<std::vector<float>>& entries, int64_t num_new,
               int heads, int lora, float scale, float* out) {
  const auto len = static_cast<int64_t>(entries.size());
  const size_t ed = entries.empty() ? 0 : entries[0].size();
  for (int64_t j = 0; j < num_new; ++j) {
    const int64_t pos = len - num_new + j;
    for (int h = 0; h < heads; ++h) {
      const float* qh = q + (j * heads + h) * ed;
      std::vector<double> w(pos + 1);
      double mx = -INFINITY, sum = 0;
      for (int64_t t = 0; t <= pos; ++t) {
        double dot = 0;
        for (size_t d = 0; d < ed; ++d) dot += double{qh[d]} * entries[t][d];
        mx = std::max(mx, w[t] = dot * scale);
      }
      for (double& x : w) sum += (x = std::exp(x - mx));
      for (int d = 0; d < lora; ++d) {
        double acc = 0;
        for (int64_t t = 0; t <= pos; ++t) acc += w[t] * entries[t][d];
        out[(j * heads + h) * lora + d] = static_cast<float>(acc / sum);
      }
    }
  }
}

std::vector<float> run_case(const Case& c, std::mt19937& rng, const Seqs& seqs = kSeqs) {
  const Step st = build_step(c, rng, seqs);
  const float scale = scale_of(c);
  const size_t n_out = size_t(st.qsl.back()) * c.heads * c.lora;
  std::vector<float> out(n_out, NAN), out_ref(n_out, NAN), out_dense(n_out, NAN);
  mla_paged_attention(st.q.data(), st.cache(), st.layout, st.batch(), c.heads, scale, out.data());
  ref::mla_paged_attention(st.q.data(), st.cache(), st.layout, st.batch(), c.heads, scale,
                           out_ref.data());
  const int64_t q_tok = int64_t{c.heads} * st.layout.entry_dim(), o_tok = int64_t{c.heads} * c.lora;
  for (size_t s = 0; s < seqs.size(); ++s) {
    dense_mla(st.q.data() + st.qsl[s] * q_tok, st.entries[s], seqs[s].second, c.heads, c.lora,
              scale, out_dense.data() + st.qsl[s] * o_tok);
  }
  expect_close(out_ref, out_dense, 1e-5f, "reference vs dense, " + describe(c));
  expect_close(out, out_ref, 2e-5f, "kernel vs reference, " + describe(c));
  return out;
}

TEST(MlaKvWrite, MatchesReferenceInPlaceAndSkipsPadding) {
  // write_mla_kv == ref::write_mla_kv byte for byte, for dense inputs and
  // for the strided in-place form (latent and k_pe inside one [T, entry]
  // row); negative slots leave the cache untouched.
  for (DType dt : {DType::F32, DType::BF16}) {
    const MLALayout layout{4, 24, 8, dt};
    const int ed = layout.entry_dim(), T = 9;
    std::mt19937 rng(3);
    const auto kva = random_vec(size_t(T) * ed, rng);  // [T, latent ; pe]
    const std::vector<int64_t> slots = {5, -1, 0, 11, 3, -7, 8, 2, 15};
    const size_t bytes = size_t(16) * ed * dtype_size(dt);
    std::vector<uint8_t> fast(bytes, 0xab), strided(bytes, 0xab), ref_cache(bytes, 0xab);
    std::vector<float> latent, pe;
    for (int t = 0; t < T; ++t) {
      latent.insert(latent.end(), kva.begin() + t * ed, kva.begin() + t * ed + 24);
      pe.insert(pe.end(), kva.begin() + t * ed + 24, kva.begin() + (t + 1) * ed);
    }
    write_mla_kv(latent.data(), pe.data(), slots.data(), T, layout, fast.data());
    write_mla_kv(kva.data(), kva.data() + 24, slots.data(), T, layout, strided.data(), ed, ed);
    ref::write_mla_kv(latent.data(), pe.data(), slots.data(), T, layout, ref_cache.data());
    EXPECT_EQ(fast, ref_cache) << dtype_name(dt);
    EXPECT_EQ(strided, ref_cache) << dtype_name(dt);
    // Slots nobody wrote (1, 4, 6, 7, ...) keep their bytes.
    const size_t entry_bytes = size_t(ed) * dtype_size(dt);
    for (int slot : {1, 4, 6, 7, 9, 10, 12, 13, 14}) {
      for (size_t b = 0; b < entry_bytes; ++b)
        ASSERT_EQ(fast[slot * entry_bytes + b], 0xab) << "slot " << slot;
    }
    // And the written entries hold the values (rounded for bf16).
    for (int t = 0; t < T; ++t) {
      if (slots[t] < 0) continue;
      for (int d = 0; d < ed; ++d) {
        const float want =
            dt == DType::BF16 ? bf16_to_f32(f32_to_bf16(kva[t * ed + d])) : kva[t * ed + d];
        float got;
        if (dt == DType::BF16) {
          uint16_t h;
          std::memcpy(&h, fast.data() + (slots[t] * ed + d) * 2, 2);
          got = bf16_to_f32(h);
        } else {
          std::memcpy(&got, fast.data() + (slots[t] * ed + d) * 4, 4);
        }
        ASSERT_EQ(got, want) << "token " << t << " element " << d;
      }
    }
  }
}

TEST_P(MlaAttention, MatchesReferenceAndDense) {
  std::mt19937 rng(5);
  // Heads 1..16 (odd counts too), entries 64+16, 512+64 (the real model),
  // 40+8 and 20+4 (not multiples of the vector width), block sizes 1, 16,
  // 64 (blocks of several score chunks) and 3.
  const std::vector<Case> cases = {{1, 64, 16, 16}, {4, 64, 16, 1},   {16, 64, 16, 64},
                                   {3, 40, 8, 3},   {8, 512, 64, 16}, {2, 512, 64, 64},
                                   {5, 20, 4, 1},   {16, 40, 8, 16},  {1, 512, 64, 1}};
  for (DType dt : {DType::F32, DType::BF16}) {
    for (Case c : cases) {
      c.dtype = dt;
      SCOPED_TRACE(describe(c));
      run_case(c, rng);
    }
  }
}

TEST_P(MlaAttention, ManyHeadsDecodeMatchesReference) {
  // 128 heads (the real model's, four head blocks per token) and 40, decode
  // rows only, as the engine's decode steps run it.
  const Seqs decode = {{50, 1}, {17, 1}, {90, 1}};
  std::mt19937 rng(9);
  for (DType dt : {DType::F32, DType::BF16}) {
    for (Case c : {Case{128, 64, 16, 16}, Case{40, 512, 64, 64}}) {
      c.dtype = dt;
      SCOPED_TRACE(describe(c));
      run_case(c, rng, decode);
    }
  }
}

TEST_P(MlaAttention, EachRowAloneEqualsItsRowInTheBatch) {
  std::mt19937 rng(7);
  for (DType dt : {DType::F32, DType::BF16}) {
    for (Case c :
         {Case{8, 64, 16, 16}, Case{3, 40, 8, 3}, Case{16, 512, 64, 64}, Case{40, 64, 16, 16}}) {
      c.dtype = dt;
      SCOPED_TRACE(describe(c));
      const Step st = build_step(c, rng);
      const int64_t q_tok = int64_t{c.heads} * st.layout.entry_dim(),
                    o_tok = int64_t{c.heads} * c.lora;
      std::vector<float> out(st.qsl.back() * o_tok, NAN);
      mla_paged_attention(st.q.data(), st.cache(), st.layout, st.batch(), c.heads, scale_of(c),
                          out.data());
      int mismatches = 0;
      for (size_t s = 0; s < kSeqs.size(); ++s) {
        for (int32_t row = st.qsl[s]; row < st.qsl[s + 1]; ++row) {
          const int32_t qsl[2] = {0, 1};
          const int32_t seq_len = st.seq_lens[s] - (st.qsl[s + 1] - 1 - row);
          const AttentionBatch one{
              1, qsl, &seq_len, st.tables.data() + s * st.max_blocks, st.max_blocks, 0};
          std::vector<float> alone(o_tok, NAN);
          mla_paged_attention(st.q.data() + row * q_tok, st.cache(), st.layout, one, c.heads,
                              scale_of(c), alone.data());
          mismatches += !std::equal(alone.begin(), alone.end(), out.begin() + row * o_tok);
        }
      }
      EXPECT_EQ(mismatches, 0);
    }
  }
}

TEST_P(MlaAttention, TwoThreadsEqualOne) {
  for (DType dt : {DType::F32, DType::BF16}) {
    const Case c{16, 64, 16, 16, dt};
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

TEST_P(MlaAttention, Bf16CacheEqualsF32CacheOfTheRoundedValues) {
  // Widening bf16 is exact, so the f32 kernel on the rounded values must
  // give the very same bits.
  for (const Case& c : {Case{8, 64, 16, 16}, Case{4, 512, 64, 64}}) {
    SCOPED_TRACE(describe(c));
    Case cb = c;
    cb.dtype = DType::BF16;
    std::mt19937 rng_b(11), rng_f(11);
    const Step bf = build_step(cb, rng_b);
    Step f = build_step(c, rng_f);
    for (size_t i = 0; i < bf.bf16.size(); ++i) f.f32[i] = bf16_to_f32(bf.bf16[i]);
    ASSERT_EQ(bf.q, f.q);
    const size_t n_out = size_t(bf.qsl.back()) * c.heads * c.lora;
    std::vector<float> out_b(n_out, NAN), out_f(n_out, NAN);
    mla_paged_attention(bf.q.data(), bf.cache(), bf.layout, bf.batch(), c.heads, scale_of(c),
                        out_b.data());
    mla_paged_attention(f.q.data(), f.cache(), f.layout, f.batch(), c.heads, scale_of(c),
                        out_f.data());
    EXPECT_EQ(out_b, out_f);
  }
}

TEST_P(MlaAttention, LongRowsSplitIntoSegmentsGiveTheSameBits) {
  // Rows over several 1024-key segments: with fewer work items than
  // threads, decode rows split into one item per segment whose states are
  // merged afterwards; with one thread they run whole. Both must match the
  // reference and each other bit for bit, and a row alone (split) must
  // equal its row in a batch with enough items not to split.
  const Seqs decode = {{2500, 1}, {1023, 1}, {3071, 1}};
  for (DType dt : {DType::F32, DType::BF16}) {
    const Case c{3, 40, 8, 16, dt};
    SCOPED_TRACE(describe(c));
    std::vector<std::vector<float>> runs;
    for (int threads : {1, 2, 4}) {
      ScopedThreads scoped(threads);
      std::mt19937 rng(31);
      runs.push_back(run_case(c, rng, decode));
    }
    EXPECT_EQ(runs[0], runs[1]);
    EXPECT_EQ(runs[0], runs[2]);
  }
  const Seqs mixed = {{2100, 24}, {2600, 1}, {5, 3}};
  std::mt19937 rng(32);
  for (DType dt : {DType::F32, DType::BF16}) {
    const Case c{4, 64, 16, 64, dt};
    SCOPED_TRACE(describe(c));
    ScopedThreads scoped(4);
    const Step st = build_step(c, rng, mixed);
    const int64_t q_tok = int64_t{c.heads} * st.layout.entry_dim(),
                  o_tok = int64_t{c.heads} * c.lora;
    std::vector<float> out(st.qsl.back() * o_tok, NAN);
    mla_paged_attention(st.q.data(), st.cache(), st.layout, st.batch(), c.heads, scale_of(c),
                        out.data());
    int mismatches = 0;
    for (size_t s = 0; s < mixed.size(); ++s) {
      for (int32_t row = st.qsl[s]; row < st.qsl[s + 1]; ++row) {
        const int32_t qsl[2] = {0, 1};
        const int32_t seq_len = st.seq_lens[s] - (st.qsl[s + 1] - 1 - row);
        const AttentionBatch one{
            1, qsl, &seq_len, st.tables.data() + s * st.max_blocks, st.max_blocks, 0};
        std::vector<float> alone(o_tok, NAN);
        mla_paged_attention(st.q.data() + row * q_tok, st.cache(), st.layout, one, c.heads,
                            scale_of(c), alone.data());
        mismatches += !std::equal(alone.begin(), alone.end(), out.begin() + row * o_tok);
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TEST_P(MlaAttention, HeadMajorStridesGiveTheSameBits) {
  // q and out head-major ([heads, tokens, ...], as a model feeding W_UV
  // one linear per head would use): every output equals the token-major
  // run's, bit for bit, in the kernel and in the reference.
  std::mt19937 rng(12);
  for (DType dt : {DType::F32, DType::BF16}) {
    const Case c{5, 64, 16, 16, dt};
    SCOPED_TRACE(describe(c));
    const Step st = build_step(c, rng);
    const int64_t T = st.qsl.back(), ed = st.layout.entry_dim(), H = c.heads, L = c.lora;
    std::vector<float> q_hm(st.q.size());
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        std::copy_n(st.q.begin() + (t * H + h) * ed, ed, q_hm.begin() + (h * T + t) * ed);
      }
    }
    const MlaStrides hm{ed, T * ed, L, T * L};
    for (bool reference : {false, true}) {
      auto run = reference ? ref::mla_paged_attention : mla_paged_attention;
      std::vector<float> tok(T * H * L, NAN), head(T * H * L, NAN);
      run(st.q.data(), st.cache(), st.layout, st.batch(), c.heads, scale_of(c), tok.data(), {});
      run(q_hm.data(), st.cache(), st.layout, st.batch(), c.heads, scale_of(c), head.data(), hm);
      int mismatches = 0;
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t h = 0; h < H; ++h) {
          mismatches +=
              !std::equal(tok.begin() + (t * H + h) * L, tok.begin() + (t * H + h + 1) * L,
                          head.begin() + (h * T + t) * L);
        }
      }
      EXPECT_EQ(mismatches, 0) << (reference ? "reference" : "kernel");
    }
  }
}

TEST_P(MlaAttention, AbsorbedFormEqualsTheMhaForm) {
  // The op's contract against spec 3.1.2: with q = [W_UK_h^T q_nope_h ;
  // q_pe_h] and W_UV_h applied to the latent output, it computes the MHA
  // form over per-head keys [W_UK_h c_j ; k_pe_j] and values W_UV_h c_j.
  const int H = 4, nope = 16, rope = 8, vdim = 12, lora = 32, len = 37, bs = 16;
  const int num_new = 9;  // a prefill chunk over a cached prefix
  std::mt19937 rng(21);
  const auto c = random_vec(size_t(len) * lora, rng), pe = random_vec(size_t(len) * rope, rng);
  const auto w_uk = random_vec(size_t(H) * nope * lora, rng, 0.3f);  // [H][nope][lora]
  const auto w_uv = random_vec(size_t(H) * vdim * lora, rng, 0.3f);  // [H][vdim][lora]
  const auto q_nope = random_vec(size_t(num_new) * H * nope, rng);
  const auto q_pe = random_vec(size_t(num_new) * H * rope, rng);
  const float scale = 1.0f / std::sqrt(float(nope + rope));
  // MHA form, dense, in f64.
  std::vector<double> mha(size_t(num_new) * H * vdim);
  for (int i = 0; i < num_new; ++i) {
    const int last = len - num_new + i;
    for (int h = 0; h < H; ++h) {
      std::vector<double> p(last + 1);
      double mx = -INFINITY, sum = 0;
      for (int j = 0; j <= last; ++j) {
        double dot = 0;
        for (int a = 0; a < nope; ++a) {
          double k = 0;
          for (int b = 0; b < lora; ++b)
            k += double{w_uk[(h * nope + a) * lora + b]} * c[j * lora + b];
          dot += q_nope[(i * H + h) * nope + a] * k;
        }
        for (int a = 0; a < rope; ++a)
          dot += double{q_pe[(i * H + h) * rope + a]} * pe[j * rope + a];
        mx = std::max(mx, p[j] = dot * scale);
      }
      for (double& x : p) sum += (x = std::exp(x - mx));
      for (int a = 0; a < vdim; ++a) {
        double o = 0;
        for (int j = 0; j <= last; ++j) {
          double v = 0;
          for (int b = 0; b < lora; ++b)
            v += double{w_uv[(h * vdim + a) * lora + b]} * c[j * lora + b];
          o += p[j] * v;
        }
        mha[(i * H + h) * vdim + a] = o / sum;
      }
    }
  }
  // Absorbed form through the paged op (blocks 2, 0, 1 of a 3-block cache).
  const MLALayout layout{bs, lora, rope, DType::F32};
  std::vector<float> cache(size_t(3) * bs * layout.entry_dim(), NAN);
  const std::vector<int32_t> table = {2, 0, 1};
  std::vector<int64_t> slots(len);
  for (int j = 0; j < len; ++j) slots[j] = int64_t{table[j / bs]} * bs + j % bs;
  write_mla_kv(c.data(), pe.data(), slots.data(), len, layout, cache.data());
  const int ed = layout.entry_dim();
  std::vector<float> q(size_t(num_new) * H * ed);
  for (int i = 0; i < num_new; ++i) {
    for (int h = 0; h < H; ++h) {
      float* qh = q.data() + (i * H + h) * ed;
      for (int b = 0; b < lora; ++b) {
        double acc = 0;
        for (int a = 0; a < nope; ++a)
          acc += double{w_uk[(h * nope + a) * lora + b]} * q_nope[(i * H + h) * nope + a];
        qh[b] = static_cast<float>(acc);
      }
      for (int a = 0; a < rope; ++a) qh[lora + a] = q_pe[(i * H + h) * rope + a];
    }
  }
  const int32_t qsl[2] = {0, num_new}, seq_len = len;
  const AttentionBatch batch{1, qsl, &seq_len, table.data(), 3, 0};
  std::vector<float> latent(size_t(num_new) * H * lora, NAN);
  mla_paged_attention(q.data(), cache.data(), layout, batch, H, scale, latent.data());
  std::vector<float> absorbed(mha.size()), want(mha.begin(), mha.end());
  for (int i = 0; i < num_new; ++i) {
    for (int h = 0; h < H; ++h) {
      for (int a = 0; a < vdim; ++a) {
        double o = 0;
        for (int b = 0; b < lora; ++b)
          o += double{w_uv[(h * vdim + a) * lora + b]} * latent[(i * H + h) * lora + b];
        absorbed[(i * H + h) * vdim + a] = static_cast<float>(o);
      }
    }
  }
  expect_close(absorbed, want, 1e-5f, "absorbed vs MHA form");
}

TEST(MlaAttentionChecks, RefusesASlidingWindow) {
  const MLALayout layout{16, 8, 4, DType::F32};
  std::vector<float> cache(16 * 12, 0.0f), q(12, 0.0f), out(8);
  const int32_t qsl[2] = {0, 1}, len = 1, table = 0;
  const AttentionBatch b{1, qsl, &len, &table, 1, 4};
  EXPECT_ANY_THROW(mla_paged_attention(q.data(), cache.data(), layout, b, 1, 1.0f, out.data()));
}

INSTANTIATE_TEST_SUITE_P(AllSupported, MlaAttention, ::testing::ValuesIn(supported_isas()),
                         isa_test_name);

}  // namespace
}  // namespace pagoda::ops::testing
