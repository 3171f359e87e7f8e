// tool_choice "required" and a named function on a tiny random DeepSeek V3
// checkpoint with DeepSeek V3's real tokenizer (tests/data/tokenizers/
// deepseek_v3; tools/make_deepseek_checkpoint.py --tokenizer), served with
// each DeepSeek tool-call parser: the openai client gets valid tool_calls,
// streaming and not, and every tool-call marker of the output is its one
// added token (<｜tool▁calls▁begin｜> = 128806, ...; token terminals in the
// forced grammar), never the same text spelled in pieces.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import OpenAI from "openai";
import { waitForServer } from "./server_process.mjs";
import { checkForcedToolCalls, messages, tools } from "./forced_tool_calls.mjs";

const binary = process.env.PAGODA_BINARY;
if (!binary) throw new Error("set PAGODA_BINARY");
const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const parsers = ["deepseek_v3", "deepseek_v31"];
// The markers by id, from the tokenizer's added_tokens.
const markers = { "<｜tool▁calls▁begin｜>": 128806, "<｜tool▁calls▁end｜>": 128807, "<｜tool▁call▁begin｜>": 128808,
  "<｜tool▁call▁end｜>": 128809, "<｜tool▁sep｜>": 128814 };

let dir;
const servers = {};
before(async () => {
  dir = mkdtempSync(join(tmpdir(), "pagoda-ds-tools-"));
  execFileSync("/usr/bin/python3", [join(root, "tools/make_deepseek_checkpoint.py"), "--out", dir, "--seed", "3",
    "--vocab", "129280", "--hidden", "64", "--layers", "2", "--mtp", "0", "--bos", "0", "--eos", "1",
    "--tokenizer", join(root, "tests/data/tokenizers/deepseek_v3")]);
  for (const parser of parsers) {
    servers[parser] = await waitForServer(spawn(binary, ["serve", "--model", dir, "--served-model-name", "ds", "--port", "0",
      "--block-size", "4", "--threads", "1", "--enable-auto-tool-choice", "--tool-call-parser", parser]), 60000);
  }
});
after(() => {
  for (const s of Object.values(servers)) s.proc.kill("SIGTERM");
  if (dir) rmSync(dir, { recursive: true, force: true });
});

for (const parser of parsers) {
  test(`${parser}: tool_choice required and named give valid tool_calls (openai client, stream and not)`, async () => {
    const client = new OpenAI({ baseURL: servers[parser].url + "/v1", apiKey: "x", maxRetries: 0 });
    await checkForcedToolCalls(client, "ds", [1, 2, 3]);
  });

  test(`${parser}: each marker in the output is its one token`, async () => {
    for (const seed of [4, 5]) {
      const r = await fetch(servers[parser].url + "/v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ messages, tools, tool_choice: "required", max_tokens: 400, temperature: 1, seed, return_token_ids: true }) });
      const j = await r.json();
      assert.equal(r.status, 200, JSON.stringify(j));
      const ids = j.choices[0].token_ids;
      // The text as the model wrote it (markers kept), from the server's own detokenizer.
      const detok = await fetch(servers[parser].url + "/detokenize", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ tokens: ids }) }).then((x) => x.json());
      const text = detok.prompt;
      assert.ok(text.startsWith("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"), text);
      assert.ok(text.endsWith("<｜tool▁calls▁end｜>"), text);
      for (const [marker, id] of Object.entries(markers)) {
        const inText = text.split(marker).length - 1;
        assert.ok(inText >= 1, `${marker} missing: ${text}`);
        assert.equal(ids.filter((x) => x === id).length, inText, `${marker} spelled in pieces: ${JSON.stringify(ids)}`);
      }
      assert.ok(j.choices[0].message.tool_calls.length >= 1);
    }
  });
}
