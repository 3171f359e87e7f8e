#!/usr/bin/env bash
# Rooflines and kernels on every ISA the CPU supports (issue 25): `--isa
# list` agrees with /proc/cpuinfo; for each supported ISA `bench roofline`
# measures nonzero peaks with that ISA's instructions, and `bench latency`
# / `bench throughput` on stories260k (f32, bf16, int8 weights) print
# nonzero fractions of the peak the linears run at (no 0s, no inf/nan).
set -uo pipefail
pagoda=$1
src=$2
model=$src/models/stories260k
bf16_model=$src/tests/data/stories260k-bf16
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# What the CPU has, independently of pagoda's detection.
has_flags() { for f in "$@"; do grep -qw "$f" /proc/cpuinfo || return 1; done; }
expected=(scalar)
has_flags avx2 fma f16c && expected+=(avx2)
has_flags avx2 fma f16c avx_vnni && expected+=(avx2vnni)
has_flags avx512f avx512bw avx512vl avx512dq && expected+=(avx512)
has_flags avx512f avx512bw avx512vl avx512dq avx512_bf16 && expected+=(avx512bf16)

joined=$(printf '%s, ' "${expected[@]}")
joined=${joined%, }
"$pagoda" bench roofline --isa list >"$tmp/list" 2>&1 || fail "--isa list exited $?"
supported=()
while read -r name state _; do
  [[ $state == supported ]] && supported+=("$name")
done <"$tmp/list"
[[ "${supported[*]}" == "${expected[*]}" ]] \
  || fail "--isa list says '${supported[*]}', /proc/cpuinfo says '${expected[*]}': $(cat "$tmp/list")"
grep -q "(default)" "$tmp/list" || fail "--isa list names no default: $(cat "$tmp/list")"
"$pagoda" generate --help >"$tmp/help" 2>&1
grep -q "this CPU supports: $joined" "$tmp/help" \
  || fail "generate --help does not list the supported ISAs: $(grep -A2 -- --isa "$tmp/help")"

for isa in "${supported[@]}"; do
  "$pagoda" bench roofline --isa "$isa" --threads 1 --seconds 0.02 --read-mib 16 --json \
    >"$tmp/roof.json" 2>"$tmp/err" || fail "bench roofline --isa $isa: $(head -c 300 "$tmp/err")"
  /usr/bin/python3 - "$isa" "$tmp/roof.json" <<'PY' || fail "bench roofline --isa $isa figures"
import json, sys
isa, rows = sys.argv[1], json.load(open(sys.argv[2]))["roofline"]
for r in rows:
    assert r["isa"] == isa, r
    for k in ("read_gb_per_s", "fp32_gflops", "bf16_gflops", "int8_gops"):
        assert r[k] > 0, (k, r)
    width = {"scalar": "scalar", "avx2": "avx2", "avx2vnni": "avx2"}.get(isa, "avx512")
    assert r["fp32_probe"].startswith(width), r
    assert ("vdpbf16ps" in r["bf16_probe"]) == (isa == "avx512bf16"), r
    if isa == "avx2":
        assert "vpmaddubsw" in r["int8_probe"], r
    if isa == "avx2vnni":
        assert r["int8_probe"] == "avx-vnni vpdpbusd", r
PY
  # The engine's benchmarks: f32, bf16 (repacked) and int8 weights.
  for variant in "$model" "$bf16_model" "$model --quantization int8"; do
    # shellcheck disable=SC2086
    "$pagoda" bench latency --model $variant --isa "$isa" --threads 1 --input-len 16 \
      --output-len 4 --repeats 1 --warmup 0 --batch 2 --json >"$tmp/lat.json" 2>"$tmp/err" \
      || fail "bench latency --isa $isa $variant: $(head -c 300 "$tmp/err")"
    /usr/bin/python3 - "$isa" "$variant" "$tmp/lat.json" <<'PY' || fail "bench latency --isa $isa $variant fractions"
import json, math, sys
isa, variant, j = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
# (by the flag and the model's name, not the path: a checkout may be named *int8*)
model = variant.split()[0].rstrip("/").split("/")[-1]
kind = "int8" if "--quantization int8" in variant else "bf16" if "bf16" in model else "fp32"
assert j["linear_peak"] == kind and j["roofline"]["isa"] == isa, j
for k in ("prefill_fraction_of_linear_peak", "prefill_fraction_of_fp32_peak",
          "prefill_fraction_of_bf16_peak", "decode_fraction_of_linear_peak",
          "decode_fraction_of_roofline", "decode_compute_ms_per_step"):
    assert j[k] is not None and math.isfinite(j[k]) and j[k] > 0, (k, j)
peak = j["roofline"][{"int8": "int8_gops", "bf16": "bf16_gflops", "fp32": "fp32_gflops"}[kind]]
assert math.isclose(j["prefill_roofline_tokens_per_s"], peak * 1e9 / j["prefill_flops_per_token"]), j
# bf16 weights go into GEMM panels wherever the kernels have a panel GEMM
# (vdpbf16ps on avx512bf16, the widening one on avx2 / avx2vnni / avx512).
if kind == "bf16":
    want = "as stored" if isa == "scalar" else "bf16, repacked into GEMM panels"
    assert j["weights"] == want, j
# The CPU-clock figures: CPU seconds that can hold the work, a peak per
# thread-second, and fractions that follow from them.
assert j["linear_peak_per_cpu_second"] > 0, j
assert 0 < j["prefill_cpu_seconds"] < 60 and 0 < j["decode_cpu_ms_per_step"] < 60e3, j
flops = j["batch"] * j["input_len"] * j["prefill_flops_per_token"]
assert math.isclose(j["prefill_fraction_of_linear_peak_cpu_clock"],
                    flops / j["prefill_cpu_seconds"] / (j["linear_peak_per_cpu_second"] * 1e9)), j
assert 0 < j["decode_fraction_of_linear_peak_cpu_clock"] < 1.5, j
PY
  done
  "$pagoda" bench throughput --model "$model" --isa "$isa" --threads 1 --num-prompts 3 \
    --input-len 16 --output-len 4 --json >"$tmp/tp.json" 2>"$tmp/err" \
    || fail "bench throughput --isa $isa: $(head -c 300 "$tmp/err")"
  /usr/bin/python3 - "$isa" "$tmp/tp.json" <<'PY' || fail "bench throughput --isa $isa fraction"
import json, math, sys
isa, j = sys.argv[1], json.load(open(sys.argv[2]))
assert j["roofline"]["isa"] == isa and j["linear_peak"] == "fp32", j
assert j["flops"] > 0 and math.isfinite(j["fraction_of_linear_peak"]), j
assert 0 < j["fraction_of_linear_peak"] < 1.5, j
PY
done

# A variant the CPU lacks, or an unknown name: exit 2 naming the supported ones.
for isa in avx2 avx2vnni avx512 avx512bf16 avx9000; do
  [[ " ${supported[*]} " == *" $isa "* ]] && continue
  "$pagoda" bench roofline --isa "$isa" >"$tmp/out" 2>&1
  code=$?
  [[ $code -eq 2 ]] || fail "bench roofline --isa $isa exited $code, expected 2"
  grep -q "supports: $joined" "$tmp/out" \
    || fail "bench roofline --isa $isa does not name the supported ISAs: $(cat "$tmp/out")"
done

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "bench ISA tests passed (${supported[*]})"
