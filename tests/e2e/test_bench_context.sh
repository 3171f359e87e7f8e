#!/usr/bin/env bash
# `pagoda bench latency --context-len N` on the demo model: decode at a
# context taken as computed (no prefill), with the KV bytes the pools hold
# per sequence equal to `pagoda kv-plan`'s figure, the KV a token reads
# growing with the context, consistent roofline fields, and garbage input
# refused with exit 2.
set -uo pipefail
pagoda=$1
src=$2
model=$src/models/stories260k
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

expect_exit() {
  local code=$1 pattern=$2
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  [[ $got -eq $code ]] || fail "'$*' exited $got, expected $code: $(head -c 300 "$tmp/err")"
  grep -q -- "$pattern" "$tmp/out" "$tmp/err" || fail "'$*' output lacks '$pattern'"
}

bench=("$pagoda" bench latency --output-len 4 --repeats 2 --warmup 0 --threads 1)
lat=("${bench[@]}" --model "$model")
for n in 100 400; do
  "${lat[@]}" --context-len $n --no-roofline --json >"$tmp/ctx$n.json" 2>"$tmp/err" \
    || fail "bench latency --context-len $n failed: $(head -c 300 "$tmp/err")"
  "$pagoda" kv-plan --model "$model" --context $n --kv-cache-dtype f32 --json >"$tmp/plan$n.json" \
    2>/dev/null || fail "kv-plan --context $n failed"
done
"${lat[@]}" --context-len 400 --json >"$tmp/roof.json" 2>"$tmp/err" \
  || fail "bench latency --context-len 400 (roofline) failed: $(head -c 300 "$tmp/err")"
"${lat[@]}" --context-len 400 >"$tmp/text" 2>&1 || fail "bench latency --context-len text failed"
grep -q "KV per sequence at 400" "$tmp/text" || fail "text output lacks the KV line: $(cat "$tmp/text")"
if grep -Eiwq 'inf|nan' "$tmp/text"; then fail "text output has inf/nan: $(cat "$tmp/text")"; fi

/usr/bin/python3 - "$tmp" <<'PY' || fail "bench latency --context-len JSON fields"
import json, math, sys
tmp = sys.argv[1]
ctx = {n: json.load(open(f"{tmp}/ctx{n}.json")) for n in (100, 400)}
plan = {n: json.load(open(f"{tmp}/plan{n}.json")) for n in (100, 400)}
roof = json.load(open(f"{tmp}/roof.json"))
def plan_total(p):
    return p["bytes_per_sequence"]
for n, j in ctx.items():
    assert j["context_len"] == n and j["input_len"] == n + 1, j
    # Demo: 5 layers x K and V x 4 heads x 8 dims x f32 = 1280 B per position,
    # in blocks of 16 positions: ceil(n / 16) blocks.
    expect = -(-n // 16) * 16 * 1280
    assert j["kv_bytes_per_sequence"] == expect, (n, j["kv_bytes_per_sequence"], expect)
    assert j["kv_plan_bytes_per_sequence"] == expect, j
    assert plan_total(plan[n]) == expect, (plan[n], expect)
    # One pool of one group: what the pool sets aside is the same.
    assert j["kv_reserved_bytes_per_sequence"] == j["kv_plan_reserved_bytes_per_sequence"] == expect, j
    # A decode token reads every cached position (mean context n + 4 / 2).
    assert j["kv_read_bytes_per_token"] == (n + 2) * 1280, j
    assert j["decode_ms_per_step"] > 0 and j["first_step_ms"] > 0, j
    assert len(j["decode_tokens_per_s_runs"]) == 2, j
    # No prefill ran: no prefill figures.
    assert "prefill_tokens_per_s" not in j and j["prefix_caching"] is False, j
assert ctx[400]["decode_bytes_per_step"] - ctx[100]["decode_bytes_per_step"] == 300 * 1280, ctx
bw = roof["decode_bandwidth_ms_per_step"]
assert bw > 0 and roof["decode_roofline_ms_per_step"] == bw, roof
assert roof["decode_compute_ms_per_step"] is None, roof
assert math.isclose(roof["decode_fraction_of_roofline"], bw / roof["decode_ms_per_step"]), roof
# The bandwidth bound: the step's bytes at the median of the read probes
# (this small model's steps may stay in the caches: one probe per run).
assert roof["decode_read_probe_every_step"] is False, roof
assert len(roof["decode_read_gb_per_s_probes"]) == 2, roof
assert math.isclose(bw, roof["decode_bytes_per_step"] / (roof["decode_read_gb_per_s"] * 1e9) * 1e3,
                    rel_tol=1e-9), roof
PY

# Any architecture, with no model-specific code: a tiny DeepSeek V4
# (sliding window, compressed caches, compressor state: 9 cache groups),
# its pages equal to kv-plan's figure.
if /usr/bin/python3 "$src/tools/make_deepseek_v4_checkpoint.py" --out "$tmp/v4" --dtype f32 >/dev/null; then
  "${bench[@]}" --model "$tmp/v4" --context-len 400 --no-roofline --kv-cache-memory 200000000 --json \
    >"$tmp/v4.json" 2>"$tmp/err" || fail "bench latency --context-len on V4 failed: $(head -c 300 "$tmp/err")"
  /usr/bin/python3 - "$tmp/v4.json" <<'PY' || fail "bench latency --context-len V4 fields"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["context_len"] == 400 and j["decode_ms_per_step"] > 0 and j["kv_bytes_per_sequence"] > 0, j
# Between steps a sequence holds what kv-plan predicts to the byte (every
# page of the full groups, a sliding group's window pages only); its peak
# during a step (a sliding group's window + 2 pages) is above that.
assert j["kv_bytes_per_sequence"] == j["kv_plan_bytes_per_sequence"], j
assert j["kv_plan_bytes_per_sequence"] < j["kv_plan_peak_bytes_per_sequence"], j
assert 0 < j["kv_reserved_bytes_per_sequence"] <= j["kv_plan_reserved_bytes_per_sequence"], j
PY
else
  fail "could not write the tiny V4 checkpoint"
fi

# A speculative proposer's caches share the pools and each request's pages:
# the demo as its own draft holds twice the demo's bytes per sequence, and
# kv-plan's figure counts the draft's layers too.
"${lat[@]}" --context-len 100 --no-roofline --json \
  --speculative-config "{\"method\": \"draft_model\", \"model\": \"$model\", \"num_speculative_tokens\": 2}" \
  >"$tmp/draft.json" 2>"$tmp/err" || fail "bench latency --context-len with a draft failed: $(head -c 300 "$tmp/err")"
/usr/bin/python3 - "$tmp/draft.json" <<'PY' || fail "bench latency --context-len with a draft: KV bytes"
import json, sys
j = json.load(open(sys.argv[1]))
expect = 2 * -(-100 // 16) * 16 * 1280  # target and draft: 1280 B per position each
assert j["kv_bytes_per_sequence"] == expect, (j["kv_bytes_per_sequence"], expect)
assert j["kv_plan_bytes_per_sequence"] == expect, (j["kv_plan_bytes_per_sequence"], expect)
PY

# Garbage input: exit 2 with a clear message.
expect_exit 2 "maximum model length 512" -- "${lat[@]}" --context-len 600 --no-roofline
expect_exit 2 "maximum model length 512" -- "${lat[@]}" --context-len 508 --no-roofline
expect_exit 2 "excludes" -- "${lat[@]}" --context-len 100 --input-len 8 --no-roofline
expect_exit 2 "context-len" -- "${lat[@]}" --context-len 0 --no-roofline
expect_exit 2 "context-len" -- "${lat[@]}" --context-len abc --no-roofline

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "bench latency --context-len: ok"
