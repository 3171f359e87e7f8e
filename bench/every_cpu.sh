#!/usr/bin/env bash
# The issue-25 table on this machine, per ISA (--isa avx2 on an AVX-512 box
# gives the AVX2 figures), each figure next to the same-run peak it is
# judged by (`bench latency --json`: prefill and batch-32 decode against the
# linears' peak, single-stream decode against the read bandwidth). Binaries
# are interleaved per figure, so a before/after pair sees the same machine
# state (a shared host's load changes within minutes).
#
#   bench/every_cpu.sh MODEL_DIR "isa..." pagoda_binary... > table.md
# e.g. bench/every_cpu.sh /tmp/qwen3-0.6b-random "avx2 avx512bf16" /work/main/build/pagoda ./build/pagoda
set -euo pipefail
model=${1:?usage: bench/every_cpu.sh MODEL_DIR "isa..." pagoda_binary...}
isas=$2
shift 2
common=(bench latency --model "$model" --max-model-len 1024 --threads 2 --json)
figure() {  # name, then bench latency flags
  local name=$1
  shift
  for isa in $isas; do
    for bin in "${binaries[@]}"; do
      out=$("$bin" "${common[@]}" --isa "$isa" "${flags[@]}" 2>/dev/null | tail -1)
      /usr/bin/python3 - "$name" "$isa" "$bin" "$out" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, sys
name, isa, binary, out, load = sys.argv[1:6]
j = json.loads(out)
r = j["roofline"]
if name.startswith("prefill"):
    got = f"{j['prefill_tokens_per_s']:.1f} tok/s"
    frac = f"{100 * j['prefill_fraction_of_linear_peak']:.1f}% of {j['linear_peak']} peak " \
           f"({100 * j['prefill_fraction_of_fp32_peak']:.1f}% of fp32)"
elif name.startswith("batch"):
    got = f"{j['decode_tokens_per_s']:.1f} tok/s decode, {j['prefill_tokens_per_s']:.1f} prefill"
    frac = f"{100 * j['decode_fraction_of_linear_peak']:.1f}% of {j['linear_peak']} peak " \
           f"({100 * j['decode_fraction_of_roofline']:.1f}% of roofline)"
else:
    got = f"{j['decode_tokens_per_s']:.1f} tok/s ({j['decode_ms_per_step']:.1f} ms/step)"
    frac = f"{100 * j['decode_bandwidth_ms_per_step'] / j['decode_ms_per_step']:.1f}% of read bandwidth"
peaks = (f"read {r['read_gb_per_s']:.1f} GB/s, fp32 {r['fp32_gflops']:.0f}, "
         f"bf16 {r['bf16_gflops']:.0f}, int8 {r['int8_gops']:.0f}")
print(f"| {name} | {isa} | {binary} | {got} | {frac} | {peaks} | {load} |", flush=True)
PY
    done
  done
}
binaries=("$@")
echo "| figure | --isa | binary | speed | fraction | same-run peaks (G/s) | loadavg |"
echo "|---|---|---|---|---|---|---|"
flags=(--input-len 512 --output-len 2 --repeats 2 --kv-cache-memory 300000000)
figure "prefill pp512 bf16"
flags=(--input-len 128 --output-len 64 --repeats 2 --kv-cache-memory 300000000)
figure "decode bf16"
flags=(--input-len 128 --output-len 64 --repeats 2 --kv-cache-memory 300000000 --quantization int8)
figure "decode int8"
flags=(--input-len 512 --output-len 2 --repeats 2 --kv-cache-memory 300000000 --quantization int8)
figure "prefill pp512 int8"
flags=(--input-len 128 --output-len 32 --batch 32 --repeats 1 --warmup 0 --kv-cache-memory 1200000000)
figure "batch 32 x (128 in, 32 out) bf16"
