// `pagoda kv-plan`: what a model's KV cache holds per token and per
// sequence, from its config alone (no weights are read): per cache group
// (layers whose caches share a spec), bytes per token and per page, pages
// and bytes of one sequence of --context tokens; per pool (page size), the
// pages one sequence takes; the total. The figures are the engine's own
// (the same specs and plan the KV-cache manager allocates from).
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "kv/kv_cache_plan.h"
#include "models/model.h"

namespace pagoda::cli {

namespace {

struct KvPlanArgs {
  std::string model;
  int64_t context = 0;
  std::string dtype = "bf16";
  int32_t block_size = 0;  // 0: the architecture's default
  bool json = false;
};

DType plan_dtype(const std::string& name) {
  if (name == "bf16") return DType::BF16;
  if (name == "f32") return DType::F32;
  if (name == "fp8") return DType::F8E4M3;
  throw_input_error("--kv-cache-dtype {} is not one of bf16, f32, fp8", name);
}

double gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

int run_kv_plan(const KvPlanArgs& a) {
  // A config.json path stands for its directory.
  std::string dir = a.model;
  if (std::filesystem::is_regular_file(dir)) {
    if (std::filesystem::path(dir).filename() != "config.json") {
      throw_input_error("{}: give a model directory or its config.json", dir);
    }
    dir = std::filesystem::path(dir).parent_path().string();
    if (dir.empty()) dir = ".";
  }
  const DType dtype = plan_dtype(a.dtype);
  const std::vector<LayerKVCache> caches = kv_cache_specs_of_config(dir, dtype);
  // DeepSeek's sparse-attention caches use 64-token pages (the seed's
  // choice); the dense models, the engine's default of 16.
  int32_t block_size = a.block_size;
  if (block_size == 0) {
    bool has_indexer = false;
    for (const LayerKVCache& c : caches) has_indexer |= c.name == "indexer_k";
    block_size = has_indexer ? 64 : 16;
  }
  const KVCachePlan plan = plan_kv_cache(caches, block_size);
  nlohmann::json groups = nlohmann::json::array();
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const KVCacheGroup& group = plan.groups[g];
    const int64_t tensors = static_cast<int64_t>(group.tensors.size());
    const int64_t pages = plan.group_blocks(g, a.context) * tensors;
    const int64_t page_bytes = plan.pools[group.pool].page_bytes;
    groups.push_back({{"cache", caches[0].name},  // replaced below
                      {"spec", group.spec.describe()},
                      {"tensors", tensors},
                      {"bytes_per_token_per_tensor",
                       static_cast<double>(group.spec.entry_bytes) / group.spec.compress_ratio},
                      {"bytes_per_token",
                       static_cast<double>(group.spec.entry_bytes) * tensors /
                           group.spec.compress_ratio},
                      {"page_bytes", page_bytes},
                      {"pool", group.pool},
                      {"pages_per_sequence", pages},
                      {"bytes_per_sequence", pages * page_bytes}});
    // The cache's name, from the first tensor of the group.
    for (const LayerKVCache& c : caches) {
      if (c.layer == group.tensors[0].layer && c.spec == group.spec) {
        groups.back()["cache"] = c.name;
        break;
      }
    }
  }
  nlohmann::json pools = nlohmann::json::array();
  const std::vector<int64_t> per_pool = plan.blocks_per_sequence(a.context);
  for (size_t p = 0; p < plan.pools.size(); ++p) {
    int64_t pages = 0;
    for (size_t g = 0; g < plan.groups.size(); ++g) {
      if (plan.groups[g].pool == static_cast<int32_t>(p)) {
        pages += plan.group_blocks(g, a.context) *
                 static_cast<int64_t>(plan.groups[g].tensors.size());
      }
    }
    pools.push_back({{"page_bytes", plan.pools[p].page_bytes},
                     {"pages_per_sequence", pages},
                     {"block_ids_per_sequence", per_pool[p]}});
  }
  const int64_t total = plan.bytes_per_sequence(a.context);
  if (a.json) {
    std::printf("%s\n", nlohmann::json({{"context", a.context},
                                        {"kv_cache_dtype", a.dtype},
                                        {"block_size", block_size},
                                        {"groups", groups},
                                        {"pools", pools},
                                        {"bytes_per_sequence", total}})
                            .dump()
                            .c_str());
    return 0;
  }
  std::printf("KV cache of %s for one sequence of %lld tokens, %s, %d-token blocks\n",
              dir.c_str(), static_cast<long long>(a.context), a.dtype.c_str(), block_size);
  std::printf("%-10s %-44s %7s %12s %10s %12s %18s\n", "cache", "spec", "layers", "B/token",
              "B/page", "pages", "bytes");
  for (const auto& g : groups) {
    std::printf("%-10s %-44s %7lld %12.1f %10lld %12lld %18lld\n",
                g["cache"].get<std::string>().c_str(), g["spec"].get<std::string>().c_str(),
                static_cast<long long>(g["tensors"].get<int64_t>()),
                g["bytes_per_token"].get<double>(),
                static_cast<long long>(g["page_bytes"].get<int64_t>()),
                static_cast<long long>(g["pages_per_sequence"].get<int64_t>()),
                static_cast<long long>(g["bytes_per_sequence"].get<int64_t>()));
  }
  for (size_t p = 0; p < plan.pools.size(); ++p) {
    std::printf("pool %zu: pages of %lld B, %lld pages per sequence\n", p,
                static_cast<long long>(pools[p]["page_bytes"].get<int64_t>()),
                static_cast<long long>(pools[p]["pages_per_sequence"].get<int64_t>()));
  }
  std::printf("total: %lld bytes (%.2f GiB) per sequence\n", static_cast<long long>(total),
              gib(total));
  return 0;
}

}  // namespace

Runner add_kv_plan_command(CLI::App& app) {
  auto args = std::make_shared<KvPlanArgs>();
  CLI::App* cmd = app.add_subcommand(
      "kv-plan", "Per layer and cache kind, the KV-cache bytes a sequence of N tokens takes");
  cmd->add_option("--model,-m", args->model, "Model directory, or its config.json")->required();
  cmd->add_option("--context", args->context, "Tokens in the sequence")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--kv-cache-dtype", args->dtype,
                  "Cache element type: bf16, f32, or fp8 (DeepSeek's fp8_ds_mla latents and "
                  "fp8 indexer keys)")
      ->check(CLI::IsMember({"bf16", "f32", "fp8"}))
      ->capture_default_str();
  cmd->add_option("--block-size", args->block_size,
                  "Tokens per block (default: 64 for DeepSeek V3.2's sparse caches, else 16)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_flag("--json", args->json, "Print one JSON object");
  return [args] { return run_kv_plan(*args); };
}

}  // namespace pagoda::cli
