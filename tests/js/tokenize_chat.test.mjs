// /tokenize for conversations (issue 24, section 3), against references
// independent of Pagoda: the prompt is rendered by @huggingface/jinja and
// tokenized by @huggingface/tokenizers, and must equal /tokenize's ids; the
// chat endpoint must run that same prompt (usage.prompt_tokens, and the same
// greedy text as a completion on those ids). Both shipped templates
// (Qwen3, Llama-3) are given to the demo model.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync, copyFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";
import { Tokenizer } from "@huggingface/tokenizers";
import { waitForServer } from "./server_process.mjs";

const binary = process.env.PAGODA_BINARY;
const demo = process.env.PAGODA_MODEL;
if (!binary || !demo) throw new Error("set PAGODA_BINARY and PAGODA_MODEL");
const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const templateOf = (name) =>
  JSON.parse(readFileSync(join(root, "tests/data/tokenizers", name, "tokenizer_config.json"), "utf8")).chat_template;
const demoConfig = JSON.parse(readFileSync(join(demo, "tokenizer_config.json"), "utf8"));
const hfTokenizer = new Tokenizer(JSON.parse(readFileSync(join(demo, "tokenizer.json"), "utf8")), demoConfig);

const servers = {};
const dirs = [];
// The demo model with `template` as its chat template.
async function startWithTemplate(template) {
  const dir = mkdtempSync(join(tmpdir(), "pagoda-tokenize-"));
  dirs.push(dir);
  for (const f of readdirSync(demo)) if (!f.endsWith(".jsonl")) copyFileSync(join(demo, f), join(dir, f));
  writeFileSync(join(dir, "tokenizer_config.json"), JSON.stringify({ ...demoConfig, chat_template: template }));
  const proc = spawn(binary, ["serve", "--model", dir, "--served-model-name", "chat", "--port", "0"]);
  return waitForServer(proc, 30000);
}
before(async () => {
  servers.qwen3 = await startWithTemplate(templateOf("qwen3"));
  servers.llama3 = await startWithTemplate(templateOf("llama3"));
});
after(() => {
  for (const s of Object.values(servers)) s.proc.kill("SIGTERM");
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const post = async (url, path, body) => {
  const r = await fetch(url + path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
};

const tools = [{ type: "function", function: { name: "get_weather", description: "Weather now",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
const requests = [
  { messages: [{ role: "user", content: "Tell me a story about a cat." }] },
  { messages: [{ role: "system", content: "You are kind." }, { role: "user", content: "Hi!" },
    { role: "assistant", content: "Hello. How can I help?" }, { role: "user", content: "A story, please." }] },
  { messages: [{ role: "user", content: "Think first." }], chat_template_kwargs: { enable_thinking: false } },
  { messages: [{ role: "user", content: "Weather in Paris?" }], tools },
  { messages: [{ role: "user", content: "Hi" }, { role: "assistant", content: "Hello" }], add_generation_prompt: false },
  // The model continues its own half-written turn.
  { messages: [{ role: "user", content: "Tell me a story." }, { role: "assistant", content: "Once upon a time " }],
    add_generation_prompt: false, continue_final_message: true },
];

// The rendered prompt as transformers builds it, with @huggingface/jinja.
function oracleRender(template, req) {
  let text = new Template(template).render({ messages: req.messages, tools: req.tools,
    add_generation_prompt: req.add_generation_prompt ?? true, bos_token: "<s>", eos_token: "</s>",
    ...(req.chat_template_kwargs ?? {}) });
  if (req.continue_final_message) {
    // transformers' rule: cut right after the last message's (stripped)
    // text; its trailing spaces stay only if the render kept them.
    const msg = req.messages.at(-1).content;
    const at = text.lastIndexOf(msg.trim());
    assert.ok(at >= 0);
    text = text.slice(0, at + (text.slice(at, at + msg.trimStart().length) === msg ? msg.trimStart().length : msg.trim().length));
  }
  return text;
}

for (const name of ["qwen3", "llama3"]) {
  test(`/tokenize with messages is the chat endpoint's prompt (${name} template)`, async () => {
    const { url } = servers[name];
    for (const req of requests) {
      const what = `${name} ${JSON.stringify(req).slice(0, 120)}`;
      const tok = await post(url, "/tokenize", req);
      assert.equal(tok.status, 200, what + " " + JSON.stringify(tok.json));
      const expected = hfTokenizer.encode(oracleRender(templateOf(name), req), { add_special_tokens: false }).ids;
      assert.deepEqual(tok.json.tokens, expected, what);
      assert.equal(tok.json.count, expected.length, what);
      assert.equal(tok.json.max_model_len, 512);
      assert.equal(tok.json.token_strs, undefined);

      const chat = await post(url, "/v1/chat/completions", { ...req, model: "chat", max_tokens: 8, temperature: 0 });
      assert.equal(chat.status, 200, what + " " + JSON.stringify(chat.json));
      assert.equal(chat.json.usage.prompt_tokens, tok.json.count, what);
      const completion = await post(url, "/v1/completions", { model: "chat", prompt: tok.json.tokens, max_tokens: 8, temperature: 0 });
      assert.equal(chat.json.choices[0].message.content, completion.json.choices[0].text, what);
    }
  });
}

test("/tokenize: return_token_strs gives the vocabulary strings", async () => {
  const { url } = servers.qwen3;
  for (const body of [{ ...requests[1], return_token_strs: true }, { prompt: "Once upon a time\n", return_token_strs: true }]) {
    const tok = await post(url, "/tokenize", body);
    assert.equal(tok.status, 200);
    assert.equal(tok.json.token_strs.length, tok.json.count);
    assert.deepEqual(tok.json.token_strs, tok.json.tokens.map((id) => hfTokenizer.id_to_token(id)));
  }
});

test("/tokenize: vLLM's defaults and add_special_tokens", async () => {
  const { url } = servers.llama3;
  const req = requests[0];
  const plain = (await post(url, "/tokenize", req)).json;
  // add_special_tokens adds the tokenizer's BOS on top of the template's.
  const withSpecial = (await post(url, "/tokenize", { ...req, add_special_tokens: true })).json;
  assert.deepEqual(withSpecial.tokens, [hfTokenizer.token_to_id("<s>"), ...plain.tokens]);
  const chat = (await post(url, "/v1/chat/completions", { ...req, add_special_tokens: true, max_tokens: 1 })).json;
  assert.equal(chat.usage.prompt_tokens, withSpecial.count);
  // A text prompt still gets BOS by default, as before.
  const text = (await post(url, "/tokenize", { prompt: "Once upon a time" })).json;
  assert.deepEqual(text.tokens, hfTokenizer.encode("Once upon a time").ids);
});

test("/tokenize: bad chat requests are 4xx naming the field", async () => {
  const { url } = servers.qwen3;
  const cases = [
    [{ messages: requests[0].messages, continue_final_message: true }, 400, "continue_final_message"],
    [{ messages: [{ role: "user", content: "zzz" }], add_generation_prompt: false, continue_final_message: true,
       chat_template_kwargs: {} }, 200, null],
    [{ messages: [] }, 400, "messages"],
    [{ messages: requests[0].messages, tools: "x" }, 400, "tools"],
    [{ messages: requests[0].messages, chat_template_kwargs: 3 }, 400, "chat_template_kwargs"],
    [{ messages: requests[0].messages, prompt: "both" }, 400, "messages"],
    [{ messages: requests[0].messages, model: "other" }, 404, "model"],
  ];
  for (const [body, status, param] of cases) {
    const r = await post(url, "/tokenize", body);
    assert.equal(r.status, status, JSON.stringify(body) + " " + JSON.stringify(r.json));
    if (param) assert.equal(r.json.error.param, param);
  }
});
