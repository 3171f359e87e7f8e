// `pagoda generate`: offline generation for prompts from flags or a file.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/prompt_file.h"
#include "core/error.h"
#include "engine/llm.h"
#include "server/prompt_logprobs_json.h"
#include "structured/gbnf_parser.h"
#include "structured/grammar_compiler.h"

namespace pagoda::cli {

namespace {

struct GenerateArgs {
  std::string model;
  std::vector<std::string> prompts;
  std::vector<std::string> prompt_token_ids;  // one comma list per prompt
  std::string prompts_file;
  bool json = false;
  bool no_progress = false;
  bool quiet = false;
  int64_t seed = -1;
  // Structured outputs: at most one of these.
  std::string json_schema_file, regex, grammar_file;
  std::vector<std::string> choices;
  SamplingParams sampling;
  EngineOptions engine;
};

void add_sampling_flags(CLI::App& cmd, SamplingParams& s, int64_t& seed) {
  cmd.add_option("--max-tokens,-n", s.max_tokens, "Most tokens to generate per prompt")
      ->capture_default_str();
  cmd.add_option("--min-tokens", s.min_tokens, "Tokens to generate before EOS/stop ids may end it")
      ->capture_default_str();
  cmd.add_option("--temperature,-t", s.temperature, "Sampling temperature; 0 = greedy")
      ->capture_default_str();
  cmd.add_option("--top-p", s.top_p,
                 "Nucleus sampling: keep the most likely tokens up to this mass")
      ->capture_default_str();
  cmd.add_option("--top-k", s.top_k, "Keep only the k most likely tokens (0 or -1 = all)")
      ->capture_default_str();
  cmd.add_option("--min-p", s.min_p,
                 "Drop tokens less likely than min-p x the top token's probability")
      ->capture_default_str();
  cmd.add_option("--seed", seed, "Random seed per request (same seed, same output)")
      ->check(CLI::Range(int64_t{0}, INT64_MAX));
  cmd.add_option("--repetition-penalty", s.repetition_penalty,
                 "Penalise tokens already in the prompt or output (>1 discourages)")
      ->capture_default_str();
  cmd.add_option("--presence-penalty", s.presence_penalty,
                 "Subtract from logits of tokens already generated, once")
      ->capture_default_str();
  cmd.add_option("--frequency-penalty", s.frequency_penalty,
                 "Subtract from logits per occurrence in the output")
      ->capture_default_str();
  cmd.add_option("--stop", s.stop, "Stop string (repeatable); not included in the output");
  cmd.add_option("--stop-token-ids", s.stop_token_ids, "Token ids that end generation (comma list)")
      ->delimiter(',');
  cmd.add_flag("--ignore-eos", s.ignore_eos, "Keep generating after the EOS token");
  cmd.add_option("--logprobs", s.logprobs,
                 "Report the chosen token's logprob and the top N alternatives (JSON output)");
  cmd.add_option("--prompt-logprobs", s.prompt_logprobs,
                 "Report every prompt token's logprob and rank and the top N alternatives at "
                 "each prompt position, as vLLM's prompt_logprobs (JSON output)");
}

void print_progress(size_t done, size_t total) {
  const int width = 40;
  const int filled = static_cast<int>(width * done / std::max<size_t>(total, 1));
  std::fprintf(stderr, "\r[%.*s%*s] %zu/%zu", filled,
               "========================================", width - filled, "", done, total);
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

nlohmann::json output_json(const RequestOutput& out, const std::string& prompt,
                           const Tokenizer& tok) {
  nlohmann::json j = {{"prompt", prompt},
                      {"prompt_token_ids", out.prompt_ids},
                      {"text", out.text},
                      {"token_ids", out.token_ids},
                      {"finish_reason", finish_reason_name(out.finish_reason)},
                      {"metrics",
                       {{"prompt_tokens", out.metrics.num_prompt_tokens},
                        {"output_tokens", out.metrics.num_output_tokens},
                        {"cached_tokens", out.metrics.num_cached_tokens},
                        {"preemptions", out.metrics.num_preemptions},
                        {"time_to_first_token_s", out.metrics.time_to_first_token_s},
                        {"time_per_output_token_s", out.metrics.time_per_output_token_s},
                        {"e2e_latency_s", out.metrics.e2e_latency_s}}}};
  if (!out.logprobs.empty()) {
    nlohmann::json lp = nlohmann::json::array();
    for (const SampledToken& s : out.logprobs) {
      nlohmann::json top = nlohmann::json::array();
      for (const auto& [id, logprob] : s.top_logprobs) {
        top.push_back({{"token_id", id}, {"token", tok.id_to_token(id)}, {"logprob", logprob}});
      }
      lp.push_back({{"token_id", s.token}, {"logprob", s.logprob}, {"top_logprobs", top}});
    }
    j["logprobs"] = lp;
  }
  if (out.prompt_logprobs)
    j["prompt_logprobs"] = server::prompt_logprobs_json(*out.prompt_logprobs, tok);
  return j;
}

std::string read_text_file(const std::string& path, const char* flag) {
  std::ifstream in(path);
  if (!in) throw_input_error("{}: cannot read '{}'", flag, path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The constraint the flags ask for (Kind::None without one). Checked here,
// before the model loads, so a bad schema fails fast.
structured::OutputSpec output_spec(const GenerateArgs& a) {
  using Kind = structured::OutputSpec::Kind;
  structured::OutputSpec spec;
  int given = 0;
  if (!a.json_schema_file.empty()) {
    spec = {Kind::JsonSchema, read_text_file(a.json_schema_file, "--json-schema")};
    ++given;
  }
  if (!a.regex.empty()) {
    spec = {Kind::Regex, a.regex};
    ++given;
  }
  if (!a.grammar_file.empty()) {
    spec = {Kind::Grammar, read_text_file(a.grammar_file, "--grammar")};
    ++given;
  }
  if (!a.choices.empty()) {
    spec = {Kind::Choice, nlohmann::json(a.choices).dump()};
    ++given;
  }
  if (given > 1) throw_input_error("give at most one of --json-schema, --regex, --grammar and --choice");
  if (given == 1) {
    const char* flag = !a.json_schema_file.empty() ? "--json-schema"
                       : !a.regex.empty()          ? "--regex"
                       : !a.grammar_file.empty()   ? "--grammar"
                                                   : "--choice";
    try {
      structured::parse_gbnf(spec.to_gbnf());
    } catch (const InputError& e) {
      throw_input_error("{}: {}", flag, e.what());
    }
  }
  return spec;
}

int run_generate(GenerateArgs& a) {
  if (a.seed >= 0) a.sampling.seed = static_cast<uint64_t>(a.seed);
  a.sampling.validate();
  const structured::OutputSpec spec = output_spec(a);
  std::vector<Prompt> prompts;
  for (const std::string& p : a.prompts) prompts.push_back(Prompt::from_text(p));
  for (const std::string& ids : a.prompt_token_ids)
    prompts.push_back(parse_prompt_token_ids(ids, "--prompt-token-ids"));
  if (!a.prompts_file.empty()) {
    for (Prompt& p : read_prompt_file(a.prompts_file)) prompts.push_back(std::move(p));
  }
  if (prompts.empty()) {
    throw_input_error(
        "no prompts: give --prompt TEXT, --prompt-token-ids IDS or --prompts-file FILE");
  }

  LLM llm(a.model, a.engine);
  if (!a.quiet) print_engine_summary(llm.engine());
  if (!spec.empty()) a.sampling.grammar = llm.engine().grammar_compiler().compile(spec);
  const bool show_progress = !a.no_progress && prompts.size() > 1 && isatty(STDERR_FILENO);
  const auto outputs =
      llm.generate(prompts, {a.sampling}, show_progress ? LLM::Progress(print_progress) : nullptr);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string prompt_text = prompts[i].token_ids.empty()
                                        ? prompts[i].text
                                        : llm.tokenizer().decode(prompts[i].token_ids);
    if (a.json) {
      // Text decoded from arbitrary token ids may end inside a UTF-8
      // sequence: invalid bytes become U+FFFD rather than an exception.
      std::cout << output_json(outputs[i], prompt_text, llm.tokenizer())
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
    } else {
      std::cout << prompt_text << outputs[i].text << "\n";
      if (i + 1 < outputs.size()) std::cout << "\n";
    }
  }
  if (!a.quiet && a.engine.speculative_config) {
    const SpecDecodeStats s = llm.engine().stats().spec_decode;
    std::fprintf(stderr,
                 "pagoda: speculative decoding: %lld drafts, %lld of %lld draft tokens accepted "
                 "(%.1f%%), mean acceptance length %.2f\n",
                 static_cast<long long>(s.num_drafts), static_cast<long long>(s.num_accepted_tokens),
                 static_cast<long long>(s.num_draft_tokens), 100 * s.acceptance_rate(),
                 s.mean_acceptance_length());
  }
  return 0;
}

}  // namespace

Runner add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text for prompts (offline batch)");
  cmd->add_option("--model,-m", args->model, "Model directory (Hugging Face layout)")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--prompt,-p", args->prompts, "Prompt text (repeatable)");
  cmd->add_option("--prompt-token-ids", args->prompt_token_ids,
                  "Prompt as token ids, e.g. 0,17,42, used as they are (repeatable)");
  cmd->add_option("--prompts-file", args->prompts_file,
                  "File of prompts: one per line, or .jsonl with \"prompt\"/\"prompt_token_ids\"")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--json", args->json, "Print one JSON object per prompt (ids, text, metrics)");
  cmd->add_flag("--no-progress", args->no_progress, "Do not draw a progress bar on stderr");
  cmd->add_flag("--quiet,-q", args->quiet, "Print only the generated text (no engine summary)");
  add_sampling_flags(*cmd, args->sampling, args->seed);
  cmd->add_option("--json-schema", args->json_schema_file,
                  "Constrain the output to JSON valid under this JSON schema (file; see README)");
  cmd->add_option("--regex", args->regex, "Constrain the output to match this regular expression");
  cmd->add_option("--grammar", args->grammar_file, "Constrain the output to this GBNF grammar (file)");
  cmd->add_option("--choice", args->choices, "Constrain the output to one of these strings (repeatable)");
  add_engine_flags(*cmd, args->engine);
  return [args] {
    return run_on_rank0(args->model, args->engine, [&] { return run_generate(*args); });
  };
}

}  // namespace pagoda::cli
