// Reasoning content and tool calling end to end (issue 21): `pagoda serve
// --reasoning-parser qwen3 --enable-auto-tool-choice --tool-call-parser
// hermes` on a tiny random-weight Qwen3 checkpoint with the real tokenizer
// and chat template (tools/make_random_checkpoint.py). Random weights write
// no think or tool-call markers of their own, so this checks the plumbing
// and the response shapes against the raw text of the same greedy run (a
// completion on the same prompt ids, which no parser touches); what the
// parsers make of real model output is tested on fixtures
// (tests/server/test_chat_output_parser.cpp). A second checkpoint
// (tools/make_chain_checkpoint.py) has weights that write one fixed text,
// a Qwen3 thought and hermes tool call, so the openai client receives real
// tool_calls through the whole server.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";
import { Tokenizer } from "@huggingface/tokenizers";
import OpenAI from "openai";
import { waitForServer } from "./server_process.mjs";

const binary = process.env.PAGODA_BINARY;
if (!binary) throw new Error("set PAGODA_BINARY");
const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

// What the chain checkpoint writes after "<|im_start|>assistant\n".
const chainText = '<think>Rain check.</think><tool_call>{"name":"get_weather","arguments":{"city": "Paris"}}</tool_call>';
let dir, server, plain, client, chainDir, chain, chainClient;
before(async () => {
  dir = mkdtempSync(join(tmpdir(), "pagoda-tools-"));
  execFileSync("/usr/bin/python3", [join(root, "tools/make_random_checkpoint.py"), "--out", dir, "--layers", "2",
    "--hidden", "32", "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--intermediate", "64", "--seed", "5"]);
  const start = (extra) => waitForServer(spawn(binary, ["serve", "--model", dir, "--served-model-name", "qwen3", "--port", "0",
    "--max-model-len", "2048", ...extra]), 60000);
  server = await start(["--reasoning-parser", "qwen3", "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]);
  plain = await start([]);
  client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "x", maxRetries: 0 });
  // The chain's ids from @huggingface/tokenizers (not Pagoda's tokenizer):
  // "\n" (the prompt's last token), the text, then <|im_end|> (EOS).
  const tokDir = join(root, "tests/data/tokenizers/qwen3");
  const hf = new Tokenizer(JSON.parse(readFileSync(join(tokDir, "tokenizer.json"), "utf8")),
    JSON.parse(readFileSync(join(tokDir, "tokenizer_config.json"), "utf8")));
  const ids = [198, ...hf.encode(chainText, { add_special_tokens: false }).ids, 151645];
  chainDir = mkdtempSync(join(tmpdir(), "pagoda-chain-"));
  execFileSync("/usr/bin/python3", [join(root, "tools/make_chain_checkpoint.py"), "--out", chainDir, "--chain", ids.join(",")]);
  chain = await waitForServer(spawn(binary, ["serve", "--model", chainDir, "--served-model-name", "qwen3", "--port", "0",
    "--max-model-len", "2048", "--reasoning-parser", "qwen3", "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]), 60000);
  chainClient = new OpenAI({ baseURL: chain.url + "/v1", apiKey: "x", maxRetries: 0 });
});
after(() => {
  server?.proc.kill("SIGTERM");
  plain?.proc.kill("SIGTERM");
  chain?.proc.kill("SIGTERM");
  if (dir) rmSync(dir, { recursive: true, force: true });
  if (chainDir) rmSync(chainDir, { recursive: true, force: true });
});

const post = async (url, path, body) => {
  const r = await fetch(url + path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
};

const tools = [{ type: "function", function: { name: "get_weather", description: "Weather now",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
const messages = [{ role: "user", content: "What is the weather in Paris?" }];

// The raw greedy text of a chat request: its prompt ids (/tokenize renders
// the same template) run as a completion, with the special tokens kept as
// a tool-parsing request keeps them.
async function rawText(body, maxTokens) {
  const ids = (await post(server.url, "/tokenize", { messages: body.messages, tools: body.tools,
    chat_template_kwargs: body.chat_template_kwargs })).json.tokens;
  const r = await post(server.url, "/v1/completions", { prompt: ids, max_tokens: maxTokens, temperature: 0,
    skip_special_tokens: false });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  return r.json.choices[0].text;
}

// vLLM's qwen3 split of a whole output, worked out here independently.
function qwen3Split(text, thinking) {
  if (!thinking) return { reasoning: null, content: text || null };
  const t = text.startsWith("<think>") ? text.slice(7) : text;
  const end = t.indexOf("</think>");
  if (end < 0) return { reasoning: t || null, content: null };
  return { reasoning: t.slice(0, end) || null, content: t.slice(end + 8) || null };
}

async function streamed(body) {
  const stream = await client.chat.completions.create({ ...body, stream: true });
  let reasoning = "", content = "", finish = null, roles = 0;
  const calls = [];
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta.role) roles++;
    reasoning += c.delta.reasoning_content ?? "";
    content += c.delta.content ?? "";
    for (const t of c.delta.tool_calls ?? []) (calls[t.index] ??= []).push(t);
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(roles, 1, "one chunk carries the role");
  return { reasoning: reasoning || null, content: content || null, finish, calls };
}

for (const [label, extra, thinking] of [["thinking (default)", {}, true],
  ["enable_thinking false", { chat_template_kwargs: { enable_thinking: false } }, false]]) {
  test(`reasoning_content and content, ${label}: non-streaming and streaming agree with the raw text`, async () => {
    const body = { model: "qwen3", messages, tools, tool_choice: "auto", max_tokens: 40, temperature: 0, ...extra };
    const raw = await rawText(body, 40);
    const want = qwen3Split(raw, thinking);
    const r = await client.chat.completions.create(body);
    const m = r.choices[0].message;
    assert.equal(m.role, "assistant");
    assert.equal(m.reasoning_content, want.reasoning, raw);
    assert.equal(m.content, want.content, raw);
    assert.equal(m.tool_calls, undefined, "random weights write no call");
    assert.equal(r.choices[0].finish_reason, "length");
    const s = await streamed(body);
    assert.deepEqual([s.reasoning, s.content, s.finish], [want.reasoning, want.content, "length"]);
    assert.deepEqual(s.calls, []);
  });
}

test("tool_choice none, and no tools: output is not parsed for calls", async () => {
  for (const body of [{ messages, tools, tool_choice: "none" }, { messages }]) {
    const r = await client.chat.completions.create({ model: "qwen3", max_tokens: 8, temperature: 0, ...body });
    assert.equal(r.choices[0].finish_reason, "length");
    assert.equal(typeof r.choices[0].message.reasoning_content, "string");
  }
});

// (Enforced calls on a server with a parser: structured_outputs.test.mjs.)
test("tool_choice required or a named function without a tool-call parser: a clear 400", async () => {
  for (const tool_choice of ["required", { type: "function", function: { name: "get_weather" } }]) {
    const r = await post(plain.url, "/v1/chat/completions", { messages, tools, tool_choice });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.param, "tool_choice");
    assert.match(r.json.error.message, /--tool-call-parser/);
  }
  // "auto" on a server started without a tool-call parser, as vLLM.
  const r = await post(plain.url, "/v1/chat/completions", { messages, tools, tool_choice: "auto" });
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /--enable-auto-tool-choice/);
  assert.equal((await post(plain.url, "/v1/chat/completions", { messages, tools, max_tokens: 2 })).status, 200);
});

// An agent's second turn: the assistant's tool call and the tool's result
// go back through the template. The prompt must be what @huggingface/jinja
// renders from the same template and messages.
test("tool calls and tool results render through the chat template", async () => {
  const turn = [...messages,
    { role: "assistant", content: "", tool_calls: [{ id: "chatcmpl-tool-1", type: "function",
      function: { name: "get_weather", arguments: JSON.stringify({ city: "Paris" }) } }] },
    { role: "tool", tool_call_id: "chatcmpl-tool-1", content: "{\"temperature\": 21}" }];
  const template = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")).chat_template;
  const rendered = new Template(template).render({ messages: turn, tools, add_generation_prompt: true,
    bos_token: "", eos_token: "<|im_end|>" });
  assert.match(rendered, /<tool_call>\n\{"name": "get_weather", "arguments": \{"city":"Paris"\}\}\n<\/tool_call>/);
  assert.match(rendered, /<tool_response>\n\{"temperature": 21\}\n<\/tool_response>/);
  const fromMessages = (await post(server.url, "/tokenize", { messages: turn, tools })).json.tokens;
  const fromText = (await post(server.url, "/tokenize", { prompt: rendered, add_special_tokens: false })).json.tokens;
  assert.deepEqual(fromMessages, fromText);
  const r = await client.chat.completions.create({ model: "qwen3", messages: turn, tools, max_tokens: 4, temperature: 0 });
  assert.equal(r.usage.prompt_tokens, fromMessages.length);
});

test("unknown or incomplete parser flags stop the server at startup", () => {
  for (const args of [["--reasoning-parser", "qwen"], ["--tool-call-parser", "hermes"], ["--enable-auto-tool-choice"],
    ["--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder"]]) {
    const r = spawnSync(binary, ["serve", "--model", dir, "--port", "0", ...args], { encoding: "utf8", timeout: 30000 });
    assert.notEqual(r.status, 0, args.join(" "));
    assert.match(r.stderr + r.stdout, /reasoning-parser|tool-call-parser|enable-auto-tool-choice/, args.join(" "));
  }
});

// The openai client, given a model that writes a thought and a hermes call.
test("the openai client receives reasoning_content and tool_calls (non-streaming)", async () => {
  const raw = await post(chain.url, "/v1/chat/completions", { messages, tools, tool_choice: "none", max_tokens: 64 });
  assert.equal(raw.json.choices[0].message.content, chainText.slice("<think>Rain check.</think>".length),
    "with tool_choice none the call stays text");
  const r = await chainClient.chat.completions.create({ model: "qwen3", messages, tools, max_tokens: 64 });
  const c = r.choices[0];
  assert.equal(c.finish_reason, "tool_calls");
  assert.equal(c.message.reasoning_content, "Rain check.");
  assert.equal(c.message.content, null);
  assert.equal(c.message.tool_calls.length, 1);
  const call = c.message.tool_calls[0];
  assert.equal(call.type, "function");
  assert.match(call.id, /^chatcmpl-tool-[0-9a-f]+$/);
  assert.equal(call.function.name, "get_weather");
  assert.deepEqual(JSON.parse(call.function.arguments), { city: "Paris" });
  // The agent's next turn: the call and its result go back in.
  const next = await chainClient.chat.completions.create({ model: "qwen3", tools, max_tokens: 4, messages: [...messages,
    { role: "assistant", content: c.message.content, tool_calls: c.message.tool_calls },
    { role: "tool", tool_call_id: call.id, content: "{\"sky\": \"rain\"}" }] });
  assert.equal(next.choices[0].message.role, "assistant");
});

test("the openai client receives tool_calls streamed: id and name first, then the arguments", async () => {
  const stream = await chainClient.chat.completions.create({ model: "qwen3", messages, tools, max_tokens: 64, stream: true });
  const toolDeltas = [];
  let reasoning = "", content = "", finish = null;
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta ?? {};
    reasoning += d.reasoning_content ?? "";
    content += d.content ?? "";
    for (const t of d.tool_calls ?? []) toolDeltas.push(t);
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(reasoning, "Rain check.");
  assert.equal(content, "");
  assert.equal(finish, "tool_calls");
  assert.ok(toolDeltas.length >= 2, JSON.stringify(toolDeltas));
  assert.equal(toolDeltas[0].index, 0);
  assert.equal(toolDeltas[0].function.name, "get_weather");
  assert.match(toolDeltas[0].id, /^chatcmpl-tool-/);
  assert.ok(toolDeltas.slice(1).every((t) => t.index === 0 && t.id === undefined && t.function.name === undefined));
  assert.deepEqual(JSON.parse(toolDeltas.map((t) => t.function.arguments ?? "").join("")), { city: "Paris" });
  // The SDK's own accumulation of the deltas (its stream helper).
  const final = await chainClient.chat.completions.stream({ model: "qwen3", messages, tools, max_tokens: 64 }).finalChatCompletion();
  const call = final.choices[0].message.tool_calls[0];
  assert.equal(call.function.name, "get_weather");
  assert.deepEqual(JSON.parse(call.function.arguments), { city: "Paris" });
  assert.equal(final.choices[0].finish_reason, "tool_calls");
});
