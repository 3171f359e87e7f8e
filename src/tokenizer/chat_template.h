// Renders a Hugging Face chat template (Jinja2) for a conversation.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace pagoda {

struct ChatTemplateInputs {
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;
  bool add_generation_prompt = true;
  std::string bos_token, eos_token;
  nlohmann::ordered_json extra_context;  // e.g. {"enable_thinking": false}
};

// Throws InputError for template syntax errors or raise_exception().
std::string render_chat_template(const std::string& source, const ChatTemplateInputs& inputs);

}  // namespace pagoda
