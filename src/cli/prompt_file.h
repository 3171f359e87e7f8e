// Prompts given as data rather than text: a file of prompts, plain text
// (one prompt per non-empty line) or JSONL (.jsonl: each line a JSON
// string, or an object with "prompt" text or "prompt_token_ids"), and a
// flag's comma list of token ids.
#pragma once

#include <string>
#include <vector>

#include "engine/llm.h"

namespace pagoda::cli {

std::vector<Prompt> read_prompt_file(const std::string& path);

// "0,17,42" -> a prompt of those ids, used as they are (no BOS added).
// Throws InputError naming `flag` for an empty list or a bad id; ids past
// the vocabulary are the engine's to refuse.
Prompt parse_prompt_token_ids(const std::string& list, const std::string& flag);

}  // namespace pagoda::cli
