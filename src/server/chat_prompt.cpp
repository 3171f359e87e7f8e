#include "server/chat_prompt.h"

#include <string_view>

#include "core/error.h"
#include "server/api_error.h"
#include "tokenizer/chat_template.h"

namespace pagoda::server {

namespace {

// Python's str.isspace(), which str.strip() uses: transformers strips the
// final message with it, so the cut below must agree on what is whitespace.
bool is_python_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Decodes the code point of the (valid) UTF-8 sequence s[at, at + len).
uint32_t code_point(std::string_view s, size_t at, size_t len) {
  const auto b0 = static_cast<unsigned char>(s[at]);
  uint32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<unsigned char>(s[at + i]) & 0x3F);
  return cp;
}

std::string_view lstrip(std::string_view s) {
  while (!s.empty()) {
    const auto b = static_cast<unsigned char>(s[0]);
    const size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    if (len > s.size() || !is_python_space(code_point(s, 0, len))) break;
    s.remove_prefix(len);
  }
  return s;
}

std::string_view rstrip(std::string_view s) {
  while (!s.empty()) {
    size_t start = s.size() - 1;  // back over continuation bytes to the lead byte
    while (start > 0 && s.size() - start < 4 &&
           (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80)
      --start;
    if (!is_python_space(code_point(s, start, s.size() - start))) break;
    s.remove_suffix(s.size() - start);
  }
  return s;
}

// continue_final_message, as transformers' apply_chat_template does it: the
// render is cut right after the last message's text, dropping whatever the
// template wrote to close that turn. The text is looked up stripped, since
// templates often trim it; its trailing whitespace is kept only where the
// render has the whole message verbatim. (An empty message, like Python's
// rindex(""), cuts nothing.)
std::string cut_after_final_message(const std::string& rendered, const ChatPrompt& p) {
  const auto& last = p.messages.back();
  const std::string content = last.contains("content") && last["content"].is_string()
                                  ? last["content"].get<std::string>()
                                  : "";
  const std::string_view left = lstrip(content);
  const std::string_view both = rstrip(left);
  const size_t at = rendered.rfind(both);
  if (at == std::string::npos) {
    throw bad_request(
        "continue_final_message: the final message's text does not appear in the rendered chat "
        "template, so it cannot be continued",
        "continue_final_message");
  }
  const bool verbatim = std::string_view(rendered).substr(at, left.size()) == content;
  return rendered.substr(0, at + (verbatim ? left.size() : both.size()));
}

}  // namespace

std::string chat_prompt_text(const Tokenizer& tokenizer, const std::string& chat_template,
                             const ChatPrompt& p) {
  if (chat_template.empty()) {
    throw bad_request(
        "this model has no chat template (tokenizer_config.json chat_template); use "
        "/v1/completions",
        "messages");
  }
  ChatTemplateInputs in;
  in.messages = p.messages;
  in.tools = p.tools;
  in.add_generation_prompt = p.add_generation_prompt;
  in.bos_token = tokenizer.bos_token();
  in.eos_token = tokenizer.eos_token();
  in.extra_context = p.chat_template_kwargs;
  std::string text;
  try {
    text = render_chat_template(chat_template, in);
  } catch (const InputError& e) {
    throw bad_request(std::string("chat template: ") + e.what(), "messages");
  }
  if (p.continue_final_message) text = cut_after_final_message(text, p);
  return text;
}

std::vector<int32_t> chat_prompt_ids(const Tokenizer& tokenizer, const std::string& chat_template,
                                     const ChatPrompt& p) {
  const std::string text = chat_prompt_text(tokenizer, chat_template, p);
  // The template writes BOS and other specials where they belong; the
  // tokenizer adds its own only when asked (vLLM's add_special_tokens).
  return tokenizer.encode(text, p.add_special_tokens);
}

}  // namespace pagoda::server
