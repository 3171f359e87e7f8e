// `pagoda serve` under tensor parallelism (mpirun -np 2, local ranks) with
// the official OpenAI client: completions (plain, batched, streaming) and
// chat equal the single-process offline greedy results, and SIGTERM to rank
// 0 shuts the whole job down with exit code 0.
// Usage: node --test tp_server.test.mjs   (PAGODA_BINARY and PAGODA_MODEL in the environment)
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import OpenAI from "openai";
import { waitForServer } from "./server_process.mjs";

const binary = process.env.PAGODA_BINARY;
const model = process.env.PAGODA_MODEL;
if (!binary || !model) throw new Error("set PAGODA_BINARY and PAGODA_MODEL");
const mpiEnv = { ...process.env, OMPI_ALLOW_RUN_AS_ROOT: "1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: "1",
  ASAN_OPTIONS: `${process.env.ASAN_OPTIONS ?? ""}:detect_leaks=0` };

function startServer() {
  const proc = spawn("timeout", ["-k", "5", "240", "mpirun", "--timeout", "230", "--bind-to", "none", "-np", "2",
    binary, "serve", "--model", model, "--served-model-name", "stories", "--port", "0", "--threads", "1",
    "--tensor-parallel-size", "2"], { env: mpiEnv });
  return waitForServer(proc, 60000);
}

function parentPid(pid) {
  // /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces.
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
}

function descendsFrom(pid, ancestor) {
  for (let p = pid, hops = 0; p > 1 && hops < 16; p = parentPid(p), hops++) {
    if (p === ancestor) return true;
  }
  return false;
}

// The pid of MPI rank `rank` among this server's processes (descendants of
// the process we spawned: other tests may run mpirun jobs at the same time).
function rankPid(rank) {
  for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
      if (cmd[0] !== binary || cmd[1] !== "serve") continue;
      if (!descendsFrom(Number(pid), server.proc.pid)) continue;
      const env = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0");
      if (env.includes(`OMPI_COMM_WORLD_RANK=${rank}`)) return Number(pid);
    } catch {}
  }
  return 0;
}

function offlineGreedy(prompts, maxTokens) {
  const out = execFileSync(binary, ["generate", "--model", model, "--temperature", "0", "--max-tokens", String(maxTokens),
    "--json", "--quiet", ...prompts.flatMap((p) => ["--prompt", p])], { encoding: "utf8" });
  return out.trim().split("\n").map((l) => JSON.parse(l).text);
}

const prompts = ["Once upon a time", "The little dog", "Lily and Tom went to the park", "Mom said"];
let server, client;

before(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: server.url + "/v1", apiKey: "unused", maxRetries: 0 });
});

after(async () => {
  const rank0 = rankPid(0);
  assert.ok(rank0 > 0, "rank 0 not found");
  const exited = new Promise((resolve) => {
    server.proc.removeAllListeners("exit");
    server.proc.on("exit", (code, signal) => resolve({ code, signal }));
  });
  process.kill(rank0, "SIGTERM");
  const { code } = await exited;
  assert.equal(code, 0, "SIGTERM to rank 0 must end the whole job with exit code 0: " + server.stderr());
});

test("completions equal the offline single-process greedy text", async () => {
  const want = offlineGreedy(prompts, 32);
  const got = await Promise.all(prompts.map((p) =>
    client.completions.create({ model: "stories", prompt: p, max_tokens: 32, temperature: 0 })));
  assert.deepEqual(got.map((r) => r.choices[0].text), want);
  const batch = await client.completions.create({ model: "stories", prompt: prompts, max_tokens: 32, temperature: 0 });
  assert.deepEqual(batch.choices.sort((a, b) => a.index - b.index).map((c) => c.text), want);
});

test("streaming completion", async () => {
  const [want] = offlineGreedy(["Once upon a time"], 40);
  const stream = await client.completions.create({ model: "stories", prompt: "Once upon a time", max_tokens: 40,
    temperature: 0, stream: true });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
  assert.equal(text, want);
});

test("sampling with a seed is reproducible across requests", async () => {
  const req = { model: "stories", prompt: "The sun was hot and", max_tokens: 24, temperature: 0.8, seed: 7 };
  const a = await client.completions.create(req);
  const b = await client.completions.create(req);
  assert.equal(a.choices[0].text, b.choices[0].text);
  assert.ok(a.choices[0].text.length > 0);
});
