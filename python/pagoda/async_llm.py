"""vLLM's AsyncLLM: streaming generation from asyncio, over the engine
thread the server uses (engine/async_engine.h)."""

import asyncio
import os
import random
from concurrent.futures import ThreadPoolExecutor

from . import _pagoda
from .engine_args import engine_options
from .inputs import parse_prompt
from .outputs import request_output
from .sampling_params import RequestOutputKind, SamplingParams
from .tokenizer import Tokenizer

# How long a waiting thread blocks in Stream.next before looking again (an
# output wakes it at once; this only bounds how long a cancelled wait lingers).
_POLL_MS = 100


class AsyncLLM:
    """AsyncLLM(model, **engine arguments as LLM).

        async for out in engine.generate(prompt, SamplingParams(...), "req-1"):
            print(out.outputs[0].text)

    Outputs are cumulative unless sampling_params.output_kind says DELTA or
    FINAL_ONLY. Cancelling the consuming task (or closing the generator)
    aborts the request and frees its KV blocks."""

    def __init__(self, model, **kwargs):
        options, seed = engine_options(model, **kwargs)
        self._engine = _pagoda.AsyncEngine(os.fspath(model), options)
        self._tokenizer = Tokenizer(self._engine.tokenizer)
        self._rng = random.Random(seed) if seed is not None else None
        # Threads that wait on the engine's streams (Stream.next releases
        # the GIL), apart from the loop's default executor.
        self._waiters = ThreadPoolExecutor(max_workers=64, thread_name_prefix="pagoda-stream")
        self._children = {}  # request id -> its engine request ids (n choices)

    async def get_tokenizer(self):
        return self._tokenizer

    def get_stats(self):
        return self._engine.stats()

    async def abort(self, request_id):
        for rid in self._children.get(request_id, [request_id]):
            self._engine.abort(rid)

    def shutdown(self):
        """Aborts what is running and stops the engine thread."""
        self._engine.shutdown(0)
        self._waiters.shutdown(wait=False, cancel_futures=True)

    async def generate(self, prompt, sampling_params=None, request_id=None):
        sp = sampling_params or SamplingParams()
        if request_id is None:
            raise ValueError("request_id is required (unique among running requests)")
        shown, text, ids = parse_prompt(prompt)
        if ids is None:
            ids = self._tokenizer.encode(text)
        choices = sp._engine_choices(lambda: len(ids), self._engine.max_model_len, self._tokenizer,
                                     self._rng)
        rids = [request_id] if sp.n == 1 else [f"{request_id}-{c}" for c in range(sp.n)]
        streams = []
        try:
            for rid, p in zip(rids, choices):
                streams.append(self._engine.submit(rid, ids, p))
        except BaseException:
            for rid in rids[:len(streams)]:
                self._engine.abort(rid)
            raise
        self._children[request_id] = rids
        loop = asyncio.get_running_loop()
        queue = asyncio.Queue()

        async def pump(choice, stream):
            try:
                while True:
                    out = await loop.run_in_executor(self._waiters, stream.next, _POLL_MS)
                    if out is not None:
                        queue.put_nowait((choice, out))
                        if out.finished:
                            return
                    elif stream.done():
                        return
            except Exception as e:  # noqa: BLE001 (handed to the consumer)
                queue.put_nowait((choice, e))

        pumps = [asyncio.ensure_future(pump(c, s)) for c, s in enumerate(streams)]
        latest = [None] * len(rids)
        done = [False] * len(rids)
        try:
            while not all(done):
                choice, out = await queue.get()
                if isinstance(out, Exception):
                    raise out
                latest[choice] = out
                done[choice] = out.finished
                if sp.output_kind == RequestOutputKind.FINAL_ONLY and not all(done):
                    continue
                if sp.output_kind == RequestOutputKind.DELTA:
                    only = [out if i == choice else None for i in range(len(rids))]
                    yield request_output(self._tokenizer, request_id, shown, only, sp,
                                         delta=True, finished=all(done))
                else:
                    yield request_output(self._tokenizer, request_id, shown, latest, sp)
        finally:
            for t in pumps:
                t.cancel()
            for rid, finished in zip(rids, done):
                if not finished:
                    self._engine.abort(rid)
            self._children.pop(request_id, None)
