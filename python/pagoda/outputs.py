"""vLLM's output classes (vllm.outputs, vllm.logprobs) and their making
from the engine's per-request outputs."""

from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass
class Logprob:
    logprob: float
    # 1-based rank in the vocabulary; None for a sampled token outside the
    # requested top N (the engine ranks only those).
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[List[Dict[int, Logprob]]]
    finish_reason: Optional[str] = None  # "stop", "length", "abort"
    # The stop string or stop token id that ended it (None for EOS).
    stop_reason: object = None

    def finished(self):
        return self.finish_reason is not None


@dataclass
class RequestMetrics:
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    num_output_tokens: int = 0
    num_preemptions: int = 0
    time_to_first_token_s: float = 0.0
    time_per_output_token_s: float = 0.0
    e2e_latency_s: float = 0.0


@dataclass
class RequestOutput:
    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    prompt_logprobs: Optional[List[Optional[Dict[int, Logprob]]]]
    outputs: List[CompletionOutput]
    finished: bool
    metrics: Optional[RequestMetrics] = None
    num_cached_tokens: int = 0
    # The metrics of every choice (n > 1); `metrics` is choice 0's.
    choice_metrics: List[RequestMetrics] = field(default_factory=list, repr=False)


def _decode_one(tokenizer, token_id):
    return tokenizer.decode([token_id], skip_special_tokens=False)


def _sample_logprobs(tokenizer, raw):
    """[(token, logprob, [(id, logprob), ...])] -> [{id: Logprob}], the
    sampled token first, then the top N ranked 1..N (as vLLM)."""
    out = []
    for token, logprob, top in raw:
        entry = {}
        rank = next((i + 1 for i, (t, _) in enumerate(top) if t == token), None)
        entry[token] = Logprob(logprob, rank, _decode_one(tokenizer, token))
        for i, (t, lp) in enumerate(top):
            if t not in entry:
                entry[t] = Logprob(lp, i + 1, _decode_one(tokenizer, t))
        out.append(entry)
    return out


def _prompt_logprobs(tokenizer, raw):
    """None for the first prompt position (nothing predicts it), then
    {id: Logprob} with the prompt token first, as vLLM."""
    if raw is None:
        return None
    out = [None]
    for token, logprob, rank, top in raw:
        entry = {token: Logprob(logprob, rank, _decode_one(tokenizer, token))}
        for i, (t, lp) in enumerate(top):
            if t not in entry:
                entry[t] = Logprob(lp, i + 1, _decode_one(tokenizer, t))
        out.append(entry)
    return out


def _stop_reason(tokenizer, raw, params):
    if raw.finish_reason != "stop":
        return None
    if raw.token_ids and raw.token_ids[-1] in params.stop_token_ids:
        return raw.token_ids[-1]
    # A stop string: the text ends where it starts, so the full decode
    # continues with it.
    full = tokenizer.decode(raw.token_ids, skip_special_tokens=params.skip_special_tokens)
    return next((s for s in params.stop if full.startswith(raw.text + s)), None)


def completion_output(tokenizer, index, raw, params, delta=False):
    """`raw` is the engine's output of one choice; `delta`: only its new
    text and ids (RequestOutputKind.DELTA)."""
    logprobs = cumulative = None
    if params.logprobs is not None:
        all_lps = raw.logprobs
        cumulative = float(sum(lp for _, lp, _ in all_lps))
        if delta:
            all_lps = all_lps[len(all_lps) - len(raw.new_token_ids):]
        logprobs = _sample_logprobs(tokenizer, all_lps)
    return CompletionOutput(
        index=index,
        text=raw.new_text if delta else raw.text,
        token_ids=list(raw.new_token_ids if delta else raw.token_ids),
        cumulative_logprob=cumulative,
        logprobs=logprobs,
        finish_reason=raw.finish_reason,
        stop_reason=_stop_reason(tokenizer, raw, params))


def request_output(tokenizer, request_id, prompt, raws, params, delta=False, finished=None):
    """One prompt's RequestOutput from its choices' engine outputs (None for
    a choice with no output yet, left out). `finished` overrides whether all
    choices are done (a delta carries one choice)."""
    present = [(i, r) for i, r in enumerate(raws) if r is not None]
    first = present[0][1]
    metrics = [RequestMetrics(**r.metrics) for _, r in present]
    return RequestOutput(
        request_id=request_id,
        prompt=prompt,
        prompt_token_ids=list(first.prompt_token_ids),
        prompt_logprobs=_prompt_logprobs(tokenizer, first.prompt_logprobs),
        outputs=[completion_output(tokenizer, i, r, params, delta) for i, r in present],
        finished=(len(present) == len(raws) and all(r.finished for _, r in present))
        if finished is None else finished,
        metrics=metrics[0],
        num_cached_tokens=metrics[0].num_cached_tokens,
        choice_metrics=metrics)
