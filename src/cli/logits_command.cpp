// `pagoda logits`: greedy generation that records every step's logits as
// JSON, for comparing the engine with an independent reference
// (tools/compare_logits.py). --dump-index-topk FILE also writes the
// indexer's picks of every layer and query (DeepSeek V3.2), in the format of
// tools/deepseek_reference.py --topk-out, to compare them as sets.
// --mtp-out FILE (with --speculative-config method mtp) writes the MTP
// layer's logits at every position and every draft it proposed, for
// tools/compare_mtp.py.
#include <algorithm>
#include <fstream>
#include <map>
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
  std::string dump_index_topk;
  std::string mtp_out;
  EngineOptions engine;
};

int run_logits(const LogitsArgs& a) {
  LLM llm(a.model, a.engine);
  nlohmann::json rows = nlohmann::json::array();
  llm.engine().set_logits_observer([&](const std::string&, const float* logits, int64_t vocab) {
    rows.push_back(std::vector<float>(logits, logits + vocab));
  });
  // [layer][position] -> the sorted positions that query picked. One
  // request, so a batch token's position names its query; a recompute
  // (preemption) writes the same picks again.
  std::map<int32_t, std::map<int32_t, std::vector<int32_t>>> picks;
  int64_t index_topk = 0;
  if (!a.dump_index_topk.empty()) {
    const bool selects = llm.engine().set_index_topk_observer(
        [&](int32_t layer, const BatchMetadata& batch, const int32_t* positions, int64_t topk) {
          index_topk = topk;
          for (int64_t t = 0; t < batch.num_tokens(); ++t) {
            std::vector<int32_t> sel;
            for (int64_t j = 0; j < topk; ++j) {
              if (positions[t * topk + j] >= 0) sel.push_back(positions[t * topk + j]);
            }
            std::sort(sel.begin(), sel.end());
            picks[layer][batch.positions[t]] = std::move(sel);
          }
        });
    if (!selects) {
      throw_input_error("--dump-index-topk: this model attends to every cached token (no indexer "
                        "top-k, as DeepSeek V3.2 has)");
    }
  }
  // Position -> the MTP layer's logits there (a recompute writes the same
  // position again); the drafts in the order proposed.
  std::map<int64_t, std::vector<float>> mtp_rows;
  nlohmann::json mtp_drafts = nlohmann::json::array();
  if (!a.mtp_out.empty()) {
    MtpProposer::Observer observer;
    observer.logits = [&](const std::string&, int64_t position, const float* logits,
                          int64_t vocab) {
      mtp_rows[position].assign(logits, logits + vocab);
    };
    observer.drafts = [&](const std::string&, int64_t num_tokens, std::span<const int32_t> d) {
      if (!d.empty()) {
        mtp_drafts.push_back({{"num_tokens", num_tokens},
                              {"drafts", std::vector<int32_t>(d.begin(), d.end())}});
      }
    };
    llm.engine().set_mtp_observer(std::move(observer));
  }
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
  if (!a.mtp_out.empty()) {
    std::vector<int32_t> ids = a.prompt_ids;
    ids.insert(ids.end(), outputs[0].token_ids.begin(), outputs[0].token_ids.end());
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& [pos, row] : mtp_rows) {
      if (pos != static_cast<int64_t>(rows.size())) {
        throw InternalError(fmt::format("--mtp-out: no MTP logits at position {}", rows.size()));
      }
      rows.push_back(row);
    }
    std::ofstream mtp(a.mtp_out);
    if (!mtp) throw_input_error("cannot write '{}'", a.mtp_out);
    mtp << nlohmann::json({{"ids", ids}, {"mtp_logits", rows}, {"drafts", mtp_drafts}}).dump()
        << "\n";
  }
  if (!a.dump_index_topk.empty()) {
    // deepseek_reference.py --topk-out's layout: "layers": {"L": [picks of
    // position 0, 1, ...]}, with the ids the model ran on (the last output
    // token is sampled, never run).
    std::vector<int32_t> ids = a.prompt_ids;
    ids.insert(ids.end(), outputs[0].token_ids.begin(), outputs[0].token_ids.end() - 1);
    nlohmann::json layers = nlohmann::json::object();
    for (const auto& [layer, by_position] : picks) {
      nlohmann::json rows = nlohmann::json::array();
      for (const auto& [pos, sel] : by_position) {
        if (pos != static_cast<int32_t>(rows.size())) {
          throw InternalError(fmt::format("--dump-index-topk: layer {} has no picks for position {}",
                                          layer, rows.size()));
        }
        rows.push_back(sel);
      }
      layers[std::to_string(layer)] = rows;
    }
    std::ofstream dump(a.dump_index_topk);
    if (!dump) throw_input_error("cannot write '{}'", a.dump_index_topk);
    dump << nlohmann::json({{"index_topk", index_topk}, {"ids", ids}, {"layers", layers}}).dump()
         << "\n";
  }
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
  cmd->add_option("--dump-index-topk", args->dump_index_topk,
                  "Also write the indexer's picks per layer and query as JSON (DeepSeek V3.2; "
                  "the format of tools/deepseek_reference.py --topk-out)");
  cmd->add_option("--mtp-out", args->mtp_out,
                  "With --speculative-config method mtp: also write the MTP layer's logits at "
                  "every position and its drafts as JSON (tools/compare_mtp.py)");
  add_engine_flags(*cmd, args->engine);
  return
      [args] { return run_on_rank0(args->model, args->engine, [&] { return run_logits(*args); }); };
}

}  // namespace pagoda::cli
