// Raw-socket and streaming clients for the server tests: what fetch cannot
// do (drip bytes, pipeline, half-close, hold idle connections) goes through
// node:net.
import net from "node:net";
import { spawn } from "node:child_process";

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function hostPort(url) {
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port) };
}

// Resolves to {ms, value} of an async call.
export async function timed(fn) {
  const t0 = performance.now();
  const value = await fn();
  return { ms: Math.round(performance.now() - t0), value };
}

// Opens n connections; each is {socket, received, closed}.
export function openSockets(url, n) {
  const { host, port } = hostPort(url);
  return Promise.all(Array.from({ length: n }, () => new Promise((resolve, reject) => {
    const s = { socket: net.connect(port, host), received: "", closed: false };
    s.socket.setEncoding("utf8");
    s.socket.on("data", (d) => { s.received += d; });
    s.socket.on("close", () => { s.closed = true; });
    s.socket.on("error", () => {});
    s.socket.once("connect", () => resolve(s));
    s.socket.once("error", reject);
  })));
}

// Writes `first` on every socket, then chunk() every intervalMs; returns stop().
export function drip(sockets, chunk, first, intervalMs) {
  for (const s of sockets) s.socket.write(first);
  const timer = setInterval(() => {
    for (const s of sockets) if (!s.closed) s.socket.write(chunk());
  }, intervalMs);
  return () => clearInterval(timer);
}

// Sends `data` on a new connection; resolves to what came back once done(text)
// holds or the server closed. halfClose: end our side after writing.
export function rawExchange(url, data, done = null, { halfClose = false, timeoutMs = 10000 } = {}) {
  const { host, port } = hostPort(url);
  return new Promise((resolve, reject) => {
    let text = "";
    const socket = net.connect(port, host, () => {
      socket.write(data);
      if (halfClose) socket.end();
    });
    socket.setEncoding("utf8");
    const timer = setTimeout(() => { socket.destroy(); reject(new Error("no answer: " + text)); }, timeoutMs);
    const finish = () => { clearTimeout(timer); socket.destroy(); resolve(text); };
    socket.on("data", (d) => { text += d; if (done && done(text)) finish(); });
    socket.on("close", finish);
    socket.on("error", () => {});
  });
}

// A streaming request: {abort(), done} where done resolves to {text, events}
// (events: the parsed data: lines before [DONE]).
export function sseStream(url, body) {
  const ac = new AbortController();
  const done = (async () => {
    const r = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body), signal: ac.signal });
    let text = "";
    try {
      const decoder = new TextDecoder();
      for await (const chunk of r.body) text += decoder.decode(chunk, { stream: true });
    } catch {
      // the connection closed early: what arrived is the result
    }
    const events = text.split("\n\n").filter((e) => e.startsWith("data: {")).map((e) => JSON.parse(e.slice(6)));
    return { status: r.status, text, events };
  })();
  return { abort: () => ac.abort(), done };
}

// The value of one Prometheus sample line from /metrics.
export async function metric(url, name) {
  const text = await (await fetch(url + "/metrics")).text();
  const line = text.split("\n").find((l) => l.startsWith(name + " "));
  return line ? Number(line.split(" ")[1]) : NaN;
}

// A streaming request on a raw socket whose client does not read until
// resume(): the server's writes back up, as with a slow client.
// done resolves to the raw response text once the server closes or resume
// has read a complete chunked response.
export async function pausedStream(url, body) {
  const [s] = await openSockets(url, 1);
  const json = JSON.stringify(body);
  s.socket.pause();
  s.socket.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ${Buffer.byteLength(json)}\r\n\r\n${json}`);
  const done = new Promise((resolve) => s.socket.on("close", () => resolve(s.received)));
  return { resume: () => s.socket.resume(), done, destroy: () => s.socket.destroy() };
}

// Latencies (ms, sorted) of `count` GETs of each path, measured from a
// separate node process so that this one, busy consuming streams, does not
// add its own delays to the figures.
export function probeLatencies(url, paths, count) {
  const script = `
    const lat = [];
    for (let i = 0; i < ${count}; i++) {
      for (const p of ${JSON.stringify(paths)}) {
        const t0 = performance.now();
        const r = await fetch(${JSON.stringify(url)} + p, { signal: AbortSignal.timeout(5000) });
        await r.text();
        if (r.status !== 200) throw new Error(p + " " + r.status);
        lat.push(performance.now() - t0);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    console.log(JSON.stringify(lat));`;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--input-type=module", "-e", script]);
    let out = "", err = "";
    child.stdout.on("data", (d) => { out += d; });
    child.stderr.on("data", (d) => { err += d; });
    child.on("exit", (code) => {
      if (code !== 0) return reject(new Error("probe failed: " + err));
      resolve(JSON.parse(out).map(Math.round).sort((a, b) => a - b));
    });
  });
}
