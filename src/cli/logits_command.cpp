// `pagoda logits`: greedy generation that records every step's logits as
// JSON, for comparing the engine with an independent reference
// (tools/compare_logits.py).
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/llm.h"
#include "ops/ops.h"

namespace pagoda::cli {

namespace {

struct LogitsArgs {
  std::string model;
  std::vector<int32_t> prompt_ids;
  int max_tokens = 32;
  std::string out;
  EngineOptions engine;
};

int run_logits(const LogitsArgs& a) {
  LLM llm(a.model, a.engine);
  nlohmann::json rows = nlohmann::json::array();
  llm.engine().set_logits_observer([&](const std::string&, const float* logits, int64_t vocab) {
    rows.push_back(std::vector<float>(logits, logits + vocab));
  });
  SamplingParams params;
  params.temperature = 0;
  params.max_tokens = a.max_tokens;
  params.ignore_eos = true;
  const auto outputs = llm.generate({Prompt::from_ids(a.prompt_ids)}, {params});
  nlohmann::json j = {
      {"prompt_ids", a.prompt_ids},
      {"output_ids", outputs[0].token_ids},
      {"logits", rows},
      // The reference models the numerics of the kernel variant and KV dtype.
      {"isa", ops::isa_name(ops::current_isa())},
      {"kv_cache_dtype", std::string(kv_dtype_label(llm.engine().kv_cache_dtype()))}};
  if (const std::string idx = llm.engine().indexer_cache_label(); !idx.empty()) {
    j["indexer_cache_dtype"] = idx;
  }
  std::ofstream out(a.out);
  if (!out) throw_input_error("cannot write '{}'", a.out);
  out << j.dump() << "\n";
  return 0;
}

}  // namespace

Runner add_logits_command(CLI::App& app) {
  auto args = std::make_shared<LogitsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "logits", "Greedy generation from token ids, writing every step's logits as JSON");
  cmd->add_option("--model,-m", args->model, "Model directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--prompt-ids", args->prompt_ids, "Prompt token ids (comma list)")
      ->required()
      ->delimiter(',');
  cmd->add_option("--max-tokens", args->max_tokens, "Tokens to generate")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--out", args->out, "Output JSON file")->required();
  add_engine_flags(*cmd, args->engine);
  return
      [args] { return run_on_rank0(args->model, args->engine, [&] { return run_logits(*args); }); };
}

}  // namespace pagoda::cli
