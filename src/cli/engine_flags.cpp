#include <fmt/format.h>

#include <cctype>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/flag_errors.h"
#include "core/parallel.h"
#include "ops/ops.h"
#include "ops/quant.h"
#include "parallel/communicator.h"

namespace pagoda::cli {

void add_isa_flag(CLI::App& cmd) {
  // Kernel variant (A/B benchmarks, reproducing another machine's numerics,
  // the AVX2 figures on an AVX-512 machine). `list` prints what this CPU
  // supports; a variant it lacks, or an unknown name, is a usage error
  // (exit 2) naming the supported ones.
  std::string names;
  for (ops::Isa isa : ops::kAllIsas) names += std::string(names.empty() ? "" : ", ") + ops::isa_name(isa);
  cmd.add_option_function<std::string>(
      "--isa",
      [names](std::string value) {
        for (char& c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (value == "list") {
          for (ops::Isa isa : ops::kAllIsas) {
            std::printf("%-11s %s%s\n", ops::isa_name(isa),
                        ops::isa_supported(isa) ? "supported" : "not supported by this CPU",
                        isa == ops::best_isa() ? " (default)" : "");
          }
          std::fflush(stdout);
          throw CLI::Success();
        }
        for (ops::Isa isa : ops::kAllIsas) {
          if (value == ops::isa_name(isa)) {
            apply_flag("--isa", [&] { ops::set_isa(isa); });
            return;
          }
        }
        throw CLI::ValidationError(
            "--isa", fmt::format("unknown kernel variant '{}' (the variants: {}; this CPU supports: "
                                 "{}; `--isa list` prints them)",
                                 value, names, ops::supported_isa_names()));
      },
      fmt::format("Kernel variant: {} (this CPU supports: {}; default: {}), or list (print "
                  "them and exit)",
                  names, ops::supported_isa_names(), ops::isa_name(ops::best_isa())));
}

void add_engine_flags(CLI::App& cmd, EngineOptions& o) {
  cmd.add_option("--threads", o.num_threads, "Kernel threads (default: all cores)")
      ->check(CLI::Range(1, 1024));
  add_isa_flag(cmd);
  // Every attention row over a bf16 KV cache takes bf16 flash-attention
  // tiles on avx512bf16 (ops.h paged_attention, Numerics); off: the f32
  // path for every row. --no-flash-prefill: its name from when only prompt
  // chunks took the tiles.
  cmd.add_flag_function(
      "--no-flash-attention,--no-flash-prefill", [](int64_t) { ops::set_flash_attention(false); },
      "Compute attention with f32 products (default: bf16 dot-product flash-attention tiles for "
      "every row, prompt and decode, over a bf16 KV cache on avx512bf16)");
  cmd.add_option("--block-size", o.block_size,
                 "Tokens per KV-cache block (default: the model's: 64 for DeepSeek V3.2, else 16)")
      ->check(CLI::Range(1, 1024));
  cmd.add_option("--kv-cache-memory", o.kv_cache_memory,
                 "Bytes reserved for the KV cache (default: enough for --max-num-seqs full "
                 "sequences, at most half the available memory)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 50));
  cmd.add_option_function<std::string>(
         "--kv-cache-dtype",
         [&o](const std::string& name) { o.kv_cache_dtype = parse_kv_cache_dtype(name); },
         "KV cache element type: auto (bf16 for bf16 checkpoints, f32 otherwise), bf16 (half "
         "the memory and the bytes attention reads; twice the tokens per --kv-cache-memory), "
         "f32, or fp8 (DeepSeek V3/V3.2: e4m3 latents with a f32 scale per 128 values and "
         "bf16 rope values, 656 bytes a token and layer; e4m3 indexer keys with a f32 scale)")
      ->check(CLI::IsMember({"auto", "bf16", "f32", "fp8"}))
      ->default_str("auto");
  cmd.add_option_function<std::string>(
         "--indexer-cache-dtype",
         [&o](const std::string& name) { o.indexer_cache_dtype = parse_indexer_cache_dtype(name); },
         "DeepSeek V4's indexer-key cache: auto (as the KV cache; e4m3 keys with a f32 scale, "
         "132 bytes, when it is fp8), fp8, or fp4 (MXFP4: e2m1 with a UE8M0 scale per 32 "
         "values, 68 bytes a key)")
      ->check(CLI::IsMember({"auto", "fp8", "fp4"}))
      ->default_str("auto");
  cmd.add_option("--max-num-seqs", o.max_num_seqs, "Most sequences in one step")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd.add_option("--max-num-batched-tokens", o.max_num_batched_tokens,
                 "Most tokens computed in one step (longer prompts are prefilled in chunks)")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  cmd.add_flag("--no-prefix-caching{false}", o.enable_prefix_caching,
               "Disable automatic prefix caching (on by default)");
  cmd.add_option_function<std::string>(
         "--scheduling-policy",
         [&o](const std::string& v) {
           o.scheduling_policy =
               v == "priority" ? SchedulingPolicy::Priority : SchedulingPolicy::Fcfs;
         },
         "fcfs: first come, first served; priority: requests with a lower \"priority\" value are "
         "admitted first and preempted last")
      ->check(CLI::IsMember({"fcfs", "priority"}))
      ->option_text("fcfs|priority (default: fcfs)");
  cmd.add_option("--tensor-parallel-size,--tp", o.tensor_parallel_size,
                 "Split the model over N ranks (tensor parallelism); run under mpirun -np N")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd.add_option_function<std::string>(
         "--quantization",
         [&o](const std::string& name) { o.quantization = parse_quantization(name); },
         "Weight quantization at load: none, or int8 (every linear layer and the LM head as "
         "int8 with per-row scales; activations quantized per token)")
      ->check(CLI::IsMember({"none", "int8"}))
      ->default_str("none");
  cmd.add_flag("--no-repack{false}", o.repack_weights,
               "Keep bf16 weights in place in the checkpoint mapping (and --quantization int8 "
               "weights row-major) instead of packing them into GEMM panels at load (bf16 and "
               "int8 panels where the ISA has a packed kernel: every x86 one but scalar; they "
               "make prefill and batched decode faster)");
  cmd.add_option_function<std::string>(
      "--speculative-config",
      [&o](const std::string& json) {
        apply_flag("--speculative-config",
                   [&] { o.speculative_config = parse_speculative_config(json); });
      },
      "Speculative decoding, as vLLM's JSON: '{\"method\": \"ngram\", "
      "\"num_speculative_tokens\": 4, \"prompt_lookup_max\": 4, \"prompt_lookup_min\": 2}' "
      "drafts up to num_speculative_tokens tokens per request and step from the latest earlier "
      "match of the context's last n tokens (n from prompt_lookup_max down to "
      "prompt_lookup_min), verified in the same step; '{\"method\": \"draft_model\", "
      "\"model\": DIR, \"num_speculative_tokens\": 3}' drafts with a smaller checkpoint "
      "that shares the target's tokenizer (its K/V in the same pool); '{\"method\": \"mtp\", "
      "\"num_speculative_tokens\": 2}' drafts with a DeepSeek V3/V3.2/V4 checkpoint's own MTP "
      "layer (num_nextn_predict_layers); greedy output is "
      "unchanged, sampled output keeps its distribution (rejection sampling). \"adaptive\": "
      "false keeps drafting for requests whose acceptance is below the break-even");
  cmd.add_option("--max-model-len", o.max_model_len,
                 "Context length limit (default: the model's max_position_embeddings; a longer "
                 "one is refused unless PAGODA_ALLOW_LONG_MAX_MODEL_LEN=1 is set, as in vLLM)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 32));
}

int run_on_rank0(const std::string& model, const EngineOptions& options,
                 const std::function<int()>& run) {
  if (parallel::world().rank() == 0) return run();
  LLMEngine::run_worker(model, options);
  return 0;
}

std::string weights_summary(const LLMEngine& engine) {
  if (engine.options().quantization == Quantization::None) {
    return engine.model().repacked_weights() ? "bf16, repacked into GEMM panels" : "as stored";
  }
  return fmt::format("{} ({} kernels{})", quantization_name(engine.options().quantization),
                     ops::int8_kernel_name(),
                     engine.model().repacked_weights() ? ", repacked into GEMM panels" : "");
}

void print_engine_summary(const LLMEngine& engine) {
  // Per pool (page-size bucket, kv/kv_cache_plan.h): its block count.
  std::string blocks;
  for (const BlockPool& p : engine.kv_cache().pools()) {
    blocks += (blocks.empty() ? "" : "/") + std::to_string(p.num_blocks());
  }
  const int32_t block_size = engine.options().block_size;
  std::fprintf(stderr,
               "pagoda: KV cache %s, %s blocks in %zu pool(s), %d-token blocks = %lld token slots "
               "(%.1f MiB, %zu layer group(s)), prefix caching %s, %d thread(s), %s kernels, "
               "weights %s%s%s\n",
               std::string(kv_dtype_label(engine.kv_cache_dtype())).c_str(), blocks.c_str(),
               engine.kv_cache().pools().size(), block_size,
               static_cast<long long>(engine.stats().kv_token_capacity),
               static_cast<double>(engine.kv_cache_bytes()) / (1 << 20),
               engine.kv_cache().groups().size(), engine.kv_cache().prefix_caching() ? "on" : "off",
               num_threads(), ops::isa_name(ops::current_isa()), weights_summary(engine).c_str(),
               engine.model().load_notes().empty() ? "" : ", ",
               engine.model().load_notes().c_str());
}

}  // namespace pagoda::cli
