// Serving benchmark in the spirit of vLLM's benchmark_serving: drives a
// running `pagoda serve` with N streaming completion requests at a fixed
// concurrency (or request rate), random or shared-prefix prompts, and
// reports request throughput, output tokens/s and TTFT / TPOT / end-to-end
// latency (mean, median, p99).
//
//   node bench/serve_bench.mjs --url http://127.0.0.1:8000 --num-prompts 200 \
//        --concurrency 16 --input-words 64 --output-len 64 [--shared-prefix-words 48] [--rate 10]
//        [--bound latency.json]
//
// --bound takes the JSON of `pagoda bench latency --json` on the same model
// and machine (--batch = the concurrency, --input-len about the prompts'
// tokens; it measures the roofline in its own run) and prints the run's
// lower bound and the fraction of it reached: every prompt token's FLOPs at
// the linears' peak, plus the decode tokens in full steps of `concurrency`
// rows, each step the larger of its bytes (weights + KV) at the read
// bandwidth and its FLOPs at the peak. (Steps that mix prompt chunks and
// decode rows can beat it slightly: such a step reads the weights once.)
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

const { values: a } = parseArgs({
  options: {
    url: { type: "string", default: "http://127.0.0.1:8000" },
    model: { type: "string" },
    "num-prompts": { type: "string", default: "100" },
    concurrency: { type: "string", default: "16" },
    rate: { type: "string", default: "0" },  // requests/s; 0 = as fast as concurrency allows
    "input-words": { type: "string", default: "64" },
    "output-len": { type: "string", default: "64" },
    "shared-prefix-words": { type: "string", default: "0" },
    seed: { type: "string", default: "1" },
    json: { type: "boolean", default: false },
    bound: { type: "string" },
  },
});
const n = Number(a["num-prompts"]), concurrency = Number(a.concurrency), rate = Number(a.rate);
const outputLen = Number(a["output-len"]);
let seed = Number(a.seed);
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const words = ["the", "cat", "sat", "on", "a", "mat", "little", "girl", "big", "red", "ball", "park", "day", "sun", "dog", "happy", "tree", "bird"];
const phrase = (k) => Array.from({ length: k }, () => words[Math.floor(rand() * words.length)]).join(" ");
const prefix = phrase(Number(a["shared-prefix-words"]));
const prompts = Array.from({ length: n }, () => (prefix ? prefix + " " : "") + phrase(Number(a["input-words"]) - Number(a["shared-prefix-words"])));
const model = a.model ?? (await (await fetch(a.url + "/v1/models")).json()).data[0].id;

async function one(prompt) {
  const start = performance.now();
  const res = await fetch(a.url + "/v1/completions", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ model, prompt, max_tokens: outputLen, temperature: 0, ignore_eos: true, stream: true, stream_options: { include_usage: true } }),
  });
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  let ttft = null, tokens = 0, promptTokens = 0, buffer = "";
  const decoder = new TextDecoder();
  for await (const chunk of res.body) {
    buffer += decoder.decode(chunk, { stream: true });
    let i;
    while ((i = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, i);
      buffer = buffer.slice(i + 2);
      if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
      const data = JSON.parse(event.slice(6));
      if (data.usage) tokens = data.usage.completion_tokens, promptTokens = data.usage.prompt_tokens;
      if (ttft === null && data.choices.length) ttft = performance.now() - start;
    }
  }
  const e2e = performance.now() - start;
  return { ttft, e2e, tokens, promptTokens, tpot: tokens > 1 ? (e2e - ttft) / (tokens - 1) : 0 };
}

const results = [];
let next = 0;
const t0 = performance.now();
async function worker() {
  while (next < n) {
    const i = next++;
    if (rate > 0) {
      const due = t0 + (i / rate) * 1000;
      if (due > performance.now()) await new Promise((r) => setTimeout(r, due - performance.now()));
    }
    results.push(await one(prompts[i]));
  }
}
await Promise.all(Array.from({ length: concurrency }, worker));
const seconds = (performance.now() - t0) / 1000;

const stat = (xs) => {
  const s = [...xs].sort((x, y) => x - y);
  return { mean: s.reduce((p, q) => p + q, 0) / s.length, median: s[Math.floor(s.length / 2)], p99: s[Math.min(s.length - 1, Math.floor(s.length * 0.99))] };
};
const outTokens = results.reduce((p, r) => p + r.tokens, 0);
const report = {
  requests: n, concurrency, rate, seconds,
  request_throughput: n / seconds, output_tokens_per_s: outTokens / seconds,
  ttft_ms: stat(results.map((r) => r.ttft)), tpot_ms: stat(results.map((r) => r.tpot)), e2e_ms: stat(results.map((r) => r.e2e)),
};
if (a.bound) {
  const lat = JSON.parse(readFileSync(a.bound, "utf8").trim().split("\n").pop());
  if (!lat.roofline || !lat.decode_flops_per_step) throw new Error(`--bound ${a.bound}: not the JSON of \`pagoda bench latency --json\` with its roofline`);
  const peak = lat.prefill_roofline_tokens_per_s * lat.prefill_flops_per_token;  // FLOP/s
  const bandwidth = lat.roofline.read_gb_per_s * 1e9;
  const promptTokens = results.reduce((p, r) => p + r.promptTokens, 0);
  const decodeTokens = results.reduce((p, r) => p + Math.max(0, r.tokens - 1), 0);
  // A decode step of `concurrency` rows, from the latency run's step of lat.batch rows.
  const kvBytesPerRow = (lat.decode_bytes_per_step - lat.weight_bytes_per_step) / lat.batch;
  const stepBytes = lat.weight_bytes_per_step + concurrency * kvBytesPerRow;
  const stepFlops = (lat.decode_flops_per_step / lat.batch) * concurrency;
  const stepSeconds = Math.max(stepBytes / bandwidth, stepFlops / peak);
  const prefillSeconds = (promptTokens * lat.prefill_flops_per_token) / peak;
  const decodeSeconds = (decodeTokens / concurrency) * stepSeconds;
  report.bound = {
    seconds: prefillSeconds + decodeSeconds, prefill_seconds: prefillSeconds, decode_seconds: decodeSeconds,
    prompt_tokens: promptTokens, decode_tokens: decodeTokens, peak_gflops: peak * 1e-9, read_gb_per_s: lat.roofline.read_gb_per_s,
    decode_step_ms: stepSeconds * 1e3, decode_step: stepBytes / bandwidth >= stepFlops / peak ? "bandwidth" : "compute",
  };
  report.fraction_of_bound = report.bound.seconds / seconds;
}
if (a.json) {
  console.log(JSON.stringify(report));
} else {
  console.log(`${n} requests, concurrency ${concurrency}${rate ? `, rate ${rate}/s` : ""}: ${seconds.toFixed(2)} s`);
  console.log(`throughput: ${report.request_throughput.toFixed(2)} req/s, ${report.output_tokens_per_s.toFixed(1)} output tokens/s`);
  for (const k of ["ttft_ms", "tpot_ms", "e2e_ms"]) {
    const s = report[k];
    console.log(`${k.padEnd(8)} mean ${s.mean.toFixed(2)}  median ${s.median.toFixed(2)}  p99 ${s.p99.toFixed(2)}`);
  }
  if (report.bound) {
    const b = report.bound;
    console.log(`bound: ${b.seconds.toFixed(2)} s = prefill ${b.prompt_tokens} tokens at ${b.peak_gflops.toFixed(0)} GFLOP/s ` +
      `${b.prefill_seconds.toFixed(2)} s + decode ${b.decode_tokens} tokens in steps of ${concurrency} ` +
      `(${b.decode_step_ms.toFixed(2)} ms each, ${b.decode_step}-bound at ${b.read_gb_per_s.toFixed(1)} GB/s) ${b.decode_seconds.toFixed(2)} s`);
    console.log(`run at ${(100 * report.fraction_of_bound).toFixed(1)}% of the bound`);
  }
}
