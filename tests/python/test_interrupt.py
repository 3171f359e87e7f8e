"""Ctrl-C during a long LLM.generate: the call raises KeyboardInterrupt,
its requests are aborted and the engine serves the next call with every
KV block back in the pool."""

import os
import signal
import threading
import time

import pytest

import pagoda.llm
from pagoda import SamplingParams

LONG = SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)
PROMPTS = [f"Once upon a time {i}" for i in range(32)]


def assert_idle(llm):
    s = llm.get_stats()
    assert s["num_running"] == 0 and s["num_waiting"] == 0, s
    assert s["kv_blocks_free"] == s["kv_blocks_total"], s


def test_sigint_aborts_and_the_engine_stays_usable(stories_llm, monkeypatch):
    expected = stories_llm.generate("The little dog", SamplingParams(temperature=0, max_tokens=20),
                                    use_tqdm=False)[0].outputs[0].token_ids
    assert_idle(stories_llm)
    steps = []
    started = threading.Event()

    class Bar:  # counts engine steps; the first one lets the signal go
        def __init__(self, total, desc=""):
            pass

        def __call__(self, done, total):
            steps.append(done)
            started.set()

        def close(self):
            pass

    def interrupt():
        started.wait(30)
        os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, from another thread

    monkeypatch.setattr(pagoda.llm, "ProgressBar", Bar)
    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        stories_llm.generate(PROMPTS, LONG)
    # Stopped early: 32 x 400 tokens take far more steps than ran.
    assert 0 < len(steps) < 380
    assert_idle(stories_llm)
    again = stories_llm.generate("The little dog", SamplingParams(temperature=0, max_tokens=20),
                                 use_tqdm=False)[0].outputs[0].token_ids
    assert again == expected


def test_an_exception_from_the_progress_callback_aborts(stories_llm, monkeypatch):
    class Bar:
        def __init__(self, total, desc=""):
            self.calls = 0

        def __call__(self, done, total):
            self.calls += 1
            if self.calls == 5:
                raise RuntimeError("stop here")

        def close(self):
            pass

    monkeypatch.setattr(pagoda.llm, "ProgressBar", Bar)
    with pytest.raises(RuntimeError, match="stop here"):
        stories_llm.generate(PROMPTS, LONG)
    assert_idle(stories_llm)


def test_progress_bar_without_tqdm(stories_llm, capfd):
    stories_llm.generate(["Once", "A dog"], SamplingParams(temperature=0, max_tokens=8), use_tqdm=True)
    err = capfd.readouterr().err
    assert "Processed prompts" in err and "2/2" in err


def test_the_gil_is_released_while_the_engine_runs(stories_llm):
    # A Python thread counts during the engine's call (the C++ module's
    # generate, without the Python code around it). Were the GIL held
    # through the engine's steps, the counter would only get the one switch
    # interval (5 ms) after the call returns; released, it counts through
    # the call at a good share of its free rate (measured here first).
    count = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        before = count[0]
        time.sleep(0.1)  # releases the GIL: the counter's free rate
        rate = (count[0] - before) / 0.1
        params = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)._engine_params(200)
        start = time.monotonic()
        before = count[0]
        stories_llm._engine.generate(PROMPTS[:16], [params], None)
        during = count[0] - before
        elapsed = time.monotonic() - start
    finally:
        stop.set()
        t.join()
    assert elapsed > 0.05, elapsed  # long enough to tell the two apart
    assert during > 0.1 * rate * elapsed, (during, rate, elapsed)
