// Minutes-long checks of the server under hostile clients at the scale of
// issue 24's probe, with the default timeouts: run by scripts/soak.sh, not
// by the normal suite (server_hostile.test.mjs has the fast versions).
// Usage: node --test server_soak.test.mjs   (PAGODA_BINARY and PAGODA_MODEL in the environment)
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { waitForServer } from "./server_process.mjs";
import { openSockets, drip, timed, sseStream, sleep } from "./server_clients.mjs";

const binary = process.env.PAGODA_BINARY;
const model = process.env.PAGODA_MODEL;
if (!binary || !model) throw new Error("set PAGODA_BINARY and PAGODA_MODEL");

const spawned = [];  // killed at the end whatever happened
after(() => {
  for (const p of spawned) if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
});

async function withServer(args, fn) {
  const proc = spawn(binary, ["serve", "--model", model, "--port", "0", ...args]);
  spawned.push(proc);
  const server = await waitForServer(proc, 30000);
  try {
    await fn(server);
  } finally {
    const exited = new Promise((r) => { proc.removeAllListeners("exit"); proc.on("exit", (code) => r(code)); });
    proc.kill("SIGTERM");
    assert.equal(await exited, 0);
  }
}

const fetchT = (url, opts = {}) => fetch(url, { signal: AbortSignal.timeout(5000), ...opts });

// /health latencies (ms) sampled every `everyMs` for `forMs`.
async function healthLatencies(url, forMs, everyMs) {
  const out = [];
  const end = Date.now() + forMs;
  while (Date.now() < end) {
    const { ms, value } = await timed(() => fetchT(url + "/health"));
    assert.equal(value.status, 200);
    out.push(ms);
    await sleep(everyMs);
  }
  return out;
}

test("slowloris at the default deadlines: 200 header drips and 200 body drips (one byte / 2 s)", { timeout: 120000 }, async () => {
  await withServer([], async (server) => {
    const heads = await openSockets(server.url, 200);
    const bodies = await openSockets(server.url, 200);
    const stopH = drip(heads, () => "X-Slow: 1\r\n", "GET /health HTTP/1.1\r\nHost: x\r\n", 2000);
    const stopB = drip(bodies, () => "a", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n", 2000);
    try {
      const lat = await healthLatencies(server.url, 33000, 500);
      assert.ok(Math.max(...lat) < 250, `/health worst ${Math.max(...lat)} ms`);
      // Header deadline 10 s, body deadline 30 s: all of them were cut off.
      assert.ok(heads.every((s) => s.closed && /^HTTP\/1\.1 408 /.test(s.received)));
      assert.ok(bodies.every((s) => s.closed && /^HTTP\/1\.1 408 /.test(s.received)));
    } finally {
      stopH();
      stopB();
      for (const s of [...heads, ...bodies]) s.socket.destroy();
    }
  });
});

test("/health and /metrics within milliseconds during a 500-stream burst", { timeout: 300000 }, async () => {
  await withServer(["--max-pending-requests", "1000"], async (server) => {
    const streams = Array.from({ length: 500 }, (_, i) =>
      sseStream(server.url + "/v1/completions", { prompt: "Once upon a time", max_tokens: 200 + (i % 50), ignore_eos: true, stream: true }));
    let finished = false;
    const all = Promise.all(streams.map((s) => s.done)).finally(() => { finished = true; });
    const lat = [];
    while (!finished) {
      for (const path of ["/health", "/metrics"]) {
        const { ms, value } = await timed(() => fetchT(server.url + path).then((r) => r.text().then(() => r)));
        assert.equal(value.status, 200);
        lat.push(ms);
      }
      await sleep(100);
    }
    const results = await all;
    for (const r of results) assert.ok(r.text.endsWith("data: [DONE]\n\n"));
    lat.sort((a, b) => a - b);
    console.log(`# /health+/metrics during 500 streams: median ${lat[lat.length >> 1]} ms, worst ${lat[lat.length - 1]} ms`);
    assert.ok(lat[lat.length - 1] < 500, `worst ${lat[lat.length - 1]} ms`);
  });
});

test("graceful shutdown, 5 rounds of 20 streams x n 4: every stream ends with [DONE], every choice with a finish_reason", { timeout: 300000 }, async () => {
  let streamsCut = 0, choicesCut = 0;
  for (let round = 0; round < 5; round++) {
    const proc = spawn(binary, ["serve", "--model", model, "--port", "0", "--shutdown-grace", "30"]);
    spawned.push(proc);
    const server = await waitForServer(proc, 30000);
    const streams = Array.from({ length: 20 }, (_, i) =>
      sseStream(server.url + "/v1/completions", { prompt: "Once upon a time", n: 4, max_tokens: 100 + 20 * i, ignore_eos: true, stream: true }));
    await sleep(50 + 100 * round);
    const exited = new Promise((r) => { proc.removeAllListeners("exit"); proc.on("exit", (code) => r(code)); });
    proc.kill("SIGTERM");
    for (const r of await Promise.all(streams.map((s) => s.done))) {
      if (!r.text.endsWith("data: [DONE]\n\n")) streamsCut++;
      const finished = new Set(r.events.filter((e) => e.choices?.[0]?.finish_reason).map((e) => e.choices[0].index));
      choicesCut += 4 - finished.size;
    }
    assert.equal(await exited, 0);
  }
  assert.equal(streamsCut, 0, `${streamsCut} of 100 streams ended without [DONE]`);
  assert.equal(choicesCut, 0, `${choicesCut} of 400 choices ended without a finish_reason`);
});
