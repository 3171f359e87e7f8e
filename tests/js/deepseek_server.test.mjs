// `pagoda serve` on a tiny random DeepSeek V3 checkpoint (MLA + MoE, FP8
// block-scaled weights; written by tools/make_deepseek_checkpoint.py; V3.2
// with its lightning indexer when PAGODA_DEEPSEEK_ARCH=v32; V4 with
// compressed attention, FP8 weights and FP4 experts when it is v4, written
// by tools/make_deepseek_v4_checkpoint.py) with
// the official OpenAI client: completions from token ids and text, batched
// and streamed, equal the offline greedy tokens of `pagoda generate`.
// Usage: node --test deepseek_server.test.mjs   (PAGODA_BINARY and PAGODA_SOURCE_DIR in the environment)
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { waitForServer } from "./server_process.mjs";

const binary = process.env.PAGODA_BINARY;
const src = process.env.PAGODA_SOURCE_DIR;
if (!binary || !src) throw new Error("set PAGODA_BINARY and PAGODA_SOURCE_DIR");
const dir = mkdtempSync(join(tmpdir(), "pagoda-deepseek-"));
const model = join(dir, "model");
const arch = process.env.PAGODA_DEEPSEEK_ARCH ?? "v3";
// V4's compressed caches need 256-position blocks (its default).
const engineArgs = arch === "v4" ? ["--threads", "1"] : ["--block-size", "4", "--threads", "1"];

// Greedy token ids of each prompt (lists of ids), one request at a time.
function offlineGreedy(prompts, maxTokens) {
  const file = join(dir, "prompts.jsonl");
  writeFileSync(file, prompts.map((p) => JSON.stringify({ prompt_token_ids: p })).join("\n") + "\n");
  const out = execFileSync(binary, ["generate", "--model", model, "--prompts-file", file, "--temperature", "0",
    "--ignore-eos", "--max-tokens", String(maxTokens), "--json", "--quiet", "--max-num-seqs", "1",
    ...engineArgs], { encoding: "utf8" });
  return out.trim().split("\n").map((l) => JSON.parse(l));
}

let server, client;
before(async () => {
  const writer = arch === "v4"
    ? [join(src, "tools/make_deepseek_v4_checkpoint.py"), "--out", model, "--fp8", "--fp4-experts", "--seed", "5"]
    : [join(src, "tools/make_deepseek_checkpoint.py"), "--out", model, "--fp8", "--seed", "5", "--arch", arch];
  execFileSync("/usr/bin/python3", writer, { stdio: "ignore" });
  const proc = spawn(binary, ["serve", "--model", model, "--served-model-name", "ds", "--port", "0", ...engineArgs]);
  server = await waitForServer(proc, 60000);
  client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "unused", maxRetries: 0 });
});

after(() => {
  server?.proc.removeAllListeners("exit");
  server?.proc.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

const prompts = [[1, 45, 300, 17, 88, 102, 7, 256, 511, 3, 99, 140], [1, 45, 300, 17, 9, 9], [5, 6, 7]];

test("token-id completions, one by one and batched, equal the offline greedy tokens", async () => {
  const want = offlineGreedy(prompts, 20);
  const req = { model: "ds", max_tokens: 20, temperature: 0, ignore_eos: true };
  const single = await Promise.all(prompts.map((p) => client.completions.create({ ...req, prompt: p })));
  assert.deepEqual(single.map((r) => r.choices[0].text), want.map((w) => w.text));
  const batch = await client.completions.create({ ...req, prompt: prompts });
  const texts = batch.choices.sort((a, b) => a.index - b.index).map((c) => c.text);
  assert.deepEqual(texts, want.map((w) => w.text));
  assert.deepEqual(single.map((r) => r.usage.completion_tokens), want.map((w) => w.token_ids.length));
});

test("streaming equals the whole response", async () => {
  const [want] = offlineGreedy([prompts[0]], 24);
  const stream = await client.completions.create({ model: "ds", prompt: prompts[0], max_tokens: 24, temperature: 0,
    ignore_eos: true, stream: true });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
  assert.equal(text, want.text);
});

test("a text prompt is served", async () => {
  const r = await client.completions.create({ model: "ds", prompt: "Once upon a time", max_tokens: 8,
    temperature: 0 });
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(["length", "stop"].includes(r.choices[0].finish_reason));
});

test("/metrics reports the KV cache's token capacity, as the start-up line does", async () => {
  const line = server.stderr().match(/, ([\d/]+) blocks in (\d+) pool\(s\), (\d+)-token blocks = (\d+) token slots/);
  const pools = line[1].split("/").map(Number);
  assert.equal(pools.length, Number(line[2]));
  const metrics = await (await fetch(server.url + "/metrics")).text();
  const capacity = Number(metrics.match(/^pagoda_kv_cache_token_capacity (\d+)/m)[1]);
  const blocks = Number(metrics.match(/^pagoda_kv_cache_blocks_total (\d+)/m)[1]);
  assert.equal(capacity, Number(line[4]));
  assert.equal(blocks, pools.reduce((a, b) => a + b, 0));  // summed over the page-size pools
  // One pool (V3): every block holds block-size positions of every layer.
  if (pools.length === 1) assert.equal(capacity, blocks * Number(line[3]));
});
