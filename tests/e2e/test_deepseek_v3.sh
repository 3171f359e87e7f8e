#!/usr/bin/env bash
# DeepSeek V3 (MLA + MoE) end to end on tiny random checkpoints written by
# tools/make_deepseek_checkpoint.py (real tensor and config names; f32, bf16
# and FP8 with 128x128 block scales): Pagoda's logits against the
# independent numpy reference (tools/deepseek_reference.py) at every
# position of the prompt's last row and 32 greedy decode steps, under block
# sizes and prefill chunk splits around the block boundary (decode equals
# full recompute); then the engine invariants of greedy decoding: a batch
# of mixed requests, prefix-cache hits and preemption give the same tokens
# as each request alone.
set -uo pipefail
pagoda=$1
src=$2
py=/usr/bin/python3
tools=$src/tools
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

make_ckpt() {  # make_ckpt NAME [writer args...]
  local name=$1
  shift
  [[ -d $tmp/$name ]] || $py "$tools/make_deepseek_checkpoint.py" --out "$tmp/$name" "$@" >/dev/null ||
    fail "$name: could not build the checkpoint"
}

# 17 prompt tokens: several blocks at block size 4.
prompt=1,45,300,17,88,102,7,256,511,3,99,140,12,400,23,77,5
# Tolerances: 1e-4 relative where the engine computes in f32 like the
# reference. A bf16 latent cache: the engine rounds f32 values, the
# reference f64 ones, so an element at a rounding midpoint lands one bf16
# ulp (2^-8 relative) apart, which moves logits by up to a few 1e-4: 1e-3.
# bf16 activations (avx512bf16 kernels on bf16 weights) on top: 1e-2.
check() {  # check NAME CKPT RTOL [pagoda args...]
  local name=$1 ckpt=$2 rtol=$3
  shift 3
  local out=$tmp/$name.json
  if ! "$pagoda" logits --model "$tmp/$ckpt" --prompt-ids "$prompt" --max-tokens 32 --out "$out" "$@" \
      2>"$tmp/$name.err"; then
    fail "$name: pagoda logits failed: $(tail -3 "$tmp/$name.err")"
    return
  fi
  $py "$tools/compare_logits.py" --model "$tmp/$ckpt" --pagoda-json "$out" --rtol "$rtol" ||
    failures=$((failures + 1))
}

make_ckpt f32 --dtype f32 --seed 1
make_ckpt bf16 --dtype bf16 --seed 2
make_ckpt fp8 --dtype bf16 --fp8 --seed 3
make_ckpt noqlora-softmax --dtype f32 --q-lora-rank 0 --scoring softmax --seed 4

check f32-block4 f32 1e-4 --block-size 4
check f32-block1-1thread f32 1e-4 --block-size 1 --threads 1
# Prefill chunks of 1, block_size - 1, block_size and block_size + 1 tokens.
for chunk in 1 3 4 5; do
  check f32-chunk$chunk f32 1e-4 --block-size 4 --max-num-batched-tokens $chunk
done
check f32-bf16kv f32 1e-3 --block-size 4 --kv-cache-dtype bf16
check bf16-f32math bf16 1e-4 --block-size 16 --isa avx2 --kv-cache-dtype f32
check bf16 bf16 1e-2 --block-size 16
check fp8 fp8 1e-4 --block-size 4 --kv-cache-dtype f32
check fp8-scalar fp8 1e-4 --block-size 4 --isa scalar --kv-cache-dtype f32
check fp8-bf16kv fp8 1e-3 --block-size 4
check noqlora-softmax noqlora-softmax 1e-4 --block-size 4

# Greedy tokens of a batch of requests that share prefixes equal each
# request run alone, with the prefix cache on or off, and under a KV pool
# so small that requests are preempted and recomputed.
cat >"$tmp/prompts.jsonl" <<'JSONL'
{"prompt_token_ids": [1, 45, 300, 17, 88, 102, 7, 256, 511, 3, 99, 140, 12]}
{"prompt_token_ids": [1, 45, 300, 17, 88, 102, 7, 256, 9, 9, 9]}
{"prompt_token_ids": [5, 6, 7]}
{"prompt_token_ids": [1, 45, 300, 17, 88, 102, 7, 256, 511, 3, 99, 140, 12, 33, 34, 35, 36, 37, 38]}
JSONL
gen() {  # gen MODEL OUT [args...]: token ids of every prompt, one line each; OUT.stats: cached, preempted
  local model=$1 out=$2
  shift 2
  "$pagoda" generate --model "$model" --prompts-file "$tmp/prompts.jsonl" --max-tokens 24 \
    --temperature 0 --ignore-eos --json --block-size 4 "$@" >"$out.jsonl" 2>"$out.err" ||
    fail "generate $*: $(tail -3 "$out.err")"
  $py - "$out.jsonl" "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
open(sys.argv[2], "w").write("".join(f"{r['token_ids']}\n" for r in rows))
cached = sum(r["metrics"]["cached_tokens"] for r in rows)
preempted = sum(r["metrics"]["preemptions"] for r in rows)
open(sys.argv[2] + ".stats", "w").write(f"{cached} {preempted}\n")
PY
}
invariants() {  # invariants NAME: the engine invariants on checkpoint $tmp/NAME
  local model=$tmp/$1 o=$tmp/$1-gen
  gen "$model" "$o.batch" --max-num-seqs 4
  gen "$model" "$o.alone" --max-num-seqs 1 --no-prefix-caching
  # One at a time with the prefix cache: later prompts hit earlier blocks.
  gen "$model" "$o.cached" --max-num-seqs 1
  gen "$model" "$o.chunked" --max-num-seqs 4 --max-num-batched-tokens 3
  # 12 blocks of 4 tokens: fewer than the 4 requests need together (their
  # prompts + 24 tokens need 7-11 blocks each), so some are preempted.
  local bytes_per_token
  bytes_per_token=$($py -c "import json; c=json.load(open('$model/config.json')); print((c['kv_lora_rank'] + c['qk_rope_head_dim'] + c.get('index_head_dim', 0)) * 4 * c['num_hidden_layers'])")
  gen "$model" "$o.preempted" --max-num-seqs 4 --max-model-len 48 \
    --kv-cache-memory $((bytes_per_token * 4 * 12))
  for run in batch cached chunked preempted; do
    if ! cmp -s "$o.alone" "$o.$run"; then
      fail "$1: greedy tokens of the '$run' run differ from each request alone:"
      diff "$o.alone" "$o.$run" | head -6
    fi
  done
  [[ -s $o.alone ]] || fail "$1: no generate output"
  local cached preempted
  read -r cached _ <"$o.cached.stats"
  [[ ${cached:-0} -gt 0 ]] || fail "$1: the cached run had no prefix-cache hit (${cached:-none})"
  read -r _ preempted <"$o.preempted.stats"
  [[ ${preempted:-0} -gt 0 ]] || fail "$1: the small-pool run preempted nothing (${preempted:-none})"
}
invariants f32

# ---- DeepSeek V3.2: lightning indexer + top-k sparse MLA -----------------
# index_topk 8 and 90 prompt tokens + 24 decode steps: every query past
# position 8 attends to a strict subset (T > 10 x index_topk). The prompt's
# top-k choices have clear margins in the reference (checked below, so a
# float-noise flip cannot make the comparison flaky).
make_ckpt v32 --arch v32 --dtype f32 --seed 1
make_ckpt v32-fp8 --arch v32 --fp8 --seed 1
make_ckpt v32-dense --arch v32 --dtype f32 --seed 1 --index-topk 512
make_ckpt v3-same --dtype f32 --seed 1
prompt=$($py -c "import random; r = random.Random(7); print(','.join(str(r.randrange(512)) for _ in range(90)))")
margins=$($py "$tools/deepseek_reference.py" --model "$tmp/v32" --ids "$prompt" --check-margins --min-margin 1e-5 2>&1)
[[ $? -eq 0 ]] || fail "the V3.2 test prompt's top-k margins are not clear: $margins"
check v32-block16 v32 1e-4 --block-size 16
check v32-block64 v32 1e-4
# The indexer's picks, layer by layer and query by query (prefill and 23
# decode queries), equal the reference's as sets wherever the reference's
# k-th / (k+1)-th score margin is clear (> 1e-5 relative: every prompt
# query, checked above); a query with t + 1 <= index_topk takes every key.
if "$pagoda" logits --model "$tmp/v32" --prompt-ids "$prompt" --max-tokens 24 --block-size 16 \
    --out "$tmp/topk-logits.json" --dump-index-topk "$tmp/topk-engine.json" 2>"$tmp/topk.err"; then
  ids=$($py -c "import json, sys; print(','.join(map(str, json.load(open(sys.argv[1]))['ids'])))" \
    "$tmp/topk-engine.json")
  $py "$tools/deepseek_reference.py" --model "$tmp/v32" --ids "$ids" --topk-out "$tmp/topk-ref.json" \
    >/dev/null || fail "deepseek_reference.py --topk-out failed"
  $py - "$tmp/topk-engine.json" "$tmp/topk-ref.json" <<'PY' || fail "indexer top-k sets differ from the reference's"
import json, sys
eng, ref = (json.load(open(p)) for p in sys.argv[1:3])
assert eng["index_topk"] == ref["index_topk"] and eng["ids"] == ref["ids"], (eng["index_topk"], ref["index_topk"])
assert sorted(eng["layers"]) == sorted(ref["layers"]), (sorted(eng["layers"]), sorted(ref["layers"]))
k, compared, skipped = ref["index_topk"], 0, 0
for layer, rows in ref["layers"].items():
    mine = eng["layers"][layer]
    assert len(mine) == len(rows) == len(ref["ids"]), (layer, len(mine), len(rows))
    for t, (a, b) in enumerate(zip(mine, rows)):
        margin = ref["margins"][layer][t]
        if margin is not None and margin <= 1e-5:
            skipped += 1
            continue
        assert len(a) == min(k, t + 1), (layer, t, a)
        assert set(a) == set(b), f"layer {layer} query {t}: engine {sorted(a)} reference {sorted(b)}"
        compared += 1
# Every prompt query of every layer has a clear margin (--check-margins above).
assert compared >= 90 * len(ref["layers"]), (compared, skipped)
print(f"ok indexer top-k sets equal the reference's: {compared} queries compared, {skipped} with unclear margins")
PY
else
  fail "pagoda logits --dump-index-topk failed: $(tail -3 "$tmp/topk.err")"
fi
# A model without an indexer has no picks to write: refused (exit 2).
"$pagoda" logits --model "$tmp/v3-same" --prompt-ids 1,2,3 --max-tokens 1 --out "$tmp/x.json" \
  --dump-index-topk "$tmp/x-topk.json" >/dev/null 2>"$tmp/x.err"
rc=$?
[[ $rc -eq 2 ]] && grep -q "dump-index-topk" "$tmp/x.err" ||
  fail "--dump-index-topk on V3 exited $rc: $(head -c 300 "$tmp/x.err")"
# Prefill chunks of 1, index_topk - 1, index_topk, index_topk + 1 and
# block_size - 1, block_size, block_size + 1 tokens.
for chunk in 1 7 8 9 15 16 17; do
  check v32-chunk$chunk v32 1e-4 --block-size 16 --max-num-batched-tokens $chunk
done
check v32-fp8-weights v32-fp8 1e-4 --block-size 16 --kv-cache-dtype f32 --isa avx2
# index_topk >= T: the sparse path attends to every causal key, so the
# logits equal V3's (the same weights without the indexer) up to f32
# reassociation (the sparse kernel takes keys in score order).
"$pagoda" logits --model "$tmp/v32-dense" --prompt-ids "$prompt" --max-tokens 16 --out "$tmp/d32.json" \
  2>/dev/null || fail "v32-dense logits"
"$pagoda" logits --model "$tmp/v3-same" --prompt-ids "$prompt" --max-tokens 16 --out "$tmp/d3.json" \
  2>/dev/null || fail "v3-same logits"
$py - "$tmp/d32.json" "$tmp/d3.json" <<'PY' || fail "V3.2 with index_topk >= T differs from V3"
import json, sys
import numpy as np
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["output_ids"] == b["output_ids"], (a["output_ids"], b["output_ids"])
x, y = np.array(a["logits"]), np.array(b["logits"])
err = max(np.max(np.abs(x[i] - y[i])) / np.max(np.abs(y[i])) for i in range(len(x)))
assert err < 1e-5, err
print(f"ok V3.2 with index_topk >= T equals V3: worst relative {err:.1e}")
PY
invariants v32

# --kv-cache-dtype fp8: the seed's "fp8_ds_mla" latent entries (e4m3 with an
# f32 scale per 128 latent values, bf16 rope values; kv_lora_rank 128 here
# so there are whole groups) and e4m3 indexer keys with a per-token scale,
# against the reference's simulation of the same formats. 5e-3: the engine
# quantises f32 values and the reference f64 ones, so a value at an e4m3
# rounding midpoint gets the neighbouring code, a step of 1/16 of itself
# (measured: 1.7e-6 on one checkpoint, 5.6e-4 on another).
make_ckpt v32-kv128 --arch v32 --dtype f32 --kv-lora 128 --seed 1
make_ckpt v3-kv128 --dtype f32 --kv-lora 128 --seed 2
check v32-fp8-cache v32-kv128 5e-3 --block-size 16 --kv-cache-dtype fp8
check v3-fp8-cache v3-kv128 5e-3 --block-size 4 --kv-cache-dtype fp8
"$pagoda" generate --model "$tmp/f32" --prompt hi --max-tokens 2 --kv-cache-dtype fp8 >/dev/null 2>"$tmp/fp8.err"
[[ $? -eq 2 ]] && grep -q "kv_lora_rank a multiple of 128" "$tmp/fp8.err" ||
  fail "fp8 cache on kv_lora_rank 64 not refused clearly: $(cat "$tmp/fp8.err")"

# Bad FP8 checkpoints are refused at load with exit 2, naming the tensor
# (or config field) and the reason.
refuse() {  # refuse BROKEN EXPECTED-TEXT
  make_ckpt "bad-$1" --fp8 --broken "$1"
  local err rc
  err=$("$pagoda" generate --model "$tmp/bad-$1" --prompt hi --max-tokens 2 2>&1 >/dev/null)
  rc=$?
  [[ $rc -eq 2 && $err == *"$2"* ]] || fail "broken checkpoint '$1': exit $rc, message: $err"
}
refuse missing-scale "q_a_proj.weight_scale_inv"
refuse scale-shape "expected [1, 2]"
refuse unknown-quant-method "quant_method 'fp7'"

if [[ $failures -ne 0 ]]; then
  echo "$failures DeepSeek V3 check(s) failed"
  exit 1
fi
echo "all DeepSeek V3 checks passed"
