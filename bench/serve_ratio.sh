#!/usr/bin/env bash
# The serving workload of issue 23 item 8 against its own bound: 32 streaming
# requests, 8 at a time, ~200-token prompts, 64 output tokens, on a
# `pagoda serve` of MODEL_DIR; the bound (prefill FLOPs at the linears' peak
# + decode steps at max(bytes / read bandwidth, FLOPs / peak)) comes from a
# `pagoda bench latency --json` run of the same shape just before, with its
# own roofline probes (bench/serve_bench.mjs --bound).
#
#   bench/serve_ratio.sh MODEL_DIR [runs=1] [port=18123] [pagoda binary] [serve flags...]
# e.g. bench/serve_ratio.sh /tmp/qwen3-0.6b-random (tools/make_random_checkpoint.py)
# Flags after the binary go to `pagoda serve` only (e.g. --max-num-batched-tokens 256 to
# A/B a scheduling setting against the same bound).
set -euo pipefail
model=${1:?usage: bench/serve_ratio.sh MODEL_DIR [runs] [port] [pagoda binary] [serve flags...]}
runs=${2:-1}
port=${3:-18123}
pagoda=${4:-./build/pagoda}
serve_flags=("${@:5}")
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
server=""
cleanup() {
  if [[ -n $server ]]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
"$pagoda" serve --model "$model" --port "$port" --max-model-len 1024 --kv-cache-memory 400000000 \
  "${serve_flags[@]}" >"$tmp/server.log" 2>&1 &
server=$!
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { cat "$tmp/server.log"; exit 1; }
  sleep 0.5
done
for ((i = 1; i <= runs; ++i)); do
  # The bound's run right before the serving run: the shared machine's
  # bandwidth and peak drift within minutes. (The latency run and the server
  # do not compute at the same time: the server is idle until the clients.)
  "$pagoda" bench latency --model "$model" --max-model-len 1024 --kv-cache-memory 400000000 \
    --batch 8 --input-len 200 --output-len 64 --repeats 3 --json >"$tmp/latency.json"
  node "$here/serve_bench.mjs" --url "http://127.0.0.1:$port" --num-prompts 32 --concurrency 8 \
    --input-words 200 --output-len 64 --bound "$tmp/latency.json"
done
