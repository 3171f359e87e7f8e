#include "engine/request.h"

namespace pagoda {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop:
      return "stop";
    case FinishReason::Length:
      return "length";
    case FinishReason::Abort:
      return "abort";
    case FinishReason::None:
      return "";
  }
  return "";
}

Request::Request(std::string id, std::vector<int32_t> prompt, SamplingParams sampling,
                 const Tokenizer* tokenizer)
    : request_id(std::move(id)),
      prompt_ids(std::move(prompt)),
      params(std::move(sampling)),
      rng(params),
      detokenizer(std::make_unique<IncrementalDetokenizer>(*tokenizer, prompt_ids,
                                                           params.skip_special_tokens)),
      stop_checker(params.stop) {
  if (params.grammar) grammar = std::make_unique<structured::GrammarMatcher>(params.grammar);
  if (params.prompt_logprobs >= 0) {
    prompt_logprobs = std::make_shared<PromptLogprobs>(params.prompt_logprobs, prompt_ids.size());
  }
}

}  // namespace pagoda
