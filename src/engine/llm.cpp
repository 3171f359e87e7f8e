#include "engine/llm.h"

#include <unordered_map>

#include "core/error.h"

namespace pagoda {

LLM::LLM(const std::string& model_dir, const EngineOptions& options)
    : engine_(model_dir, options) {}

std::vector<int32_t> LLM::encode(const std::string& text) const {
  return engine_.tokenizer().encode(text, /*add_special_tokens=*/true);
}

namespace {

// Aborts the call's requests that have not finished (`results`, indexed as
// `index` says; empty: none has) and steps the engine until it has reported
// them, so their KV blocks are back in the pool. Runs while an exception is
// in flight: an error of the cleanup itself is swallowed (the engine is then
// broken anyway) so the caller sees the original one.
void abort_unfinished(LLMEngine& engine, const std::unordered_map<std::string, size_t>& index,
                      const std::vector<RequestOutput>& results) {
  try {
    for (const auto& [id, i] : index) {
      if (results.empty() || !results[i].finished) engine.abort_request(id);
    }
    do {
      engine.step();  // reports (and forgets) the aborted requests
    } while (engine.has_unfinished());
  } catch (...) {
  }
}

}  // namespace

std::vector<RequestOutput> LLM::generate(const std::vector<Prompt>& prompts,
                                         const std::vector<SamplingParams>& params,
                                         const Progress& progress) {
  if (params.size() != 1 && params.size() != prompts.size()) {
    throw_input_error("got {} sampling parameter sets for {} prompts", params.size(),
                      prompts.size());
  }
  // Tokenize and validate everything first, so a bad prompt fails the call
  // before any work is queued.
  std::vector<std::vector<int32_t>> ids(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    ids[i] = prompts[i].token_ids.empty() ? encode(prompts[i].text) : prompts[i].token_ids;
    (params.size() == 1 ? params[0] : params[i]).validate();
  }
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string id = "offline-" + std::to_string(next_request_id_++);
    index[id] = i;
    // Only each request's final output is kept: the engine makes no others.
    SamplingParams p = params.size() == 1 ? params[0] : params[i];
    p.output_kind = RequestOutputKind::FinalOnly;
    try {
      engine_.add_request(id, std::move(ids[i]), p);
    } catch (const InputError& e) {
      abort_unfinished(engine_, index, {});
      throw InputError("prompt " + std::to_string(i) + ": " + e.what());
    }
  }
  std::vector<RequestOutput> results(prompts.size());
  size_t done = 0;
  try {
    while (engine_.has_unfinished()) {
      for (RequestOutput& out : engine_.step()) {
        if (!out.finished) continue;
        results[index.at(out.request_id)] = std::move(out);
        ++done;
      }
      if (progress) progress(done, prompts.size());
    }
  } catch (...) {
    // The progress callback interrupted the call (Python's Ctrl-C) or a
    // step failed: abort what is left, so its KV blocks go back to the pool
    // and the engine serves the next call.
    abort_unfinished(engine_, index, results);
    throw;
  }
  return results;
}

std::vector<RequestOutput> LLM::generate(const std::vector<std::string>& prompts,
                                         const SamplingParams& params) {
  std::vector<Prompt> p;
  for (const std::string& t : prompts) p.push_back(Prompt::from_text(t));
  return generate(p, std::vector<SamplingParams>{params});
}

}  // namespace pagoda
