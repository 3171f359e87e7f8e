// TEMPORARY placeholder while the Jinja interpreter lands; replaced before merge.
#include "tokenizer/chat_template.h"

#include "core/error.h"

namespace pagoda {

std::string render_chat_template(const std::string&, const ChatTemplateInputs&) {
  throw InputError("chat templates are not available in this build");
}

}  // namespace pagoda
