#!/usr/bin/env bash
# The issue-25 table on this machine, per ISA (--isa avx2 on an AVX-512 box
# gives the AVX2 figures), each figure next to the same-run peak it is
# judged by: prefill and batch-32 decode against the peak the linears run
# at (`linear_peak`: bf16 weights -> the bf16 probe of the ISA, int8 -> the
# int8 one) and the f32 FMA peak, single-stream decode against the read
# bandwidth. One command prints the whole table (every x86 ISA the CPU
# runs but scalar: avx2, avx2vnni, avx512, avx512bf16 on Zen 4/5; about 6
# minutes on a quiet 2-core Zen 5).
#
#   bench/every_cpu.sh MODEL_DIR ["isa..."] [pagoda_binary...] > table.md
# e.g. bench/every_cpu.sh /tmp/qwen3-0.6b-random
#      bench/every_cpu.sh /tmp/qwen3-0.6b-random "avx2 avx512bf16" ./build/pagoda /work/main/build/pagoda
#
# With several binaries they are interleaved per figure, so a before/after
# pair sees the same machine state (a shared host's load changes within
# minutes); every row is then judged by the FIRST binary's roofline of that
# figure (it must print the per-ISA peaks: a build before issue 25
# measured AVX-512 peaks under --isa avx2). Decode rows are judged by
# the read bandwidth each run probed between its own decode steps
# (`decode_read_gb_per_s`), so the step and its bound see the same machine.
#
# Only some figures (FIGURES, comma-separated names as in the table), e.g.
# the int8 decode rows of two binaries interleaved (an A/B):
#   FIGURES="decode int8" bench/every_cpu.sh MODEL_DIR "avx2 avx512bf16" new/pagoda old/pagoda
set -euo pipefail
model=${1:?usage: bench/every_cpu.sh MODEL_DIR ["isa..."] [pagoda_binary...]}
isas=${2:-}
if [ $# -ge 2 ]; then shift 2; else shift 1; fi
binaries=("$@")
[ ${#binaries[@]} -gt 0 ] || binaries=("$(dirname "$0")/../build/pagoda")
if [ -z "$isas" ]; then  # what the first binary says this CPU supports, but scalar
  isas=$("${binaries[0]}" bench latency --model "$model" --isa list |
    awk '$2 == "supported" && $1 != "scalar" { printf "%s ", $1 }')
fi
common=(bench latency --model "$model" --max-model-len 1024 --threads 2 --json)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
figure() {  # name, then bench latency flags
  local name=$1
  shift
  # FIGURES="a,b": only the figures named (comma-separated names as below).
  [ -z "${FIGURES:-}" ] || [[ ",$FIGURES," == *",$name,"* ]] || return 0
  for isa in $isas; do
    local i=0
    for bin in "${binaries[@]}"; do
      "$bin" "${common[@]}" --isa "$isa" "$@" 2>/dev/null | tail -1 >"$tmp/$i.json"
      /usr/bin/python3 - "$name" "$isa" "$bin" "$tmp/0.json" "$tmp/$i.json" \
        "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, sys
name, isa, binary, ref_path, path, load = sys.argv[1:7]
ref, j = json.load(open(ref_path)), json.load(open(path))
r = ref["roofline"]
kind = ref["linear_peak"]
peak = r[{"int8": "int8_gops", "bf16": "bf16_gflops", "fp32": "fp32_gflops"}[kind]] * 1e9
# The CPU clock (bench latency's *_cpu_clock): FLOPs per CPU-second of the
# process against one thread's peak per CPU-second (the first binary's);
# "n/a" for a binary that does not time its CPU.
thread_peak = ref.get("linear_peak_per_cpu_second", 0) * 1e9
def cpu_clock(flops, cpu_s):
    if not thread_peak or not cpu_s:
        return "n/a"
    return f"{100 * flops / cpu_s / thread_peak:.1f}%"
if name.startswith("prefill"):
    got = f"{j['prefill_tokens_per_s']:.1f} tok/s"
    tokens = j["batch"] * j["input_len"]
    flops = j["prefill_tokens_per_s"] * j["prefill_flops_per_token"]
    frac = (f"{100 * flops / peak:.1f}% of {kind} peak "
            f"({100 * flops / (r['fp32_gflops'] * 1e9):.1f}% of fp32)")
    cpu = cpu_clock(tokens * j["prefill_flops_per_token"], j.get("prefill_cpu_seconds"))
elif name.startswith("batch"):
    got = f"{j['decode_tokens_per_s']:.1f} tok/s ({j['decode_ms_per_step']:.0f} ms/step)"
    flops = j["decode_flops_per_step"] / (j["decode_ms_per_step"] * 1e-3)
    frac = (f"{100 * flops / peak:.1f}% of {kind} peak "
            f"({100 * flops / (r['fp32_gflops'] * 1e9):.1f}% of fp32)")
    cpu_ms = j.get("decode_cpu_ms_per_step")
    cpu = cpu_clock(j["decode_flops_per_step"], cpu_ms * 1e-3 if cpu_ms else 0)
else:
    got = f"{j['decode_tokens_per_s']:.1f} tok/s ({j['decode_ms_per_step']:.1f} ms/step)"
    bw = j["decode_bytes_per_step"] / (j["decode_ms_per_step"] * 1e-3)
    # The run's own read probes, taken between its decode steps (median);
    # a binary without them is judged by the first binary's roofline probe.
    read = j.get("decode_read_gb_per_s") or r["read_gb_per_s"]
    probes = "between the steps" if j.get("decode_read_gb_per_s") else "probed before the runs"
    frac = f"{100 * bw / (read * 1e9):.1f}% of read bandwidth ({read:.1f} GB/s {probes})"
    cpu = "-"  # bound by memory: CPU time is no measure of it
peaks = (f"read {r['read_gb_per_s']:.1f} GB/s, fp32 {r['fp32_gflops']:.0f}, "
         f"bf16 {r['bf16_gflops']:.0f}, int8 {r['int8_gops']:.0f}")
print(f"| {name} | {isa} | {binary} | {got} | {frac} | {cpu} | {peaks} | {load} |", flush=True)
PY
      i=$((i + 1))
    done
  done
}
echo "| figure | --isa | binary | speed | fraction (wall clock) | of the peak on the CPU clock | same-run peaks of the first binary (G/s) | loadavg |"
echo "|---|---|---|---|---|---|---|---|"
kv=(--kv-cache-memory 300000000)
figure "prefill pp512 bf16" --input-len 512 --output-len 2 --repeats 1 "${kv[@]}"
figure "decode bf16" --input-len 128 --output-len 64 --repeats 2 "${kv[@]}"
figure "decode int8" --input-len 128 --output-len 64 --repeats 2 "${kv[@]}" --quantization int8
figure "prefill pp512 int8" --input-len 512 --output-len 2 --repeats 1 "${kv[@]}" --quantization int8
figure "batch 32 x (128 in, 32 out) bf16" --input-len 128 --output-len 32 --batch 32 --repeats 1 \
  --warmup 0 --kv-cache-memory 1200000000
