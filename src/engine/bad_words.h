// vLLM's bad_words: each word becomes the token sequences that would write
// it, which the sampler then never lets the output complete.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace pagoda {

// As vLLM's SamplingParams.update_from_tokenizer: a word (leading spaces
// stripped) tokenized alone, and again after a space when that gives a
// different first token of the same length (a word-initial token, as in
// the middle of text), so it is banned at the start and after a space.
std::vector<std::vector<int32_t>> bad_words_token_ids(const Tokenizer& tok,
                                                      const std::vector<std::string>& words);

}  // namespace pagoda
