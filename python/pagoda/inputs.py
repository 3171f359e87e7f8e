"""Prompts as vLLM takes them: text, or TextPrompt / TokensPrompt dicts."""

from typing import List, TypedDict


class TextPrompt(TypedDict):
    prompt: str


class TokensPrompt(TypedDict, total=False):
    prompt_token_ids: List[int]
    prompt: str  # shown as RequestOutput.prompt; the ids are what runs


def parse_prompt(prompt):
    """(prompt shown in the output, text to tokenize or None, ids or None)."""
    if isinstance(prompt, str):
        return prompt, prompt, None
    if isinstance(prompt, dict):
        if "prompt_token_ids" in prompt:
            ids = [int(t) for t in prompt["prompt_token_ids"]]
            if not ids:
                raise ValueError("prompt_token_ids is empty")
            return prompt.get("prompt"), None, ids
        if isinstance(prompt.get("prompt"), str):
            return prompt["prompt"], prompt["prompt"], None
        raise ValueError("a prompt dict needs 'prompt' (text) or 'prompt_token_ids'")
    raise TypeError(f"a prompt is a str or a dict (TextPrompt, TokensPrompt), got "
                    f"{type(prompt).__name__}")


def prompt_list(prompts):
    """One prompt or a sequence of them -> a list."""
    if isinstance(prompts, (str, dict)):
        return [prompts]
    return list(prompts)


def params_per_prompt(sampling_params, num_prompts, default):
    """None, one SamplingParams for all, or one per prompt."""
    if sampling_params is None:
        return [default] * num_prompts
    if isinstance(sampling_params, (list, tuple)):
        if len(sampling_params) != num_prompts:
            raise ValueError(f"got {len(sampling_params)} SamplingParams for {num_prompts} "
                             "prompts: pass one for all or one per prompt")
        return list(sampling_params)
    return [sampling_params] * num_prompts
