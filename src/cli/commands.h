// `pagoda` subcommands. Each registers its flags on the CLI11 app and
// returns the function that runs it (exit code).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

#include "engine/llm_engine.h"

namespace pagoda::cli {

using Runner = std::function<int()>;

Runner add_generate_command(CLI::App& app);
Runner add_logits_command(CLI::App& app);
Runner add_bench_command(CLI::App& app);
Runner add_serve_command(CLI::App& app);
Runner add_kv_plan_command(CLI::App& app);

// --isa NAME (ops::set_isa) and --isa list (prints the variants, which this
// CPU supports, and exits 0); part of the engine flags.
void add_isa_flag(CLI::App& cmd);
// Engine flags shared by every command that loads a model.
void add_engine_flags(CLI::App& cmd, EngineOptions& options);
// Tensor parallel: rank 0 runs the command (scheduler, tokenizer, I/O); the
// other ranks run the model worker for `model` until rank 0 is done.
int run_on_rank0(const std::string& model, const EngineOptions& options,
                 const std::function<int()>& run);
// "as stored", or the quantization and its kernels ("int8 (avx512-vnni kernels)").
std::string weights_summary(const LLMEngine& engine);
// One stderr line: KV-cache blocks, token capacity and memory, threads, ISA.
void print_engine_summary(const LLMEngine& engine);

}  // namespace pagoda::cli
