// Reads prompts from a file: plain text (one prompt per non-empty line) or
// JSONL (.jsonl: each line a JSON string, or an object with "prompt" text
// or "prompt_token_ids").
#pragma once

#include <string>
#include <vector>

#include "engine/llm.h"

namespace pagoda::cli {

std::vector<Prompt> read_prompt_file(const std::string& path);

}  // namespace pagoda::cli
