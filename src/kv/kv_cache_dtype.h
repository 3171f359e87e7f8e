// The KV cache's element type (--kv-cache-dtype, as in vLLM): "auto" follows
// the checkpoint's weights, or f32 / bf16 explicitly, or fp8 (DeepSeek's
// MLA models: e4m3 values with f32 scales, the "fp8_ds_mla" layout).
#pragma once

#include <string_view>

#include "core/dtype.h"

namespace pagoda {

enum class KVCacheDType { Auto, F32, BF16, Fp8 };

std::string_view kv_cache_dtype_name(KVCacheDType d);
// "auto", "bf16", "f32" or "fp8"; anything else throws InputError naming the choices.
KVCacheDType parse_kv_cache_dtype(std::string_view name);

// The cache dtype to use for a checkpoint whose weights are stored as
// weight_dtype. auto: bf16 for BF16 weights (vLLM's "the model's dtype";
// the activations then already carry about bf16's precision), f32 for
// everything else: F32 weights keep an exact f32 cache (their greedy
// outputs do not move), and F16 ones too, since bf16 would be coarser than
// the model's own dtype and there is no f16 cache.
DType resolve_kv_cache_dtype(KVCacheDType choice, DType weight_dtype);

// DeepSeek V4's indexer-key cache (--indexer-cache-dtype): auto follows the
// KV cache (e4m3 keys with an f32 scale when it is fp8), fp8 (132 bytes
// for 128 values), or fp4 (MXFP4: e2m1 values with a UE8M0 scale per 32,
// 68 bytes).
enum class IndexerCacheDType { Auto, Fp8, Fp4 };
// "auto", "fp8" or "fp4"; anything else throws InputError naming the choices.
IndexerCacheDType parse_indexer_cache_dtype(std::string_view name);
// The element type of the indexer keys: F8E4M3, F4E2M1, or (auto) the KV
// cache's.
DType resolve_indexer_cache_dtype(IndexerCacheDType choice, DType kv_dtype);

// Short lower-case name of a cache dtype for messages: "f32", "bf16" or
// "fp8" (F8E4M3).
std::string_view kv_dtype_label(DType d);

}  // namespace pagoda
