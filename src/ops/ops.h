// CPU kernels behind one interface. Every function here has a plain scalar
// twin in ops/reference.h that tests compare against; the implementation
// picks the fastest variant this CPU supports (ops/cpu/dispatch) at run time.
//
// Conventions: activations are f32, row-major; weights are f32 or bf16
// row-major [rows = out_features, cols = in_features] as in HF checkpoints.
// No function allocates in its hot path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace pagoda::ops {

// FP8 block-scaled weights (DeepSeek V3's `weight` + `weight_scale_inv`):
// one f32 scale per kFp8Block x kFp8Block block of the matrix, partial
// blocks at the right and bottom edges.
constexpr int64_t kFp8Block = 128;
inline int64_t fp8_scale_rows(int64_t rows) { return (rows + kFp8Block - 1) / kFp8Block; }
inline int64_t fp8_scale_cols(int64_t cols) { return (cols + kFp8Block - 1) / kFp8Block; }

// FP4 (MXFP4) weights as DeepSeek V4 publishes its routed experts: e2m1
// codes, two per byte, with one power-of-two (E8M0) scale per kFp4Block
// consecutive inputs of a row; cols must be a multiple of kFp4Block.
constexpr int64_t kFp4Block = 32;
inline int64_t fp4_row_bytes(int64_t cols) { return cols / 2; }
inline int64_t fp4_scale_cols(int64_t cols) { return cols / kFp4Block; }

// A read-only 2-D weight matrix [rows, cols], row-major, F32, BF16, I8,
// F8E4M3 or F4E2M1; packed BF16 matrices (packed = true) use the panel layout of
// ops/packed.h.
// I8 (ops/quant.h): row r is q[r, :] * scales[r] (symmetric, per output
// channel); row_sums[r] = sum_c q[r, c] lets the VNNI kernel use unsigned
// activations (x + 128) and subtract 128 * row_sums[r].
// F8E4M3: element (r, c) is f32(e4m3 byte) * block_scales[(r / 128) *
// fp8_scale_cols(cols) + c / 128], that product rounded to f32 once (so an
// FP8 linear equals, bit for bit, the F32 linear of that dequantised
// matrix). The e4m3 NaN codes are not valid weights (the kernels read them
// as 480).
// F4E2M1: row r is fp4_row_bytes(cols) bytes at data + r * cols / 2; byte
// j holds column 2j in its LOW nibble and column 2j + 1 in its high nibble
// (f4e2m1_to_f32 codes, core/dtype.h); element (r, c) is f4e2m1_to_f32(code)
// * f8e8m0_to_f32(e8m0_scales[r * fp4_scale_cols(cols) + c / 32]). That
// product of an e2m1 value and a power of two is exact in f32 (2^-128 and
// up are representable; a scale code past 252 could overflow, and 255 is
// NaN: not valid weights), so an FP4 linear equals, bit for bit, the F32
// linear of the dequantised matrix, as FP8's does. 0.5 byte a weight plus
// 1/32 byte of scale.
struct Matrix {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const float* scales = nullptr;      // I8 only: [rows]
  const int32_t* row_sums = nullptr;  // I8 only: [rows]
  bool packed = false;                // BF16 only: ops/packed.h layout
  // F8E4M3 only: [fp8_scale_rows(rows), fp8_scale_cols(cols)], row-major.
  const float* block_scales = nullptr;
  // F4E2M1 only: [rows, fp4_scale_cols(cols)] E8M0 codes, row-major.
  const uint8_t* e8m0_scales = nullptr;
};

// y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n] when bias != nullptr).
// I8 weights: each row of x is quantized to int8 on the fly and the dot
// products are exact integers (see ops/quant.h).
// F8E4M3 weights are dequantised on the fly inside the kernel (1 byte per
// weight read from memory; no wider copy exists): few rows of x convert
// weights in registers, many rows dequantise a block of weight rows into a
// per-thread f32 scratch and run the f32 GEMM tiles on it; both give the
// F32 linear's bits on the dequantised matrix, whatever m.
// F4E2M1 weights likewise (0.5 byte a weight read; decode expands the codes
// in registers through a 16-entry table of the block's scaled values).
// x: [m, w.cols], y: [m, w.rows] with row stride ldy (0: w.rows; a larger
// stride lets two linears fill the halves of one buffer, e.g. gate and up
// projections read in place from the checkpoint); y must not alias x.
void linear(const float* x, int64_t m, const Matrix& w, const float* bias, float* y,
            int64_t ldy = 0);

// Columns [c0, c1) of row `row` of an F8E4M3 matrix as f32: the values
// linear computes with (ref::matrix_at's). For load-time conversions
// (int8 requantisation, unaligned tensor-parallel slices), not hot paths.
void dequantize_fp8_row(const Matrix& w, int64_t row, int64_t c0, int64_t c1, float* out);
// The same for an F4E2M1 matrix (ref::matrix_at's values).
void dequantize_fp4_row(const Matrix& w, int64_t row, int64_t c0, int64_t c1, float* out);

// Several linears of one input x (q/k/v, gate/up): x is prepared once (bf16
// rounding) and one thread split covers all their output columns, so the
// threads meet once instead of once per matrix. Each output equals what
// linear() gives for it, bit for bit. At most kMaxLinearOutputs outputs,
// all with x's width as their cols.
struct LinearOutput {
  const Matrix* w = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
  int64_t ldy = 0;  // 0: w->rows
};
constexpr int kMaxLinearOutputs = 4;
void linear_multi(const float* x, int64_t m, const LinearOutput* outs, int count);

// An op and the linear(s) that read its output, as one call: the same
// results, bit for bit, as silu_mul (into act) then linear, and as
// add_rms_norm (residual updated, normed rows into y) then linear_multi
// of y. Fused because decode rows are converted by every thread for
// itself (linear_multi's own copy): each thread then computes the rows too,
// instead of waiting while one thread runs the op and then reading that
// thread's lines; on a Zen 4 whose two vCPUs sit on two CCDs, each such
// hop is a few microseconds of a decode step's layer. out.w->cols == inter.
void silu_mul_linear(const float* gate_up, int64_t m, int64_t inter, float* act,
                     const LinearOutput& out, float swiglu_limit = 0.0f);
void add_rms_norm_linear(float* residual, const float* x, const float* weight, int64_t m,
                         float eps, float* y, const LinearOutput* outs, int count);

// y[i, :] = x[i, :] / sqrt(mean(x[i, :]^2) + eps) * weight; rows of length n.
// y may alias x.
void rms_norm(const float* x, const float* weight, int64_t m, int64_t n, float eps, float* y);

// Fused pre-norm of the next sub-layer: residual += x; y = rms_norm(residual).
void add_rms_norm(float* residual, const float* x, const float* weight, int64_t m, int64_t n,
                  float eps, float* y);

// Rotary embedding in place, Hugging Face "rotate_half" (NeoX) convention:
// within each head, element i pairs with i + rot_dim/2 for i < rot_dim/2;
// angle = positions[t] * inv_freq[i]. Elements at index >= rot_dim are left
// alone (partial rotary). x: [num_tokens, num_heads, head_dim].
void rope(float* x, int64_t num_tokens, int num_heads, int head_dim, const int32_t* positions,
          const float* inv_freq, int rot_dim);

// Rotary embedding of a slice of each head, in either pair layout (spec
// §0.3): DeepSeek V3/V3.2 MLA rotates the last qk_rope_head_dim elements of
// each q head and the k_pe vector interleaved (GPT-J), the V3.2 indexer the
// first 64 half-split (NeoX); V4 also de-rotates attention outputs.
enum class RopeLayout {
  NeoX,         // pairs (i, i + rot_dim / 2), HF "rotate_half"
  Interleaved,  // pairs (2i, 2i + 1), GPT-J / DeepSeek's official code
};
struct RopeParams {
  int num_heads = 1;
  int head_dim = 0;           // elements from one head to the next
  int64_t token_stride = 0;   // elements from one token to the next; 0: num_heads * head_dim
  int offset = 0;             // first rotated element within a head
  int rot_dim = 0;            // rotated elements (even): [offset, offset + rot_dim)
  RopeLayout layout = RopeLayout::NeoX;
  bool inverse = false;       // rotate by -angle (the inverse rotation)
};
// For each token t and head h: the slice's pair i (per layout) rotated by
// angle positions[t] * inv_freq[i] (inv_freq: rot_dim / 2 values; angles,
// cos and sin in f32 as ops::rope forms them); elements outside the slice
// are untouched. x: num_tokens rows of token_stride elements, heads at
// multiples of head_dim.
void rope(float* x, int64_t num_tokens, const int32_t* positions, const float* inv_freq,
          const RopeParams& p);

// y[i, :] = (x[i, :] - mean) / sqrt(var + eps) * weight + bias, with the
// biased variance (mean of squared deviations) of the row of length n, as
// torch.nn.LayerNorm (the V3.2 indexer's k_norm). bias may be null (zero);
// y may alias x.
void layer_norm(const float* x, const float* weight, const float* bias, int64_t m, int64_t n,
                float eps, float* y);

// out[i, j] = silu(gate_up[i, j]) * gate_up[i, inter + j] for j < inter;
// gate_up: [m, 2 * inter] (gate then up), out: [m, inter].
// swiglu_limit L > 0 (DeepSeek V4's routed experts, spec §3.2.6) clamps
// first: g = min(gate, L), u = clamp(up, -L, L), out = silu(g) * u (exact
// clamps, so the result is silu_mul of the clamped inputs, bit for bit);
// L = 0: no clamp.
void silu_mul(const float* gate_up, int64_t m, int64_t inter, float* out,
              float swiglu_limit = 0.0f);

// Numerically stable in-place softmax of x[0..n).
void softmax(float* x, int64_t n);

// out[i, :] = table[ids[i], :] converted to f32; out: [m, table.cols].
void embedding(const int32_t* ids, int64_t m, const Matrix& table, float* out);

// ---- Paged KV cache -------------------------------------------------------
// One layer's cache is two arrays k_cache, v_cache of shape
// [num_blocks, num_kv_heads, block_size, head_dim] with elements of
// layout.dtype: F32, or BF16 (uint16 bit patterns, rounded to nearest even
// when written, widened exactly to f32 when read; half the bytes, so twice
// the tokens per byte and half the bytes a decode step streams). Within a
// block, each kv head's rows are contiguous, so attention over one kv head
// streams whole runs of memory (a token-major block would scatter them a
// row apart). A token's slot is block_id * block_size + offset_in_block.
struct KVLayout {
  int block_size = 16;
  int num_kv_heads = 0;
  int head_dim = 0;
  DType dtype = DType::F32;  // F32 or BF16

  // Elements (of dtype) from the start of a cache to the row of (slot, kv head).
  int64_t row_offset(int64_t slot, int kv_head) const {
    const int64_t block = slot / block_size, offset = slot % block_size;
    return ((block * num_kv_heads + kv_head) * block_size + offset) * head_dim;
  }
};

// Writes k/v rows [num_tokens, num_kv_heads, head_dim] (f32) to their slots,
// converted to layout.dtype. A negative slot means "do not store" (padding).
void write_kv(const float* k, const float* v, const int64_t* slot_mapping, int64_t num_tokens,
              const KVLayout& layout, void* k_cache, void* v_cache);

// A step's q/k/v rows ([num_tokens, heads, head_dim]) on their way into
// attention.
struct AttentionInputs {
  float* q = nullptr;
  float* k = nullptr;
  const float* v = nullptr;
  int64_t num_tokens = 0;
  int num_q_heads = 0;
  const float* q_norm = nullptr;  // per-head RMSNorm weights [head_dim]
  const float* k_norm = nullptr;  // (Qwen3); both null: no qk-norm
  float eps = 1e-6f;
  const int32_t* positions = nullptr;
  const float* inv_freq = nullptr;  // RoPE, rot_dim / 2 frequencies
  int rot_dim = 0;
  // [num_tokens][rot_dim]: the angles' cosines and sines from rope_cos_sin
  // (the same positions and inv_freq), computed once for every layer; null:
  // computed here from positions and inv_freq.
  const float* cos_sin = nullptr;
  const int64_t* slot_mapping = nullptr;
};

// Each token's RoPE cosines and sines, as rope forms them: out
// [num_tokens][2 * half], the cosines of positions[t] x inv_freq[i] for
// i < half, then their sines (prepare_attention_inputs' cos_sin). A
// decode step's libm calls for them otherwise repeat in every layer.
void rope_cos_sin(const int32_t* positions, int64_t num_tokens, const float* inv_freq, int half,
                  float* out);

// Fused rms_norm (per q and k head, if given) + rope (q and k) + write_kv:
// one pass in which each token's rows stay in L1, with results equal to the
// three ops run one after another, bit for bit.
void prepare_attention_inputs(const AttentionInputs& in, const KVLayout& layout, void* k_cache,
                              void* v_cache);

// The sequences of one forward step, as attention sees them.
struct AttentionBatch {
  int num_seqs = 0;
  // [num_seqs + 1]: sequence s owns query rows [query_start_loc[s], query_start_loc[s+1]).
  const int32_t* query_start_loc = nullptr;
  // [num_seqs]: number of keys of sequence s after this step (cached + new).
  // The new tokens are the last (query_start_loc[s+1] - query_start_loc[s])
  // of them, so new token j sees keys [0, seq_len - num_new + j].
  const int32_t* seq_lens = nullptr;
  // Rows of max_blocks_per_seq block ids, each a sequence's blocks in
  // order: sequence s's row is block_table_rows[s], or s when
  // block_table_rows is null. (The engine keeps one persistent row per
  // running request and only appends new blocks to it each step.)
  const int32_t* block_tables = nullptr;
  int max_blocks_per_seq = 0;
  // 0: full causal attention. W > 0: each query sees only the last W keys
  // up to and including itself.
  int sliding_window = 0;
  const int32_t* block_table_rows = nullptr;  // [num_seqs] or null: row s

  const int32_t* block_table(int64_t s) const {
    return block_tables + (block_table_rows ? block_table_rows[s] : s) * int64_t{max_blocks_per_seq};
  }
};

// Causal attention of the step's new tokens over cached + new K/V, read
// through the block tables (caches of layout.dtype; math in f32 either
// way). q, out: [num_tokens, num_q_heads, head_dim].
// GQA: query head h reads kv head h / (num_q_heads / num_kv_heads).
//
// Numerics: a query row's output depends only on its q and its keys, never
// on the rest of the batch, how many rows its sequence computes in the step
// (chunk splits, prefix-cache hits, decode), the tiling or the threads. The
// path is chosen by things no scheduler changes: over a bf16 cache on the
// Avx512Bf16 ISA (head_dim a multiple of 32, GQA group <= kFlashQueries,
// with flash_attention_enabled) every row, prompt and decode alike, takes
// flash-attention tiles with bf16 dot products, q and the softmax weights
// rounded to bf16 (f32 softmax and accumulation), a relative difference of
// ~1e-3 from the f32 path (q.k and p.v as f32 FMAs) that every other case
// takes.
// On by default; off forces the f32 path everywhere (--no-flash-attention,
// alias --no-flash-prefill).
void set_flash_attention(bool on);
bool flash_attention_enabled();

void paged_attention(const float* q, const void* k_cache, const void* v_cache,
                     const KVLayout& layout, const AttentionBatch& batch, int num_q_heads,
                     float scale, float* out);

// prepare_attention_inputs(in, layout, k_cache, v_cache), then
// paged_attention of in.q (in.num_q_heads heads), as one op with the same
// bits. When every sequence's new rows fit one tile of the attention
// (decode rows), each work item first prepares its own rows' kv heads and
// their q heads: no pass by one thread before the attention (whose q and K
// rows the others then read from it), and each thread attends the rows it
// has just written. Otherwise the two run in turn.
void paged_attention(const AttentionInputs& in, void* k_cache, void* v_cache,
                     const KVLayout& layout, const AttentionBatch& batch, float scale, float* out);

// ---- MLA: attention over a paged latent cache (DeepSeek V2/V3) ---------
// One layer's cache is one array [num_blocks, block_size, entry_dim] of
// layout.dtype (F32, or BF16 with the rounding rules of KVLayout), with
// entry_dim = kv_lora_rank + rope_dim: per token its normalised latent c_kv
// (kv_lora_rank values) then its rotated k_pe (rope_dim values), shared by
// every head. A token's slot is block_id * block_size + offset_in_block and
// its entry starts at element slot * entry_dim (entries of a block are
// adjacent, so a block is one run of memory).
//
// F8E4M3 is DeepSeek V3.2's "fp8_ds_mla" entry (vLLM / FlashMLA): per
// token, entry_bytes() = kv_lora_rank e4m3 bytes, then kv_lora_rank / 128
// f32 scales (one per 128 latent values, in order), then rope_dim bf16
// k_pe values, unquantised: 656 bytes for 512 + 64. kv_lora_rank must be a
// multiple of 128. Scale of a 128-value group = amax / 448 (a plain f32,
// not rounded to a power of two: the seed gives "4 float32 values" and no
// rounding; 1 for an all-zero group), byte = f32_to_f8e4m3(x / scale); the
// value attention reads = f8e4m3_to_f32(byte) * scale (one f32 product),
// so attention over this cache equals attention over an F32 cache holding
// those values, bit for bit. Entries are adjacent (slot * entry_bytes()).
constexpr int kMlaFp8Group = 128;
struct MLALayout {
  int block_size = 16;
  int kv_lora_rank = 0;
  int rope_dim = 0;
  DType dtype = DType::F32;  // F32, BF16 or F8E4M3 (fp8_ds_mla)

  int entry_dim() const { return kv_lora_rank + rope_dim; }
  // F32 / BF16: elements (of dtype) from the start of the cache to the
  // entry of a slot.
  int64_t entry_offset(int64_t slot) const { return slot * entry_dim(); }
  // Bytes of one token's entry, in any format.
  int64_t entry_bytes() const {
    if (dtype == DType::F8E4M3)
      return kv_lora_rank + 4 * (kv_lora_rank / kMlaFp8Group) + 2 * int64_t{rope_dim};
    return int64_t{entry_dim()} * int64_t(dtype_size(dtype));
  }
  // F8E4M3: bytes from an entry's start to its scales and to its k_pe.
  int64_t fp8_scales_offset() const { return kv_lora_rank; }
  int64_t fp8_rope_offset() const { return kv_lora_rank + 4 * (kv_lora_rank / kMlaFp8Group); }
};

// Stores each token's entry [latent ; k_pe] at its slot, converted to
// layout.dtype. latent: [num_tokens] rows of kv_lora_rank values with row
// stride latent_stride; k_pe: rows of rope_dim values with row stride
// pe_stride (0 = the row length, i.e. dense). The strides let a model pass
// its kv_a projection output [T, kv_lora_rank + rope_dim] in place (latent
// = row start, k_pe = row start + kv_lora_rank, both strides entry_dim).
// A negative slot means "do not store" (padding).
void write_mla_kv(const float* latent, const float* k_pe, const int64_t* slot_mapping,
                  int64_t num_tokens, const MLALayout& layout, void* cache,
                  int64_t latent_stride = 0, int64_t pe_stride = 0);

// Absorbed-form MLA (MQA with one latent key per token): for query token t
// and head h, with q_h = [q~_h = W_UK_h^T q_nope_h (kv_lora_rank) ; q_pe_h
// (rope_dim)] and e_j = entry of key j,
//   out[t, h, :] = sum_j softmax_j(scale * q_h . e_j) * e_j[0 : kv_lora_rank]
// over the keys the token sees (AttentionBatch's causal rule; its
// sliding_window must be 0). q: [num_tokens, num_heads, entry_dim]; out:
// [num_tokens, num_heads, kv_lora_rank] (the latent output; the model then
// applies W_UV per head). Math in f32 whatever the cache dtype. Each
// (token, head) output is one fixed sequence of operations, whatever the
// other tokens of the batch, the thread count or the tiling: a request
// alone and in a batch give the same bits.
// `strides` places q and out rows elsewhere than token-major: e.g. a
// head-major out [num_heads, num_tokens, kv_lora_rank] (out_token =
// kv_lora_rank, out_head = num_tokens * kv_lora_rank) makes each head's
// latent outputs one contiguous [num_tokens, kv_lora_rank] matrix, so W_UV
// runs as one ops::linear per head writing straight into o_proj's input
// (its ldy = num_heads * v_head_dim). Rows must not overlap.
struct MlaStrides {
  int64_t q_token = 0, q_head = 0;      // elements; 0: num_heads * entry_dim, entry_dim
  int64_t out_token = 0, out_head = 0;  // 0: num_heads * kv_lora_rank, kv_lora_rank
};
void mla_paged_attention(const float* q, const void* cache, const MLALayout& layout,
                         const AttentionBatch& batch, int num_heads, float scale, float* out,
                         const MlaStrides& strides = {});

// ---- DeepSeek V3.2 sparse attention (DSA) ---------------------------------
// Absorbed-form MLA as mla_paged_attention, but query token t attends only
// to the entries listed in topk_slots[t * topk, (t + 1) * topk): physical
// slots (block_id * block_size + offset, as write_mla_kv takes them) whose
// entries are read directly (no block table walk); -1 = no entry (padding,
// anywhere in the list). out[t, h, :] = sum_j softmax_j(scale * q . e_j) *
// e_j[0 : kv_lora_rank] over the listed valid slots; a list with none gives
// zeros. batch supplies the token count (query_start_loc[num_seqs]); the
// lists already encode causality (the indexer picks keys <= the token).
// Order: valid slots are consumed in list order, with mla_paged_attention's
// chunking and segment merges applied to that sequence. A token's result
// depends only on its q and its list (never on the batch or threads); the
// token's causal keys in position order give mla_paged_attention's bits
// (block sizes multiple of 16); another order of the same set differs by
// f32 reassociation only. A slot listed twice counts twice.
void mla_sparse_attention(const float* q, const void* cache, const MLALayout& layout,
                          const AttentionBatch& batch, const int32_t* topk_slots, int topk,
                          int num_heads, float scale, float* out, const MlaStrides& strides = {});

// ---- DeepSeek V3.2 lightning indexer --------------------------------------
// One layer's indexer key cache: pages of block_size keys of head_dim
// values (one key per token, shared by the index heads), in the same
// logical blocks and slots as the MLA cache (slot = block_id * block_size +
// offset). Page formats by dtype:
//   F32 / BF16: [block_size, head_dim] rows (BF16: round to nearest even);
//   F8E4M3 (vLLM's V3.2 fp8 indexer cache): the page's block_size *
//     head_dim e4m3 bytes first (token-major), then its block_size f32
//     scales: head_dim + 4 bytes per token (132 for 128). Per token, scale =
//     amax / 448 (plain f32, not rounded to a power of two; 1 for an
//     all-zero key), byte = f32_to_f8e4m3(x / scale), value read back =
//     f8e4m3_to_f32(byte) * scale (one f32 product).
//   F4E2M1 = MXFP4 (DeepSeek V4's indexer keys, spec §5.1): the page's
//     block_size * head_dim / 2 value bytes first (token-major; element 2i
//     in the low nibble, 2i + 1 in the high one, as the checkpoints' FP4
//     experts), then its block_size * head_dim / kFp4Block (32)
//     UE8M0 scale bytes (token-major): 68 bytes per 128-value key. Per 32
//     values: s = 2^ceil(log2(max(amax, 6 * 2^-126) / 6)) (the smallest power
//     of two with amax / s <= 6; byte = log2(s) + 127), code = e2m1 of
//     clamp(x / s, +-6) rounded to nearest, ties to the even code (grid 0,
//     0.5, 1, 1.5, 2, 3, 4, 6, sign bit 8; -0 keeps its sign); value read
//     back = grid[code] * s (exact). tools/deepseek_v4_reference.py fp4_sim
//     gives the same values (tests/data/v4_codecs). head_dim % 32 == 0.
struct IndexerLayout {
  int block_size = 64;
  int head_dim = 128;
  DType dtype = DType::F32;  // F32, BF16, F8E4M3 or F4E2M1 (MXFP4)
  // Bytes from one page to the next when the pool's pages are larger than
  // page_bytes() (aligned or padded into a bigger bucket); 0: page_bytes().
  int64_t page_stride = 0;

  int64_t page_step() const { return page_stride > 0 ? page_stride : page_bytes(); }
  int64_t page_bytes() const {
    int64_t per_token = int64_t{head_dim} * int64_t(dtype_size(dtype));
    if (dtype == DType::F8E4M3) per_token = head_dim + 4;
    if (dtype == DType::F4E2M1) per_token = head_dim / 2 + head_dim / kFp4Block;
    return per_token * block_size;
  }
  // MXFP4: bytes from a page's start to a token's values and to its scales.
  int64_t mxfp4_values_offset(int offset) const { return int64_t{offset} * (head_dim / 2); }
  int64_t mxfp4_scales_offset(int offset) const {
    return int64_t{block_size} * (head_dim / 2) + int64_t{offset} * (head_dim / kFp4Block);
  }
  // FP8: bytes from a page's start to a token's values and to its scale.
  int64_t fp8_values_offset(int offset) const { return int64_t{offset} * head_dim; }
  int64_t fp8_scale_offset(int offset) const {
    return int64_t{block_size} * head_dim + int64_t{offset} * 4;
  }
};

// Stores each token's indexer key k[t, 0:head_dim] (row stride k_stride, 0 =
// head_dim) at its slot in the layout's format; a negative slot = padding.
void write_indexer_k(const float* k, const int64_t* slot_mapping, int64_t num_tokens,
                     const IndexerLayout& layout, void* cache, int64_t k_stride = 0);

// The lightning indexer's top-k for each query token of a step's mixed batch
// (prefill chunks and decodes, AttentionBatch's causal rule: new token j of
// sequence s sees keys [0, seq_len - num_new + j], read through its block
// table; sliding_window must be 0). seq_len may be below the sequence's
// new-token count: a token that so sees no key (e.g. a V4 query given as
// its own 1-token sequence with seq_len = its floor((t + 1) / 4) visible
// compressed keys, 0 for t < 3) gets an all -1 list.
//   I(t, p) = sum_h weights[t, h] * ReLU(q[t, h, :] . key_p)   (f32)
// q: [num_tokens, num_heads, head_dim] (already roped and rotated),
// weights: [num_tokens, num_heads] (already scaled). out_slots[t, 0:topk]
// gets the physical slots of the min(topk, n_keys) best keys, in descending
// score, ties to the lower position, then -1; out_positions (optional) the
// same keys' positions (-1 padded). Keys are scored a block at a time into a
// bounded candidate buffer (at most 2 * topk), never all n_keys scores at
// once. The selection is a function of the scores alone (a strict total
// order), and each score a fixed computation of (q, w, key), so results do
// not depend on the batch, the threads or how a token's keys are split
// between threads. Scores of non-finite inputs are not defined.
// IndexerOrder::Position lists the same selected keys in increasing
// position instead (then -1): with topk >= n_keys that is the token's whole
// causal set in position order, which mla_sparse_attention turns into
// mla_paged_attention's bits (block sizes multiple of 16); it also reads
// the latent cache in address order within each block.
enum class IndexerOrder { Score, Position };
void indexer_topk(const float* q, const float* weights, const void* cache,
                  const IndexerLayout& layout, const AttentionBatch& batch, int num_heads,
                  int topk, int32_t* out_slots, int32_t* out_positions = nullptr,
                  IndexerOrder order = IndexerOrder::Score);

// ---- DeepSeek V4 attention (spec §3.2.2, §5.1) ----------------------------
// One cache of V4 entries (a window cache or a compressed cache; spec §5.1):
// head_dim values per entry, the last rope_dim of them rotary.
// slot = page * entries_per_page + offset; page p starts at byte
// p * page_stride(). F32 / BF16 (round to nearest even): entry e of a page
// at byte e * head_dim * size. F8E4M3 = FlashMLA's V4 "fp8_ds_mla" entry
// (584 B for 448 + 64): per page, the token bodies (nope = head_dim -
// rope_dim e4m3 bytes, then rope_dim bf16 values) of all entries_per_page
// entries first, then per entry an 8-byte-aligned trailer of
// ceil(nope / 64) UE8M0 scale bytes (+ zero pad). Per 64 nope values (a
// last partial group has its own scale, as the reference tool's fp8_sim):
// s = 2^ceil(log2(max(amax, 1e-4) / 448)) (the smallest power of two with
// max(amax, 1e-4) / s <= 448; byte = log2(s) + 127), byte =
// f32_to_f8e4m3(clamp(x / s, +-448)) (x / s exact), value read back =
// f8e4m3_to_f32(byte) * s (exact); rope values bf16, round to nearest even.
// These are tools/deepseek_v4_reference.py --fp8-cache's values bit for bit
// (tests/data/v4_codecs).
constexpr int kV4Fp8Group = 64;
struct V4EntryLayout {
  int entries_per_page = 64;  // the cache's positions per page / compress_ratio
  int head_dim = 512;
  int rope_dim = 64;
  DType dtype = DType::F32;   // F32, BF16, or F8E4M3 = FlashMLA's V4 fp8 entry (above)
  int64_t page_bytes = 0;     // bytes from one page to the next (the planner's rounded page)

  int nope_dim() const { return head_dim - rope_dim; }
  int fp8_scale_groups() const { return (nope_dim() + kV4Fp8Group - 1) / kV4Fp8Group; }
  // F8E4M3: bytes of one body and of one scale trailer.
  int64_t fp8_body_bytes() const { return nope_dim() + 2 * int64_t{rope_dim}; }
  int64_t fp8_trailer_bytes() const { return (fp8_scale_groups() + 7) / 8 * 8; }
  // Bytes one entry takes in any format (584 for the fp8 448 + 64).
  int64_t entry_bytes() const {
    if (dtype == DType::F8E4M3) return fp8_body_bytes() + fp8_trailer_bytes();
    return int64_t{head_dim} * int64_t(dtype_size(dtype));
  }
  // The page stride: page_bytes, or 0 = entries_per_page * entry_bytes().
  int64_t page_stride() const {
    return page_bytes > 0 ? page_bytes : int64_t{entries_per_page} * entry_bytes();
  }
  // Bytes from the cache start to a slot's entry (F32 / BF16 / the fp8 body)
  // and, F8E4M3 only, to its scale trailer.
  int64_t entry_offset(int64_t slot) const {
    const int64_t page = slot / entries_per_page, off = slot % entries_per_page;
    const int64_t stride = dtype == DType::F8E4M3 ? fp8_body_bytes() : entry_bytes();
    return page * page_stride() + off * stride;
  }
  int64_t fp8_scales_offset(int64_t slot) const {
    const int64_t page = slot / entries_per_page, off = slot % entries_per_page;
    return page * page_stride() + entries_per_page * fp8_body_bytes() + off * fp8_trailer_bytes();
  }
};

// Stores entry rows x[i, 0:head_dim] (row stride x_stride; 0 = head_dim) at
// slots[i] in the layout's format; a negative slot = skip (padding).
void write_v4_entries(const float* x, const int64_t* slots, int64_t n, const V4EntryLayout& layout,
                      void* cache, int64_t x_stride = 0);
// The head_dim values attention reads for a slot (dequantised), as f32.
void read_v4_entry(const void* cache, const V4EntryLayout& layout, int64_t slot, float* out);

// V4 attention with an attention sink (spec §3.2.2): for token t and head h,
//   o[t,h] = sum_k exp(s_k - M) kappa_k / (sum_k exp(s_k - M) + exp(sink[h] - M)),
//   s_k = scale * q[t,h] . kappa_k, M = max(max_k s_k, sink[h]),
// over kappa_k = the entries at window_slots[t*window_count ...] of window_cache and
// comp_slots[t*comp_count ...] of comp_cache (-1 = none, anywhere in a list; comp_cache may be null
// with comp_count 0); K = V = the whole dequantised entry (head_dim values). q, out: [num_tokens,
// num_heads, head_dim]. sink: [num_heads] (may hold -inf = plain softmax). A token's output depends
// only on its q, lists and caches (never on the batch or the threads).
// Both layouts must have the same head_dim. A token with no valid entry
// gets zeros, whatever its sinks (the sink's value vector is zero). Order: the window list then the comp list, each taken
// in fixed segments of list positions (v4_attention_impl.h) whose softmax
// states merge in order; another order or padding of the same entries
// differs by f32 reassociation only. A slot listed twice counts twice.
void v4_sparse_attention(const float* q, int64_t num_tokens, int num_heads,
                         const void* window_cache, const V4EntryLayout& window_layout,
                         const int32_t* window_slots, int window_count,
                         const void* comp_cache, const V4EntryLayout& comp_layout,
                         const int32_t* comp_slots, int comp_count,
                         const float* sink, float scale, float* out);

// ---- Variant selection (tests run every variant the CPU supports) ---------
// Avx512Bf16: Avx512 plus AVX512_BF16; linears with bf16 weights round the
// activations to bf16 (round-to-nearest-even) and accumulate bf16 products
// in f32 (vdpbf16ps), so they differ from the other variants by that
// rounding (and are still independent of batch composition).
// Avx2Vnni: Avx2 plus AVX-VNNI (256-bit vpdpbusd, Intel Alder Lake and
// later, AMD Zen 5) for the int8 linears; the same outputs as Avx2 (exact
// integer dot products). Avx2 alone is the Zen 2/3 and older Intel path.
// AArch64: Neon (every AArch64 CPU: 128-bit f32 FMA, int8 via smull), NeonDot
// (Neon + the dot-product extension: int8 linears with sdot), NeonBf16
// (NeonDot + BF16: bf16-weight linears with bfdot, rounding activations to
// bf16 like Avx512Bf16). Each architecture's variants exist only in its build.
enum class Isa { Scalar, Avx2, Avx512, Avx512Bf16, Avx2Vnni, Neon, NeonDot, NeonBf16 };
const char* isa_name(Isa isa);
// Every variant of this build's architecture, in the order --isa lists them.
#if defined(__aarch64__)
inline constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::Neon, Isa::NeonDot, Isa::NeonBf16};
#else
inline constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx2Vnni, Isa::Avx512,
                                   Isa::Avx512Bf16};
#endif
// Best variant this CPU supports, and whether a given one is supported.
Isa best_isa();
bool isa_supported(Isa isa);
// The variants this CPU supports (kAllIsas order), and their names joined
// by ", " (for --isa list and its error message).
std::vector<Isa> supported_isas();
std::string supported_isa_names();
// Forces a variant (tests, --isa flag); throws InputError if unsupported.
void set_isa(Isa isa);
Isa current_isa();

}  // namespace pagoda::ops
