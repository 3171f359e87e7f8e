#include "cli/commands.h"

namespace pagoda::cli {

void add_engine_flags(CLI::App& cmd, EngineOptions& o) {
  cmd.add_option("--threads", o.num_threads, "Kernel threads (default: all cores)")
      ->check(CLI::Range(1, 1024));
  cmd.add_option("--block-size", o.block_size, "Tokens per KV-cache block")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd.add_option("--kv-cache-memory", o.kv_cache_memory,
                 "Bytes reserved for the KV cache (default: enough for --max-num-seqs full "
                 "sequences, at most half the available memory)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 50));
  cmd.add_option("--max-num-seqs", o.max_num_seqs, "Most sequences in one step")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd.add_option("--max-num-batched-tokens", o.max_num_batched_tokens,
                 "Most tokens computed in one step (longer prompts are prefilled in chunks)")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  cmd.add_option("--max-model-len", o.max_model_len,
                 "Context length limit (default: the model's max_position_embeddings)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 32));
}

}  // namespace pagoda::cli
