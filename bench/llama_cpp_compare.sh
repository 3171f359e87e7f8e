#!/usr/bin/env bash
# The issue-25 table with llama.cpp as the anchor: each figure measured with a
# llama.cpp tool and with the matching `pagoda` command on the same weights,
# interleaved (llama.cpp, Pagoda, llama.cpp, Pagoda) so a pair sees the same
# machine state, once per ISA pair: a llama.cpp built for AVX2 only against
# `pagoda --isa avx2` (the Zen 2/3 path), and a native llama.cpp build
# (AVX-512 BF16 on Zen 4/5) against Pagoda's default ISA. Never downloads or
# builds anything: it takes the builds and the GGUFs as arguments.
#
#   bench/llama_cpp_compare.sh LLAMA_AVX2_BUILD LLAMA_NATIVE_BUILD BF16_GGUF Q8_0_GGUF MODEL_DIR \
#     [pagoda binary] > table.md
#
# LLAMA_*_BUILD: llama.cpp CMake build dirs holding bin/llama-bench,
# llama-batched-bench and llama-server (CPU only, e.g. for AVX2:
# -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
# -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF). BF16_GGUF: MODEL_DIR's weights
# as a bf16 GGUF (llama.cpp's convert_hf_to_gguf.py --outtype bf16; see
# tools/qwen3_to_gguf.py, how they were made here without torch); Q8_0_GGUF:
# `llama-quantize BF16_GGUF Q8_0_GGUF q8_0`. MODEL_DIR: the HF checkpoint
# (e.g. tools/make_random_checkpoint.py's Qwen3-0.6B shape).
#
# Environment: TIMER, a command prefix for every timed run (e.g.
# "flock /tmp/quiet.lock /tmp/lead/quiet.sh" on a shared host); FIGURES,
# some figures only, comma-separated from "prefill pp512 bf16", "decode bf16",
# "decode int8", "batch 32", "serving"; ISAS, the
# pairs to run (default "avx2 avx512bf16"); REPEATS, pairs per figure (2);
# THREADS (2); PORT (18231) for the serving figure; ROOFLINE=0 skips the
# `pagoda bench roofline` rows.
#
# A figure whose command fails prints "failed: ..." (with the tool's last
# error line) in its row, the table goes on, and the script exits 1 at the
# end; a server already listening on PORT is refused before any run.
set -euo pipefail
usage="usage: bench/llama_cpp_compare.sh LLAMA_AVX2_BUILD LLAMA_NATIVE_BUILD BF16_GGUF Q8_0_GGUF MODEL_DIR [pagoda]"
[ $# -ge 5 ] || { echo "$usage" >&2; exit 2; }
avx2_build=$1 native_build=$2 bf16=$3 q8=$4 model=$5
here=$(cd "$(dirname "$0")" && pwd)
pagoda=${6:-$here/../build/pagoda}
for f in "$avx2_build/bin/llama-bench" "$native_build/bin/llama-bench" "$bf16" "$q8" "$model/config.json" "$pagoda"; do
  [ -e "$f" ] || { echo "missing: $f" >&2; echo "$usage" >&2; exit 2; }
done
read -r -a timer <<<"${TIMER:-}"
isas=${ISAS:-avx2 avx512bf16}
repeats=${REPEATS:-2}
threads=${THREADS:-2}
port=${PORT:-18231}
want() { [ -z "${FIGURES:-}" ] || [[ ",$FIGURES," == *",$1,"* ]]; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if want serving && curl -s -o /dev/null "http://127.0.0.1:$port/" 2>/dev/null; then
  echo "llama_cpp_compare.sh: something already listens on port $port (a stale server?); stop it or set PORT" >&2
  exit 2
fi
load() { cut -d' ' -f1-3 /proc/loadavg; }
build_for() { [ "$1" = avx2 ] && echo "$avx2_build" || echo "$native_build"; }
row() { echo "| $1 | $2 | $3 | $4 | $(load) |"; }
py=/usr/bin/python3
pg=("$pagoda" bench latency --model "$model" --max-model-len 1024 --threads "$threads" --json)

# One line of the table from a tool's JSON: KIND FILE.
speed() {
  $py - "$1" "$2" <<'PY'
import json, sys
kind, text = sys.argv[1], open(sys.argv[2]).read().strip()
# (TIMER may print a line before the tool's own output.)
if kind == "llama-bench":
    j = json.loads(text[text.index("["):])
else:  # the last JSON line (llama-batched-bench's jsonl, pagoda's --json)
    j = json.loads([line for line in text.splitlines() if line.startswith("{")][-1])
if kind == "llama-bench":  # one test; avg_ts: tokens/s over its -r repetitions
    j = j[0]
    print(f"{j['avg_ts']:.1f} tok/s (sd {j['stddev_ts']:.1f})")
elif kind == "prefill":  # pagoda bench latency
    print(f"{j['prefill_tokens_per_s']:.1f} tok/s")
elif kind == "decode":
    print(f"{j['decode_tokens_per_s']:.1f} tok/s ({j['decode_ms_per_step']:.1f} ms/step; "
          f"read probe between steps {j['decode_read_gb_per_s']:.1f} GB/s)")
elif kind == "batched-bench":  # llama-batched-bench --output-format jsonl
    print(f"{j['speed']:.1f} tok/s total (prefill {j['speed_pp']:.1f}, decode {j['speed_tg']:.1f} tok/s)")
elif kind == "batch":  # pagoda bench latency --batch: the same three figures
    pp, tg = j["batch"] * j["input_len"], j["batch"] * j["output_len"]
    t = pp / j["prefill_tokens_per_s"] + tg / j["decode_tokens_per_s"]
    print(f"{(pp + tg) / t:.1f} tok/s total (prefill {j['prefill_tokens_per_s']:.1f}, "
          f"decode {j['decode_tokens_per_s']:.1f} tok/s)")
elif kind == "serving":  # bench/serve_bench.mjs --json
    tokens = round(j["output_tokens_per_s"] * j["seconds"])
    print(f"{j['output_tokens_per_s']:.1f} output tok/s ({tokens} tokens in {j['seconds']:.1f} s; "
          f"TTFT median {j['ttft_ms']['median']:.0f} ms, TPOT median {j['tpot_ms']['median']:.0f} ms)")
elif kind == "roofline":  # pagoda bench roofline --json: the all-threads row
    r = j["roofline"][-1]
    print(f"read {r['read_gb_per_s']:.1f} GB/s, fp32 {r['fp32_gflops']:.0f} GFLOP/s ({r['fp32_probe']}), "
          f"bf16 {r['bf16_gflops']:.0f} ({r['bf16_probe']}), int8 {r['int8_gops']:.0f} GOP/s ({r['int8_probe']})")
PY
}
# Runs a timed command into a file and prints its figure, or "failed: " and
# the command's last error line (counted in $tmp/failed): KIND CMD...
measure() {
  local kind=$1; shift
  if "${timer[@]}" "$@" >"$tmp/out" 2>"$tmp/err" && speed "$kind" "$tmp/out" 2>>"$tmp/err"; then
    return
  fi
  echo "$kind" >>"$tmp/failed"
  echo "failed: $(basename "$1"): $(grep -v '^quiet:' "$tmp/err" | tail -1 | tr -d '|')"
}
llama_bench() {  # isa, then llama-bench flags
  local b; b=$(build_for "$1"); shift
  measure llama-bench "$b/bin/llama-bench" -t "$threads" -r 3 -o json "$@"
}
pagoda_latency() {  # kind (prefill|decode), isa, then bench latency flags
  local kind=$1 isa=$2; shift 2
  measure "$kind" "${pg[@]}" --isa "$isa" "$@"
}

echo "| figure | ISA | engine | speed | loadavg |"
echo "|---|---|---|---|---|"
for isa in $isas; do
  if [ "${ROOFLINE:-1}" != 0 ]; then
    row "peaks (pagoda bench roofline, $threads threads)" "$isa" "-" \
      "$(measure roofline "$pagoda" bench roofline --threads "$threads" --isa "$isa" --json)"
  fi
  engine_llama="llama.cpp ($([ "$isa" = avx2 ] && echo "AVX2 build" || echo "native build"))"
  engine_pagoda="pagoda --isa $isa"
  for ((r = 0; r < repeats; ++r)); do
    if want "prefill pp512 bf16"; then
      row "prefill pp512 bf16" "$isa" "$engine_llama" "$(llama_bench "$isa" -m "$bf16" -p 512 -n 0)"
      row "prefill pp512 bf16" "$isa" "$engine_pagoda" "$(pagoda_latency prefill "$isa" --input-len 512 --output-len 2 --repeats 1 --kv-cache-memory 300000000)"
    fi
    # Decode of 64 tokens after a 128-token context in both (llama-bench -d: the depth).
    if want "decode bf16"; then
      row "decode bf16 (tg64 @ 128)" "$isa" "$engine_llama" "$(llama_bench "$isa" -m "$bf16" -p 0 -n 64 -d 128)"
      row "decode bf16 (tg64 @ 128)" "$isa" "$engine_pagoda" "$(pagoda_latency decode "$isa" --input-len 128 --output-len 64 --repeats 2 --kv-cache-memory 300000000)"
    fi
    if want "decode int8"; then
      row "decode q8_0 / int8 (tg64 @ 128)" "$isa" "$engine_llama q8_0" "$(llama_bench "$isa" -m "$q8" -p 0 -n 64 -d 128)"
      row "decode q8_0 / int8 (tg64 @ 128)" "$isa" "$engine_pagoda --quantization int8" "$(pagoda_latency decode "$isa" --input-len 128 --output-len 64 --repeats 2 --kv-cache-memory 300000000 --quantization int8)"
    fi
    # 32 sequences of 128 prompt tokens then 32 decode steps of 32 rows: the
    # prefill and decode rates and the total (prefill + decode tokens over both phases' time).
    if want "batch 32"; then
      row "batch 32 x (128 in, 32 out) bf16" "$isa" "$engine_llama" \
        "$(measure batched-bench "$(build_for "$isa")/bin/llama-batched-bench" -m "$bf16" -t "$threads" \
             -tb "$threads" -c 8192 -npp 128 -ntg 32 -npl 32 --output-format jsonl)"
      row "batch 32 x (128 in, 32 out) bf16" "$isa" "$engine_pagoda" \
        "$(measure batch "${pg[@]}" --isa "$isa" --batch 32 --input-len 128 --output-len 32 --repeats 1 \
             --warmup 0 --kv-cache-memory 1200000000)"
    fi
    # 32 streaming requests, 8 at a time, 200 words in, 64 tokens out
    # (bench/serve_bench.mjs, the OpenAI completions API of both servers).
    # The server starts inside the timed command (TIMER may stop every other
    # process) and is stopped by its PID at the end.
    if want "serving"; then
      for engine in llama pagoda; do
        if [ $engine = llama ]; then
          server=("$(build_for "$isa")/bin/llama-server" -m "$bf16" -t "$threads" -tb "$threads" -np 8
                  -c 8192 --port "$port" --no-webui)
          name="$engine_llama llama-server -np 8"
        else
          server=("$pagoda" serve --model "$model" --port "$port" --threads "$threads" --isa "$isa"
                  --max-model-len 1024 --max-num-seqs 8 --kv-cache-memory 400000000)
          name="$engine_pagoda serve"
        fi
        rm -f "$tmp/serve.json"
        "${timer[@]}" bash -c '
          port=$1 bench=$2 out=$3; shift 3
          "$@" >"$out.log" 2>&1 & server=$!
          trap "kill $server 2>/dev/null; wait $server 2>/dev/null" EXIT
          for _ in $(seq 1 240); do
            curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1 && break
            kill -0 $server 2>/dev/null || { cat "$out.log" >&2; exit 1; }
            sleep 0.5
          done
          node "$bench" --url "http://127.0.0.1:$port" --num-prompts 32 --concurrency 8 \
            --input-words 200 --output-len 64 --json >"$out"' _ "$port" "$here/serve_bench.mjs" "$tmp/serve.json" \
          "${server[@]}" 2>"$tmp/serve.err" && result=$(speed serving "$tmp/serve.json") || {
          echo serving >>"$tmp/failed"
          result="failed: $(cat "$tmp/serve.err" "$tmp/serve.json.log" 2>/dev/null | grep -m1 -E 'Error|error' | tr -d '|' || true)"
        }
        row "serving 32 req, 8 concurrent, 200 in / 64 out" "$isa" "$name" "$result"
      done
    fi
  done
done
if [ -s "$tmp/failed" ]; then
  echo "llama_cpp_compare.sh: $(wc -l <"$tmp/failed") figure(s) failed (their rows say why)" >&2
  exit 1
fi
