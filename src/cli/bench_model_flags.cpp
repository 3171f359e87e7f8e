#include "cli/bench.h"

namespace pagoda::cli {

void add_bench_model_flags(CLI::App* cmd, BenchModelArgs* args) {
  cmd->add_option("--model,-m", args->model, "Model directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--input-len", args->input_len, "Prompt tokens per request")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--output-len", args->output_len, "Generated tokens per request")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "Seed of the synthetic prompts")->capture_default_str();
  cmd->add_flag("--json", args->json, "Print one JSON object");
}

}  // namespace pagoda::cli
