"""LLM.generate against the `pagoda generate` CLI and against itself."""

import json
import os

import pytest

import pagoda
from pagoda import LLM, SamplingParams
from conftest import STORIES, run_cli

PROMPTS = ["Once upon a time", "The little dog", "Lily saw a big"]


def test_imports_the_installed_package():
    # The module comes from the venv's site-packages, not the source tree.
    assert "site-packages" in pagoda.__file__, pagoda.__file__


def test_greedy_equals_cli_token_for_token(stories_llm):
    cli = [json.loads(line) for line in run_cli(
        "generate", "--model", STORIES, "--max-tokens", "48", "--temperature", "0",
        "--max-model-len", "512", "--json", "--quiet", "--no-progress",
        *[a for p in PROMPTS for a in ("--prompt", p)]).splitlines()]
    outs = stories_llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=48),
                                use_tqdm=False)
    assert len(outs) == len(cli) == len(PROMPTS)
    for prompt, out, ref in zip(PROMPTS, outs, cli):
        assert out.prompt == prompt
        assert out.prompt_token_ids == ref["prompt_token_ids"]
        assert out.outputs[0].token_ids == ref["token_ids"]
        assert out.outputs[0].text == ref["text"]
        assert out.outputs[0].finish_reason == ref["finish_reason"]
        assert out.finished and out.metrics.num_prompt_tokens == len(ref["prompt_token_ids"])


def test_mixed_batch_equals_each_prompt_alone(stories_llm):
    ids = stories_llm.get_tokenizer().encode("One day, a girl")
    prompts = ["Once upon a time", {"prompt_token_ids": ids}, {"prompt": "The cat"}]
    params = [SamplingParams(temperature=0, max_tokens=30),
              SamplingParams(temperature=0.9, top_p=0.9, seed=11, max_tokens=25),
              SamplingParams(temperature=0.7, top_k=20, seed=5, max_tokens=20, stop=["."])]
    batch = stories_llm.generate(prompts, params, use_tqdm=False)
    for prompt, p, out in zip(prompts, params, batch):
        alone = stories_llm.generate(prompt, p, use_tqdm=False)[0]
        assert out.outputs[0].token_ids == alone.outputs[0].token_ids
        assert out.outputs[0].text == alone.outputs[0].text
    assert batch[1].prompt is None and batch[1].prompt_token_ids == ids
    assert "." not in batch[2].outputs[0].text


def test_seeds_are_reproducible(stories_llm):
    p = SamplingParams(temperature=1.0, seed=7, max_tokens=40)
    a = stories_llm.generate("Once upon a time", p, use_tqdm=False)[0].outputs[0]
    b = stories_llm.generate("Once upon a time", p, use_tqdm=False)[0].outputs[0]
    assert a.token_ids == b.token_ids
    other = stories_llm.generate("Once upon a time", SamplingParams(temperature=1.0, seed=8, max_tokens=40),
                                 use_tqdm=False)[0].outputs[0]
    assert other.token_ids != a.token_ids
    # n choices are the server's expansion: choice c samples with seed + c.
    three = stories_llm.generate("Once upon a time", SamplingParams(n=3, temperature=1.0, seed=7, max_tokens=40),
                                 use_tqdm=False)[0]
    assert [c.index for c in three.outputs] == [0, 1, 2]
    assert three.outputs[0].token_ids == a.token_ids
    assert three.outputs[1].token_ids == other.token_ids


def test_engine_seed_makes_unseeded_requests_reproducible():
    p = SamplingParams(temperature=1.0, max_tokens=30)
    runs = [LLM(STORIES, seed=123, max_model_len=256).generate(["Once", "A dog"], p, use_tqdm=False)
            for _ in range(2)]
    assert [o.outputs[0].token_ids for o in runs[0]] == [o.outputs[0].token_ids for o in runs[1]]


def test_logprobs_shapes(stories_llm):
    out = stories_llm.generate("Once upon a time",
                               SamplingParams(temperature=0, max_tokens=5, logprobs=3, prompt_logprobs=2),
                               use_tqdm=False)[0]
    c = out.outputs[0]
    assert len(c.logprobs) == 5
    for token, entry in zip(c.token_ids, c.logprobs):
        # Greedy: the sampled token is the top one, ranked 1, and first.
        assert list(entry)[0] == token and entry[token].rank == 1
        assert len(entry) == 3 and sorted(e.rank for e in entry.values()) == [1, 2, 3]
        assert entry[token].decoded_token == stories_llm.get_tokenizer().decode([token], skip_special_tokens=False)
    assert c.cumulative_logprob == pytest.approx(sum(e[t].logprob for t, e in zip(c.token_ids, c.logprobs)))
    assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == len(out.prompt_token_ids)
    for token, entry in zip(out.prompt_token_ids[1:], out.prompt_logprobs[1:]):
        assert list(entry)[0] == token and entry[token].rank >= 1


def test_stop_reason(stories_llm):
    greedy = stories_llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=30),
                                  use_tqdm=False)[0].outputs[0]
    stop_id = greedy.token_ids[3]
    out = stories_llm.generate("Once upon a time",
                               SamplingParams(temperature=0, max_tokens=30, stop_token_ids=[stop_id]),
                               use_tqdm=False)[0].outputs[0]
    assert out.finish_reason == "stop" and out.stop_reason == stop_id
    word = greedy.text.split()[2]
    out = stories_llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=30, stop=[word]),
                               use_tqdm=False)[0].outputs[0]
    assert out.finish_reason == "stop" and out.stop_reason == word and word not in out.text


def test_tokenizer(stories_llm):
    tok = stories_llm.get_tokenizer()
    ids = tok.encode("Once upon a time")
    assert ids == stories_llm.generate("Once upon a time", SamplingParams(max_tokens=1),
                                       use_tqdm=False)[0].prompt_token_ids
    assert tok.decode(ids) == "Once upon a time"
    assert tok.bos_token_id is not None and ids[0] == tok.bos_token_id


@pytest.mark.parametrize("kwargs, message", [
    (dict(temperature=-1), "temperature must be a finite number >= 0"),
    (dict(top_p=0), "top_p must be in \\(0, 1\\]"),
    (dict(top_k=-5), "top_k must be"),
    (dict(max_tokens=0), "max_tokens must be at least 1"),
    (dict(min_tokens=5, max_tokens=2), "min_tokens must be in"),
    (dict(n=0), "n must be at least 1"),
    (dict(presence_penalty=3), "presence_penalty must be in \\[-2, 2\\]"),
    (dict(logprobs=50), "logprobs must be in \\[0, 20\\]"),
    (dict(logit_bias={3: 500}), "logit_bias values must be in"),
    (dict(seed=-1), "bad sampling parameter"),
    (dict(stop=[""]), "stop strings must not be empty"),
])
def test_bad_sampling_params_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_bad_requests_raise_value_error(stories_llm):
    vocab = stories_llm.get_tokenizer().vocab_size
    with pytest.raises(ValueError, match="outside the vocabulary"):
        stories_llm.generate({"prompt_token_ids": [1, vocab + 5]}, use_tqdm=False)
    with pytest.raises(ValueError, match="got 2 SamplingParams for 3 prompts"):
        stories_llm.generate(["a", "b", "c"], [SamplingParams(), SamplingParams()], use_tqdm=False)
    with pytest.raises(ValueError, match="prompt_token_ids is empty"):
        stories_llm.generate({"prompt_token_ids": []}, use_tqdm=False)
    with pytest.raises(ValueError, match="allowed_token_ids holds token id"):
        stories_llm.generate("a", SamplingParams(allowed_token_ids=[vocab]), use_tqdm=False)
    # Nothing was left queued by the refused calls.
    s = stories_llm.get_stats()
    assert s["num_running"] == s["num_waiting"] == 0 and s["kv_blocks_free"] == s["kv_blocks_total"]


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(tensor_parallel_size=2), ValueError, "tensor_parallel_size=2"),
    (dict(kv_cache_dtype="fp4"), ValueError, "unknown KV cache dtype 'fp4'"),
    (dict(quantization="awq"), ValueError, "awq"),
    (dict(dtype="float16"), ValueError, "dtype='float16'"),
    (dict(max_num_seqs=0), ValueError, "max_num_seqs must be a positive integer"),
    (dict(tokenizer="/elsewhere"), ValueError, "tokenizer"),
    (dict(no_such_option=1), TypeError, "no_such_option"),
])
def test_bad_engine_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        LLM(STORIES, **kwargs)


def test_gpu_memory_utilization_is_accepted_with_a_warning():
    with pytest.warns(UserWarning, match="gpu_memory_utilization is ignored"):
        LLM(STORIES, gpu_memory_utilization=0.9, max_model_len=64)


def test_missing_model_directory():
    with pytest.raises(FileNotFoundError, match="model directory not found"):
        LLM("/nonexistent/model")


def test_checkpoint_with_a_missing_tensor_raises(tmp_path):
    # Copy stories260k with one tensor dropped from the safetensors header.
    for name in os.listdir(STORIES):
        if name != "model.safetensors":
            with open(os.path.join(STORIES, name), "rb") as f, open(tmp_path / name, "wb") as g:
                g.write(f.read())
    with open(os.path.join(STORIES, "model.safetensors"), "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    dropped = next(k for k in header if k.endswith("norm.weight") and "layers" not in k)
    del header[dropped]
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(tmp_path / "model.safetensors", "wb") as g:
        g.write(len(h).to_bytes(8, "little") + h + data[8 + n:])
    with pytest.raises(ValueError, match=dropped.replace(".", "\\.")):
        LLM(str(tmp_path))
