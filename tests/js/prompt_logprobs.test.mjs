// vLLM's evaluation extensions over HTTP, against the offline path:
// "prompt_logprobs": N and "return_token_ids": true on /v1/completions and
// /v1/chat/completions must give what `pagoda generate --prompt-token-ids
// ... --prompt-logprobs N --json` gives for the same prompt ids (whose
// entries test_cli.sh checks against `pagoda logits`). The demo model gets
// Qwen3's chat template so both endpoints run on one server.
// Usage: node --test prompt_logprobs.test.mjs   (PAGODA_BINARY and PAGODA_MODEL in the environment)
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync, copyFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import OpenAI from "openai";
import { waitForServer } from "./server_process.mjs";

const binary = process.env.PAGODA_BINARY;
const demo = process.env.PAGODA_MODEL;
if (!binary || !demo) throw new Error("set PAGODA_BINARY and PAGODA_MODEL");
const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const template = JSON.parse(readFileSync(join(root, "tests/data/tokenizers/qwen3/tokenizer_config.json"), "utf8")).chat_template;

let dir, proc, url, client;
before(async () => {
  dir = mkdtempSync(join(tmpdir(), "pagoda-plp-"));
  for (const f of readdirSync(demo)) if (!f.endsWith(".jsonl")) copyFileSync(join(demo, f), join(dir, f));
  const cfg = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
  cfg.chat_template = template;
  writeFileSync(join(dir, "tokenizer_config.json"), JSON.stringify(cfg));
  proc = spawn(binary, ["serve", "--model", dir, "--served-model-name", "m", "--port", "0"]);
  url = (await waitForServer(proc, 30000)).url;
  client = new OpenAI({ baseURL: url + "/v1", apiKey: "x", maxRetries: 0 });
});
after(() => {
  proc.kill("SIGTERM");
  rmSync(dir, { recursive: true, force: true });
});

// `pagoda generate --json` for token-id prompts: one parsed line each.
function offline(idPrompts, { maxTokens, promptLogprobs }) {
  const args = ["generate", "--model", dir, "--temperature", "0", "--max-tokens", String(maxTokens), "--json", "--quiet",
    ...idPrompts.flatMap((ids) => ["--prompt-token-ids", ids.join(",")])];
  if (promptLogprobs !== undefined) args.push("--prompt-logprobs", String(promptLogprobs));
  return execFileSync(binary, args, { encoding: "utf8" }).trim().split("\n").map((l) => JSON.parse(l));
}

async function tokenize(body) {
  const r = await fetch(url + "/tokenize", { method: "POST", body: JSON.stringify(body) });
  assert.equal(r.status, 200);
  return (await r.json()).tokens;
}

// vLLM's shape: null, then per position {id: {logprob, rank, decoded_token}}
// with the prompt token and the top n; and the same numbers as offline.
function assertPromptLogprobs(got, want, promptIds, n, what) {
  assert.equal(got.length, promptIds.length, what);
  assert.equal(got[0], null, what);
  assert.equal(want.length, got.length, what);
  for (let k = 1; k < got.length; k++) {
    const entry = got[k];
    const tok = String(promptIds[k]);
    assert.ok(tok in entry, `${what}: position ${k} lacks the prompt token ${tok}`);
    const ranks = Object.entries(entry).filter(([id]) => id !== tok).map(([, e]) => e.rank).sort((a, b) => a - b);
    // The top n hold ranks 1..n; the prompt token, when outside them, adds one entry.
    assert.ok(Object.keys(entry).length === n || Object.keys(entry).length === n + 1, `${what}: ${JSON.stringify(entry)}`);
    for (const r of ranks) assert.ok(r >= 1 && r <= n, `${what}: rank ${r}`);
    assert.ok(entry[tok].rank >= 1 && entry[tok].logprob <= 0, `${what}: ${JSON.stringify(entry[tok])}`);
    assert.deepEqual(Object.keys(entry).sort(), Object.keys(want[k]).sort(), `${what}: position ${k}`);
    for (const [id, e] of Object.entries(entry)) {
      assert.equal(e.rank, want[k][id].rank, `${what}: position ${k} id ${id}`);
      assert.equal(e.decoded_token, want[k][id].decoded_token, `${what}: position ${k} id ${id}`);
      assert.ok(Math.abs(e.logprob - want[k][id].logprob) < 1e-5, `${what}: position ${k} id ${id}: ${e.logprob} vs ${want[k][id].logprob}`);
    }
  }
}

test("completions: prompt_logprobs and return_token_ids equal offline generate", async () => {
  const textIds = await tokenize({ prompt: "Once upon a time, there was a little girl named Lily" });
  const idPrompts = [textIds, [1, 403, 407, 261, 378, 432, 30, 263]];
  const want = offline(idPrompts, { maxTokens: 8, promptLogprobs: 3 });
  // Each prompt alone, as text and as ids, then both in one request: every
  // choice carries its own prompt's fields.
  const alone = [
    await client.completions.create({ model: "m", prompt: "Once upon a time, there was a little girl named Lily", max_tokens: 8,
      temperature: 0, prompt_logprobs: 3, return_token_ids: true }),
    await client.completions.create({ model: "m", prompt: idPrompts[1], max_tokens: 8, temperature: 0, prompt_logprobs: 3,
      return_token_ids: true }),
  ];
  const both = await client.completions.create({ model: "m", prompt: idPrompts, max_tokens: 8, temperature: 0,
    prompt_logprobs: 3, return_token_ids: true });
  const choices = [alone[0].choices[0], alone[1].choices[0], ...both.choices];
  for (const [i, c] of choices.entries()) {
    const w = want[i % 2];
    assert.deepEqual(c.prompt_token_ids, w.prompt_token_ids, `choice ${i}`);
    assert.deepEqual(c.token_ids, w.token_ids, `choice ${i}`);
    assert.equal(c.text, w.text, `choice ${i}`);
    assertPromptLogprobs(c.prompt_logprobs, w.prompt_logprobs, w.prompt_token_ids, 3, `choice ${i}`);
  }
  // Again, now that the prefix cache holds these prompts: a scoring request
  // computes its prompt anyway, so nothing changes.
  const again = await client.completions.create({ model: "m", prompt: idPrompts[1], max_tokens: 8, temperature: 0,
    prompt_logprobs: 3, return_token_ids: true });
  assertPromptLogprobs(again.choices[0].prompt_logprobs, want[1].prompt_logprobs, idPrompts[1], 3, "cached");
  // prompt_logprobs 0: the prompt token's entry alone.
  const zero = await client.completions.create({ model: "m", prompt: idPrompts[1], max_tokens: 2, temperature: 0, prompt_logprobs: 0 });
  const wantZero = offline([idPrompts[1]], { maxTokens: 2, promptLogprobs: 0 })[0];
  assertPromptLogprobs(zero.choices[0].prompt_logprobs, wantZero.prompt_logprobs, idPrompts[1], 0, "n=0");
  // Neither field unless asked.
  const plain = await client.completions.create({ model: "m", prompt: idPrompts[1], max_tokens: 2, temperature: 0 });
  for (const f of ["prompt_logprobs", "prompt_token_ids", "token_ids"]) assert.equal(plain.choices[0][f], undefined, f);
});

test("chat: prompt_logprobs and prompt_token_ids at the top, token_ids per choice", async () => {
  const messages = [{ role: "user", content: "Tell me a story about a cat." }];
  const promptIds = await tokenize({ messages });
  const [want] = offline([promptIds], { maxTokens: 6, promptLogprobs: 2 });
  const r = await client.chat.completions.create({ model: "m", messages, max_tokens: 6, temperature: 0, prompt_logprobs: 2,
    return_token_ids: true, n: 2 });
  assert.deepEqual(r.prompt_token_ids, promptIds);
  assertPromptLogprobs(r.prompt_logprobs, want.prompt_logprobs, promptIds, 2, "chat");
  for (const c of r.choices) {
    assert.deepEqual(c.token_ids, want.token_ids);
    assert.equal(c.message.content, want.text);
  }
});

test("streaming: token_ids per chunk, prompt_token_ids in a choice's first chunk", async () => {
  const ids = [1, 403, 407, 261, 378];
  const [want] = offline([ids], { maxTokens: 12 });
  const stream = await client.completions.create({ model: "m", prompt: ids, max_tokens: 12, temperature: 0, stream: true,
    return_token_ids: true });
  const tokens = [];
  let promptSeen = 0, first = true, text = "";
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      if (first) assert.deepEqual(c.prompt_token_ids, ids);
      if (c.prompt_token_ids) promptSeen++;
      first = false;
      tokens.push(...c.token_ids);
      text += c.text;
    }
  }
  assert.equal(promptSeen, 1);
  assert.deepEqual(tokens, want.token_ids);
  assert.equal(text, want.text);

  const chat = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "Hi!" }], max_tokens: 8,
    temperature: 0, stream: true, return_token_ids: true });
  const chatIds = await tokenize({ messages: [{ role: "user", content: "Hi!" }] });
  const [wantChat] = offline([chatIds], { maxTokens: 8 });
  const chatTokens = [];
  let chatPrompt = null;
  for await (const chunk of chat) {
    if (chunk.prompt_token_ids) {
      assert.equal(chatPrompt, null, "prompt_token_ids in more than one chunk");
      chatPrompt = chunk.prompt_token_ids;
    }
    for (const c of chunk.choices) chatTokens.push(...c.token_ids);
  }
  assert.deepEqual(chatPrompt, chatIds);
  assert.deepEqual(chatTokens, wantChat.token_ids);
});

test("bad prompt_logprobs / return_token_ids are 400s naming the field", async () => {
  const cases = [
    ["/v1/completions", { prompt: "hi", prompt_logprobs: 21 }, "prompt_logprobs"],
    ["/v1/completions", { prompt: "hi", prompt_logprobs: -1 }, "prompt_logprobs"],
    ["/v1/completions", { prompt: "hi", prompt_logprobs: "3" }, "prompt_logprobs"],
    ["/v1/completions", { prompt: "hi", prompt_logprobs: 2, stream: true }, "prompt_logprobs"],
    ["/v1/completions", { prompt: "hi", return_token_ids: "yes" }, "return_token_ids"],
    ["/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], prompt_logprobs: 1.5 }, "prompt_logprobs"],
    ["/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], return_token_ids: 1 }, "return_token_ids"],
  ];
  for (const [path, body, param] of cases) {
    const r = await fetch(url + path, { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ model: "m", max_tokens: 2, ...body }) });
    assert.equal(r.status, 400, JSON.stringify(body));
    const err = (await r.json()).error;
    assert.equal(err.param, param, JSON.stringify(body));
    assert.match(err.message, new RegExp(param));
  }
  // The server still answers.
  const ok = await client.completions.create({ model: "m", prompt: [1, 403], max_tokens: 1, temperature: 0, prompt_logprobs: 1 });
  assert.equal(ok.choices[0].prompt_logprobs.length, 2);
});
