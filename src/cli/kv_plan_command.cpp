// `pagoda kv-plan`: what a model's KV cache holds per token and per
// sequence, from its config alone (no weights are read): per cache group
// (layers whose caches share a spec), bytes per token and per page, pages
// and bytes of one sequence of --context tokens; per layer kind and cache
// kind (DeepSeek V4: SWA / c4a / c128a / c<r>a layers; window, compressed,
// indexer keys, compressor state), the exact entries' bytes and the bytes
// of the pages held; per pool (page-size bucket), the pages one sequence
// takes; the totals. The figures are the engine's own (the same specs and
// plan the KV-cache manager allocates from).
//
// Two totals, because they differ: "exact" counts entries (a window of W
// positions holds min(S, W) entries, a compressed cache floor(S / r)): the
// figures of the papers and spec §5.3; "pages held" counts whole pages at
// their pool's page size (alignment and bucket padding included, a window's
// partly filled pages): what the pool gives one sequence.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "kv/kv_cache_dtype.h"
#include "kv/kv_cache_plan.h"
#include "models/config.h"
#include "models/deepseek_v4_config.h"
#include "models/model.h"

namespace pagoda::cli {

namespace {

struct KvPlanArgs {
  std::string model;
  int64_t context = 0;
  std::string dtype = "bf16";
  std::string indexer_dtype = "auto";  // DeepSeek V4 indexer keys: auto (as dtype), fp8, fp4
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

// The kind of a layer, from its caches: DeepSeek V4's "SWA" (window only),
// "c4a", "c128a", or "c<r>a" for another ratio; "attention" for the rest.
std::string layer_kind(const std::vector<LayerKVCache>& caches, int32_t layer) {
  bool window = false;
  for (const LayerKVCache& c : caches) {
    if (c.layer != layer) continue;
    if (c.name == "compressed") return fmt::format("c{}a", c.spec.compress_ratio);
    window |= c.name == "swa";
  }
  return window ? "SWA" : "attention";
}

// The kind of a cache, by the name the model gives it.
std::string cache_kind(const std::string& name) {
  if (name == "swa") return "window";
  if (name == "indexer_k") return "indexer keys";
  if (name == "compressor_state") return "compressor state";
  if (name == "indexer_state") return "indexer compressor state";
  return name;
}

bool is_state(const std::string& name) {
  return name == "compressor_state" || name == "indexer_state";
}

// Entries one tensor of `spec` holds for a sequence of S positions: a
// window's min(S, W) positions or all S, one entry per compress_ratio.
int64_t exact_entries(const KVCacheSpec& spec, int64_t s) {
  const int64_t positions = spec.sliding_window > 0 ? std::min(s, spec.sliding_window) : s;
  return positions / spec.compress_ratio;
}


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
  const ModelConfig config = load_model_config(dir);
  const bool v4 = config.architecture == "DeepseekV4ForCausalLM";
  if (a.indexer_dtype != "auto" && !v4) {
    throw_input_error("--indexer-cache-dtype is for DeepSeek V4, not '{}'", config.architecture);
  }
  const IndexerCacheDType indexer = parse_indexer_cache_dtype(a.indexer_dtype);
  const std::vector<LayerKVCache> caches = kv_cache_specs_of_config(dir, dtype, indexer);
  // DeepSeek V3.2's sparse-attention caches use 64-token pages (the seed's
  // choice), V4's 256-position blocks (spec §5.4); the dense models, the
  // engine's default of 16.
  int32_t block_size = a.block_size;
  if (block_size == 0) {
    bool has_indexer = false;
    for (const LayerKVCache& c : caches) has_indexer |= c.name == "indexer_k";
    block_size = v4 ? 256 : has_indexer ? 64 : 16;
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
  // Per (layer kind, cache kind): layers, exact bytes, pages held.
  struct KindRow {
    std::string layer_kind, cache_kind;
    int64_t layers = 0, entry_bytes = 0, exact_bytes = 0, pages = 0, page_bytes = 0;
    int64_t held_bytes = 0;
    bool state = false;
  };
  std::vector<KindRow> kinds;
  std::vector<std::string> kind_of_layer(plan.layer_cache_group.size());
  for (size_t l = 0; l < kind_of_layer.size(); ++l) {
    kind_of_layer[l] = layer_kind(caches, static_cast<int32_t>(l));
  }
  std::vector<int32_t> seen(plan.layer_cache_group.size(), 0);  // caches of each layer so far
  int64_t exact_total = 0, exact_without_state = 0, held_total = 0;
  for (const LayerKVCache& c : caches) {
    const int32_t gi = plan.layer_cache_group[c.layer][seen[c.layer]++];
    const KVCacheGroup& g = plan.groups[gi];
    const std::string lk = kind_of_layer[c.layer], ck = cache_kind(c.name);
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const KindRow& k) {
      return k.layer_kind == lk && k.cache_kind == ck && k.entry_bytes == c.spec.entry_bytes;
    });
    if (it == kinds.end()) {
      kinds.push_back({lk, ck, 0, c.spec.entry_bytes, 0, 0, plan.pools[g.pool].page_bytes, 0,
                       is_state(c.name)});
      it = kinds.end() - 1;
    }
    const int64_t exact = exact_entries(c.spec, a.context) * c.spec.entry_bytes;
    const int64_t pages = plan.group_blocks(gi, a.context);
    it->layers += 1;
    it->exact_bytes += exact;
    it->pages += pages;
    it->held_bytes += pages * plan.pools[g.pool].page_bytes;
    exact_total += exact;
    if (!it->state) exact_without_state += exact;
    held_total += pages * plan.pools[g.pool].page_bytes;
  }
  nlohmann::json kinds_json = nlohmann::json::array();
  for (const KindRow& k : kinds) {
    kinds_json.push_back({{"layer_kind", k.layer_kind},
                          {"cache_kind", k.cache_kind},
                          {"layers", k.layers},
                          {"entry_bytes", k.entry_bytes},
                          {"exact_bytes_per_sequence", k.exact_bytes},
                          {"pages_per_sequence", k.pages},
                          {"page_bytes", k.page_bytes},
                          {"bytes_per_sequence", k.held_bytes}});
  }
  const int64_t total = plan.bytes_per_sequence(a.context);
  PAGODA_CHECK(total == held_total, "pages held {} != plan {}", held_total, total);
  // DeepSeek V4 against a V3.2-style stack of as many layers (spec §5.3):
  // every position of every layer keeps a 512 + 64 latent and a 128-value
  // indexer key, at this dtype (fp8: vLLM's 656-B fp8_ds_mla entry and the
  // indexer key as --indexer-cache-dtype says).
  nlohmann::json v32 = nullptr;
  if (v4) {
    const DeepseekV4Config v4c = load_deepseek_v4_config(dir, config);
    const int64_t latent = config.head_dim, rope = v4c.qk_rope_head_dim;
    const int64_t mla = dtype == DType::F8E4M3
                            ? latent + latent / 128 * 4 + rope * 2
                            : (latent + rope) * static_cast<int64_t>(dtype_size(dtype));
    const int64_t index_head = v4c.index_head_dim > 0 ? v4c.index_head_dim : 128;
    const int64_t index =
        deepseek_v4_indexer_entry_bytes(index_head, resolve_indexer_cache_dtype(indexer, dtype));
    const int64_t stack = config.num_hidden_layers * a.context * (mla + index);
    v32 = {{"bytes_per_sequence", stack},
           {"entry_bytes", mla + index},
           {"ratio_to_exact_without_state",
            static_cast<double>(stack) / static_cast<double>(exact_without_state)}};
  }
  if (a.json) {
    std::printf("%s\n", nlohmann::json({{"context", a.context},
                                        {"kv_cache_dtype", a.dtype},
                                        {"block_size", block_size},
                                        {"indexer_cache_dtype", a.indexer_dtype},
                                        {"groups", groups},
                                        {"kinds", kinds_json},
                                        {"pools", pools},
                                        {"bytes_per_sequence", total},
                                        {"bytes_between_steps",
                                         plan.bytes_held_between_steps(a.context)},
                                        {"reserved_bytes_per_sequence",
                                         plan.reserved_bytes_per_sequence(a.context)},
                                        {"exact_bytes_per_sequence", exact_total},
                                        {"exact_bytes_without_state", exact_without_state},
                                        {"v32_stack", v32}})
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
  std::printf("\nper layer kind and cache kind (exact: entries only; held: whole pages at the "
              "pool's page size)\n");
  std::printf("%-8s %-26s %7s %8s %18s %12s %10s %18s\n", "layers", "cache", "count", "B/entry",
              "exact bytes", "pages", "B/page", "held bytes");
  for (const KindRow& k : kinds) {
    std::printf("%-8s %-26s %7lld %8lld %18lld %12lld %10lld %18lld\n", k.layer_kind.c_str(),
                k.cache_kind.c_str(), static_cast<long long>(k.layers),
                static_cast<long long>(k.entry_bytes), static_cast<long long>(k.exact_bytes),
                static_cast<long long>(k.pages), static_cast<long long>(k.page_bytes),
                static_cast<long long>(k.held_bytes));
  }
  for (size_t p = 0; p < plan.pools.size(); ++p) {
    std::printf("pool %zu: pages of %lld B, %lld pages per sequence (%lld block ids x %d slots)\n",
                p, static_cast<long long>(pools[p]["page_bytes"].get<int64_t>()),
                static_cast<long long>(pools[p]["pages_per_sequence"].get<int64_t>()),
                static_cast<long long>(pools[p]["block_ids_per_sequence"].get<int64_t>()),
                plan.pools[p].num_slots);
  }
  std::printf("exact entries: %lld bytes (%.2f GiB) per sequence, %lld bytes (%.2f GiB) without "
              "compressor state\n",
              static_cast<long long>(exact_total), gib(exact_total),
              static_cast<long long>(exact_without_state), gib(exact_without_state));
  if (!v32.is_null()) {
    std::printf("V3.2-style stack of %lld layers (%lld B per position per layer): %lld bytes "
                "(%.2f GiB), %.2fx the exact total without compressor state\n",
                static_cast<long long>(config.num_hidden_layers),
                static_cast<long long>(v32["entry_bytes"].get<int64_t>()),
                static_cast<long long>(v32["bytes_per_sequence"].get<int64_t>()),
                gib(v32["bytes_per_sequence"].get<int64_t>()),
                v32["ratio_to_exact_without_state"].get<double>());
  }
  std::printf("total: %lld bytes (%.2f GiB) per sequence in pages held\n",
              static_cast<long long>(total), gib(total));
  const int64_t between = plan.bytes_held_between_steps(a.context);
  if (between != total) {
    std::printf("between decode steps: %lld bytes (%.2f GiB) (sliding-window caches hold only "
                "their window's pages)\n",
                static_cast<long long>(between), gib(between));
  }
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
  cmd->add_option("--indexer-cache-dtype", args->indexer_dtype,
                  "DeepSeek V4 indexer keys: auto (as --kv-cache-dtype), fp8 (132 B) or fp4 "
                  "(MXFP4, 68 B)")
      ->check(CLI::IsMember({"auto", "fp8", "fp4"}))
      ->capture_default_str();
  cmd->add_option("--block-size", args->block_size,
                  "Tokens per block (default: 256 for DeepSeek V4, 64 for V3.2's sparse caches, "
                  "else 16)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_flag("--json", args->json, "Print one JSON object");
  return [args] { return run_kv_plan(*args); };
}

}  // namespace pagoda::cli
