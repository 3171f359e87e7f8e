// Maps config.json's architectures[0] to the code that builds the model.
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include "core/error.h"
#include "models/deepseek_v3.h"
#include "models/deepseek_v4.h"
#include "models/deepseek_v4_config.h"
#include "models/llama.h"
#include "models/model.h"

namespace pagoda {

namespace {

using Factory =
    std::function<std::unique_ptr<CausalLM>(const ModelConfig&, std::unique_ptr<Checkpoint>,
                                            parallel::Communicator&, const WeightOptions&)>;

const std::map<std::string, Factory>& registry() {
  static const std::map<std::string, Factory> kRegistry = {
      {"DeepseekV3ForCausalLM",
       [](const ModelConfig& c, auto ckpt, auto& comm, const WeightOptions& q) {
         return make_deepseek_v3(c, std::move(ckpt), comm, q);
       }},
      {"DeepseekV32ForCausalLM",
       [](const ModelConfig& c, auto ckpt, auto& comm, const WeightOptions& q) {
         return make_deepseek_v3(c, std::move(ckpt), comm, q);
       }},
      {"DeepseekV4ForCausalLM",
       [](const ModelConfig& c, auto ckpt, auto& comm, const WeightOptions& q) {
         return make_deepseek_v4(c, std::move(ckpt), comm, q);
       }},
      {"LlamaForCausalLM",
       [](const ModelConfig& c, auto ckpt, auto& comm, const WeightOptions& q) {
         return make_llama_family(c, std::move(ckpt), {}, comm, q);
       }},
      {"MistralForCausalLM",
       [](const ModelConfig& c, auto ckpt, auto& comm, const WeightOptions& q) {
         return make_llama_family(c, std::move(ckpt), {}, comm, q);
       }},
      {"Qwen2ForCausalLM",
       [](const ModelConfig& c, auto ckpt, auto& comm, const WeightOptions& q) {
         return make_llama_family(c, std::move(ckpt), {}, comm, q);
       }},
      {"Qwen3ForCausalLM",
       [](const ModelConfig& c, auto ckpt, auto& comm, const WeightOptions& q) {
         return make_llama_family(c, std::move(ckpt), {.qk_norm = true}, comm, q);
       }},
  };
  return kRegistry;
}

}  // namespace

std::unique_ptr<CausalLM> load_model(const std::string& dir) {
  return load_model(dir, parallel::single_process());
}

std::unique_ptr<CausalLM> load_model(const std::string& dir, parallel::Communicator& comm,
                                     const WeightOptions& options) {
  const ModelConfig config = load_model_config(dir);
  const auto it = registry().find(config.architecture);
  if (it == registry().end()) {
    std::string known;
    for (const auto& [name, _] : registry()) known += (known.empty() ? "" : ", ") + name;
    throw_input_error("{}/config.json: unknown architecture '{}' (supported: {})", dir,
                      config.architecture, known);
  }
  return it->second(config, Checkpoint::open(dir), comm, options);
}

std::vector<LayerKVCache> kv_cache_specs_of_config(const std::string& dir, DType kv_dtype,
                                                   IndexerCacheDType indexer) {
  const ModelConfig config = load_model_config(dir);
  // V4's caches depend on fields only its own config reader knows (the
  // per-layer compress_ratios, the indexer key format).
  if (config.architecture == "DeepseekV4ForCausalLM") {
    return deepseek_v4_kv_cache_specs(config, load_deepseek_v4_config(dir, config), kv_dtype,
                                      resolve_indexer_cache_dtype(indexer, kv_dtype));
  }
  if (indexer != IndexerCacheDType::Auto) {
    throw_input_error("{}/config.json: --indexer-cache-dtype is for DeepSeek V4, not '{}'", dir,
                      config.architecture);
  }
  if (config.architecture.rfind("Deepseek", 0) == 0) {
    return deepseek_kv_cache_specs(config, load_deepseek_config(dir), kv_dtype);
  }
  if (registry().count(config.architecture) == 0) {
    throw_input_error("{}/config.json: unknown architecture '{}'", dir, config.architecture);
  }
  return llama_kv_cache_specs(config, config.num_key_value_heads, kv_dtype);
}

int64_t resident_checkpoint_bytes() {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_checkpoint = false;
  int64_t total = 0;
  while (std::getline(smaps, line)) {
    const std::string first = line.substr(0, line.find(' '));
    if (first.empty()) continue;
    if (first.back() != ':') {  // a mapping header: "lo-hi perms offset dev inode path"
      const std::string suffix = ".safetensors";
      in_checkpoint = line.size() >= suffix.size() &&
                      line.compare(line.size() - suffix.size(), suffix.size(), suffix) == 0;
    } else if (in_checkpoint && first == "Rss:") {
      std::istringstream in(line.substr(4));
      int64_t kib = 0;
      in >> kib;
      total += kib * 1024;
    }
  }
  return total;
}

}  // namespace pagoda
