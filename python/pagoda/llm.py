"""vLLM's offline LLM class over Pagoda's engine (engine/llm.h)."""

import itertools
import os
import random

from . import _pagoda
from .engine_args import engine_options
from .inputs import params_per_prompt, parse_prompt, prompt_list
from .outputs import request_output
from .progress import ProgressBar
from .sampling_params import SamplingParams
from .tokenizer import Tokenizer, chat_body


class LLM:
    """LLM(model, *, quantization=None, kv_cache_memory=None, max_model_len=None,
    max_num_seqs=256, max_num_batched_tokens=2048, block_size=None,
    enable_prefix_caching=True, seed=None, threads=None, kv_cache_dtype="auto", ...)

    `model` is a local checkpoint directory. `seed` makes the requests
    without a seed of their own reproducible from run to run."""

    def __init__(self, model, **kwargs):
        options, seed = engine_options(model, **kwargs)
        self._engine = _pagoda.Engine(os.fspath(model), options)
        self._tokenizer = Tokenizer(self._engine.tokenizer)
        self._rng = random.Random(seed) if seed is not None else None
        self._request_counter = itertools.count()

    def get_tokenizer(self):
        return self._tokenizer

    def get_stats(self):
        """The engine's counters: num_running, num_waiting, kv_blocks_total,
        kv_blocks_free (cached blocks no request uses count as free), ..."""
        return self._engine.stats()

    @property
    def max_model_len(self):
        return self._engine.max_model_len

    def generate(self, prompts, sampling_params=None, use_tqdm=True):
        parsed = [parse_prompt(p) for p in prompt_list(prompts)]
        params = params_per_prompt(sampling_params, len(parsed), SamplingParams())
        if not parsed:
            return []
        engine_prompts, engine_params = [], []
        for (_, text, ids), sp in zip(parsed, params):
            if not isinstance(sp, SamplingParams):
                raise TypeError(f"sampling_params must be pagoda.SamplingParams, got "
                                f"{type(sp).__name__}")

            def prompt_len(text=text, ids=ids):
                return len(ids if ids is not None else self._tokenizer.encode(text))

            for p in sp._engine_choices(prompt_len, self._engine.max_model_len, self._tokenizer,
                                        self._rng):
                engine_prompts.append(text if ids is None else ids)
                engine_params.append(p)
        bar = ProgressBar(len(engine_prompts)) if use_tqdm else None
        try:
            raws = self._engine.generate(engine_prompts, engine_params, bar)
        finally:
            if bar is not None:
                bar.close()
        outputs, at = [], 0
        for (shown, _, _), sp in zip(parsed, params):
            outputs.append(request_output(self._tokenizer, str(next(self._request_counter)),
                                          shown, raws[at:at + sp.n], sp))
            at += sp.n
        return outputs

    def chat(self, messages, sampling_params=None, use_tqdm=True, chat_template=None,
             add_generation_prompt=True, continue_final_message=False, tools=None,
             chat_template_kwargs=None):
        """One conversation (a list of {"role", "content"} dicts) or a list
        of them, rendered by the server's chat template code."""
        one = isinstance(messages, (list, tuple)) and (not messages or isinstance(messages[0], dict))
        conversations = [messages] if one else list(messages)
        prompts = []
        for conv in conversations:
            body = chat_body(list(conv), tools, add_generation_prompt, continue_final_message,
                             chat_template_kwargs)
            tok = self._engine.tokenizer
            prompts.append({"prompt": tok.render_chat(body, chat_template),
                            "prompt_token_ids": tok.chat_prompt_ids(body, chat_template)})
        return self.generate(prompts, sampling_params, use_tqdm)
