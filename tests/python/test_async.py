"""AsyncLLM: streaming from asyncio over the server's engine thread."""

import asyncio
import time

import pytest

from pagoda import AsyncLLM, RequestOutputKind, SamplingParams
from conftest import STORIES

GREEDY = dict(temperature=0, max_tokens=40, ignore_eos=True)


@pytest.fixture(scope="module")
def engine():
    e = AsyncLLM(STORIES, max_model_len=512, threads=2)
    yield e
    e.shutdown()


async def collect(engine, prompt, params, request_id, log=None):
    outs = []
    async for out in engine.generate(prompt, params, request_id):
        outs.append(out)
        if log is not None:
            log.append(request_id)
    return outs


def test_stream_equals_the_blocking_call(engine, stories_llm):
    blocking = stories_llm.generate("Once upon a time", SamplingParams(**GREEDY), use_tqdm=False)[0]
    outs = asyncio.run(collect(engine, "Once upon a time", SamplingParams(**GREEDY), "a"))
    final = outs[-1]
    assert final.finished and not any(o.finished for o in outs[:-1])
    assert final.outputs[0].text == blocking.outputs[0].text
    assert final.outputs[0].token_ids == blocking.outputs[0].token_ids
    assert final.prompt_token_ids == blocking.prompt_token_ids
    # Cumulative outputs grow token by token.
    assert len(outs) > 1
    assert all(len(o.outputs[0].token_ids) <= len(n.outputs[0].token_ids) for o, n in zip(outs, outs[1:]))
    # Deltas add up to the same text.
    deltas = asyncio.run(collect(engine, "Once upon a time",
                                 SamplingParams(**GREEDY, output_kind=RequestOutputKind.DELTA), "b"))
    assert "".join(d.outputs[0].text for d in deltas) == blocking.outputs[0].text
    assert sum((d.outputs[0].token_ids for d in deltas), []) == blocking.outputs[0].token_ids
    only = asyncio.run(collect(engine, "Once upon a time",
                               SamplingParams(**GREEDY, output_kind=RequestOutputKind.FINAL_ONLY), "c"))
    assert len(only) == 1 and only[0].outputs[0].text == blocking.outputs[0].text


def test_two_consumers_interleave(engine, stories_llm):
    # Each consumer, once it holds its first output, waits for the other's
    # first output before reading on: this passes only if both streams make
    # progress on one loop at the same time (a generator that blocked the
    # loop while it waited on its stream would time out). Unlike ordering
    # the outputs as they come, it does not depend on whether the engine
    # finishes the first request before the second one arrives.
    prompts = {"x": "Once upon a time", "y": "The little dog"}

    async def main():
        first = {rid: asyncio.Event() for rid in prompts}

        async def consume(rid, other):
            outs = []
            async for out in engine.generate(prompts[rid], SamplingParams(**GREEDY), rid):
                outs.append(out)
                if len(outs) == 1:
                    first[rid].set()
                    await asyncio.wait_for(first[other].wait(), timeout=30)
            return outs

        return await asyncio.gather(consume("x", "y"), consume("y", "x"))

    x, y = asyncio.run(main())
    assert x[-1].finished and y[-1].finished
    # Served side by side, each equals its own blocking run.
    for rid, outs in (("x", x), ("y", y)):
        blocking = stories_llm.generate(prompts[rid], SamplingParams(**GREEDY), use_tqdm=False)[0]
        assert outs[-1].outputs[0].token_ids == blocking.outputs[0].token_ids


def test_n_choices_and_bad_params(engine, stories_llm):
    p = SamplingParams(n=2, temperature=1.0, seed=3, max_tokens=20)
    final = asyncio.run(collect(engine, "Once", p, "n2"))[-1]
    blocking = stories_llm.generate("Once", p, use_tqdm=False)[0]
    assert [c.token_ids for c in final.outputs] == [c.token_ids for c in blocking.outputs]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        asyncio.run(collect(engine, {"prompt_token_ids": [10 ** 6]}, SamplingParams(), "bad"))


def test_cancelling_the_consumer_aborts_the_request(engine):
    async def main():
        got = asyncio.Event()

        async def consume():
            async for _ in engine.generate("Once upon a time", SamplingParams(
                    temperature=0, max_tokens=480, ignore_eos=True), "long"):
                got.set()

        task = asyncio.ensure_future(consume())
        await got.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the engine thread frees the blocks on its next step
        s = engine.get_stats()
        if s["num_running"] == 0 and s["kv_blocks_free"] == s["kv_blocks_total"]:
            break
        time.sleep(0.05)
    s = engine.get_stats()
    assert s["num_running"] == 0 and s["kv_blocks_free"] == s["kv_blocks_total"], s
    # Still serving.
    assert asyncio.run(collect(engine, "Once", SamplingParams(**GREEDY), "after"))[-1].finished
