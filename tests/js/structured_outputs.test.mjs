// Structured outputs (constrained decoding, issue 21) end to end: a tiny
// random-weight Qwen3 checkpoint with the real tokenizer and template
// (tools/make_random_checkpoint.py) knows nothing of JSON, so whatever it
// writes under a constraint is the grammar's doing. Every output is
// checked by independent validators: JSON.parse and Ajv (JSON Schema
// 2020-12) for schemas, JavaScript's RegExp for regexes, the list itself
// for choices, and the openai client plus Ajv for forced tool calls.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import Ajv2020 from "ajv/dist/2020.js";
import OpenAI from "openai";
import { waitForServer } from "./server_process.mjs";
import { checkForcedToolCalls, messages, tools } from "./forced_tool_calls.mjs";

const binary = process.env.PAGODA_BINARY;
if (!binary) throw new Error("set PAGODA_BINARY");
const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

// Formats by their RFC syntax, written here (not from Pagoda's grammar).
const ajv = new Ajv2020({ strict: false, allErrors: true });
ajv.addFormat("date", /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/);
ajv.addFormat("date-time", /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$/);
ajv.addFormat("uuid", /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i);
ajv.addFormat("email", /^[^@\s"]+@[^@\s"]+\.[A-Za-z]{2,}$/);
ajv.addFormat("ipv4", /^((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/);

let dir, server, client;
before(async () => {
  dir = mkdtempSync(join(tmpdir(), "pagoda-structured-"));
  execFileSync("/usr/bin/python3", [join(root, "tools/make_random_checkpoint.py"), "--out", dir, "--layers", "2",
    "--hidden", "32", "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--intermediate", "64", "--seed", "7"]);
  server = await waitForServer(spawn(binary, ["serve", "--model", dir, "--served-model-name", "qwen3", "--port", "0",
    "--max-model-len", "4096", "--reasoning-parser", "qwen3", "--enable-auto-tool-choice", "--tool-call-parser", "hermes"]), 60000);
  client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "x", maxRetries: 0 });
});
after(() => {
  server?.proc.kill("SIGTERM");
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const post = async (path, body) => {
  const r = await fetch(server.url + path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
};

const point = { type: "object", properties: { x: { type: "integer", minimum: -9, maximum: 9 }, y: { type: "integer", minimum: -9, maximum: 9 } }, required: ["x", "y"] };
const schemas = {
  person: { type: "object", properties: { name: { type: "string", maxLength: 10 }, age: { type: "integer", minimum: 0, maximum: 120 } }, required: ["name", "age"] },
  nested: { type: "object", properties: { user: { type: "object", properties: { id: { type: "integer", minimum: 1, maximum: 99999 }, email: { type: "string", format: "email" } }, required: ["id"] }, active: { type: "boolean" } }, required: ["user", "active"] },
  int_array: { type: "array", items: { type: "integer", minimum: -50, maximum: 50 }, minItems: 2, maxItems: 5 },
  enums: { type: "object", properties: { color: { enum: ["red", "green", "blue"] }, size: { enum: [1, 2, 3, null] } }, required: ["color", "size"] },
  number_bounds: { type: "number", minimum: -2.5, maximum: 7.25 },
  exclusive: { type: "integer", exclusiveMinimum: 0, exclusiveMaximum: 10 },
  patterns: { type: "object", properties: { code: { type: "string", pattern: "^[A-Z]{3}-[0-9]{2,4}$" }, zip: { type: "string", pattern: "\\d{5}(-\\d{4})?" } }, required: ["code", "zip"] },
  any_of: { anyOf: [{ type: "integer", minimum: 0, maximum: 9 }, { type: "string", maxLength: 4 }, { type: "null" }] },
  one_of: { oneOf: [
    { type: "object", properties: { kind: { const: "circle" }, r: { type: "number", minimum: 0, maximum: 100 } }, required: ["kind", "r"] },
    { type: "object", properties: { kind: { const: "square" }, side: { type: "integer", minimum: 1, maximum: 10 } }, required: ["kind", "side"] }] },
  refs: { $defs: { point }, type: "object", properties: { from: { $ref: "#/$defs/point" }, to: { $ref: "#/$defs/point" } }, required: ["from", "to"] },
  recursive: { $defs: { node: { type: "object", properties: { v: { type: "integer", minimum: 0, maximum: 9 }, next: { type: "array", items: { $ref: "#/$defs/node" }, maxItems: 1 } }, required: ["v"] } }, $ref: "#/$defs/node" },
  tuple: { type: "array", prefixItems: [{ type: "string", maxLength: 3 }, { type: "integer", minimum: 0, maximum: 5 }, { type: "boolean" }] },
  all_optional: { type: "object", properties: { a: { type: "integer", minimum: 0, maximum: 3 }, b: { type: "string", maxLength: 2 }, c: { type: "boolean" }, d: { type: "null" } } },
  closed: { type: "object", properties: { a: { type: "integer", minimum: 0, maximum: 3 }, b: { type: "boolean" }, c: { type: "string", maxLength: 5 } }, required: ["c"], additionalProperties: false },
  string_length: { type: "string", minLength: 3, maxLength: 6 },
  dates: { type: "object", properties: { d: { type: "string", format: "date" }, t: { type: "string", format: "date-time" } }, required: ["d", "t"] },
  uuid: { type: "string", format: "uuid" },
  records: { type: "array", items: { type: "object", properties: { k: { type: "string", maxLength: 3 }, v: { type: "number", minimum: 0, maximum: 1 } }, required: ["k", "v"] }, minItems: 1, maxItems: 3 },
  type_list: { type: ["string", "integer", "null"], maxLength: 5, minimum: 0, maximum: 100 },
  consts: { type: "object", properties: { version: { const: 2 }, tag: { const: "v2" } }, required: ["version", "tag"] },
  flags: { type: "array", items: { type: ["boolean", "null"] }, maxItems: 4 },
  ipv4: { type: "string", format: "ipv4" },
  free_text: { type: "object", properties: { note: { type: "string" } }, required: ["note"] },
  grid: { type: "array", items: { type: "array", items: { enum: ["x", "o"] }, maxItems: 2 }, minItems: 1, maxItems: 2 },
};
const seeds = [1, 2, 3];

// The forms a request can carry a schema in; they rotate over the cases.
const forms = [
  (schema) => ({ structured_outputs: { json: schema } }),
  (schema) => ({ guided_json: schema }),
  (schema) => ({ response_format: { type: "json_schema", json_schema: { name: "out", schema, strict: true } } }),
];

test("JSON schemas: every seed's output parses and validates (temperature 1, random weights)", async () => {
  const runs = [];
  let k = 0;
  for (const [name, schema] of Object.entries(schemas)) {
    const validate = ajv.compile(schema);
    for (const seed of seeds) {
      const form = forms[k++ % forms.length](schema);
      runs.push((async () => {
        const r = await post("/v1/completions", { prompt: "Answer in JSON:", max_tokens: 600, temperature: 1, seed, ...form });
        assert.equal(r.status, 200, `${name}: ${JSON.stringify(r.json)}`);
        const c = r.json.choices[0];
        // A string without maxLength is unbounded (documented): random
        // weights may not close it in max_tokens, but what was written must
        // be a prefix that closing the string and object completes.
        let text = c.text;
        if (name === "free_text" && c.finish_reason === "length") {
          const dangling = text.match(/(\\+)(u[0-9a-fA-F]{0,3})?$/);  // an escape cut short
          if (dangling && dangling[1].length % 2 === 1) text = text.slice(0, dangling.index + dangling[1].length - 1);
          text += '"}';
        }
        if (name !== "free_text") assert.equal(c.finish_reason, "stop", `${name} seed ${seed} did not finish: ${c.text}`);
        let value;
        assert.doesNotThrow(() => { value = JSON.parse(text); }, `${name} seed ${seed}: ${c.text}`);
        assert.ok(validate(value), `${name} seed ${seed}: ${text} ${JSON.stringify(validate.errors)}`);
        return c.text;
      })());
    }
  }
  const texts = await Promise.all(runs);
  // Random weights under a constraint still sample: seeds differ.
  assert.ok(new Set(texts).size > texts.length / 2, texts.join("\n"));
});

test("chat: response_format json_schema and json_object through the openai client (reasoning parser on)", async () => {
  const validate = ajv.compile(schemas.person);
  for (const seed of seeds) {
    const r = await client.chat.completions.create({ model: "qwen3", messages: [{ role: "user", content: "Who?" }],
      max_tokens: 300, temperature: 1, seed,
      response_format: { type: "json_schema", json_schema: { name: "person", schema: schemas.person, strict: true } } });
    const m = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, "stop", m.content);
    assert.equal(m.reasoning_content ?? null, null, "the think block is closed at once");
    assert.ok(validate(JSON.parse(m.content)), m.content);
    // Streaming carries the same constrained text.
    const stream = await client.chat.completions.create({ model: "qwen3", messages: [{ role: "user", content: "Who?" }],
      max_tokens: 300, temperature: 1, seed, stream: true,
      response_format: { type: "json_schema", json_schema: { name: "person", schema: schemas.person } } });
    let content = "";
    for await (const chunk of stream) content += chunk.choices[0]?.delta?.content ?? "";
    assert.equal(content, m.content);
  }
  // json_object: any object; random weights may nest without end, so the
  // check is that the text so far is a valid prefix when cut by max_tokens.
  const r = await post("/v1/chat/completions", { messages: [{ role: "user", content: "{" }], max_tokens: 40, temperature: 1,
    seed: 4, response_format: { type: "json_object" }, chat_template_kwargs: { enable_thinking: false } });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  const text = r.json.choices[0].message.content;
  assert.ok(text.startsWith("{"), text);
  if (r.json.choices[0].finish_reason === "stop") assert.equal(typeof JSON.parse(text), "object");
});

test("regex and choice constraints: outputs match / are among the choices", async () => {
  const regexes = ["[A-Z][a-z]{2,8} [0-9]{1,3}", "(\\+\\d{1,3} )?\\(\\d{3}\\) \\d{3}-\\d{4}", "(yes|no|maybe)!?",
    "[a-f0-9]{8}", "\\w{1,8}@\\w{1,8}\\.(com|org)"];
  const choices = ["positive", "negative", "neutral", "mixed feelings"];
  const runs = [];
  for (const re of regexes) {
    for (const seed of seeds) {
      runs.push(post("/v1/completions", { prompt: "x", max_tokens: 200, temperature: 1, seed, guided_regex: re }).then((r) => {
        assert.equal(r.status, 200, JSON.stringify(r.json));
        const c = r.json.choices[0];
        assert.equal(c.finish_reason, "stop", `${re}: ${c.text}`);
        assert.match(c.text, new RegExp(`^(?:${re})$`), re);
      }));
    }
  }
  for (const seed of [...seeds, 4, 5, 6]) {
    for (const body of [{ guided_choice: choices }, { structured_outputs: { choice: choices } }]) {
      runs.push(post("/v1/completions", { prompt: "x", max_tokens: 20, temperature: 1, seed, ...body }).then((r) => {
        assert.equal(r.status, 200, JSON.stringify(r.json));
        assert.ok(choices.includes(r.json.choices[0].text), r.json.choices[0].text);
      }));
    }
  }
  const grammar = 'root ::= expr\nexpr ::= term ([+*] term){0,3}\nterm ::= [1-9] [0-9]? | "(" expr ")"\n';
  for (const seed of seeds) {
    runs.push(post("/v1/completions", { prompt: "x", max_tokens: 200, temperature: 1, seed, structured_outputs: { grammar } }).then((r) => {
      assert.equal(r.status, 200, JSON.stringify(r.json));
      const text = r.json.choices[0].text;
      // Independent check: balanced parentheses around digits and operators.
      assert.match(text, /^[0-9+*()]+$/);
      let depth = 0;
      for (const ch of text) { depth += ch === "(" ? 1 : ch === ")" ? -1 : 0; assert.ok(depth >= 0, text); }
      if (r.json.choices[0].finish_reason === "stop") assert.equal(depth, 0, text);
    }));
  }
  await Promise.all(runs);
});

test("tool_choice required and a named function always give valid tool_calls (openai client, stream and not)", async () => {
  await checkForcedToolCalls(client, "qwen3", seeds);
});

test("bad constraints are a 400 naming the problem", async () => {
  const cases = [
    [{ guided_json: { type: "array", uniqueItems: true } }, "guided_json", /uniqueItems/],
    [{ response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "string", format: "hostname" } } } }, "response_format", /format "hostname"/],
    [{ guided_json: { type: "strin" } }, "guided_json", /unknown type "strin"/],
    [{ guided_json: "{not json" }, "guided_json", /not valid JSON/],
    [{ guided_regex: "(a" }, "guided_regex", /unclosed '\('/],
    [{ guided_regex: "(a)\\1" }, "guided_regex", /backreferences/],
    [{ structured_outputs: { grammar: "root ::= foo" } }, "structured_outputs.grammar", /'foo' is used but never defined/],
    [{ guided_grammar: "root ::= \"a" }, "guided_grammar", /line 1 column 10: unclosed string literal/],
    [{ guided_choice: [] }, "guided_choice", /non-empty/],
    [{ guided_regex: "a", guided_choice: ["a"] }, "guided_choice", /only one output constraint/],
  ];
  for (const [body, param, message] of cases) {
    const r = await post("/v1/completions", { prompt: "x", max_tokens: 5, ...body });
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.equal(r.json.error.param, param, JSON.stringify(r.json));
    assert.match(r.json.error.message, message);
  }
  const named = await post("/v1/chat/completions", { messages, tools, tool_choice: { type: "function", function: { name: "nope" } } });
  assert.equal(named.status, 400);
  assert.match(named.json.error.message, /"nope", which is not among the tools/);
  const noTools = await post("/v1/chat/completions", { messages, tool_choice: "required" });
  assert.equal(noTools.status, 400);
  assert.match(noTools.json.error.message, /needs tools/);
  const badParams = await post("/v1/chat/completions", { messages, tool_choice: "required",
    tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { x: { not: {} } } } } }] });
  assert.equal(badParams.status, 400);
  assert.match(badParams.json.error.message, /unsupported keyword "not"/);
});
