// The heavy ops.h entry points (linear, norms, silu_mul, paged attention): validate,
// split the work across threads, and run the selected ISA's kernels.
#include <algorithm>
#include <atomic>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/quant_kernels.h"
#include "ops/ops.h"
#include "ops/packed.h"

namespace pagoda::ops {

namespace {

// Output columns are handed to threads in units of this many, so thread
// boundaries fall on whole register tiles (every kColTile divides it).
constexpr int64_t kColumnUnit = 16;

int64_t rows_per_thread(int64_t n) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)); }

// x [m, k] rounded to bf16 for the bf16 dot-product linear, in a buffer of
// the calling thread that only grows (no allocation in the steady state);
// rows are converted in parallel, since a prefill's activations are MBs.
const uint16_t* bf16_activations(const cpu::KernelTable& kt, const float* x, int64_t m, int64_t k) {
  thread_local std::vector<uint16_t> buffer;
  const size_t count = static_cast<size_t>(m * k);
  if (buffer.size() < count) buffer.resize(count);
  uint16_t* out = buffer.data();
  parallel_for(m, rows_per_thread(k), [&](int64_t r0, int64_t r1) {
    kt.bf16_rows(x + r0 * k, (r1 - r0) * k, out + r0 * k);
  });
  return out;
}

// Where a linear_multi's x comes from: given rows, or the output of the op
// before it (ops.h silu_mul_linear, add_rms_norm_linear), computed here.
struct XSource {
  enum class Op { Rows, SiluMul, AddRmsNorm } op = Op::Rows;
  const float* x = nullptr;  // Rows: x; SiluMul: gate_up; AddRmsNorm: the addend
  float* residual = nullptr;  // AddRmsNorm: updated in place
  const float* weight = nullptr;
  float eps = 0.0f, swiglu_limit = 0.0f;
  float* out = nullptr;  // the op's output rows (act / the normed rows)
};

// Rows [0, m) of src's op into out (and res: the updated residual rows,
// AddRmsNorm): the kernels ops::silu_mul / ops::add_rms_norm run, so the
// same bits. res may be src.residual itself.
void run_source_rows(const cpu::KernelTable& kt, const XSource& src, int64_t m, int64_t k,
                     float* res, float* out) {
  if (src.op == XSource::Op::SiluMul) {
    kt.silu_mul_rows(src.x, k, src.swiglu_limit, out, 0, m);
  } else {
    if (res != src.residual) std::copy_n(src.residual, m * k, res);
    kt.add_rms_norm_rows(res, src.x, src.weight, k, src.eps, out, 0, m);
  }
}

// x as the kernels of a linear_multi take it: rounded to bf16 and/or
// quantized to int8 (each only where some output needs it).
struct Activations {
  const uint16_t* xb = nullptr;
  cpu::QuantizedRows xq{};
  const float* xf = nullptr;   // a computed source's rows (own copy)
  const float* res = nullptr;  // ... and its updated residual rows
};

// This thread's own copy of x for linear_multi call `call` (ids unique per
// call), converted (and, for a computed source, computed) at its first use
// in that call.
const Activations& own_activations(uint64_t call, const cpu::KernelTable& kt,
                                   const XSource& src, int64_t m, int64_t k, bool bf16, bool i8) {
  thread_local uint64_t converted = 0;
  thread_local Activations own;
  thread_local std::vector<uint16_t> buffer;
  thread_local std::vector<float> xf, res;
  if (converted != call) {
    own = {};
    const float* x = src.x;
    if (src.op != XSource::Op::Rows) {
      const auto count = static_cast<size_t>(m * k);
      if (xf.size() < count) xf.resize(count);
      if (src.op == XSource::Op::AddRmsNorm && res.size() < count) res.resize(count);
      run_source_rows(kt, src, m, k, res.data(), xf.data());
      x = own.xf = xf.data();
      own.res = res.data();
    }
    if (bf16) {
      if (buffer.size() < static_cast<size_t>(m * k)) buffer.resize(static_cast<size_t>(m * k));
      kt.bf16_rows(x, m * k, buffer.data());
      own.xb = buffer.data();
    }
    if (i8) own.xq = cpu::quantize_activations(x, m, k);
    converted = call;
  }
  return own;
}

void linear_multi_from(const XSource& source, int64_t m, const LinearOutput* outs, int count);

}  // namespace

void linear(const float* x, int64_t m, const Matrix& w, const float* bias, float* y, int64_t ldy) {
  const LinearOutput out{&w, bias, y, ldy};
  linear_multi(x, m, &out, 1);
}

void linear_multi(const float* x, int64_t m, const LinearOutput* outs, int count) {
  XSource src;
  src.x = x;
  linear_multi_from(src, m, outs, count);
}

void silu_mul_linear(const float* gate_up, int64_t m, int64_t inter, float* act,
                     const LinearOutput& out, float swiglu_limit) {
  PAGODA_CHECK(swiglu_limit >= 0.0f, "silu_mul: swiglu_limit {} (0: none)", swiglu_limit);
  PAGODA_CHECK(out.w->cols == inter, "silu_mul_linear: {} cols for {} features", out.w->cols,
               inter);
  XSource src;
  src.op = XSource::Op::SiluMul;
  src.x = gate_up;
  src.swiglu_limit = swiglu_limit;
  src.out = act;
  linear_multi_from(src, m, &out, 1);
}

void add_rms_norm_linear(float* residual, const float* x, const float* weight, int64_t m,
                         float eps, float* y, const LinearOutput* outs, int count) {
  XSource src;
  src.op = XSource::Op::AddRmsNorm;
  src.x = x;
  src.residual = residual;
  src.weight = weight;
  src.eps = eps;
  src.out = y;
  linear_multi_from(src, m, outs, count);
}

namespace {

void linear_multi_from(const XSource& source, int64_t m, const LinearOutput* outs, int count) {
  PAGODA_CHECK(count >= 1 && count <= kMaxLinearOutputs,
               "linear_multi: {} outputs (1 to {} allowed)", count, kMaxLinearOutputs);
  if (m <= 0) return;
  const float* x = source.x;
  const int64_t k = outs[0].w->cols;
  bool all_bf16 = true, any_packed = false, any_i8 = false;
  for (int i = 0; i < count; ++i) {
    const Matrix& w = *outs[i].w;
    PAGODA_CHECK(w.dtype == DType::F32 || w.dtype == DType::BF16 || w.dtype == DType::I8 ||
                     w.dtype == DType::F8E4M3 || w.dtype == DType::F4E2M1,
                 "linear: unsupported weight dtype {}", dtype_name(w.dtype));
    PAGODA_CHECK(w.dtype != DType::F8E4M3 || (w.block_scales && !w.packed),
                 "linear: F8E4M3 weights need block scales and a row-major layout");
    PAGODA_CHECK(w.dtype != DType::F4E2M1 || (w.e8m0_scales && !w.packed && k % kFp4Block == 0),
                 "linear: F4E2M1 weights need E8M0 scales, a row-major layout and cols a "
                 "multiple of {} (got {})",
                 kFp4Block, k);
    PAGODA_CHECK(w.cols == k, "linear_multi: output {} has {} cols, x has {}", i, w.cols, k);
    PAGODA_CHECK(outs[i].ldy == 0 || outs[i].ldy >= w.rows, "linear: output stride {} < {} rows",
                 outs[i].ldy, w.rows);
    PAGODA_CHECK(!w.packed || w.dtype == DType::I8 || (w.dtype == DType::BF16 && k % 2 == 0),
                 "linear: packed {} weights with {} cols", dtype_name(w.dtype), k);
    if (w.dtype == DType::I8) cpu::check_i8(w);
    all_bf16 = all_bf16 && w.dtype == DType::BF16;
    any_packed = any_packed || (w.packed && w.dtype == DType::BF16);
    any_i8 = any_i8 || w.dtype == DType::I8;
  }
  const cpu::KernelTable& kt = cpu::active_kernels();
  // Row-major bf16 weights take the dot-product kernel when every output
  // does (one rounding of x); packed ones whenever the ISA has the kernel.
  const bool bf16_dot = all_bf16 && kt.linear_bf16_dot;
  const bool packed_native = any_packed && kt.linear_bf16_packed;
  // int8 weights take x quantized, once for all of them (ops/quant.h). An x
  // too small to convert in parallel (decode rows) is converted by every
  // thread for itself at its first chunk (own_activations): converted by the
  // caller alone, the other threads would wait for it and then read its
  // lines across cores (~1% of a batch-8 decode step, Zen 4). A larger one
  // is converted once, in parallel, here (rows_per_thread(k) rows a thread,
  // as bf16_activations and quantize_rows_i8 split it).
  const bool need_bf16 = bf16_dot || packed_native;
  // A computed x (silu_mul_linear, add_rms_norm_linear) goes the same way:
  // in an own copy, every thread computes the rows for itself from the op's
  // inputs, so no thread waits on one computing them alone and then reads
  // its lines (two serial steps fewer per fused op; bench/every_cpu.md,
  // session 25); the caller writes the op's outputs after the join (its
  // residual update only then: the others read the old rows until the
  // join). Otherwise the op runs first, in parallel, and x is its output.
  const bool own_copy = (need_bf16 || any_i8) && m < 2 * rows_per_thread(k) && num_threads() > 1;
  static std::atomic<uint64_t> calls{0};
  const uint64_t call = own_copy ? calls.fetch_add(1, std::memory_order_relaxed) + 1 : 0;
  const bool computed = source.op != XSource::Op::Rows;
  if (computed && !own_copy) {
    if (source.op == XSource::Op::SiluMul) {
      silu_mul(source.x, m, k, source.out, source.swiglu_limit);
    } else {
      add_rms_norm(source.residual, source.x, source.weight, m, k, source.eps, source.out);
    }
    x = source.out;
  }
  Activations shared;
  if (!own_copy) {
    if (any_i8) shared.xq = cpu::quantize_activations(x, m, k);
    if (need_bf16) shared.xb = bf16_activations(kt, x, m, k);
  }
  // Output i owns units [unit_begin[i], unit_begin[i + 1]) of the split; a
  // unit is kColumnUnit columns, or one panel of packed weights.
  static_assert(kColumnUnit == cpu::kI8ColumnUnit);
  auto unit_cols = [](const Matrix& w) { return w.packed ? packed_cols(w.dtype) : kColumnUnit; };
  int64_t unit_begin[kMaxLinearOutputs + 1] = {0};
  for (int i = 0; i < count; ++i) {
    const Matrix& w = *outs[i].w;
    unit_begin[i + 1] = unit_begin[i] + (w.rows + unit_cols(w) - 1) / unit_cols(w);
  }
  const int64_t units = unit_begin[count];
  // Split output columns: each thread streams its own slice of the weights
  // once. A unit is worth a thread when it carries ~64K multiply-adds;
  // chunks taper down to one unit so the threads end together.
  const int64_t min_units = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, kColumnUnit * k * m));
  if (units > 0) parallel_for_tapered(units, min_units, 1, [&](int64_t u0, int64_t u1) {
    const Activations& a =
        own_copy ? own_activations(call, kt, source, m, k, need_bf16, any_i8) : shared;
    const cpu::QuantizedRows& xq = a.xq;
    const uint16_t* xb = a.xb;
    const float* x_rows = own_copy && computed ? a.xf : x;  // for the kernels that read f32 x
    for (int i = 0; i < count; ++i) {
      const int64_t lo = std::max(u0, unit_begin[i]), hi = std::min(u1, unit_begin[i + 1]);
      if (lo >= hi) continue;
      const LinearOutput& o = outs[i];
      const int64_t n = o.w->rows, ldy = o.ldy ? o.ldy : n;
      const int64_t u_lo = lo - unit_begin[i], u_hi = hi - unit_begin[i];
      if (o.w->dtype == DType::I8) {
        cpu::linear_i8_units(xq, m, *o.w, o.bias, o.y, ldy, u_lo, u_hi);
        continue;
      }
      if (o.w->packed) {  // bf16
        const auto* w = static_cast<const uint16_t*>(o.w->data);
        if (packed_native) {
          kt.linear_bf16_packed(xb, m, w, k, n, ldy, o.bias, o.y, u_lo, u_hi);
        } else if (kt.linear_bf16_packed_f32) {
          kt.linear_bf16_packed_f32(x_rows, m, w, k, n, ldy, o.bias, o.y, u_lo, u_hi);
        } else {
          cpu::linear_packed_portable(x_rows, m, *o.w, ldy, o.bias, o.y, u_lo, u_hi);
        }
        continue;
      }
      const int64_t n0 = u_lo * kColumnUnit, n1 = std::min(n, u_hi * kColumnUnit);
      if (o.w->dtype == DType::F4E2M1) {
        kt.linear_fp4(x_rows, m, static_cast<const uint8_t*>(o.w->data), o.w->e8m0_scales, k,
                      ldy, o.bias, o.y, n0, n1);
      } else if (o.w->dtype == DType::F8E4M3) {
        kt.linear_fp8(x_rows, m, static_cast<const uint8_t*>(o.w->data), o.w->block_scales, k,
                      ldy, o.bias, o.y, n0, n1);
      } else if (bf16_dot) {
        kt.linear_bf16_dot(xb, m, static_cast<const uint16_t*>(o.w->data), k, ldy, o.bias, o.y, n0,
                           n1);
      } else if (o.w->dtype == DType::BF16) {
        kt.linear_bf16(x_rows, m, static_cast<const uint16_t*>(o.w->data), k, ldy, o.bias, o.y,
                       n0, n1);
      } else {
        kt.linear_f32(x_rows, m, static_cast<const float*>(o.w->data), k, ldy, o.bias, o.y, n0,
                      n1);
      }
    }
  });
  if (own_copy && computed) {  // the op's outputs, from the caller's copy
    const Activations& a = own_activations(call, kt, source, m, k, need_bf16, any_i8);
    std::copy_n(a.xf, m * k, source.out);
    if (source.op == XSource::Op::AddRmsNorm) std::copy_n(a.res, m * k, source.residual);
  }
}

}  // namespace

void silu_mul(const float* gate_up, int64_t m, int64_t inter, float* out, float swiglu_limit) {
  PAGODA_CHECK(swiglu_limit >= 0.0f, "silu_mul: swiglu_limit {} (0: none)", swiglu_limit);
  const cpu::KernelTable& kt = cpu::active_kernels();
  parallel_for(m, rows_per_thread(inter), [&](int64_t r0, int64_t r1) {
    kt.silu_mul_rows(gate_up, inter, swiglu_limit, out, r0, r1);
  });
}

void layer_norm(const float* x, const float* weight, const float* bias, int64_t m, int64_t n,
                float eps, float* y) {
  const cpu::KernelTable& kt = cpu::active_kernels();
  parallel_for(m, rows_per_thread(n), [&](int64_t r0, int64_t r1) {
    kt.layer_norm_rows(x, weight, bias, n, eps, y, r0, r1);
  });
}

void rms_norm(const float* x, const float* weight, int64_t m, int64_t n, float eps, float* y) {
  const cpu::KernelTable& kt = cpu::active_kernels();
  parallel_for(m, rows_per_thread(n),
               [&](int64_t r0, int64_t r1) { kt.rms_norm_rows(x, weight, n, eps, y, r0, r1); });
}

void add_rms_norm(float* residual, const float* x, const float* weight, int64_t m, int64_t n,
                  float eps, float* y) {
  const cpu::KernelTable& kt = cpu::active_kernels();
  parallel_for(m, rows_per_thread(n), [&](int64_t r0, int64_t r1) {
    kt.add_rms_norm_rows(residual, x, weight, n, eps, y, r0, r1);
  });
}

namespace {

std::atomic<bool> flash_attention_on{true};  // relaxed: set between forward passes

// A sequence's new rows cut into tiles of up to tile_rows, costliest first
// (the pool hands out chunks in order, so the threads finish together:
// causal prefill tiles grow with their row). `keys` is the visible keys of
// a tile's last row, at most window_keys under a sliding window.
struct RowTile {
  int seq, row0, rows;
  int64_t keys;
};
// Grows only: no steady-state allocation. (Returned by reference, so the
// pool's threads see the caller's list, not their own thread_local one.)
std::vector<RowTile>& row_tiles(const AttentionBatch& batch, int tile_rows, bool window_plus_rows) {
  thread_local std::vector<RowTile> tile_list;
  std::vector<RowTile>& tiles = tile_list;
  tiles.clear();
  const int32_t* qsl = batch.query_start_loc;
  for (int s = 0; s < batch.num_seqs; ++s) {
    const int64_t num_new = qsl[s + 1] - qsl[s];
    for (int64_t r = 0; r < num_new; r += tile_rows) {
      const int rows = static_cast<int>(std::min<int64_t>(tile_rows, num_new - r));
      int64_t keys = batch.seq_lens[s] - num_new + r + rows;
      if (batch.sliding_window > 0)
        keys = std::min<int64_t>(keys, batch.sliding_window + (window_plus_rows ? rows : 0));
      tiles.push_back({s, qsl[s] + static_cast<int>(r), rows, keys});
    }
  }
  std::stable_sort(tiles.begin(), tiles.end(),
                   [](const RowTile& x, const RowTile& y) { return x.keys > y.keys; });
  return tiles;
}

// The fields of a tile that follow from its rows' sequence (the same for
// every head the tile covers); the caller adds q, out, heads and K/V.
cpu::AttentionTile sequence_tile(const AttentionBatch& batch, const RowTile& tile,
                                 const KVLayout& layout, int64_t q_row_stride, float scale) {
  const int32_t* qsl = batch.query_start_loc;
  const int64_t num_new = qsl[tile.seq + 1] - qsl[tile.seq];
  cpu::AttentionTile a;
  a.q_row_stride = q_row_stride;
  a.rows = tile.rows;
  a.block_table = batch.block_table(tile.seq);
  a.block_size = layout.block_size;
  a.head_dim = layout.head_dim;
  a.last_key = batch.seq_lens[tile.seq] - num_new + (tile.row0 - qsl[tile.seq]);
  a.sliding_window = batch.sliding_window;
  a.scale = scale;
  return a;
}

int max_tile_rows(const std::vector<RowTile>& tiles) {
  int rows = 1;
  for (const RowTile& t : tiles) rows = std::max(rows, t.rows);
  return rows;
}

// kv heads per work item, at most max_heads: as many as fit while the
// items still split evenly over the threads (or are plenty). A block's rows
// of adjacent kv heads are adjacent in the pool, so an item covering several
// reads one run of kv heads x 4 KiB instead of 4 KiB runs scattered across
// memory, which this machine reads at well under half the bandwidth.
int kv_heads_per_item(const std::vector<RowTile>& tiles, int kv_heads, int max_heads) {
  const int64_t threads = num_threads();
  for (int d = std::min(kv_heads, max_heads); d > 1; --d) {
    const int64_t items = static_cast<int64_t>(tiles.size()) * (kv_heads / d);
    if (kv_heads % d == 0 && (items % threads == 0 || items >= 4 * threads)) return d;
  }
  return 1;
}

// The prepare_attention_inputs of a fused paged_attention (ops.h): its
// inputs and the caches it writes; in == null: the inputs are prepared.
struct Prepare {
  const AttentionInputs* in = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
};

// Whether a fused paged_attention's work items can each prepare their own
// rows and kv heads before attending them (else the whole op runs first):
// when every sequence's new rows are one row tile, the only new keys a tile
// reads are its own rows', which its items write (items of other kv heads
// or sequences touch other rows and slots); and every token belongs to a
// sequence. Decode steps: no serial pass before attention, and the thread
// that attends a kv head has just written its rows.
bool prepare_in_items(const Prepare& prep, const std::vector<RowTile>& tiles,
                      const AttentionBatch& batch) {
  if (prep.in == nullptr || batch.query_start_loc[batch.num_seqs] != prep.in->num_tokens)
    return false;
  int64_t seqs_with_rows = 0;
  for (int s = 0; s < batch.num_seqs; ++s)
    seqs_with_rows += batch.query_start_loc[s + 1] > batch.query_start_loc[s];
  return static_cast<int64_t>(tiles.size()) == seqs_with_rows;
}

// All of prep's work before the attention, where the items cannot each do
// their part (nothing if the inputs are prepared).
void prepare_all(const Prepare& prep, const KVLayout& layout) {
  if (prep.in != nullptr) prepare_attention_inputs(*prep.in, layout, prep.k_cache, prep.v_cache);
}

// Runs work items [0, items) over the threads, each a tile from
// make_tile(item), after prepare_item(item); a tile knows the one its
// thread runs next within its chunk (AttentionTile::next), whose first keys
// the kernel prefetches.
// parallel_for cuts up to 4 chunks per thread, so this applies when there
// are more items than that (2 threads: a batch-32 decode's 32 items are 8
// chunks of 4); with many threads and few items, a tile starts cold.
template <typename MakeTile, typename PrepareItem>
void run_tiles(int64_t items, int64_t scratch_floats, const MakeTile& make_tile,
               void (*kernel)(const cpu::AttentionTile&, float*), const PrepareItem& prepare_item) {
  parallel_for(items, 1, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> scratch;  // grown once per thread
    if (scratch.size() < static_cast<size_t>(scratch_floats))
      scratch.resize(static_cast<size_t>(scratch_floats));
    cpu::AttentionTile tile[2];
    if (i0 < i1) tile[i0 % 2] = make_tile(i0);
    for (int64_t item = i0; item < i1; ++item) {
      cpu::AttentionTile& a = tile[item % 2];
      if (item + 1 < i1) {
        tile[(item + 1) % 2] = make_tile(item + 1);
        a.next = &tile[(item + 1) % 2];
      }
      prepare_item(item);
      kernel(a, scratch.data());
    }
  });
}

// Work items of the flash path: row tiles of every sequence x kv heads (one
// tile = rows x the kv head's whole GQA group; decode tiles x several kv
// heads, kv_heads_per_item).
void flash_attention_tiles(const float* q, const void* k_cache, const void* v_cache,
                           const KVLayout& layout, const AttentionBatch& batch, int num_q_heads,
                           float scale, float* out, const Prepare& prep) {
  const int hd = layout.head_dim, kv_heads = layout.num_kv_heads, bs = layout.block_size;
  const int group = num_q_heads / kv_heads;
  const int tile_rows = cpu::kFlashQueries / group;
  const std::vector<RowTile>& tiles = row_tiles(batch, tile_rows, /*window_plus_rows=*/true);
  const int64_t q_row_stride = int64_t{num_q_heads} * hd;
  const auto* k_bytes = static_cast<const uint16_t*>(k_cache);
  const auto* v_bytes = static_cast<const uint16_t*>(v_cache);
  // Decode tiles (few queries a kv head) go through the key blocks of
  // several kv heads in lockstep.
  const int kv_per_item = kv_heads_per_item(
      tiles, kv_heads,
      max_tile_rows(tiles) * group <= cpu::kFlashFewQueries ? cpu::kMaxFlashKvHeads : 1);
  // Item = (row tile, kv_per_item kv heads), kv-head-major: a thread's
  // consecutive items share kv heads.
  const auto num_tiles = static_cast<int64_t>(tiles.size());
  const bool in_items = prepare_in_items(prep, tiles, batch);
  if (!in_items) prepare_all(prep, layout);
  auto prepare_item = [&](int64_t item) {
    if (!in_items) return;
    const RowTile& tile = tiles[item % num_tiles];
    const int kvh = static_cast<int>(item / num_tiles) * kv_per_item;
    cpu::prepare_attention_rows(*prep.in, layout, prep.k_cache, prep.v_cache, tile.row0,
                                tile.row0 + tile.rows, kvh, kvh + kv_per_item);
  };
  auto make_tile = [&](int64_t item) {
    const RowTile& tile = tiles[item % num_tiles];
    const int kvh = static_cast<int>(item / num_tiles) * kv_per_item;
    cpu::AttentionTile a = sequence_tile(batch, tile, layout, q_row_stride, scale);
    a.q = q + tile.row0 * q_row_stride + int64_t{kvh} * group * hd;
    a.out = out + tile.row0 * q_row_stride + int64_t{kvh} * group * hd;
    a.heads = group;
    a.kv_heads = kv_per_item;
    a.k_head = k_bytes + int64_t{kvh} * bs * hd;
    a.v_head = v_bytes + int64_t{kvh} * bs * hd;
    a.block_stride = int64_t{kv_heads} * bs * hd;
    return a;
  };
  run_tiles(num_tiles * (kv_heads / kv_per_item), cpu::flash_scratch_floats(hd) * kv_per_item,
            make_tile, cpu::active_kernels().attention_bf16_flash, prepare_item);
}

}  // namespace

void set_flash_attention(bool on) { flash_attention_on.store(on, std::memory_order_relaxed); }
bool flash_attention_enabled() { return flash_attention_on.load(std::memory_order_relaxed); }

namespace {

void attention(const float* q, const void* k_cache, const void* v_cache, const KVLayout& layout,
               const AttentionBatch& batch, int num_q_heads, float scale, float* out,
               const Prepare& prep) {
  const int hd = layout.head_dim, kv_heads = layout.num_kv_heads, bs = layout.block_size;
  PAGODA_CHECK(hd > 0 && kv_heads > 0 && bs > 0 && num_q_heads % kv_heads == 0,
               "paged_attention: head_dim {} block_size {} q heads {} kv heads {}", hd, bs,
               num_q_heads, kv_heads);
  PAGODA_CHECK(layout.dtype == DType::F32 || layout.dtype == DType::BF16,
               "paged_attention: KV cache dtype {}", dtype_name(layout.dtype));
  for (int s = 0; s < batch.num_seqs; ++s) {
    const int64_t num_new = batch.query_start_loc[s + 1] - batch.query_start_loc[s];
    const int64_t len = batch.seq_lens[s];
    PAGODA_CHECK(num_new >= 0 && len >= num_new && (len + bs - 1) / bs <= batch.max_blocks_per_seq,
                 "paged_attention: sequence {} has {} new of {} keys, {} blocks max", s, num_new,
                 len, batch.max_blocks_per_seq);
  }
  // Every row over a bf16 cache: flash tiles (ops.h, Numerics). The choice
  // depends on the layout and ISA only, never on how many rows a sequence
  // computes this step, so chunking and prefix-cache hits keep the bits.
  const cpu::KernelTable& kt = cpu::active_kernels();
  if (kt.attention_bf16_flash && flash_attention_enabled() && layout.dtype == DType::BF16 &&
      hd % 32 == 0 && num_q_heads / kv_heads <= cpu::kFlashQueries) {
    flash_attention_tiles(q, k_cache, v_cache, layout, batch, num_q_heads, scale, out, prep);
    return;
  }
  // Tiles: up to kMaxTileQueries queries = tile_rows consecutive rows of a
  // sequence x tile_heads q heads of one kv head, so K/V chunks are read
  // once per tile. Work item = (row tile, kv head, head block).
  const int group = num_q_heads / kv_heads;
  const int tile_heads = std::min(group, cpu::kMaxTileQueries);
  const int head_blocks = (group + tile_heads - 1) / tile_heads;
  const int tile_rows = std::max(1, cpu::kMaxTileQueries / tile_heads);
  const std::vector<RowTile>& tiles = row_tiles(batch, tile_rows, /*window_plus_rows=*/false);
  // kv heads per work item: as many as fit the tile's queries (decode rows
  // are few).
  const int kv_per_item = kv_heads_per_item(
      tiles, kv_heads,
      head_blocks == 1 ? cpu::kMaxTileQueries / (max_tile_rows(tiles) * tile_heads) : 1);
  const int64_t per_tile = int64_t{kv_heads / kv_per_item} * head_blocks;
  // An item prepares its rows only if it holds all q heads of its kv heads.
  const bool in_items = head_blocks == 1 && prepare_in_items(prep, tiles, batch);
  if (!in_items) prepare_all(prep, layout);
  auto prepare_item = [&](int64_t item) {
    if (!in_items) return;
    const RowTile& tile = tiles[item / per_tile];
    const int kvh = static_cast<int>(item % per_tile) * kv_per_item;
    cpu::prepare_attention_rows(*prep.in, layout, prep.k_cache, prep.v_cache, tile.row0,
                                tile.row0 + tile.rows, kvh, kvh + kv_per_item);
  };
  const int64_t block_stride = int64_t{kv_heads} * bs * hd;
  const int64_t q_row_stride = int64_t{num_q_heads} * hd;
  const auto tile_kernel = layout.dtype == DType::BF16 ? kt.attention_bf16_kv : kt.attention;
  const int64_t elem = static_cast<int64_t>(dtype_size(layout.dtype));
  const auto* k_bytes = static_cast<const uint8_t*>(k_cache);
  const auto* v_bytes = static_cast<const uint8_t*>(v_cache);
  auto make_tile = [&](int64_t item) {
    const RowTile& tile = tiles[item / per_tile];
    const int kvh = static_cast<int>(item % per_tile / head_blocks) * kv_per_item;
    const int h0 = kvh * group + static_cast<int>(item % head_blocks) * tile_heads;
    cpu::AttentionTile a = sequence_tile(batch, tile, layout, q_row_stride, scale);
    a.q = q + tile.row0 * q_row_stride + int64_t{h0} * hd;
    a.out = out + tile.row0 * q_row_stride + int64_t{h0} * hd;
    a.heads = std::min(tile_heads, (kvh + 1) * group - h0);
    a.kv_heads = kv_per_item;
    a.k_head = k_bytes + int64_t{kvh} * bs * hd * elem;
    a.v_head = v_bytes + int64_t{kvh} * bs * hd * elem;
    a.block_stride = block_stride;
    return a;
  };
  run_tiles(static_cast<int64_t>(tiles.size()) * per_tile, cpu::attention_scratch_floats(hd),
            make_tile, tile_kernel, prepare_item);
}

}  // namespace

void paged_attention(const float* q, const void* k_cache, const void* v_cache,
                     const KVLayout& layout, const AttentionBatch& batch, int num_q_heads,
                     float scale, float* out) {
  attention(q, k_cache, v_cache, layout, batch, num_q_heads, scale, out, Prepare{});
}

void paged_attention(const AttentionInputs& in, void* k_cache, void* v_cache,
                     const KVLayout& layout, const AttentionBatch& batch, float scale, float* out) {
  cpu::check_attention_inputs(in, layout);
  attention(in.q, k_cache, v_cache, layout, batch, in.num_q_heads, scale, out,
            Prepare{&in, k_cache, v_cache});
}

}  // namespace pagoda::ops
