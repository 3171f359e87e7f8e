// prepare_attention_inputs: qk-norm, RoPE and the KV-cache write of each
// token in one pass (ops.h), with the same kernels as the separate ops.
#include <cstring>

#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/rope_impl.h"
#include "ops/ops.h"

namespace pagoda::ops {

void cpu::check_attention_inputs(const AttentionInputs& in, const KVLayout& layout) {
  PAGODA_CHECK(in.rot_dim >= 0 && in.rot_dim % 2 == 0 && in.rot_dim <= layout.head_dim,
               "prepare_attention_inputs: rot_dim {} must be even and within 0..head_dim {}",
               in.rot_dim, layout.head_dim);
  PAGODA_CHECK((in.q_norm == nullptr) == (in.k_norm == nullptr),
               "prepare_attention_inputs: q_norm and k_norm must be given together (qk-norm) "
               "or both be null");
  PAGODA_CHECK(layout.dtype == DType::F32 || layout.dtype == DType::BF16,
               "prepare_attention_inputs: KV cache dtype {}", dtype_name(layout.dtype));
}

void cpu::prepare_attention_rows(const AttentionInputs& in, const KVLayout& layout, void* k_cache,
                                 void* v_cache, int64_t t0, int64_t t1, int kv_h0, int kv_h1) {
  const cpu::KernelTable& kt = cpu::active_kernels();
  const int hd = layout.head_dim, kv_heads = layout.num_kv_heads;
  const int half = in.rot_dim / 2;
  const int64_t kv_row = int64_t{kv_heads} * hd;
  // The q heads of kv heads [kv_h0, kv_h1): all of them when those are all
  // the kv heads (whatever the GQA ratio), else their GQA groups.
  const bool all = kv_h0 == 0 && kv_h1 == kv_heads;
  const int group = all ? 0 : in.num_q_heads / kv_heads;
  const int q_h0 = all ? 0 : kv_h0 * group, q_h1 = all ? in.num_q_heads : kv_h1 * group;
  cpu::RopeScratch scratch(half);
  for (int64_t t = t0; t < t1; ++t) {
    const float* cos_v = in.cos_sin ? in.cos_sin + t * in.rot_dim : scratch.cos_v();
    const float* sin_v = in.cos_sin ? cos_v + half : scratch.sin_v();
    float* q = in.q + t * in.num_q_heads * hd;
    float* k = in.k + t * kv_row;
    if (in.q_norm) {  // heads are rows of head_dim: rms_norm's own kernel
      kt.rms_norm_rows(q, in.q_norm, hd, in.eps, q, q_h0, q_h1);
      kt.rms_norm_rows(k, in.k_norm, hd, in.eps, k, kv_h0, kv_h1);
    }
    if (!in.cos_sin)
      cpu::rope_angles(in.positions[t], in.inv_freq, half, scratch.cos_v(), scratch.sin_v());
    for (int h = q_h0; h < q_h1; ++h) cpu::rope_head(q + h * hd, cos_v, sin_v, half);
    for (int h = kv_h0; h < kv_h1; ++h) cpu::rope_head(k + h * hd, cos_v, sin_v, half);
    const int64_t slot = in.slot_mapping[t];
    if (slot < 0) continue;  // padding token
    cpu::write_kv_token(k, in.v + t * kv_row, slot, layout, k_cache, v_cache, kv_h0, kv_h1);
  }
}

void prepare_attention_inputs(const AttentionInputs& in, const KVLayout& layout, void* k_cache,
                              void* v_cache) {
  cpu::check_attention_inputs(in, layout);
  parallel_for(in.num_tokens, 4, [&](int64_t t0, int64_t t1) {
    cpu::prepare_attention_rows(in, layout, k_cache, v_cache, t0, t1, 0, layout.num_kv_heads);
  });
}

}  // namespace pagoda::ops
