// Chat completions end to end: the demo model given Qwen3's real chat
// template. The server's rendering must equal @huggingface/jinja's (an
// independent implementation), checked through the generated tokens: a chat
// request must produce exactly what a completion on the oracle-rendered
// prompt produces.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync, copyFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";
import OpenAI from "openai";
import { waitForServer } from "./server_process.mjs";

const binary = process.env.PAGODA_BINARY;
const demo = process.env.PAGODA_MODEL;
const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const template = JSON.parse(readFileSync(join(root, "tests/data/tokenizers/qwen3/tokenizer_config.json"), "utf8")).chat_template;

let dir, proc, url, client;
before(async () => {
  dir = mkdtempSync(join(tmpdir(), "pagoda-chat-"));
  for (const f of readdirSync(demo)) if (!f.endsWith(".jsonl")) copyFileSync(join(demo, f), join(dir, f));
  const cfg = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
  cfg.chat_template = template;
  writeFileSync(join(dir, "tokenizer_config.json"), JSON.stringify(cfg));
  proc = spawn(binary, ["serve", "--model", dir, "--served-model-name", "chat", "--port", "0"]);
  url = (await waitForServer(proc, 30000)).url;
  client = new OpenAI({ baseURL: url + "/v1", apiKey: "x", maxRetries: 0 });
});
after(() => {
  proc.kill("SIGTERM");
  rmSync(dir, { recursive: true, force: true });
});

const conversations = [
  { messages: [{ role: "user", content: "Tell me a story about a cat." }] },
  { messages: [{ role: "system", content: "You are kind." }, { role: "user", content: "Hi!" },
    { role: "assistant", content: "Hello. How can I help?" }, { role: "user", content: "A story, please." }] },
  { messages: [{ role: "user", content: "Think first." }], chat_template_kwargs: { enable_thinking: false } },
  { messages: [{ role: "user", content: "Weather?" }],
    tools: [{ type: "function", function: { name: "get_weather", description: "Weather now", parameters: { type: "object", properties: { city: { type: "string" } } } } }] },
];

test("chat completions render the template like @huggingface/jinja", async () => {
  for (const conv of conversations) {
    const rendered = new Template(template).render({ messages: conv.messages, tools: conv.tools, add_generation_prompt: true,
      bos_token: "<s>", eos_token: "</s>", ...(conv.chat_template_kwargs ?? {}) });
    const tok = await (await fetch(url + "/tokenize", { method: "POST",
      body: JSON.stringify({ prompt: rendered, add_special_tokens: false }) })).json();
    const viaCompletion = await client.completions.create({ model: "chat", prompt: tok.tokens, max_tokens: 16, temperature: 0 });
    const chat = await client.chat.completions.create({ model: "chat", messages: conv.messages, tools: conv.tools,
      max_tokens: 16, temperature: 0, chat_template_kwargs: conv.chat_template_kwargs });
    assert.equal(chat.choices[0].message.role, "assistant");
    assert.equal(chat.choices[0].message.content, viaCompletion.choices[0].text, JSON.stringify(conv));
    assert.equal(chat.usage.prompt_tokens, tok.count);
  }
});

test("chat streaming starts with the role and ends with finish_reason", async () => {
  const stream = await client.chat.completions.create({ model: "chat", messages: conversations[0].messages,
    max_tokens: 12, temperature: 0, stream: true });
  let role = null, text = "", finish = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      role ??= c.delta.role;
      text += c.delta.content ?? "";
      finish ??= c.finish_reason;
    }
  }
  const whole = await client.chat.completions.create({ model: "chat", messages: conversations[0].messages, max_tokens: 12, temperature: 0 });
  assert.equal(role, "assistant");
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, "length");
});
