#include "server/tokenize.h"

#include "server/api_error.h"
#include "server/chat_prompt.h"
#include "server/protocol.h"

namespace pagoda::server {

nlohmann::json tokenize(GenerationContext& ctx, const std::string& body) {
  const TokenizeRequest r = parse_tokenize_request(body);
  if (!r.model.empty() && r.model != ctx.model_name) {
    throw ApiError(404, "NotFoundError", "The model `" + r.model + "` does not exist.", "model");
  }
  const Tokenizer& tok = ctx.engine.tokenizer();
  const std::vector<int32_t> ids = r.chat ? chat_prompt_ids(tok, ctx.chat_template, r.chat_prompt)
                                          : tok.encode(r.prompt, r.add_special_tokens);
  nlohmann::json out = {{"count", ids.size()},
                        {"max_model_len", ctx.engine.engine().max_model_len()},
                        {"tokens", ids}};
  if (r.return_token_strs) {
    // As vLLM's convert_ids_to_tokens: the raw vocabulary entries ("Ġthe",
    // "▁Once", "<0x0A>"), not decoded text.
    nlohmann::json strs = nlohmann::json::array();
    for (int32_t id : ids) strs.push_back(tok.id_to_token(id));
    out["token_strs"] = std::move(strs);
  }
  return out;
}

}  // namespace pagoda::server
