#!/usr/bin/env bash
# The `pagoda` command line: help, the demo, JSON output, prompt files and
# token-id prompts with prompt logprobs (against `pagoda logits`),
# clear errors with exit code 2 for bad input, bench latency without a
# decode step, which weights are repacked (--no-repack), --isa on a CPU
# without those kernels, and --max-model-len past the model's positions.
set -uo pipefail
pagoda=$1
src=$2
model=$src/models/stories260k
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect_exit CODE PATTERN -- command...: exit status and a stderr/stdout pattern.
expect_exit() {
  local code=$1 pattern=$2
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  [[ $got -eq $code ]] || fail "'$*' exited $got, expected $code: $(head -c 300 "$tmp/err")"
  grep -q -- "$pattern" "$tmp/out" "$tmp/err" || fail "'$*' output lacks '$pattern'"
}

expect_exit 0 "--temperature" -- "$pagoda" generate --help
expect_exit 0 "generate" -- "$pagoda" --help

# The demo: greedy continuation equals the golden text.
golden_text=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["text"])' "$model/golden.jsonl")
"$pagoda" generate --model "$model" --prompt "Once upon a time" --max-tokens 64 --temperature 0 >"$tmp/demo" \
  || fail "demo generate failed"
[[ "$(cat "$tmp/demo")" == "Once upon a time$golden_text" ]] || fail "demo output differs from golden: $(cat "$tmp/demo")"

# JSONL prompt file with text and token-id prompts; --json output.
printf '%s\n' '"Once upon a time"' '{"prompt": "The little dog"}' '{"prompt_token_ids": [1, 403, 407, 261, 378]}' >"$tmp/prompts.jsonl"
"$pagoda" generate --model "$model" --prompts-file "$tmp/prompts.jsonl" --max-tokens 8 --temperature 0 --json >"$tmp/json" \
  || fail "jsonl generate failed"
/usr/bin/python3 - "$tmp/json" <<'PY' || fail "JSON output check"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 3, rows
assert rows[0]["token_ids"] == rows[2]["token_ids"], "text and id prompts disagree"
assert all(len(r["token_ids"]) == 8 and r["finish_reason"] == "length" for r in rows)
PY

# --prompt-token-ids: the ids used as they are, as a prompt file's
# prompt_token_ids are. --prompt-logprobs 3: vLLM's prompt_logprobs, checked
# against `pagoda logits` (a different command: the sampling row after each
# prefix of the prompt), with log_softmax, rank and top 3 computed here.
"$pagoda" generate --model "$model" --prompt-token-ids 1,403,407,261,378 --max-tokens 8 \
  --temperature 0 --prompt-logprobs 3 --json >"$tmp/ids.json" 2>/dev/null || fail "--prompt-token-ids generate failed"
for k in 1 2 3 4; do
  prefix=$(echo 1,403,407,261,378 | cut -d, -f1-$k)
  "$pagoda" logits --model "$model" --prompt-ids "$prefix" --max-tokens 1 --out "$tmp/logits$k.json" 2>/dev/null \
    || fail "logits for prefix $prefix failed"
done
/usr/bin/python3 - "$tmp" <<'PY' || fail "--prompt-token-ids / --prompt-logprobs check"
import json, math, sys
tmp = sys.argv[1]
row = json.loads(open(f"{tmp}/ids.json").readline())
ref = [json.loads(l) for l in open(f"{tmp}/json")][2]  # the same ids from the prompt file
ids = row["prompt_token_ids"]
assert ids == [1, 403, 407, 261, 378], ids
assert row["token_ids"] == ref["token_ids"], (row["token_ids"], ref["token_ids"])
pl = row["prompt_logprobs"]
assert len(pl) == len(ids) and pl[0] is None, pl
for k in range(1, len(ids)):
    logits = json.load(open(f"{tmp}/logits{k}.json"))["logits"][0]
    mx = max(logits)
    log_z = mx + math.log(sum(math.exp(v - mx) for v in logits))
    top = sorted(range(len(logits)), key=lambda i: (-logits[i], i))[:3]
    entry, tok = pl[k], ids[k]
    assert set(entry) == {str(tok), *map(str, top)}, (k, entry, top)
    for i in {tok, *top}:
        e = entry[str(i)]
        assert abs(e["logprob"] - (logits[i] - log_z)) < 1e-4, (k, i, e)
        assert isinstance(e["decoded_token"], str), e
    assert entry[str(tok)]["rank"] == sum(v >= logits[tok] for v in logits), (k, entry)
    for r, i in enumerate(top):
        assert entry[str(i)]["rank"] == r + 1, (k, i, entry)
PY

# Bad input: clear message, exit code 2.
expect_exit 2 "model" -- "$pagoda" generate --prompt hi
expect_exit 2 "top-p\|top_p" -- "$pagoda" generate --model "$model" --prompt hi --top-p 0
expect_exit 2 "temperature" -- "$pagoda" generate --model "$model" --prompt hi --temperature -1
expect_exit 2 "max" -- "$pagoda" generate --model "$model" --prompt hi --max-tokens 0
expect_exit 2 "no prompts" -- "$pagoda" generate --model "$model"
expect_exit 2 "prompt-token-ids '1,x'" -- "$pagoda" generate --model "$model" --prompt-token-ids 1,x
expect_exit 2 "prompt-token-ids" -- "$pagoda" generate --model "$model" --prompt-token-ids 1,,2
expect_exit 2 "vocabulary" -- "$pagoda" generate --model "$model" --prompt-token-ids 1,99999
expect_exit 2 "prompt_logprobs" -- "$pagoda" generate --model "$model" --prompt hi --prompt-logprobs 21
expect_exit 2 "max-tokens" -- "$pagoda" generate --model "$model" --prompt hi --max-tokens abc
expect_exit 2 "unknown\|not expected\|extra" -- "$pagoda" generate --model "$model" --prompt hi --bogus-flag
expect_exit 2 "Directory\|directory" -- "$pagoda" generate --model /nonexistent --prompt hi
expect_exit 2 "scheduling-policy" -- "$pagoda" generate --model "$model" --prompt hi --scheduling-policy lifo
expect_exit 2 "isa" -- "$pagoda" generate --model "$model" --prompt hi --isa avx9000
printf 'not json\n' >"$tmp/bad.jsonl"
expect_exit 2 "bad.jsonl:1" -- "$pagoda" generate --model "$model" --prompts-file "$tmp/bad.jsonl"
mkdir -p "$tmp/notamodel"
expect_exit 2 "config.json" -- "$pagoda" generate --model "$tmp/notamodel" --prompt hi
for cmd in generate serve logits "bench latency" "bench throughput"; do
  # shellcheck disable=SC2086
  expect_exit 2 "kv-cache-dtype" -- "$pagoda" $cmd --model "$model" --kv-cache-dtype fp16
done
# fp8 is a DeepSeek (MLA) format: a Llama model refuses it at start-up.
expect_exit 2 "kv-cache-dtype fp8 is not supported" -- "$pagoda" generate --model "$model" \
  --prompt hi --kv-cache-dtype fp8

# --indexer-cache-dtype is for DeepSeek V4's indexer keys only.
expect_exit 2 "indexer-cache-dtype is for DeepSeek V4" -- "$pagoda" generate --model "$model" \
  --prompt hi --indexer-cache-dtype fp4
expect_exit 2 "indexer-cache-dtype" -- "$pagoda" generate --model "$model" --prompt hi \
  --indexer-cache-dtype fp2

# --kv-cache-dtype: the summary names the cache dtype (auto keeps f32 for
# the f32 demo model), and a bf16 cache holds twice the blocks of an f32
# one in the same --kv-cache-memory.
kv_blocks() {  # kv_blocks DTYPE: the block count the engine summary reports
  "$pagoda" generate --model "$model" --prompt hi --max-tokens 2 --kv-cache-memory 2560000 \
    --kv-cache-dtype "$1" 2>&1 >/dev/null | sed -n "s/.*KV cache $2, \([0-9]*\) blocks.*/\1/p"
}
f32_blocks=$(kv_blocks auto f32)
bf16_blocks=$(kv_blocks bf16 bf16)
[[ -n $f32_blocks && -n $bf16_blocks && $bf16_blocks -eq $((2 * f32_blocks)) ]] \
  || fail "KV blocks: auto/f32 '$f32_blocks', bf16 '$bf16_blocks' (want twice)"

# bench latency with --output-len 1 has no decode step: decode is reported
# as not measured (null in JSON), never as inf or nan (a division by zero
# decode steps). The roofline run (on one thread, short) is where the
# fraction of the roofline was printed.
bench_latency=("$pagoda" bench latency --model "$model" --input-len 8 --repeats 2)
for extra in "--no-roofline" "--threads 1"; do
  # shellcheck disable=SC2086
  "${bench_latency[@]}" --output-len 1 $extra >"$tmp/lat" 2>&1 \
    || fail "bench latency --output-len 1 $extra failed: $(head -c 300 "$tmp/lat")"
  if grep -Eiwq 'inf|nan' "$tmp/lat"; then
    fail "bench latency --output-len 1 $extra printed inf/nan: $(cat "$tmp/lat")"
  fi
  grep -q "decode:  not measured" "$tmp/lat" \
    || fail "bench latency --output-len 1 $extra: no 'not measured': $(cat "$tmp/lat")"
done
"${bench_latency[@]}" --output-len 1 --no-roofline --json >"$tmp/lat1.json" 2>/dev/null \
  || fail "bench latency --output-len 1 --json failed"
"${bench_latency[@]}" --output-len 3 --no-roofline --json >"$tmp/lat3.json" 2>/dev/null \
  || fail "bench latency --output-len 3 --json failed"
"${bench_latency[@]}" --output-len 3 --no-roofline --json --kv-cache-dtype bf16 >"$tmp/lat3b.json" \
  2>/dev/null || fail "bench latency --kv-cache-dtype bf16 --json failed"
/usr/bin/python3 - "$tmp/lat1.json" "$tmp/lat3.json" "$tmp/lat3b.json" <<'PY' || fail "bench latency JSON decode fields"
import json, sys
one, three, bf16 = (json.load(open(p)) for p in sys.argv[1:])
assert three["kv_cache_dtype"] == "f32" and bf16["kv_cache_dtype"] == "bf16", (three, bf16)
assert bf16["decode_tokens_per_s"] > 0, bf16
assert one["decode_tokens_per_s"] is None and one["decode_ms_per_step"] is None, one
assert one["decode_tokens_per_s_runs"] == [] and one["prefill_tokens_per_s"] > 0, one
assert three["decode_tokens_per_s"] > 0 and three["decode_ms_per_step"] > 0, three
assert len(three["decode_tokens_per_s_runs"]) == 2, three
PY

# The decode roofline is the larger of the step's bytes at the read bandwidth
# and its FLOPs at the linears' peak; a batch of 2 does twice the FLOPs.
"${bench_latency[@]}" --output-len 3 --threads 1 --json >"$tmp/roof1.json" 2>/dev/null \
  || fail "bench latency --json (roofline) failed"
"${bench_latency[@]}" --output-len 3 --threads 1 --json --batch 2 --no-roofline \
  >"$tmp/roof2.json" 2>/dev/null || fail "bench latency --batch 2 --json failed"
"${bench_latency[@]}" --output-len 3 --threads 1 --json --probe-every-step >"$tmp/roof_every.json" \
  2>/dev/null || fail "bench latency --probe-every-step --json failed"
/usr/bin/python3 - "$tmp/roof1.json" "$tmp/roof2.json" "$tmp/roof_every.json" <<'PY' \
  || fail "bench latency decode roofline fields"
import json, math, statistics, sys
one, two, every = (json.load(open(p)) for p in sys.argv[1:])
bw, comp = one["decode_bandwidth_ms_per_step"], one["decode_compute_ms_per_step"]
assert bw > 0 and comp > 0 and one["decode_roofline_ms_per_step"] == max(bw, comp), one
assert math.isclose(one["decode_fraction_of_roofline"],
                    one["decode_roofline_ms_per_step"] / one["decode_ms_per_step"]), one
assert math.isclose(two["decode_flops_per_step"], 2 * one["decode_flops_per_step"]), (one, two)
# The read bandwidth is probed (outside the steps' time) over a buffer of
# at least 256 MiB: once per run before its decode, as stories260k's steps
# fit the caches, or before every decode step with --probe-every-step
# (every_json); the bound is the step's bytes at the median probe.
probes = one["decode_read_gb_per_s_probes"]
assert one["decode_read_probe_every_step"] is False, one
assert len(probes) == one["repeats"] and min(probes) > 0, one
assert every["decode_read_probe_every_step"] is True, every
every_probes = every["decode_read_gb_per_s_probes"]
assert len(every_probes) == every["repeats"] * (every["output_len"] - 1), every
assert math.isclose(every["decode_read_gb_per_s"], statistics.median(every_probes)), every
assert math.isclose(one["decode_read_gb_per_s"], statistics.median(probes)), one
assert one["decode_read_probe_bytes"] >= 256 << 20, one
assert math.isclose(bw, one["decode_bytes_per_step"] / (one["decode_read_gb_per_s"] * 1e9) * 1e3), one
assert math.isclose(one["decode_fraction_of_read_bandwidth"], bw / one["decode_ms_per_step"]), one
assert "decode_read_gb_per_s" not in two, two  # --no-roofline: no probes
# The peak RSS is the engine's: the roofline probe's 512 MiB read buffer,
# freed before the timed runs, is not in it (stories260k needs ~180 MiB).
assert one["peak_rss_includes_roofline_probe"] is False, one
assert 0 < one["peak_rss_bytes"] < one["rss_bytes"] + (64 << 20), one
PY

# A batch the KV cache cannot hold at once would time a smaller batch.
expect_exit 2 "KV slots" -- "$pagoda" bench latency --model "$model" --batch 64 --input-len 64 \
  --output-len 64 --kv-cache-memory 1000000 --no-roofline

# bf16 weights are repacked into GEMM panels where the selected kernels
# have a panel GEMM (avx512_bf16's vdpbf16ps one, AVX2's widening one; the
# default ISA is at least avx2 when the CPU has avx2 and fma)
# (--no-repack keeps them in place in the mapping); f32 weights never are.
weights_of() {  # bench latency's "weights" field for a model and flags
  "$pagoda" bench latency --model "$1" --input-len 4 --output-len 2 --repeats 1 --no-roofline \
    --json "${@:2}" 2>/dev/null | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["weights"])'
}
bf16_model=$src/tests/data/stories260k-bf16
want_bf16="as stored"
grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && want_bf16="bf16, repacked into GEMM panels"
[[ $(weights_of "$bf16_model") == "$want_bf16" ]] \
  || fail "bf16 model weights: '$(weights_of "$bf16_model")', expected '$want_bf16'"
[[ $(weights_of "$bf16_model" --no-repack) == "as stored" ]] || fail "--no-repack still repacked"
[[ $(weights_of "$model") == "as stored" ]] || fail "f32 stories260k weights were repacked"

# --isa naming kernels this CPU lacks is a bad flag like any other: exit 2
# with the message, in every command (it used to escape CLI11's parse as an
# uncaught InputError: "terminate called", exit 134). Which ISAs are missing
# comes from /proc/cpuinfo, independently of pagoda's own detection.
has_flags() { for f in "$@"; do grep -qw "$f" /proc/cpuinfo || return 1; done; }
missing_isas=()
has_flags avx2 fma || missing_isas+=(avx2)
has_flags avx2 fma avx_vnni || missing_isas+=(avx2vnni)
has_flags avx512f avx512bw avx512vl avx512dq || missing_isas+=(avx512)
has_flags avx512f avx512bw avx512vl avx512dq avx512_bf16 || missing_isas+=(avx512bf16)
[[ ${#missing_isas[@]} -eq 0 ]] && echo "note: this CPU has every ISA; only an unknown --isa name is checked"
for cmd in generate serve logits "bench latency" "bench throughput"; do
  for isa in "${missing_isas[@]}" avx9000; do
    # shellcheck disable=SC2086
    expect_exit 2 "isa" -- "$pagoda" $cmd --model "$model" --isa "$isa"
    if grep -q "terminate called" "$tmp/err"; then fail "$cmd --isa $isa: uncaught exception"; fi
  done
done
for isa in "${missing_isas[@]}"; do
  expect_exit 2 "does not support the $isa kernels" -- "$pagoda" generate --model "$model" --prompt hi --isa "$isa"
done

# --max-model-len past the model's max_position_embeddings (512 for the
# demo model) is refused, as vLLM does, unless PAGODA_ALLOW_LONG_MAX_MODEL_LEN
# is set (vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN); the flag's help says so.
expect_exit 0 "PAGODA_ALLOW_LONG_MAX_MODEL_LEN" -- "$pagoda" generate --help
expect_exit 2 "PAGODA_ALLOW_LONG_MAX_MODEL_LEN" -- "$pagoda" generate --model "$model" --prompt hi \
  --max-model-len 100000
# The check is the engine's, so the server refuses too (before listening;
# the timeout keeps a server that wrongly starts from hanging the test).
expect_exit 2 "PAGODA_ALLOW_LONG_MAX_MODEL_LEN" -- timeout 60 "$pagoda" serve --model "$model" \
  --port 0 --max-model-len 100000
expect_exit 2 "exceeds the model's 512 positions (max_position_embeddings 512" -- "$pagoda" generate --model "$model" --prompt hi --max-model-len 513
expect_exit 0 "" -- "$pagoda" generate --model "$model" --prompt hi --max-tokens 2 --max-model-len 512
expect_exit 0 "" -- env PAGODA_ALLOW_LONG_MAX_MODEL_LEN=1 "$pagoda" generate --model "$model" --prompt hi \
  --max-tokens 2 --max-model-len 1024
expect_exit 2 "PAGODA_ALLOW_LONG_MAX_MODEL_LEN" -- env PAGODA_ALLOW_LONG_MAX_MODEL_LEN=0 "$pagoda" generate \
  --model "$model" --prompt hi --max-tokens 2 --max-model-len 1024

if [[ $failures -ne 0 ]]; then
  echo "$failures CLI check(s) failed"
  exit 1
fi
echo "all CLI checks passed"
