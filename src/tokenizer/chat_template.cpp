#include "tokenizer/chat_template.h"

#include <map>
#include <memory>
#include <mutex>

#include "core/error.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/evaluator.h"

namespace pagoda {

namespace {

// A server renders the same template for every request: parse it once.
std::shared_ptr<const jinja::Template> compiled(const std::string& source) {
  static std::mutex mutex;
  static std::string cached_source;
  static std::shared_ptr<const jinja::Template> cached;
  std::lock_guard lock(mutex);
  if (!cached || cached_source != source) {
    cached = jinja::parse(source);
    cached_source = source;
  }
  return cached;
}

}  // namespace

std::string render_chat_template(const std::string& source, const ChatTemplateInputs& inputs) {
  const auto tmpl = compiled(source);
  // The variables transformers' apply_chat_template passes; tools is None
  // (defined, but none) when the request has none.
  std::map<std::string, jinja::Value> vars;
  vars["messages"] =
      jinja::Value(inputs.messages.is_null() ? jinja::Json::array() : inputs.messages);
  vars["tools"] = jinja::Value(inputs.tools.is_null() ? jinja::Json() : inputs.tools);
  vars["add_generation_prompt"] = jinja::Value(jinja::Json(inputs.add_generation_prompt));
  vars["bos_token"] = jinja::Value(jinja::Json(inputs.bos_token));
  vars["eos_token"] = jinja::Value(jinja::Json(inputs.eos_token));
  if (inputs.extra_context.is_object()) {
    for (const auto& [key, value] : inputs.extra_context.items()) vars[key] = jinja::Value(value);
  }
  return jinja::render(*tmpl, vars);
}

}  // namespace pagoda
