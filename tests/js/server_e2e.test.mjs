// End-to-end tests of `pagoda serve` with the official OpenAI client.
// Usage: node --test server_e2e.test.mjs   (PAGODA_BINARY and PAGODA_MODEL in the environment)
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import OpenAI from "openai";
import { waitForServer } from "./server_process.mjs";

const binary = process.env.PAGODA_BINARY;
const model = process.env.PAGODA_MODEL;
if (!binary || !model) throw new Error("set PAGODA_BINARY and PAGODA_MODEL");

// Starts a server on a free port; resolves to {proc, url, stderr()}.
function startServer(extraArgs = []) {
  const proc = spawn(binary, ["serve", "--model", model, "--served-model-name", "stories", "--port", "0", ...extraArgs]);
  return waitForServer(proc, 30000);
}

function stopServer(server) {
  return new Promise((resolve) => {
    server.proc.removeAllListeners("exit");
    server.proc.on("exit", (code, signal) => resolve({ code, signal }));
    server.proc.kill("SIGTERM");
  });
}

// Offline greedy results from `pagoda generate`, the reference for the server.
function offlineGreedy(prompts, maxTokens) {
  const out = execFileSync(binary, ["generate", "--model", model, "--temperature", "0", "--max-tokens", String(maxTokens), "--json", "--quiet",
    ...prompts.flatMap((p) => ["--prompt", p])], { encoding: "utf8" });
  return out.trim().split("\n").map((l) => JSON.parse(l).text);
}

const prompts = ["Once upon a time", "The little dog", "Lily and Tom went to the park", "One day, a big bird",
  "Sam had a red ball", "The sun was hot and", "There was a tiny mouse", "Mom said"];
let server, client;

before(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "unused", maxRetries: 0 });
});
after(async () => {
  const { code } = await stopServer(server);
  assert.equal(code, 0, "SIGTERM must end the server with exit code 0");
});

test("models and health", async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ["stories"]);
  const health = await fetch(server.url + "/health");
  assert.equal(health.status, 200);
});

test("greedy completions equal offline generate", async () => {
  const expected = offlineGreedy(prompts, 24);
  for (let i = 0; i < prompts.length; i++) {
    const r = await client.completions.create({ model: "stories", prompt: prompts[i], max_tokens: 24, temperature: 0 });
    assert.equal(r.choices[0].text, expected[i], prompts[i]);
    assert.equal(r.choices[0].finish_reason, "length");
    assert.equal(r.usage.completion_tokens, 24);
  }
});

test("streaming concatenates to the same text, with usage", async () => {
  const [expected] = offlineGreedy([prompts[0]], 32);
  const stream = await client.completions.create({ model: "stories", prompt: prompts[0], max_tokens: 32, temperature: 0,
    stream: true, stream_options: { include_usage: true } });
  let text = "", finish = null, usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, expected);
  assert.equal(finish, "length");
  assert.equal(usage.completion_tokens, 32);
});

test("n > 1, seeds, stop strings, logprobs, token-id prompts", async () => {
  const a = await client.completions.create({ model: "stories", prompt: prompts[1], max_tokens: 20, temperature: 1.0, seed: 7, n: 3 });
  const b = await client.completions.create({ model: "stories", prompt: prompts[1], max_tokens: 20, temperature: 1.0, seed: 7, n: 3 });
  assert.equal(a.choices.length, 3);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
  assert.ok(new Set(a.choices.map((c) => c.text)).size > 1, "choices should differ");

  const [full] = offlineGreedy([prompts[0]], 40);
  const stop = await client.completions.create({ model: "stories", prompt: prompts[0], max_tokens: 40, temperature: 0, stop: ["park"] });
  assert.equal(stop.choices[0].text, full.slice(0, full.indexOf("park")));
  assert.equal(stop.choices[0].finish_reason, "stop");

  const lp = await client.completions.create({ model: "stories", prompt: prompts[0], max_tokens: 5, temperature: 0, logprobs: 3 });
  const l = lp.choices[0].logprobs;
  assert.equal(l.tokens.length, 5);
  assert.equal(l.token_logprobs.length, 5);
  for (let i = 0; i < 5; i++) {
    const top = Object.values(l.top_logprobs[i]);
    assert.ok(top.length >= 1 && top.length <= 3);
    assert.ok(l.token_logprobs[i] <= 0);
    assert.ok(Math.abs(Math.max(...top) - l.token_logprobs[i]) < 1e-5, "greedy token is the top logprob");
  }
  const tok = await (await fetch(server.url + "/tokenize", { method: "POST", body: JSON.stringify({ prompt: prompts[0] }) })).json();
  const byIds = await client.completions.create({ model: "stories", prompt: tok.tokens, max_tokens: 12, temperature: 0 });
  assert.equal(byIds.choices[0].text, full.slice(0, byIds.choices[0].text.length));
  const detok = await (await fetch(server.url + "/detokenize", { method: "POST", body: JSON.stringify({ tokens: tok.tokens }) })).json();
  assert.equal(detok.prompt, "<s> " + prompts[0]);
});

test("chat without a chat template is a clear 400", async () => {
  await assert.rejects(client.chat.completions.create({ model: "stories", messages: [{ role: "user", content: "hi" }] }),
    (e) => e.status === 400 && /chat template/.test(e.message));
});

test("load: 64 requests, 16 at a time, mixed streaming", async () => {
  const maxTokens = 24;
  const expected = offlineGreedy(prompts, maxTokens);
  let next = 0;
  const results = [];
  async function worker() {
    while (next < 64) {
      const i = next++;
      const p = i % prompts.length;
      let text = "";
      if (i % 2) {
        const s = await client.completions.create({ model: "stories", prompt: prompts[p], max_tokens: maxTokens, temperature: 0, stream: true });
        for await (const c of s) text += c.choices.map((x) => x.text).join("");
      } else {
        text = (await client.completions.create({ model: "stories", prompt: prompts[p], max_tokens: maxTokens, temperature: 0 })).choices[0].text;
      }
      results.push([p, text]);
    }
  }
  await Promise.all(Array.from({ length: 16 }, worker));
  assert.equal(results.length, 64);
  for (const [p, text] of results) assert.equal(text, expected[p], prompts[p]);
  const metrics = await (await fetch(server.url + "/metrics")).text();
  assert.match(metrics, /^pagoda_num_requests_running 0$/m);
  const total = Number(metrics.match(/^pagoda_kv_cache_blocks_total (\d+)/m)[1]);
  const free = Number(metrics.match(/^pagoda_kv_cache_blocks_free (\d+)/m)[1]);
  assert.equal(free, total);
});

test("clients that disconnect mid-stream are aborted; others finish", async () => {
  const count = (text, name) => Number(text.match(new RegExp(`^${name} (\\d+)`, "m"))[1]);
  const before = await (await fetch(server.url + "/metrics")).text();
  const abortedBefore = count(before, "pagoda_requests_aborted_total");
  const finishedBefore = count(before, "pagoda_requests_finished_total");
  const expected = offlineGreedy([prompts[2]], 30);
  const drop = Array.from({ length: 8 }, async () => {
    const controller = new AbortController();
    const s = await client.completions.create({ model: "stories", prompt: prompts[0], max_tokens: 400, temperature: 0, ignore_eos: true, stream: true },
      { signal: controller.signal });
    let n = 0;
    try {
      for await (const _ of s) if (++n === 3) controller.abort();
    } catch (e) {
      assert.ok(e.name === "AbortError" || /abort/i.test(String(e)), String(e));
    }
  });
  const keep = Array.from({ length: 4 }, async () =>
    (await client.completions.create({ model: "stories", prompt: prompts[2], max_tokens: 30, temperature: 0 })).choices[0].text);
  await Promise.all(drop);
  for (const text of await Promise.all(keep)) assert.equal(text, expected[0]);
  // Each dropped stream is aborted when the server's next write fails. A
  // client the OS holds back (a loaded machine) may read its 3 chunks only
  // after the tiny model wrote all 400 tokens into the socket buffer: that
  // stream finished, and is counted so; most must have been aborted.
  let metrics = "", aborted = 0, finished = 0;
  for (let i = 0; i < 100; i++) {  // aborts are noticed on the next write
    metrics = await (await fetch(server.url + "/metrics")).text();
    aborted = count(metrics, "pagoda_requests_aborted_total") - abortedBefore;
    finished = count(metrics, "pagoda_requests_finished_total") - finishedBefore;
    if (aborted + finished >= 12 && /^pagoda_num_requests_running 0$/m.test(metrics)) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(aborted + finished, 12, metrics);
  assert.ok(aborted >= 4, `only ${aborted} of 8 dropped streams were aborted\n${metrics}`);
  assert.match(metrics, /^pagoda_num_requests_running 0$/m);
  const total = Number(metrics.match(/^pagoda_kv_cache_blocks_total (\d+)/m)[1]);
  assert.equal(Number(metrics.match(/^pagoda_kv_cache_blocks_free (\d+)/m)[1]), total);
  assert.match(server.stderr(), /aborted: client disconnected/);
});

test("bad input gets the right 4xx and a JSON error; the server still works", async () => {
  const post = (path, body, headers = {}) => fetch(server.url + path, { method: "POST", body, headers: { "Content-Type": "application/json", ...headers } });
  const cases = [
    ["/v1/completions", "{not json", 400],
    ["/v1/completions", "[1, 2]", 400],
    ["/v1/completions", JSON.stringify({ prompt: 5 }), 400],
    ["/v1/completions", JSON.stringify({ prompt: "hi", max_tokens: "ten" }), 400],
    ["/v1/completions", JSON.stringify({ prompt: "hi", max_tokens: -3 }), 400],
    ["/v1/completions", JSON.stringify({ prompt: "hi", max_tokens: 100000 }), 400],
    ["/v1/completions", JSON.stringify({ prompt: "hi", temperature: -1 }), 400],
    ["/v1/completions", JSON.stringify({ prompt: "hi", top_p: 0 }), 400],
    ["/v1/completions", JSON.stringify({ prompt: "hi", n: 0 }), 400],
    ["/v1/completions", JSON.stringify({ prompt: "hi", priority: 3 }), 400, "priority"],  // fcfs server
    ["/v1/completions", JSON.stringify({ prompt: "hi", max_tokens: 4, min_tokens: 5 }), 400, "min_tokens"],
    ["/v1/completions", JSON.stringify({ prompt: "hi", priority: 1.5 }), 400],
    ["/v1/completions", JSON.stringify({ prompt: "hi", model: "gpt-4" }), 404],
    ["/v1/completions", JSON.stringify({ prompt: "once ".repeat(600) }), 400],
    ["/v1/completions", JSON.stringify({ prompt: [1, 2, 99999] }), 400],
    ["/v1/completions", JSON.stringify({ prompt: [] }), 400],
    ["/v1/completions", JSON.stringify({ prompt: "hi", stop: [""] }), 400],
    ["/v1/completions", Buffer.from([0x7b, 0x22, 0x70, 0x72, 0x6f, 0x6d, 0x70, 0x74, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d]), 400],
    ["/v1/chat/completions", JSON.stringify({ messages: [] }), 400],
    ["/v1/chat/completions", JSON.stringify({ messages: [{ content: "no role" }] }), 400],
    ["/v1/completions", JSON.stringify({ prompt: "x".repeat(9 << 20) }), 413],
    ["/tokenize", JSON.stringify({ prompt: 3 }), 400],
    ["/detokenize", JSON.stringify({ tokens: [-1] }), 400],
    ["/v1/nothing-here", "{}", 404],
    // Issue 24, 4.7: each a 400 naming the field, not a 500 or a silent accept.
    ["/v1/completions", '{"prompt": "hi", "temperature": 1e400}', 400, "temperature"],
    ["/v1/completions", '{"prompt": "hi", "max_tokens": 1e400}', 400, "max_tokens"],
    ["/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], "stream": true, "stream_options": {"include_usage": -1e999}}', 400, "stream_options.include_usage"],
    ["/v1/completions", '{"prompt": "hi", "top_k": 18446744073709551615}', 400, "top_k"],
    ["/v1/completions", '{"prompt": "hi", "seed": 18446744073709551615}', 400, "seed"],
    ["/v1/completions", JSON.stringify({ prompt: "hi", logit_bias: "x" }), 400, "logit_bias"],
    ["/v1/completions", JSON.stringify({ prompt: "hi", logit_bias: { 5: 101 } }), 400, "logit_bias"],
    ["/v1/completions", JSON.stringify({ prompt: "hi", logit_bias: { x: 1 } }), 400, "logit_bias"],
    ["/v1/completions", JSON.stringify({ prompt: "hi", logit_bias: { 99999: 1 } }), 400, "logit_bias"],
    ["/v1/chat/completions", JSON.stringify({ messages: [{ role: "user", content: "hi" }], logit_bias: { 1: "x" } }), 400, "logit_bias"],
    ["/v1/completions", JSON.stringify({ prompt: "hi", allowed_token_ids: [] }), 400, "allowed_token_ids"],
    ["/v1/completions", JSON.stringify({ prompt: "hi", allowed_token_ids: [99999] }), 400, "allowed_token_ids"],
    ["/v1/completions", JSON.stringify({ prompt: "hi", bad_words: "once" }), 400, "bad_words"],
    ["/v1/completions", JSON.stringify({ prompt: "hi", best_of: 3 }), 400, "best_of"],
    ["/v1/completions", JSON.stringify({ prompt: "hi", response_format: { type: "xml" } }), 400, "response_format"],
    ["/v1/completions", JSON.stringify({ prompt: "hi", stop: Array(1025).fill("x") }), 400, "stop"],
  ];
  for (const [path, body, status, param] of cases) {
    const r = await post(path, body);
    assert.equal(r.status, status, `${path} ${String(body).slice(0, 60)}`);
    const j = await r.json();
    assert.ok(j.error && typeof j.error.message === "string" && j.error.type, JSON.stringify(j));
    if (param) assert.equal(j.error.param, param, JSON.stringify(j));
  }
  // vLLM puts no cap on stop strings (this was 16); an empty logit_bias is
  // no bias at all.
  const stops = Array.from({ length: 200 }, (_, i) => `never-${i}`);
  const many = await client.completions.create({ model: "stories", prompt: "Once upon a time", max_tokens: 4, temperature: 0,
    stop: stops, logit_bias: {} });
  assert.equal(many.usage.completion_tokens, 4);
  const ok = await client.completions.create({ model: "stories", prompt: "Once upon a time", max_tokens: 4, temperature: 0 });
  assert.equal(ok.usage.completion_tokens, 4);
});

// OpenAI's logit_bias and vLLM's allowed_token_ids / bad_words change what
// is sampled, for the requests that carry them only.
test("logit_bias, allowed_token_ids and bad_words", async () => {
  const base = { model: "stories", prompt: "Once upon a time", max_tokens: 12, temperature: 1, seed: 11, return_token_ids: true };
  const biased = await client.completions.create({ ...base, logit_bias: { 300: 100 } });
  assert.deepEqual(biased.choices[0].token_ids, Array(12).fill(300));
  const banned = await client.completions.create({ ...base, temperature: 0, logit_bias: { 300: -100 }, max_tokens: 24 });
  assert.ok(!banned.choices[0].token_ids.includes(300));
  const allowed = [300, 301, 302];
  const restricted = await client.completions.create({ ...base, max_tokens: 16, allowed_token_ids: allowed });
  assert.equal(restricted.choices[0].token_ids.length, 16);
  assert.ok(restricted.choices[0].token_ids.every((t) => allowed.includes(t)), JSON.stringify(restricted.choices[0].token_ids));
  // An unbiased request in the same batch is untouched: greedy equals offline.
  const [plainResult, other] = await Promise.all([
    client.completions.create({ model: "stories", prompt: prompts[0], max_tokens: 24, temperature: 0 }),
    client.completions.create({ ...base, logit_bias: { 300: 100 } }),
  ]);
  assert.equal(plainResult.choices[0].text, offlineGreedy([prompts[0]], 24)[0]);
  assert.deepEqual(other.choices[0].token_ids, Array(12).fill(300));
  // bad_words: the greedy text's first word never appears as its tokens.
  const greedy = await client.completions.create({ ...base, temperature: 0, max_tokens: 24 });
  const word = (greedy.choices[0].text.match(/[A-Za-z]{3,}/) || [""])[0];
  assert.ok(word.length > 0, greedy.choices[0].text);
  const wordIds = (await (await fetch(server.url + "/tokenize", { method: "POST", body: JSON.stringify({ prompt: word, add_special_tokens: false }) })).json()).tokens;
  const contains = (ids, seq) => ids.some((_, i) => seq.every((t, k) => ids[i + k] === t));
  assert.ok(contains(greedy.choices[0].token_ids, wordIds), `${word} ${wordIds} ${greedy.choices[0].token_ids}`);
  const clean = await client.completions.create({ ...base, temperature: 0, max_tokens: 24, bad_words: [word] });
  assert.ok(!contains(clean.choices[0].token_ids, wordIds), `${word} still in ${clean.choices[0].text}`);
  assert.notEqual(clean.choices[0].text, greedy.choices[0].text);
});

test("api key, queue limit", async () => {
  const secured = await startServer(["--api-key", "sekret", "--max-pending-requests", "1"]);
  try {
    const noKey = await fetch(secured.url + "/v1/models");
    assert.equal(noKey.status, 401);
    assert.ok((await noKey.json()).error);
    const c = new OpenAI({ baseURL: secured.url + "/v1", apiKey: "sekret", maxRetries: 0 });
    assert.equal((await c.models.list()).data.length, 1);
    // Requests sent together: the first fills the queue (a 500-token request
    // takes ~0.1 s here), the ones arriving meanwhile are refused with 503.
    const results = await Promise.allSettled(Array.from({ length: 6 }, () =>
      c.completions.create({ model: "stories", prompt: "Once", max_tokens: 500, temperature: 0, ignore_eos: true })));
    const served = results.filter((r) => r.status === "fulfilled");
    const refused = results.filter((r) => r.status === "rejected");
    assert.ok(served.length >= 1 && refused.length >= 1, `${served.length} served, ${refused.length} refused`);
    for (const r of refused) assert.equal(r.reason.status, 503, String(r.reason));
    for (const r of served) assert.equal(r.value.usage.completion_tokens, 500);
  } finally {
    assert.equal((await stopServer(secured)).code, 0);
  }
});

test("priority scheduling: the priority field is accepted and leaves greedy output unchanged", async () => {
  const prio = await startServer(["--scheduling-policy", "priority", "--max-num-seqs", "1"]);
  try {
    const c = new OpenAI({ baseURL: prio.url + "/v1", apiKey: "none", maxRetries: 0 });
    const req = (priority) => c.completions.create({ model: "stories", prompt: "Once upon a time", max_tokens: 12, temperature: 0, priority });
    const [low, high] = await Promise.all([req(7), req(-7)]);
    const plain = await client.completions.create({ model: "stories", prompt: "Once upon a time", max_tokens: 12, temperature: 0 });
    assert.equal(low.choices[0].text, plain.choices[0].text);
    assert.equal(high.choices[0].text, plain.choices[0].text);
    const bad = await fetch(prio.url + "/v1/completions", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ prompt: "hi", priority: "high" }) });
    assert.equal(bad.status, 400);
  } finally {
    assert.equal((await stopServer(prio)).code, 0);
  }
});

// Issue 24, 4.9: preemption is visible from outside, under Pagoda's name and
// vLLM's (so vLLM dashboards work), and vLLM's names carry the same values.
test("metrics: a tiny KV pool's preemptions show in /metrics, with vLLM's names", async () => {
  // Room for about two 44-token sequences (as test_generate's tiny pool):
  // eight at once must preempt.
  const tiny = await startServer(["--block-size", "4", "--max-model-len", "64", "--kv-cache-memory", "204800"]);
  try {
    const c = new OpenAI({ baseURL: tiny.url + "/v1", apiKey: "none", maxRetries: 0 });
    const value = (text, name) => {
      const m = text.match(new RegExp("^" + name.replace(/[{}]/g, "\\$&") + " (\\S+)$", "m"));
      assert.ok(m, `${name} missing from /metrics`);
      return Number(m[1]);
    };
    const before = await (await fetch(tiny.url + "/metrics")).text();
    const vllm = (n) => `vllm:${n}{model_name="stories",engine="0"}`;
    assert.equal(value(before, "pagoda_num_preemptions_total"), 0);
    assert.equal(value(before, vllm("num_preemptions_total")), 0);
    const outs = await Promise.all(prompts.map((p) =>
      c.completions.create({ model: "stories", prompt: p, max_tokens: 40, temperature: 0, ignore_eos: true })));
    for (const o of outs) assert.equal(o.usage.completion_tokens, 40);
    const after = await (await fetch(tiny.url + "/metrics")).text();
    const preemptions = value(after, "pagoda_num_preemptions_total");
    assert.ok(preemptions > 0, "no preemption counted:\n" + after);
    assert.equal(value(after, vllm("num_preemptions_total")), preemptions);
    assert.match(after, /^# TYPE vllm:num_preemptions_total counter$/m);
    for (const [ours, theirs] of [["pagoda_prompt_tokens_total", "prompt_tokens_total"],
      ["pagoda_generation_tokens_total", "generation_tokens_total"], ["pagoda_num_requests_running", "num_requests_running"],
      ["pagoda_num_requests_waiting", "num_requests_waiting"], ["pagoda_kv_cache_usage_perc", "kv_cache_usage_perc"],
      ["pagoda_prefix_cache_queries_total", "prefix_cache_queries_total"], ["pagoda_prefix_cache_hits_total", "prefix_cache_hits_total"]]) {
      assert.equal(value(after, vllm(theirs)), value(after, ours), theirs);
    }
    assert.equal(value(after, vllm("generation_tokens_total")), 8 * 40);
    assert.equal(value(after, `vllm:request_success_total{model_name="stories",engine="0",finished_reason="length"}`), 8);
    assert.equal(value(after, vllm("time_to_first_token_seconds_count")), 8);
  } finally {
    assert.equal((await stopServer(tiny)).code, 0);
  }
});
