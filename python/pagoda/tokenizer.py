"""The model's tokenizer with the Hugging Face method names vLLM users call
(LLM.get_tokenizer()). Chat rendering is the server's own C++ function, so
a conversation becomes the same prompt here as on /v1/chat/completions."""

import json


def chat_body(conversation, tools=None, add_generation_prompt=True,
              continue_final_message=False, chat_template_kwargs=None):
    """A chat request body as the server reads it (server/protocol.h)."""
    body = {"messages": conversation, "add_generation_prompt": add_generation_prompt,
            "continue_final_message": continue_final_message,
            "chat_template_kwargs": dict(chat_template_kwargs or {})}
    if tools is not None:
        body["tools"] = tools
    try:
        return json.dumps(body)
    except TypeError as e:
        raise ValueError(f"messages and tools must be JSON values: {e}") from None


class Tokenizer:
    def __init__(self, engine_tokenizer):
        self._tok = engine_tokenizer

    def encode(self, text, add_special_tokens=True):
        return self._tok.encode(text, add_special_tokens)

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": self.encode(text, add_special_tokens)}

    def decode(self, token_ids, skip_special_tokens=True):
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        return self._tok.decode(list(token_ids), skip_special_tokens)

    def convert_ids_to_tokens(self, ids):
        if isinstance(ids, int):
            return self._tok.id_to_token(ids)
        return [self._tok.id_to_token(i) for i in ids]

    def convert_tokens_to_ids(self, tokens):
        if isinstance(tokens, str):
            return self._tok.token_to_id(tokens)
        return [self._tok.token_to_id(t) for t in tokens]

    @property
    def vocab_size(self):
        return self._tok.vocab_size

    def __len__(self):
        return self._tok.vocab_size

    @property
    def bos_token_id(self):
        return self._tok.bos_token_id

    @property
    def eos_token_id(self):
        return self._tok.eos_token_id

    @property
    def bos_token(self):
        return self._tok.bos_token or None

    @property
    def eos_token(self):
        return self._tok.eos_token or None

    @property
    def chat_template(self):
        return self._tok.chat_template or None

    def apply_chat_template(self, conversation, tools=None, chat_template=None,
                            add_generation_prompt=False, continue_final_message=False,
                            tokenize=True, **chat_template_kwargs):
        """transformers' signature and defaults: token ids, or the rendered
        text with tokenize=False; extra keywords reach the template."""
        body = chat_body(conversation, tools, add_generation_prompt, continue_final_message,
                         chat_template_kwargs)
        if tokenize:
            return self._tok.chat_prompt_ids(body, chat_template)
        return self._tok.render_chat(body, chat_template)

    def bad_words_token_ids(self, words):
        return self._tok.bad_words_token_ids(list(words))
