// The per-ISA kernel tables behind ops/ops.h. The entry points (entry.cpp)
// split work across threads and call the table of the selected ISA; each
// table is the same generic code (kernels_impl.h) compiled for one ISA.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>  // kernels_impl.h's thread scratch

#include "ops/ops.h"

namespace pagoda::ops::cpu {

// A tile of paged attention: `rows` consecutive query rows of one sequence
// times `heads` consecutive q heads that share one kv head, with
// everything resolved to pointers. Query (r, h) is at q + r * q_row_stride
// + h * head_dim and writes out at the same offset; row r sees keys up to
// last_key + r (and, with a sliding window W > 0, from last_key + r - W + 1).
// Key t lives in block b = block_table[t / block_size], its K row at
// element k_head + b * block_stride + (t % block_size) * head_dim (k_head
// already points at the kv head's rows of block 0; see KVLayout), of the
// cache's element type (the table's attention or attention_bf16_kv).
struct AttentionTile {
  const float* q = nullptr;
  float* out = nullptr;
  int64_t q_row_stride = 0;  // num_q_heads * head_dim
  int rows = 0, heads = 0;   // rows * heads * kv_heads <= kMaxTileQueries
  // Consecutive kv heads the tile covers, in lockstep chunk by chunk so
  // that a block's K (and V) rows of all of them, adjacent in the pool, are
  // read as one run. kv head j's `heads` q heads follow kv head 0's (at
  // q + j * heads * head_dim: heads is the whole group then), its rows
  // block_size * head_dim elements after kv head 0's.
  int kv_heads = 1;
  const void* k_head = nullptr;  // f32 or bf16 elements
  const void* v_head = nullptr;
  int64_t block_stride = 0;  // num_kv_heads * block_size * head_dim
  const int32_t* block_table = nullptr;
  int block_size = 0;
  int head_dim = 0;
  int64_t last_key = 0;  // of row 0
  int sliding_window = 0;
  float scale = 1.0f;
  // The tile the calling thread runs next, if any: its first keys are
  // prefetched while this tile's last ones are computed, so one stream of
  // prefetches runs across the thread's tiles (short-context tiles would
  // otherwise each start on a cold miss).
  const AttentionTile* next = nullptr;
};
// The first key a query seeing keys up to `last` sees: 0, or the start of
// its sliding window (window > 0).
inline int64_t first_visible_key(int64_t last, int64_t window) {
  return window > 0 && last - window + 1 > 0 ? last - window + 1 : int64_t{0};
}

constexpr int kMaxTileQueries = 32;
// Keys per attention chunk: the kernel visits each block's keys in runs of
// this many from its start (kernels_impl.h).
constexpr int kKeyChunk = 16;
// Floats of scratch an attention tile of head_dim hd needs: per query, its
// output accumulator (hd), one chunk's scores, its running max and softmax
// denominator.
constexpr int64_t attention_scratch_floats(int64_t hd) {
  return kMaxTileQueries * (hd + kKeyChunk + 2);
}

// Flash-attention tiles (flash_attention_avx512bf16.cpp): up to
// kFlashQueries queries (rows x the q heads of one kv head) per kv head,
// keys in blocks of kFlashKeys positions of an absolute grid; head_dim a
// multiple of 32. Tiles of at most kFlashFewQueries queries per kv head
// (decode rows) may cover up to kMaxFlashKvHeads kv heads (kv_heads), each
// with its own flash_scratch_floats(hd) of the scratch, in lockstep block
// by block.
constexpr int kFlashQueries = 64;
constexpr int kFlashKeys = 32;
constexpr int kFlashFewQueries = 8;
constexpr int kMaxFlashKvHeads = 8;
// Floats of scratch a flash tile of head_dim hd needs per kv head: q pairs,
// the transposed output, a block's scores and weight pairs, its V pairs,
// the running max and denominator, and 16 floats to align it to 64 bytes.
constexpr int64_t flash_scratch_floats(int64_t hd) {
  return kFlashQueries * (hd / 2 + hd + kFlashKeys + kFlashKeys / 2 + 2) + kFlashKeys / 2 * hd + 16;
}

// A tile of MLA attention (ops.h mla_paged_attention): `rows` consecutive
// query rows of one sequence times `heads` consecutive heads, all reading
// the one latent entry per key. Query (r, h) is at q + r * q_row_stride +
// h * q_head_stride and writes kv_lora values at out + r * out_row_stride +
// h * out_head_stride; row r sees keys [0, last_key + r]. Key t's entry starts at
// element (block_table[t / block_size] * block_size + t % block_size) *
// entry_dim of the cache (f32 or bf16: mla_attention / mla_attention_bf16).
//
// Keys are taken in segments of kMlaSegmentKeys (from key 0): each
// segment's softmax state (max m, denominator l, unnormalised output acc)
// is computed from scratch and merged into the query's total with
// mla_merge_state, in segment order. So a tile may cover just one segment
// [seg_begin, seg_begin + kMlaSegmentKeys) and write that state to
// `partial` (m, l, then kv_lora acc values, for query (0, h) at partial +
// h * partial_head_stride) for mla_merge to combine later, giving the very
// bits the whole-range tile gives: long decode rows split across threads.
struct MlaTile {
  const float* q = nullptr;
  float* out = nullptr;
  int64_t q_row_stride = 0, q_head_stride = 0;  // ops.h MlaStrides
  int64_t out_row_stride = 0, out_head_stride = 0;
  int rows = 0, heads = 0;  // rows * heads <= kMaxTileQueries
  const void* cache = nullptr;
  const int32_t* block_table = nullptr;
  int block_size = 0;
  int kv_lora = 0, entry_dim = 0;
  int64_t entry_stride = 0;  // elements of the cache type per entry (fp8: entry bytes)
  int64_t last_key = 0;      // of row 0
  float scale = 1.0f;
  // One segment only (rows == 1): its first key, and where its state goes.
  int64_t seg_begin = 0;
  float* partial = nullptr;  // null: all segments, normalised output to out
  int64_t partial_head_stride = 0;
};
constexpr int64_t kMlaSegmentKeys = 1024;

// A tile of sparse MLA attention (ops.h mla_sparse_attention): one query
// token times `heads` consecutive heads over the entries of a slot list.
// The list's valid slots (>= 0), in list order, are taken exactly as
// mla_attention takes a row's keys 0, 1, 2, ...: chunks of kKeyChunk,
// segments of kMlaSegmentKeys merged in order. So a list holding a row's
// causal keys in position order gives that row's dense bits (block sizes
// that are multiples of kKeyChunk, where dense chunks are aligned runs of
// kKeyChunk positions).
struct MlaSparseTile {
  const float* q = nullptr;
  float* out = nullptr;
  int64_t q_head_stride = 0, out_head_stride = 0;
  int heads = 0;  // <= kMaxTileQueries
  const void* cache = nullptr;
  const int32_t* slots = nullptr;  // the token's list: physical slots, -1 = none
  int count = 0;                   // list length
  int kv_lora = 0, entry_dim = 0;
  int64_t entry_stride = 0;  // elements of the cache type per entry (fp8: entry bytes)
  float scale = 1.0f;
};
// A tile of V4 sparse attention (ops.h v4_sparse_attention): one query
// token times `heads` consecutive heads over the token's two entry lists
// (window, then compressed), every head reading each entry once per tile.
// The lists, one after the other, are cut into segments of
// kV4SegmentSlots list positions; each segment's softmax state is computed
// from the empty state (chunks of up to kKeyChunk valid entries of one
// list, in list order) and folded into the total in segment order, empty
// segments skipped; then the sink joins the denominator. A tile covers
// segments [seg_begin, seg_end): all of them (partial == null: the output),
// or exactly one, whose raw state goes to `partial` (per head h at partial
// + h * partial_head_stride: max, denominator, head_dim accumulator values) for
// v4_finish to fold. Both run the same fold, so a token's bits do not
// depend on the split.
struct V4AttentionSource {
  const void* cache = nullptr;
  const V4EntryLayout* layout = nullptr;
  const int32_t* slots = nullptr;  // the token's list, -1 = none
  int count = 0;
};
struct V4AttentionTile {
  const float* q = nullptr;     // head h at q + h * head_dim
  float* out = nullptr;         // head h at out + h * head_dim
  const float* sink = nullptr;  // the tile's heads' sinks
  int heads = 0;                // <= kMaxTileQueries
  int head_dim = 0;
  float scale = 1.0f;
  V4AttentionSource src[2];
  int seg_begin = 0, seg_end = 0;
  float* partial = nullptr;
  int64_t partial_head_stride = 0;
};
constexpr int kV4SegmentSlots = 256;

// Floats of scratch an MLA tile needs: per query a segment's and the
// total's latent accumulator, max and denominator, and one chunk's scores.
// An fp8_ds_mla cache (ops.h MLALayout F8E4M3) also needs room for one
// chunk's entries dequantised to f32 (entry_dim > 0), after that.
constexpr int64_t mla_scratch_floats(int64_t kv_lora, int64_t fp8_entry_dim = 0) {
  return kMaxTileQueries * (2 * kv_lora + kKeyChunk + 4) + kKeyChunk * fp8_entry_dim;
}

// Stores one token's k and v rows ([num_kv_heads, head_dim], f32) at its
// slot, as layout.dtype (bf16: round to nearest even, f32_to_bf16): kv
// heads [h0, h1), every one by default. A token's rows are a few KB per
// layer, so a scalar conversion costs little next to the projections that
// made them.
inline void write_kv_token(const float* k, const float* v, int64_t slot, const KVLayout& layout,
                           void* k_cache, void* v_cache, int h0 = 0, int h1 = -1) {
  const int hd = layout.head_dim;
  if (h1 < 0) h1 = layout.num_kv_heads;
  for (int h = h0; h < h1; ++h) {
    const int64_t to = layout.row_offset(slot, h);
    const float* kh = k + int64_t{h} * hd;
    const float* vh = v + int64_t{h} * hd;
    if (layout.dtype == DType::BF16) {
      uint16_t* kc = static_cast<uint16_t*>(k_cache) + to;
      uint16_t* vc = static_cast<uint16_t*>(v_cache) + to;
      for (int d = 0; d < hd; ++d) kc[d] = f32_to_bf16(kh[d]);
      for (int d = 0; d < hd; ++d) vc[d] = f32_to_bf16(vh[d]);
    } else {
      const size_t bytes = static_cast<size_t>(hd) * sizeof(float);
      std::memcpy(static_cast<float*>(k_cache) + to, kh, bytes);
      std::memcpy(static_cast<float*>(v_cache) + to, vh, bytes);
    }
  }
}

// prepare_attention_inputs' checks, and its work (ops.h) for tokens [t0,
// t1) and kv heads [kv_h0, kv_h1) only: their k rows, the q heads of their
// GQA groups and their KV slots (attention_inputs.cpp). Heads and tokens
// are independent, so any cut of them gives the whole op's bits.
void check_attention_inputs(const AttentionInputs& in, const KVLayout& layout);
void prepare_attention_rows(const AttentionInputs& in, const KVLayout& layout, void* k_cache,
                            void* v_cache, int64_t t0, int64_t t1, int kv_h0, int kv_h1);

struct KernelTable {
  // y[:, n0:n1] = x[m, k] * w[n0:n1, k]^T (+ bias); y has row stride n
  // (w's row count is not needed: only rows n0..n1 are read).
  // Each output element is computed by the same instruction sequence whatever
  // m, n0, n1 are, so results do not depend on batch size or thread split.
  void (*linear_f32)(const float* x, int64_t m, const float* w, int64_t k, int64_t n,
                     const float* bias, float* y, int64_t n0, int64_t n1);
  void (*linear_bf16)(const float* x, int64_t m, const uint16_t* w, int64_t k, int64_t n,
                      const float* bias, float* y, int64_t n0, int64_t n1);
  // Rows [r0, r1) of rms_norm / add_rms_norm (rows of length n).
  void (*rms_norm_rows)(const float* x, const float* weight, int64_t n, float eps, float* y,
                        int64_t r0, int64_t r1);
  void (*add_rms_norm_rows)(float* residual, const float* x, const float* weight, int64_t n,
                            float eps, float* y, int64_t r0, int64_t r1);
  // Rows [r0, r1) of silu_mul (gate_up rows of 2 * inter, out rows of
  // inter), gate and up clamped first when limit > 0 (ops.h swiglu_limit).
  void (*silu_mul_rows)(const float* gate_up, int64_t inter, float limit, float* out, int64_t r0,
                        int64_t r1);
  // One attention tile over an f32 / a bf16 KV cache (the same kernel,
  // templated on the element type: bf16 is widened to f32 in registers, so
  // the two give the same bits on the same bf16-representable values);
  // scratch holds attention_scratch_floats(head_dim).
  void (*attention)(const AttentionTile& a, float* scratch);
  void (*attention_bf16_kv)(const AttentionTile& a, float* scratch);
  // Flash-attention tile over a bf16 KV cache with bf16 dot
  // products (kFlashQueries, kFlashKeys above; q and the softmax weights
  // rounded to bf16); null where the ISA has none. scratch holds
  // flash_scratch_floats(head_dim).
  void (*attention_bf16_flash)(const AttentionTile& a, float* scratch) = nullptr;
  // bf16 x bf16 -> f32 linear (ISAs with a bf16 dot product; null on the
  // others, which widen bf16 weights to f32 in linear_bf16 instead): x is
  // already rounded to bf16 by bf16_rows (round-to-nearest-even), row
  // stride k; the same determinism rule as linear_f32 holds.
  void (*bf16_rows)(const float* x, int64_t count, uint16_t* out) = nullptr;
  void (*linear_bf16_dot)(const uint16_t* x, int64_t m, const uint16_t* w, int64_t k, int64_t n,
                          const float* bias, float* y, int64_t n0, int64_t n1) = nullptr;
  // Packed bf16 weights (ops/packed.h), x as for linear_bf16_dot (k even):
  // the output columns of panels [p0, p1) of y (row stride ldy); columns
  // >= n are not stored. Null where the ISA has no native kernel (entry.cpp
  // then runs a portable loop). Rows are batch-invariant as above.
  void (*linear_bf16_packed)(const uint16_t* x, int64_t m, const uint16_t* w, int64_t k, int64_t n,
                             int64_t ldy, const float* bias, float* y, int64_t p0,
                             int64_t p1) = nullptr;
  // The same with f32 activations, for ISAs without a bf16 dot product
  // (AVX2: the panel's bf16 pairs widened to f32 in registers, then FMAs).
  // Used where linear_bf16_packed is null.
  void (*linear_bf16_packed_f32)(const float* x, int64_t m, const uint16_t* w, int64_t k, int64_t n,
                                 int64_t ldy, const float* bias, float* y, int64_t p0,
                                 int64_t p1) = nullptr;
  // F8E4M3 weights with block scales (ops::Matrix; scales row stride
  // fp8_scale_cols(k)), y row stride ldy, columns [n0, n1) (n0 a multiple
  // of 16). Bit-identical to linear_f32 on the dequantised weights.
  void (*linear_fp8)(const float* x, int64_t m, const uint8_t* w, const float* block_scales,
                     int64_t k, int64_t ldy, const float* bias, float* y, int64_t n0,
                     int64_t n1) = nullptr;
  // F4E2M1 weights (ops::Matrix: k / 2 bytes a row, E8M0 scales row stride
  // k / 32, k a multiple of 32), otherwise as linear_fp8: bit-identical to
  // linear_f32 on the dequantised weights.
  void (*linear_fp4)(const float* x, int64_t m, const uint8_t* w, const uint8_t* e8m0_scales,
                     int64_t k, int64_t ldy, const float* bias, float* y, int64_t n0,
                     int64_t n1) = nullptr;
  // One head's rotated slice v[0, rot_dim) in place (ops::rope with
  // RopeParams). Interleaved: cs = (c0, c0, c1, c1, ...), sn = (-s0, s0,
  // -s1, s1, ...), so v' = v * cs + swap_pairs(v) * sn. NeoX: cs, sn hold
  // the rot_dim / 2 cosines and sines.
  void (*rope_slice)(float* v, const float* cs, const float* sn, int rot_dim,
                     bool interleaved) = nullptr;
  // Rows [r0, r1) of layer_norm (rows of length n; bias may be null).
  void (*layer_norm_rows)(const float* x, const float* weight, const float* bias, int64_t n,
                          float eps, float* y, int64_t r0, int64_t r1) = nullptr;
  // One MLA tile over an f32 / a bf16 latent cache (the same kernel
  // templated on the element type, like attention); scratch holds
  // mla_scratch_floats(kv_lora).
  void (*mla_attention)(const MlaTile& a, float* scratch) = nullptr;
  void (*mla_attention_bf16)(const MlaTile& a, float* scratch) = nullptr;
  // Merges `count` segment states (MlaTile::partial layout, consecutive,
  // stride kv_lora + 2) in order and writes the normalised output.
  void (*mla_merge)(const float* states, int count, int kv_lora, float* out) = nullptr;
  // One sparse MLA tile over an f32 / a bf16 latent cache; scratch holds
  // mla_scratch_floats(kv_lora).
  void (*mla_sparse_attention)(const MlaSparseTile& a, float* scratch) = nullptr;
  void (*mla_sparse_attention_bf16)(const MlaSparseTile& a, float* scratch) = nullptr;
  // The same two over an fp8_ds_mla cache (entry_stride = entry bytes):
  // each chunk's entries dequantised into scratch, then the f32 arithmetic;
  // scratch holds mla_scratch_floats(kv_lora, entry_dim).
  void (*mla_attention_fp8)(const MlaTile& a, float* scratch) = nullptr;
  void (*mla_sparse_attention_fp8)(const MlaSparseTile& a, float* scratch) = nullptr;
  // Lightning-indexer scores of `count` keys k (f32 rows of dim, adjacent):
  // s[j] = sum_h w[h] * max(0, sum_d qT[d * hp + h] * k[j * dim + d]), with
  // the query transposed ([dim][hp]) and hp a multiple of kIndexerHeadPad
  // (padding heads: zero q and zero w). A key's score is one fixed
  // instruction sequence of its q, w and k only.
  void (*indexer_scores)(const float* qT, const float* w, int hp, const float* k, int count,
                         int dim, float* s) = nullptr;
  // The first `rows` keys of an indexer cache page of a BF16, F8E4M3 or
  // MXFP4 layout (ops.h IndexerLayout) as f32 rows of dim in `tile`: bf16 widened
  // exactly; fp8 = f8e4m3_to_f32(byte) * the token's scale, the same bits.
  // mxfp4 (F4E2M1): grid[code] * 2^(byte - 127), exact.
  void (*indexer_widen_keys)(const char* page, int rows, int dim, int block_size, bool fp8,
                             bool mxfp4, float* tile) = nullptr;
  // One V4 attention tile (any entry formats); scratch holds
  // mla_scratch_floats(head_dim, head_dim).
  void (*v4_attention)(const V4AttentionTile& a, float* scratch) = nullptr;
  // Folds `count` segment states (V4AttentionTile::partial layout,
  // consecutive, stride head_dim + 2) in order, adds the sink and writes
  // the normalised output: what a whole-range tile computes for that head.
  // `out` doubles as the accumulator.
  void (*v4_finish)(const float* states, int count, int head_dim, float sink, float* out) = nullptr;
};
// Indexer heads are padded to a multiple of this (every ISA's lane count
// divides it).
constexpr int kIndexerHeadPad = 16;

const KernelTable& scalar_kernels();
const KernelTable& avx2_kernels();
const KernelTable& avx512_kernels();
const KernelTable& avx512bf16_kernels();  // avx512 + vdpbf16ps linears
const KernelTable& neon_kernels();        // AArch64
const KernelTable& neon_bf16_kernels();   // neon + bfdot linears

// linear over packed bf16 weights (panels [p0, p1)) for ISAs without a
// native kernel: f32 activations, weights widened (packed.cpp).
void linear_packed_portable(const float* x, int64_t m, const Matrix& w, int64_t ldy,
                            const float* bias, float* y, int64_t p0, int64_t p1);

namespace avx512bf16_impl {  // packed_avx512bf16.cpp
void linear_packed(const uint16_t* x, int64_t m, const uint16_t* w, int64_t k, int64_t n,
                   int64_t ldy, const float* bias, float* y, int64_t p0, int64_t p1);
// A flash-attention tile (flash_attention_avx512bf16.cpp).
void flash_attention(const AttentionTile& a, float* scratch);
// One panel of `cols` (a multiple of 16) columns from `count` (<= cols)
// row-major rows of `pairs` words.
void pack_panel(const uint32_t* rows, int64_t count, int64_t pairs, int64_t cols, uint32_t* panel);
}  // namespace avx512bf16_impl

// KernelTable::linear_bf16_packed_f32 of AVX2 and of AVX-512 without BF16
// (packed_widen_impl.h: packed_avx2.cpp, packed_avx512.cpp).
namespace avx2_impl {
void linear_packed(const float* x, int64_t m, const uint16_t* w, int64_t k, int64_t n, int64_t ldy,
                   const float* bias, float* y, int64_t p0, int64_t p1);
}  // namespace avx2_impl
namespace avx512_impl {
void linear_packed(const float* x, int64_t m, const uint16_t* w, int64_t k, int64_t n, int64_t ldy,
                   const float* bias, float* y, int64_t p0, int64_t p1);
}  // namespace avx512_impl

// The table of the ISA chosen by set_isa (best_isa() by default).
const KernelTable& active_kernels();

}  // namespace pagoda::ops::cpu
