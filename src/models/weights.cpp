#include "models/weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "core/error.h"
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

void check_range(const TensorInfo& t, int64_t n, int64_t begin, int64_t count) {
  PAGODA_CHECK(begin >= 0 && count >= 0 && begin + count <= n, "slice [{}, {}) of {} ({})", begin,
               begin + count, t.name, n);
}

}  // namespace

void* WeightStore::own(size_t bytes) {
  // Not value-initialized: every user writes all of it, and zeroing a GB of
  // packed weights first would cost as much as packing them.
  owned_.push_back({std::unique_ptr<uint8_t[]>(new uint8_t[bytes]), bytes});
  return owned_.back().data.get();
}

ops::Matrix WeightStore::matrix(const std::string& name, int64_t rows, int64_t cols) {
  const TensorInfo& t = checkpoint_.get(name, {rows, cols});
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
  const TensorInfo& t = checkpoint_.get(name, {rows, cols});
  check_range(t, rows, begin, count);
  const size_t esize = dtype_size(t.dtype);
  const auto* first = static_cast<const uint8_t*>(t.data) + begin * cols * esize;
  if (begin == 0 && count == rows) return matrix(name, rows, cols);
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
  const TensorInfo& t = checkpoint_.get(name, {rows, cols});
  check_range(t, cols, begin, count);
  if (begin == 0 && count == cols) return matrix(name, rows, cols);
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
  void* out = own_aligned(bytes);
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

void WeightStore::release_rows(const ops::Matrix& m) {
  if (in_mapping(m)) release_pages(m.data, matrix_bytes(m));
}

WeightStore::OwnedBuffer* WeightStore::owner_of(const void* data) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (auto& buffer : owned_) {
    if (buffer.data && p >= buffer.data.get() && p < buffer.data.get() + buffer.size)
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
    if (!still_used) *buffer = {};
    return;
  }
  release_pages(source.data, static_cast<size_t>(matrix_bytes(source)));
}

size_t WeightStore::owned_bytes() const {
  size_t total = 0;
  for (const auto& b : owned_) total += b.size;
  return total;
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
