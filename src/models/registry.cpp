// Maps config.json's architectures[0] to the code that builds the model.
#include <functional>
#include <map>
#include <string>

#include "core/error.h"
#include "models/llama.h"
#include "models/model.h"

namespace pagoda {

namespace {

using Factory =
    std::function<std::unique_ptr<CausalLM>(const ModelConfig&, std::unique_ptr<Checkpoint>)>;

const std::map<std::string, Factory>& registry() {
  static const std::map<std::string, Factory> kRegistry = {
      {"LlamaForCausalLM",
       [](const ModelConfig& c, auto ckpt) { return make_llama_family(c, std::move(ckpt), {}); }},
      {"MistralForCausalLM",
       [](const ModelConfig& c, auto ckpt) { return make_llama_family(c, std::move(ckpt), {}); }},
      {"Qwen2ForCausalLM",
       [](const ModelConfig& c, auto ckpt) { return make_llama_family(c, std::move(ckpt), {}); }},
      {"Qwen3ForCausalLM",
       [](const ModelConfig& c, auto ckpt) {
         return make_llama_family(c, std::move(ckpt), {.qk_norm = true});
       }},
  };
  return kRegistry;
}

}  // namespace

std::unique_ptr<CausalLM> load_model(const std::string& dir) {
  const ModelConfig config = load_model_config(dir);
  const auto it = registry().find(config.architecture);
  if (it == registry().end()) {
    std::string known;
    for (const auto& [name, _] : registry()) known += (known.empty() ? "" : ", ") + name;
    throw_input_error("{}/config.json: unknown architecture '{}' (supported: {})", dir,
                      config.architecture, known);
  }
  return it->second(config, Checkpoint::open(dir));
}

}  // namespace pagoda
