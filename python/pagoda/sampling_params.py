"""vLLM's SamplingParams: the same keywords and defaults, checked when made
(ValueError with the engine's message), turned into the C++ struct per
request."""

import enum

from . import _pagoda


class RequestOutputKind(enum.IntEnum):
    """What AsyncLLM.generate yields: all text so far, only the new part, or
    just the final output (vLLM's RequestOutputKind)."""
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


class SamplingParams:
    def __init__(self, n=1, presence_penalty=0.0, frequency_penalty=0.0,
                 repetition_penalty=1.0, temperature=1.0, top_p=1.0, top_k=0, min_p=0.0,
                 seed=None, stop=None, stop_token_ids=None, bad_words=None, ignore_eos=False,
                 max_tokens=16, min_tokens=0, logprobs=None, prompt_logprobs=None,
                 detokenize=True, skip_special_tokens=True, spaces_between_special_tokens=True,
                 logit_bias=None, allowed_token_ids=None, include_stop_str_in_output=False,
                 output_kind=RequestOutputKind.CUMULATIVE, priority=0):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be at least 1, got {n!r}")
        if max_tokens is not None and (isinstance(max_tokens, bool) or
                                       not isinstance(max_tokens, int) or max_tokens < 1):
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens!r}")
        for name, value in (("logprobs", logprobs), ("prompt_logprobs", prompt_logprobs)):
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ValueError(f"{name} must be a non-negative integer or None, got {value!r}")
        # vLLM options this engine has no implementation of: refused rather
        # than silently ignored.
        if not detokenize:
            raise ValueError("detokenize=False is not supported")
        if not spaces_between_special_tokens:
            raise ValueError("spaces_between_special_tokens=False is not supported")
        if include_stop_str_in_output:
            raise ValueError("include_stop_str_in_output=True is not supported")
        self.n = n
        self.presence_penalty = presence_penalty
        self.frequency_penalty = frequency_penalty
        self.repetition_penalty = repetition_penalty
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.min_p = min_p
        self.seed = seed
        self.stop = [stop] if isinstance(stop, str) else list(stop or [])
        self.stop_token_ids = list(stop_token_ids or [])
        self.bad_words = list(bad_words or [])
        self.ignore_eos = ignore_eos
        self.max_tokens = max_tokens
        self.min_tokens = min_tokens
        self.logprobs = logprobs
        self.prompt_logprobs = prompt_logprobs
        self.skip_special_tokens = skip_special_tokens
        self.logit_bias = {int(k): float(v) for k, v in (logit_bias or {}).items()}
        self.allowed_token_ids = list(allowed_token_ids) if allowed_token_ids else None
        self.output_kind = RequestOutputKind(output_kind)
        self.priority = priority
        # The engine's own checks (ranges of every field), with its message.
        self._engine_params(max_tokens=2**30 if max_tokens is None else max_tokens).validate()

    def clone(self):
        c = SamplingParams.__new__(SamplingParams)
        c.__dict__.update({k: (list(v) if isinstance(v, list) else v)
                           for k, v in self.__dict__.items()})
        c.logit_bias = dict(self.logit_bias)
        return c

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"SamplingParams({fields})"

    def _engine_choices(self, prompt_len, max_model_len, tokenizer, rng):
        """The C++ parameters of the engine requests for one prompt's n
        choices, expanded as the server expands n: choice c of a seeded
        request samples with seed + c (SamplingParams::for_choice). An
        unseeded choice draws a seed from `rng` (the engine's seed) when
        there is one. `prompt_len()` is asked only when max_tokens is None
        (vLLM: generate up to the context length)."""
        max_tokens = self.max_tokens
        if max_tokens is None:
            max_tokens = max(1, max_model_len - prompt_len())
        base = self._engine_params(max_tokens, tokenizer)
        choices = []
        for c in range(self.n):
            p = base.for_choice(c)
            if p.seed is None and rng is not None:
                p.seed = rng.getrandbits(63)
            choices.append(p)
        return choices

    def _engine_params(self, max_tokens, tokenizer=None):
        """The C++ SamplingParams; `tokenizer` turns bad_words into ids."""
        p = _pagoda.SamplingParams()
        try:
            p.temperature = self.temperature
            p.top_p = self.top_p
            p.top_k = self.top_k
            p.min_p = self.min_p
            p.seed = self.seed
            p.repetition_penalty = self.repetition_penalty
            p.presence_penalty = self.presence_penalty
            p.frequency_penalty = self.frequency_penalty
            p.max_tokens = max_tokens
            p.min_tokens = self.min_tokens
            p.stop = self.stop
            p.stop_token_ids = self.stop_token_ids
            p.ignore_eos = bool(self.ignore_eos)
            p.logprobs = -1 if self.logprobs is None else self.logprobs
            p.prompt_logprobs = -1 if self.prompt_logprobs is None else self.prompt_logprobs
            p.skip_special_tokens = bool(self.skip_special_tokens)
            p.logit_bias = sorted(self.logit_bias.items())
            p.allowed_token_ids = self.allowed_token_ids or []
            p.priority = self.priority
        except TypeError as e:  # a value of the wrong type (pybind11's message)
            raise ValueError(f"bad sampling parameter: {e}") from None
        if tokenizer is not None and self.bad_words:
            p.bad_words_token_ids = tokenizer.bad_words_token_ids(self.bad_words)
        return p
