// Turns a chat request's conversation into prompt ids with the model's chat
// template. /v1/chat/completions and /tokenize both call this one function,
// so a client that counts a conversation's tokens with /tokenize gets
// exactly the prompt the chat request runs; so does the Python package's
// LLM.chat (python/pagoda/_pagoda.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/protocol.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::server {

// The rendered conversation, before tokenization (transformers'
// apply_chat_template with tokenize=False). Throws as chat_prompt_ids.
std::string chat_prompt_text(const Tokenizer& tokenizer, const std::string& chat_template,
                             const ChatPrompt& prompt);

// `chat_template` is the model's ("" when it has none: a 400). Throws
// ApiError (400) for template errors and for continue_final_message when the
// last message's text does not appear in the render.
std::vector<int32_t> chat_prompt_ids(const Tokenizer& tokenizer, const std::string& chat_template,
                                     const ChatPrompt& prompt);

}  // namespace pagoda::server
