// Typed views of checkpoint tensors for the kernels. F32 and BF16 tensors
// are used in place from the file mapping; anything the kernels cannot read
// directly (F16, misaligned data, vectors wanted as f32) is converted once,
// at load, into buffers this store owns, and so are the int8 and packed
// bf16 copies the model asks for (which replace their sources in memory).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/meminfo.h"
#include "models/checkpoint.h"
#include "ops/ops.h"

namespace pagoda {

class WeightStore {
 public:
  explicit WeightStore(const Checkpoint& checkpoint) : checkpoint_(checkpoint) {}

  // A [rows, cols] matrix; checks the tensor's shape.
  // An F8_E4M3 tensor (DeepSeek's FP8 weights) comes back as an F8E4M3
  // matrix, read in place, with its block scales (fp8_scales_name): F32
  // (in place when aligned), BF16 or F8_E8M0 (converted to f32 once).
  // A missing scale tensor, or one of the wrong dtype, shape
  // [ceil(rows/128), ceil(cols/128)] or with non-finite values, is an
  // InputError naming both tensors and the reason.
  // An I8 tensor is FP4 as DeepSeek V4 publishes its routed experts (ops.h
  // F4E2M1): bytes [rows, cols / 2] holding two e2m1 codes each, with
  // `X.scale` F8_E8M0 [rows, cols / 32] beside `X.weight`; it comes back as
  // an F4E2M1 matrix read in place (data and scales), asked for by its
  // logical shape [rows, cols]. cols not a multiple of 32, another byte
  // shape, a missing scale tensor, or one of another dtype, shape or with a
  // NaN code (0xFF) is an InputError naming the tensors and the reason.
  ops::Matrix matrix(const std::string& name, int64_t rows, int64_t cols);
  // Rows [begin, begin + count) of a [rows, cols] matrix (a tensor-parallel
  // shard of a column-parallel layer): copied once (bf16 stays bf16) and the
  // tensor's pages dropped from this process; the whole matrix (tp = 1) is
  // used in place like matrix().
  // FP8: a slice on 128-row block boundaries (count a multiple of 128, or
  // running to the last row) stays FP8 with its scale rows; any other is
  // dequantised to an f32 copy, which linear treats bit for bit as the FP8
  // kernel would (ops.h), at 4 bytes a weight.
  // FP4: any rows stay FP4 (each row carries its own scales).
  ops::Matrix row_slice(const std::string& name, int64_t rows, int64_t cols, int64_t begin,
                        int64_t count);
  // Columns [begin, begin + count) of a [rows, cols] matrix (a shard of a
  // row-parallel layer): copied once into a buffer of rows x count; the
  // source pages are then dropped from this process (madvise), so a rank
  // keeps only its shard resident. FP8 as row_slice, on 128-column blocks.
  // FP4: a slice of whole 32-column blocks stays FP4 with its scale
  // columns; any other becomes an exact f32 copy (as FP8's).
  ops::Matrix col_slice(const std::string& name, int64_t rows, int64_t cols, int64_t begin,
                        int64_t count);
  // Where the block scales of FP8 weight `name` are: name + "_scale_inv"
  // (DeepSeek V3: X.weight_scale_inv) if the checkpoint has it, else
  // X.scale for a name X.weight (DeepSeek V4); "" if neither exists.
  std::string fp8_scales_name(const std::string& name) const;
  // An int8 copy of a matrix this store returned (models/quantize.h), in
  // memory this store owns; the source is then dropped from the process:
  // an owned copy is freed (unless source_still_used, e.g. a tied
  // embedding), checkpoint pages are released (a later read of them, such
  // as an embedding row, faults just those pages back in).
  ops::Matrix quantize_int8(const ops::Matrix& source, bool source_still_used);
  // A packed copy (ops/packed.h) of a row-major BF16 or I8 matrix this
  // store returned, the source dropped as by quantize_int8: the packed
  // panels replace the mapped (or int8) weights, they do not add to them.
  ops::Matrix repack(const ops::Matrix& source, bool source_still_used);
  // For a matrix read in place from the mapping one row at a time (an
  // embedding table): tells the kernel its pages are read at random, so a
  // lookup maps its row's page instead of a readahead window around it
  // (which kept ~200 MB of a Qwen3-0.6B table resident after one prompt).
  void advise_random_rows(const ops::Matrix& m);
  // Whether m is read in place from the checkpoint mapping (not a copy this
  // store owns).
  bool in_mapping(const ops::Matrix& m) { return owner_of(m.data) == nullptr; }
  // Unmaps the pages of the given rows of m, if it is read in place (see
  // in_mapping; nothing for an owned copy), from this process (the page cache keeps them), for a table
  // read a row at a time: each lookup's fault maps a 64 KiB window around
  // its row (fault-around, which MADV_RANDOM leaves on), so without this a
  // server's resident set grows towards the whole table (311 MB for
  // Qwen3-0.6B with an int8 head) as it sees more tokens. Just the rows'
  // windows, merged, and never past the table's own pages (the mapping may
  // end there, and anonymous memory beside it would be zeroed): advice over
  // the whole table walks all its page tables (~80 us a decode step for
  // that table), which only pays once the windows would cover it. Sorts
  // `rows`.
  void release_rows(const ops::Matrix& m, std::vector<int64_t>& rows);
  // A [rows, cols] integer table as int32 (DeepSeek V4's ffn.gate.tid2eid:
  // I64 in the published files, I32 accepted): I32 read in place when
  // aligned, I64 narrowed into a copy. A value outside [0, limit) (e.g. an
  // expert id >= n_routed_experts), another dtype or shape is an
  // InputError naming the tensor.
  const int32_t* index_table(const std::string& name, int64_t rows, int64_t cols, int64_t limit);
  // A 1-D tensor of n values as f32.
  const float* vector(const std::string& name, int64_t n);
  // Elements [begin, begin + count) of a 1-D tensor of n values, as f32.
  const float* vector_slice(const std::string& name, int64_t n, int64_t begin, int64_t count);
  // Bytes of converted/copied weights this store owns (not counting the
  // mapping).
  size_t owned_bytes() const;

  const Checkpoint& checkpoint() const { return checkpoint_; }

 private:
  void* own(size_t bytes);
  void* own_aligned(size_t bytes);  // 64-byte aligned: vectors never straddle lines
  struct OwnedBuffer;
  // A new owned buffer of `bytes` on huge pages (HugePageBuffer).
  OwnedBuffer& own_huge(size_t bytes);
  // 64-byte aligned room for a matrix every decode step streams (a repacked
  // one), carved after the previous one from a shared huge-page slab: on
  // its own, a 1 MiB matrix, or the last MiB of a 3 MiB one, would sit on
  // 4 KiB pages (a huge page needs a whole aligned 2 MiB of one mapping),
  // and those pages stream ~5% slower (bench/every_cpu.md, session 18).
  // Never freed before the store.
  void* own_streamed(size_t bytes);
  // Frees an owned source (unless still used) or releases its checkpoint pages.
  void drop(const ops::Matrix& source, bool still_used);
  // The checked weight tensor `name` of shape [rows, cols]: F32/BF16/F16,
  // F8E4M3, or I8 FP4 bytes [rows, cols / 2] (Checkpoint::get's float
  // check knows neither).
  const TensorInfo& weight_tensor(const std::string& name, int64_t rows, int64_t cols) const;
  // The checked f32 block scales of FP8 tensor t ([rows, cols]); scale rows
  // [r0, r1) and columns [c0, c1) of the scale grid only, copied, when a
  // slice asks (r1 = c1 = -1: the whole grid, in place when possible).
  const float* fp8_scales(const TensorInfo& t, int64_t rows, int64_t cols, int64_t r0 = 0,
                          int64_t r1 = -1, int64_t c0 = 0, int64_t c1 = -1);
  // The checked E8M0 scales of FP4 tensor t (logical [rows, cols]): in
  // place for the whole grid, else rows [r0, r1) x columns [c0, c1) of it
  // copied.
  const uint8_t* fp4_scales(const TensorInfo& t, int64_t rows, int64_t cols, int64_t r0 = 0,
                            int64_t r1 = -1, int64_t c0 = 0, int64_t c1 = -1);
  // An owned f32 copy of rows [r0, r1) x columns [c0, c1) of FP8 or FP4
  // matrix w.
  ops::Matrix dequantized_copy(const ops::Matrix& w, int64_t r0, int64_t r1, int64_t c0,
                               int64_t c1);

  const Checkpoint& checkpoint_;
  struct OwnedBuffer {
    std::unique_ptr<uint8_t[]> heap;  // under a huge page
    HugePageBuffer huge;              // a huge page or more: streamed weights
    uint8_t* data = nullptr;          // heap's or huge's
    size_t size = 0;                  // in use (of a slab: carved so far)
    bool slab = false;                // own_streamed's: holds many matrices
  };
  // The owned buffer data points into, or null (checkpoint memory).
  OwnedBuffer* owner_of(const void* data);
  std::deque<OwnedBuffer> owned_;
  OwnedBuffer* slab_ = nullptr;  // own_streamed's current slab (in owned_)
};

}  // namespace pagoda
