// Shared by the structured-outputs e2e tests: tool_choice "required" and a
// named function through the openai client, streaming and not, on a random
// model, whose calls must parse (JSON.parse) and validate (Ajv) against
// the tools' parameter schemas.
import assert from "node:assert/strict";
import Ajv2020 from "ajv/dist/2020.js";

export const tools = [
  { type: "function", function: { name: "get_weather", description: "Weather now",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 }, unit: { enum: ["c", "f"] } }, required: ["city"] } } },
  { type: "function", function: { name: "add", description: "Sum",
    parameters: { type: "object", properties: { a: { type: "integer", minimum: -100, maximum: 100 }, b: { type: "number", minimum: 0, maximum: 10 } }, required: ["a", "b"] } } },
];
const ajv = new Ajv2020({ strict: false, allErrors: true });
const toolValidators = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
export const messages = [{ role: "user", content: "Weather in Paris?" }];

export function checkCalls(calls, only) {
  assert.ok(calls.length >= 1);
  for (const call of calls) {
    assert.equal(call.type, "function");
    if (only) assert.equal(call.function.name, only);
    const validate = toolValidators[call.function.name];
    assert.ok(validate, call.function.name);
    const args = JSON.parse(call.function.arguments);
    assert.ok(validate(args), `${call.function.arguments} ${JSON.stringify(validate.errors)}`);
  }
}

// For each seed, required and named ("add"): the non-streamed calls are
// valid, and the stream's deltas join to the same calls.
export async function checkForcedToolCalls(client, model, seeds) {
  for (const seed of seeds) {
    for (const [tool_choice, only] of [["required", null], [{ type: "function", function: { name: "add" } }, "add"]]) {
      const r = await client.chat.completions.create({ model, messages, tools, tool_choice, max_tokens: 400, temperature: 1, seed });
      const c = r.choices[0];
      assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c.message));
      checkCalls(c.message.tool_calls, only);
      if (only) assert.equal(c.message.tool_calls.length, 1);
      const stream = await client.chat.completions.create({ model, messages, tools, tool_choice, max_tokens: 400, temperature: 1, seed, stream: true });
      const calls = [];
      let finish = null;
      for await (const chunk of stream) {
        const ch = chunk.choices[0];
        if (!ch) continue;
        for (const t of ch.delta.tool_calls ?? []) {
          calls[t.index] ??= { type: "function", function: { name: "", arguments: "" } };
          if (t.function?.name) calls[t.index].function.name = t.function.name;
          calls[t.index].function.arguments += t.function?.arguments ?? "";
        }
        if (ch.finish_reason) finish = ch.finish_reason;
      }
      assert.equal(finish, "tool_calls");
      checkCalls(calls, only);
      assert.deepEqual(calls.map((x) => [x.function.name, JSON.parse(x.function.arguments)]),
        c.message.tool_calls.map((x) => [x.function.name, JSON.parse(x.function.arguments)]), "same seed, same calls");
    }
  }
}
