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
gen() {  # gen OUT [args...]: token ids of every prompt, one line each; OUT.stats: cached, preempted
  local out=$1
  shift
  "$pagoda" generate --model "$tmp/f32" --prompts-file "$tmp/prompts.jsonl" --max-tokens 24 \
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
gen "$tmp/batch" --max-num-seqs 4
gen "$tmp/alone" --max-num-seqs 1 --no-prefix-caching
# One at a time with the prefix cache: later prompts hit earlier blocks.
gen "$tmp/cached" --max-num-seqs 1
gen "$tmp/chunked" --max-num-seqs 4 --max-num-batched-tokens 3
# 12 blocks of 4 tokens: fewer than the 4 requests need together (their
# prompts + 24 tokens need 7-11 blocks each), so some are preempted.
entry_bytes=$($py -c "import json; c=json.load(open('$tmp/f32/config.json')); print((c['kv_lora_rank']+c['qk_rope_head_dim'])*4*c['num_hidden_layers'])")
gen "$tmp/preempted" --max-num-seqs 4 --max-model-len 48 --kv-cache-memory $((entry_bytes * 4 * 12))
for run in batch cached chunked preempted; do
  if ! cmp -s "$tmp/alone" "$tmp/$run"; then
    fail "greedy tokens of the '$run' run differ from each request alone:"
    diff "$tmp/alone" "$tmp/$run" | head -6
  fi
done
[[ -s $tmp/alone ]] || fail "no generate output"
read -r cached _ <"$tmp/cached.stats"
[[ ${cached:-0} -gt 0 ]] || fail "the cached run had no prefix-cache hit (cached tokens: ${cached:-none})"
read -r _ preempted <"$tmp/preempted.stats"
[[ ${preempted:-0} -gt 0 ]] || fail "the small-pool run preempted nothing (${preempted:-none})"

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
