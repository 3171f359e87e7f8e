#include "kv/kv_cache_dtype.h"

#include "core/error.h"

namespace pagoda {

std::string_view kv_cache_dtype_name(KVCacheDType d) {
  switch (d) {
    case KVCacheDType::Auto:
      return "auto";
    case KVCacheDType::F32:
      return "f32";
    case KVCacheDType::BF16:
      return "bf16";
    case KVCacheDType::Fp8:
      return "fp8";
  }
  return "?";
}

KVCacheDType parse_kv_cache_dtype(std::string_view name) {
  if (name == "auto") return KVCacheDType::Auto;
  if (name == "f32") return KVCacheDType::F32;
  if (name == "bf16") return KVCacheDType::BF16;
  if (name == "fp8") return KVCacheDType::Fp8;
  throw_input_error("unknown KV cache dtype '{}' (choose auto, bf16, f32 or fp8)", name);
}

DType resolve_kv_cache_dtype(KVCacheDType choice, DType weight_dtype) {
  switch (choice) {
    case KVCacheDType::F32:
      return DType::F32;
    case KVCacheDType::BF16:
      return DType::BF16;
    case KVCacheDType::Fp8:
      return DType::F8E4M3;
    case KVCacheDType::Auto:
      break;
  }
  return weight_dtype == DType::BF16 ? DType::BF16 : DType::F32;
}

IndexerCacheDType parse_indexer_cache_dtype(std::string_view name) {
  if (name == "auto") return IndexerCacheDType::Auto;
  if (name == "fp8") return IndexerCacheDType::Fp8;
  if (name == "fp4") return IndexerCacheDType::Fp4;
  throw_input_error("unknown indexer cache dtype '{}' (choose auto, fp8 or fp4)", name);
}

DType resolve_indexer_cache_dtype(IndexerCacheDType choice, DType kv_dtype) {
  switch (choice) {
    case IndexerCacheDType::Fp8:
      return DType::F8E4M3;
    case IndexerCacheDType::Fp4:
      return DType::F4E2M1;
    case IndexerCacheDType::Auto:
      break;
  }
  return kv_dtype;
}

std::string_view kv_dtype_label(DType d) {
  switch (d) {
    case DType::BF16:
      return "bf16";
    case DType::F8E4M3:
      return "fp8";
    case DType::F4E2M1:
      return "fp4";
    default:
      return "f32";
  }
}

}  // namespace pagoda
