#include "models/weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/meminfo.h"
#include "models/quantize.h"
#include "ops/packed.h"

namespace pagoda {

namespace {

bool aligned_for(const void* p, DType dtype) {
  return reinterpret_cast<uintptr_t>(p) % dtype_size(dtype) == 0;
}

// Converts n values of a float dtype to f32.
void to_f32(const void* data, DType dtype, int64_t n, float* out) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::F32:
        std::memcpy(&out[i], bytes + 4 * i, 4);
        break;
      case DType::BF16: {
        bf16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        out[i] = bf16_to_f32(h);
        break;
      }
      case DType::F16: {
        f16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        out[i] = f16_to_f32(h);
        break;
      }
      case DType::F8E8M0:  // FP8 block scales (DeepSeek V4): exact powers of two
        out[i] = f8e8m0_to_f32(bytes[i]);
        break;
      default:
        throw InternalError("to_f32: not a float dtype");
    }
  }
}

void to_f32(const TensorInfo& t, float* out) { to_f32(t.data, t.dtype, t.numel(), out); }

// madvise over the whole pages that cover [data, data + nbytes).
void advise_pages(const void* data, size_t nbytes, int advice) {
  static const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = begin / page * page, last = (begin + nbytes + page - 1) / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, advice);
}

// Drops this process's pages of a tensor that was copied (the page cache
// keeps them; a later read of a neighbouring tensor faults them back in).
void release_pages(const void* data, size_t nbytes) { advise_pages(data, nbytes, MADV_DONTNEED); }
void release_pages(const TensorInfo& t) { release_pages(t.data, t.nbytes); }

// Maps all pages of a range in one call before a pass over it: one fault
// per 4 KiB page costs more than the pass itself on a virtual machine.
// Advice only: kernels before 5.14 refuse it and the pass faults as usual.
void populate_pages(const void* data, size_t nbytes, bool write) {
#ifdef MADV_POPULATE_WRITE
  advise_pages(data, nbytes, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
#else
  (void)data, (void)nbytes, (void)write;
#endif
}

// Bytes of one row of a matrix as stored in the checkpoint, without block
// scales (FP8 and FP4 keep theirs in a separate tensor).
int64_t value_row_bytes(const ops::Matrix& m) {
  if (m.dtype == DType::F8E4M3) return m.cols;
  if (m.dtype == DType::F4E2M1) return ops::fp4_row_bytes(m.cols);
  return m.cols * static_cast<int64_t>(dtype_size(m.dtype));
}

void check_range(const TensorInfo& t, int64_t n, int64_t begin, int64_t count) {
  PAGODA_CHECK(begin >= 0 && count >= 0 && begin + count <= n, "slice [{}, {}) of {} ({})", begin,
               begin + count, t.name, n);
}

std::string shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Whether [begin, begin + count) of n rows (or columns) of an FP8 matrix
// is whole 128-blocks: the slice then keeps the source's block grid.
bool fp8_block_aligned(int64_t begin, int64_t count, int64_t n) {
  return begin % ops::kFp8Block == 0 && (count % ops::kFp8Block == 0 || begin + count == n);
}

int64_t fp8_block_end(int64_t end) { return (end + ops::kFp8Block - 1) / ops::kFp8Block; }

// Where FP4 weight `name` (X.weight) keeps its scales: X.scale.
std::string fp4_scales_name(const std::string& name) {
  constexpr std::string_view kWeight = ".weight";
  if (name.size() > kWeight.size() && name.ends_with(kWeight))
    return name.substr(0, name.size() - kWeight.size()) + ".scale";
  return name + ".scale";
}

}  // namespace

void* WeightStore::own(size_t bytes) {
  // Not value-initialized: every user writes all of it, and zeroing a GB of
  // packed weights first would cost as much as packing them. Repacked and
  // quantized weights are streamed every decode step: on huge pages.
  if (bytes >= kHugePageBytes) return own_huge(bytes).data;
  OwnedBuffer buffer;
  buffer.heap.reset(new uint8_t[bytes]);
  buffer.data = buffer.heap.get();
  buffer.size = bytes;
  owned_.push_back(std::move(buffer));
  return owned_.back().data;
}

WeightStore::OwnedBuffer& WeightStore::own_huge(size_t bytes) {
  OwnedBuffer buffer;
  buffer.huge = HugePageBuffer(bytes);
  if (!buffer.huge.data()) throw std::bad_alloc();
  buffer.data = buffer.huge.data();
  buffer.size = bytes;
  owned_.push_back(std::move(buffer));
  return owned_.back();  // (a deque's elements stay put as it grows)
}

void* WeightStore::own_streamed(size_t bytes) {
  // Slabs of 64 MiB (a few layers of a small model; a larger matrix gets a
  // slab of its own size). The unused end of a slab left for a bigger
  // matrix costs address space only: pages are allocated when touched.
  constexpr size_t kSlabBytes = size_t{64} << 20;
  const size_t offset = slab_ ? (slab_->size + 63) / 64 * 64 : 0;
  if (!slab_ || offset + bytes > slab_->huge.size()) {
    slab_ = &own_huge(std::max(kSlabBytes, bytes));
    slab_->slab = true;
    slab_->size = bytes;
    return slab_->data;
  }
  slab_->size = offset + bytes;
  return slab_->data + offset;
}

const TensorInfo& WeightStore::weight_tensor(const std::string& name, int64_t rows,
                                             int64_t cols) const {
  const TensorInfo& t = checkpoint_.get(name);
  if (t.dtype == DType::I8) {  // FP4 (DeepSeek V4 experts): two e2m1 codes a byte
    if (cols % ops::kFp4Block != 0) {
      throw_input_error(
          "checkpoint {}: I8 tensor '{}' read as FP4 [{}, {}]: FP4 needs cols a multiple of {}",
          checkpoint_.dir(), name, rows, cols, ops::kFp4Block);
    }
    const std::vector<int64_t> packed{rows, ops::fp4_row_bytes(cols)};
    if (t.shape != packed) {
      throw_input_error(
          "checkpoint {}: FP4 tensor '{}' has shape {}, expected {} (two e2m1 codes per byte of "
          "a [{}, {}] matrix)",
          checkpoint_.dir(), name, shape_str(t.shape), shape_str(packed), rows, cols);
    }
    return t;
  }
  if (t.dtype != DType::F8E4M3) return checkpoint_.get(name, {rows, cols});
  const std::vector<int64_t> want{rows, cols};
  if (t.shape != want) {
    throw_input_error("checkpoint {}: tensor '{}' has shape {}, expected {}", checkpoint_.dir(),
                      name, shape_str(t.shape), shape_str(want));
  }
  return t;
}

std::string WeightStore::fp8_scales_name(const std::string& name) const {
  if (checkpoint_.has(name + "_scale_inv")) return name + "_scale_inv";
  constexpr std::string_view kWeight = ".weight";
  if (name.size() > kWeight.size() && name.ends_with(kWeight)) {
    std::string scale = name.substr(0, name.size() - kWeight.size()) + ".scale";
    if (checkpoint_.has(scale)) return scale;
  }
  return "";
}

const float* WeightStore::fp8_scales(const TensorInfo& t, int64_t rows, int64_t cols, int64_t r0,
                                     int64_t r1, int64_t c0, int64_t c1) {
  const std::string& dir = checkpoint_.dir();
  const std::string name = fp8_scales_name(t.name);
  if (name.empty()) {
    const bool v4_name = t.name.ends_with(".weight");
    throw_input_error(
        "checkpoint {}: FP8 tensor '{}' has no block scales (no tensor '{}_scale_inv'{})", dir,
        t.name, t.name,
        v4_name ? " or '" + t.name.substr(0, t.name.size() - 7) + ".scale'" : std::string());
  }
  const TensorInfo& s = checkpoint_.get(name);
  if (s.dtype != DType::F32 && s.dtype != DType::BF16 && s.dtype != DType::F8E8M0) {
    throw_input_error(
        "checkpoint {}: block scales '{}' of FP8 tensor '{}' have dtype {}, expected F32, BF16 "
        "or F8_E8M0",
        dir, name, t.name, dtype_name(s.dtype));
  }
  const std::vector<int64_t> grid{ops::fp8_scale_rows(rows), ops::fp8_scale_cols(cols)};
  if (s.shape != grid) {
    throw_input_error(
        "checkpoint {}: block scales '{}' have shape {}, expected {}: one per 128x128 block of "
        "FP8 tensor '{}' {}",
        dir, name, shape_str(s.shape), shape_str(grid), t.name, shape_str(t.shape));
  }
  if (r1 < 0) r1 = grid[0];
  if (c1 < 0) c1 = grid[1];
  const int64_t n = (r1 - r0) * (c1 - c0);
  const float* out;
  if (s.dtype == DType::F32 && aligned_for(s.data, DType::F32) && n == grid[0] * grid[1]) {
    out = static_cast<const float*>(s.data);
  } else {
    auto* f = static_cast<float*>(own(static_cast<size_t>(n) * sizeof(float)));
    const auto* bytes = static_cast<const uint8_t*>(s.data);
    for (int64_t r = r0; r < r1; ++r) {
      to_f32(bytes + (r * grid[1] + c0) * dtype_size(s.dtype), s.dtype, c1 - c0,
             f + (r - r0) * (c1 - c0));
    }
    out = f;
  }
  // A NaN or infinite scale would turn its whole block into NaNs at run time.
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(out[i])) {
      throw_input_error("checkpoint {}: block scales '{}' hold {} at block [{}, {}]", dir, name,
                        out[i], r0 + i / (c1 - c0), c0 + i % (c1 - c0));
    }
  }
  return out;
}

const uint8_t* WeightStore::fp4_scales(const TensorInfo& t, int64_t rows, int64_t cols,
                                       int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const std::string& dir = checkpoint_.dir();
  const std::string name = fp4_scales_name(t.name);
  if (!checkpoint_.has(name)) {
    throw_input_error("checkpoint {}: FP4 tensor '{}' has no scales (no tensor '{}')", dir, t.name,
                      name);
  }
  const TensorInfo& s = checkpoint_.get(name);
  if (s.dtype != DType::F8E8M0) {
    throw_input_error("checkpoint {}: scales '{}' of FP4 tensor '{}' have dtype {}, expected F8_E8M0",
                      dir, name, t.name, dtype_name(s.dtype));
  }
  const std::vector<int64_t> grid{rows, ops::fp4_scale_cols(cols)};
  if (s.shape != grid) {
    throw_input_error(
        "checkpoint {}: scales '{}' have shape {}, expected {}: one per 32 inputs of each row of "
        "FP4 tensor '{}' {} (logical [{}, {}])",
        dir, name, shape_str(s.shape), shape_str(grid), t.name, shape_str(t.shape), rows, cols);
  }
  const auto* codes = static_cast<const uint8_t*>(s.data);
  // 0xFF is E8M0's NaN: it would turn its 32 weights into NaNs at run time.
  for (int64_t i = 0; i < grid[0] * grid[1]; ++i) {
    if (codes[i] == 0xFF) {
      throw_input_error("checkpoint {}: scales '{}' hold NaN (0xFF) at [{}, {}]", dir, name,
                        i / grid[1], i % grid[1]);
    }
  }
  if (r1 < 0) r1 = grid[0];
  if (c1 < 0) c1 = grid[1];
  if (r0 == 0 && r1 == grid[0] && c0 == 0 && c1 == grid[1]) return codes;
  auto* out = static_cast<uint8_t*>(own(static_cast<size_t>((r1 - r0) * (c1 - c0))));
  for (int64_t r = r0; r < r1; ++r)
    std::memcpy(out + (r - r0) * (c1 - c0), codes + r * grid[1] + c0, static_cast<size_t>(c1 - c0));
  return out;
}

ops::Matrix WeightStore::dequantized_copy(const ops::Matrix& w, int64_t r0, int64_t r1, int64_t c0,
                                          int64_t c1) {
  const int64_t cols = c1 - c0;
  auto* f = static_cast<float*>(own(static_cast<size_t>((r1 - r0) * cols) * sizeof(float)));
  for (int64_t r = r0; r < r1; ++r) {
    if (w.dtype == DType::F4E2M1) {
      ops::dequantize_fp4_row(w, r, c0, c1, f + (r - r0) * cols);
    } else {
      ops::dequantize_fp8_row(w, r, c0, c1, f + (r - r0) * cols);
    }
  }
  return {f, DType::F32, r1 - r0, cols};
}

ops::Matrix WeightStore::matrix(const std::string& name, int64_t rows, int64_t cols) {
  const TensorInfo& t = weight_tensor(name, rows, cols);
  if (t.dtype == DType::I8) {
    ops::Matrix m{t.data, DType::F4E2M1, rows, cols};
    m.e8m0_scales = fp4_scales(t, rows, cols);
    return m;
  }
  if (t.dtype == DType::F8E4M3) {
    ops::Matrix m{t.data, DType::F8E4M3, rows, cols};
    m.block_scales = fp8_scales(t, rows, cols);
    return m;
  }
  if ((t.dtype == DType::F32 || t.dtype == DType::BF16) && aligned_for(t.data, t.dtype)) {
    return {t.data, t.dtype, rows, cols};
  }
  auto* f = static_cast<float*>(own(static_cast<size_t>(rows * cols) * sizeof(float)));
  to_f32(t, f);
  release_pages(t);
  return {f, DType::F32, rows, cols};
}

ops::Matrix WeightStore::row_slice(const std::string& name, int64_t rows, int64_t cols,
                                   int64_t begin, int64_t count) {
  const TensorInfo& t = weight_tensor(name, rows, cols);
  check_range(t, rows, begin, count);
  const size_t esize = dtype_size(t.dtype);
  const auto* first = static_cast<const uint8_t*>(t.data) + begin * cols * esize;
  if (begin == 0 && count == rows) return matrix(name, rows, cols);
  if (t.dtype == DType::I8) {  // FP4: whole rows, each with its own scales
    const int64_t row_bytes = ops::fp4_row_bytes(cols);
    void* out = own(static_cast<size_t>(count * row_bytes));
    std::memcpy(out, static_cast<const uint8_t*>(t.data) + begin * row_bytes,
                static_cast<size_t>(count * row_bytes));
    ops::Matrix m{out, DType::F4E2M1, count, cols};
    m.e8m0_scales = fp4_scales(t, rows, cols, begin, begin + count, 0, -1);
    release_pages(t);
    return m;
  }
  if (t.dtype == DType::F8E4M3) {
    ops::Matrix m;
    if (fp8_block_aligned(begin, count, rows)) {
      void* out = own(static_cast<size_t>(count * cols));
      std::memcpy(out, first, static_cast<size_t>(count * cols));
      m = {out, DType::F8E4M3, count, cols};
      m.block_scales = fp8_scales(t, rows, cols, begin / ops::kFp8Block,
                                  fp8_block_end(begin + count), 0, -1);
    } else {
      ops::Matrix whole{t.data, DType::F8E4M3, rows, cols};
      whole.block_scales = fp8_scales(t, rows, cols);
      m = dequantized_copy(whole, begin, begin + count, 0, cols);
    }
    release_pages(t);
    return m;
  }
  // A proper shard is copied and the tensor's pages dropped: read in place,
  // the kernel would map whole page-cache folios (often several hundred KiB)
  // around the shard's edges, and the other ranks' rows with them.
  const DType dtype = t.dtype == DType::BF16 ? DType::BF16 : DType::F32;
  const auto n = static_cast<size_t>(count * cols);
  void* out = own(n * dtype_size(dtype));
  if (dtype == t.dtype) {
    std::memcpy(out, first, n * esize);
  } else {
    to_f32(first, t.dtype, count * cols, static_cast<float*>(out));
  }
  release_pages(t);
  return {out, dtype, count, cols};
}

ops::Matrix WeightStore::col_slice(const std::string& name, int64_t rows, int64_t cols,
                                   int64_t begin, int64_t count) {
  const TensorInfo& t = weight_tensor(name, rows, cols);
  check_range(t, cols, begin, count);
  if (begin == 0 && count == cols) return matrix(name, rows, cols);
  if (t.dtype == DType::I8) {  // FP4
    ops::Matrix whole{t.data, DType::F4E2M1, rows, cols};
    ops::Matrix m;
    if (begin % ops::kFp4Block == 0 && count % ops::kFp4Block == 0) {
      const int64_t in_bytes = ops::fp4_row_bytes(cols), out_bytes = ops::fp4_row_bytes(count);
      auto* out = static_cast<uint8_t*>(own(static_cast<size_t>(rows * out_bytes)));
      const auto* in = static_cast<const uint8_t*>(t.data);
      for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(out + r * out_bytes, in + r * in_bytes + begin / 2,
                    static_cast<size_t>(out_bytes));
      }
      m = {out, DType::F4E2M1, rows, count};
      m.e8m0_scales = fp4_scales(t, rows, cols, 0, -1, begin / ops::kFp4Block,
                                 (begin + count) / ops::kFp4Block);
    } else {
      whole.e8m0_scales = fp4_scales(t, rows, cols);
      m = dequantized_copy(whole, 0, rows, begin, begin + count);
    }
    release_pages(t);
    return m;
  }
  if (t.dtype == DType::F8E4M3) {
    ops::Matrix m;
    if (fp8_block_aligned(begin, count, cols)) {
      auto* out = static_cast<uint8_t*>(own(static_cast<size_t>(rows * count)));
      const auto* in = static_cast<const uint8_t*>(t.data);
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(out + r * count, in + r * cols + begin, static_cast<size_t>(count));
      m = {out, DType::F8E4M3, rows, count};
      m.block_scales = fp8_scales(t, rows, cols, 0, -1, begin / ops::kFp8Block,
                                  fp8_block_end(begin + count));
    } else {
      ops::Matrix whole{t.data, DType::F8E4M3, rows, cols};
      whole.block_scales = fp8_scales(t, rows, cols);
      m = dequantized_copy(whole, 0, rows, begin, begin + count);
    }
    release_pages(t);
    return m;
  }
  const DType dtype = t.dtype == DType::BF16 ? DType::BF16 : DType::F32;
  const size_t in_size = dtype_size(t.dtype), out_size = dtype_size(dtype);
  auto* out = static_cast<uint8_t*>(own(static_cast<size_t>(rows * count) * out_size));
  const auto* in = static_cast<const uint8_t*>(t.data);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = in + (r * cols + begin) * in_size;
    uint8_t* dst = out + r * count * out_size;
    if (t.dtype == dtype) {
      std::memcpy(dst, src, static_cast<size_t>(count) * in_size);
    } else {
      to_f32(src, t.dtype, count, reinterpret_cast<float*>(dst));
    }
  }
  release_pages(t);
  return {out, dtype, rows, count};
}

const float* WeightStore::vector_slice(const std::string& name, int64_t n, int64_t begin,
                                       int64_t count) {
  const TensorInfo& t = checkpoint_.get(name, {n});
  check_range(t, n, begin, count);
  const auto* first = static_cast<const uint8_t*>(t.data) + begin * dtype_size(t.dtype);
  if (t.dtype == DType::F32 && aligned_for(first, DType::F32)) {
    return reinterpret_cast<const float*>(first);
  }
  auto* f = static_cast<float*>(own(static_cast<size_t>(count) * sizeof(float)));
  to_f32(first, t.dtype, count, f);
  return f;
}

ops::Matrix WeightStore::quantize_int8(const ops::Matrix& source, bool source_still_used) {
  const ops::Matrix q =
      quantize_matrix_int8(source, own_aligned(int8_matrix_bytes(source.rows, source.cols)));
  drop(source, source_still_used);
  return q;
}

ops::Matrix WeightStore::repack(const ops::Matrix& source, bool source_still_used) {
  const size_t bytes = source.dtype == DType::I8
                           ? int8_matrix_bytes(source.rows, source.cols, true)
                           : ops::packed_bytes(source.rows, source.cols, source.dtype);
  void* out = own_streamed(bytes);
  populate_pages(source.data, static_cast<size_t>(matrix_bytes(source)), false);
  populate_pages(out, bytes, true);
  const ops::Matrix packed =
      source.dtype == DType::I8 ? repack_int8(source, out) : ops::pack_matrix(source, out);
  drop(source, source_still_used);
  return packed;
}

void WeightStore::advise_random_rows(const ops::Matrix& m) {
  if (in_mapping(m)) advise_pages(m.data, matrix_bytes(m), MADV_RANDOM);
}

void WeightStore::release_rows(const ops::Matrix& m, std::vector<int64_t>& rows) {
  // (An owned copy is anonymous memory, which MADV_DONTNEED would zero.)
  if (rows.empty() || !in_mapping(m)) return;
  // The kernel's fault-around window (fault_around_bytes, 64 KiB by default)
  // that a row's lookup mapped.
  constexpr uintptr_t kFaultAround = 64 << 10;
  static const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto row_bytes = static_cast<uintptr_t>(value_row_bytes(m));
  const auto data = reinterpret_cast<uintptr_t>(m.data);
  // The table's pages: the mapping holds at least these.
  const uintptr_t table_first = data / page * page;
  const uintptr_t table_last =
      (data + static_cast<uintptr_t>(m.rows) * row_bytes + page - 1) / page * page;
  auto release = [](uintptr_t first, uintptr_t last) {
    release_pages(reinterpret_cast<const void*>(first), last - first);
  };
  if (rows.size() * kFaultAround >= table_last - table_first) return release(table_first, table_last);
  std::sort(rows.begin(), rows.end());
  // Row r's window, [first, last), inside the table's pages.
  auto window = [&](int64_t r) {
    const uintptr_t begin = data + static_cast<uintptr_t>(r) * row_bytes;
    return std::pair{std::max(table_first, begin / kFaultAround * kFaultAround),
                     std::min(table_last, (begin + row_bytes + kFaultAround - 1) / kFaultAround *
                                              kFaultAround)};
  };
  auto [run_first, run_last] = window(rows[0]);  // overlapping windows merged
  for (const int64_t r : rows) {
    const auto [first, last] = window(r);
    if (first > run_last) release(run_first, run_last), run_first = first;
    run_last = std::max(run_last, last);
  }
  release(run_first, run_last);
}

WeightStore::OwnedBuffer* WeightStore::owner_of(const void* data) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (auto& buffer : owned_) {
    if (buffer.data && p >= buffer.data && p < buffer.data + buffer.size)
      return &buffer;
  }
  return nullptr;
}

void* WeightStore::own_aligned(size_t bytes) {
  auto* raw = static_cast<uint8_t*>(own(bytes + 63));
  return raw + (64 - reinterpret_cast<uintptr_t>(raw) % 64) % 64;
}

void WeightStore::drop(const ops::Matrix& source, bool still_used) {
  if (OwnedBuffer* buffer = owner_of(source.data)) {
    if (!still_used && !buffer->slab) *buffer = {};  // (a slab's other matrices stay)
    return;
  }
  // (FP8, FP4: the values; their scales are a separate tensor.)
  release_pages(source.data, static_cast<size_t>(source.rows * value_row_bytes(source)));
}

size_t WeightStore::owned_bytes() const {
  size_t total = 0;
  for (const auto& b : owned_) total += b.size;
  return total;
}

const int32_t* WeightStore::index_table(const std::string& name, int64_t rows, int64_t cols,
                                       int64_t limit) {
  const TensorInfo& t = checkpoint_.get(name);
  const std::string& dir = checkpoint_.dir();
  if (t.dtype != DType::I64 && t.dtype != DType::I32) {
    throw_input_error("checkpoint {}: tensor '{}' has dtype {}, expected I64 or I32", dir, name,
                      dtype_name(t.dtype));
  }
  const std::vector<int64_t> want{rows, cols};
  if (t.shape != want) {
    throw_input_error("checkpoint {}: tensor '{}' has shape {}, expected {}", dir, name,
                      shape_str(t.shape), shape_str(want));
  }
  const int64_t n = rows * cols;
  const auto* bytes = static_cast<const uint8_t*>(t.data);
  const int32_t* out;
  if (t.dtype == DType::I32 && aligned_for(t.data, DType::I32)) {
    out = static_cast<const int32_t*>(t.data);
  } else {
    auto* copy = static_cast<int32_t*>(own(static_cast<size_t>(n) * sizeof(int32_t)));
    for (int64_t i = 0; i < n; ++i) {
      int64_t v;
      if (t.dtype == DType::I64) {
        std::memcpy(&v, bytes + 8 * i, 8);
      } else {
        int32_t v32;
        std::memcpy(&v32, bytes + 4 * i, 4);
        v = v32;
      }
      // Checked before narrowing: 2^32 + 3 must not pass as 3.
      if (v < 0 || v >= limit) {
        throw_input_error("checkpoint {}: tensor '{}' holds {} at [{}, {}], expected 0 to {}", dir,
                          name, v, i / cols, i % cols, limit - 1);
      }
      copy[i] = static_cast<int32_t>(v);
    }
    return copy;
  }
  for (int64_t i = 0; i < n; ++i) {
    if (out[i] < 0 || out[i] >= limit) {
      throw_input_error("checkpoint {}: tensor '{}' holds {} at [{}, {}], expected 0 to {}", dir,
                        name, out[i], i / cols, i % cols, limit - 1);
    }
  }
  return out;
}

const float* WeightStore::vector(const std::string& name, int64_t n) {
  const TensorInfo& t = checkpoint_.get(name, {n});
  if (t.dtype == DType::F32 && aligned_for(t.data, DType::F32)) {
    return static_cast<const float*>(t.data);
  }
  auto* f = static_cast<float*>(own(static_cast<size_t>(n) * sizeof(float)));
  to_f32(t, f);
  return f;
}

}  // namespace pagoda
