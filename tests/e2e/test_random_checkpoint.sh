#!/usr/bin/env bash
# tools/make_random_checkpoint.py: a tiny override of the Qwen3-0.6B preset
# (real Qwen3 tokenizer, full 151936 vocab, tied embeddings, q/k norms)
# loads, tokenizes text, generates, and matches the numpy reference.
# The full-size preset is for benchmarks only (1.2 GB): not written here.
set -uo pipefail
pagoda=$1
src=$2
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

dir=$tmp/qwen3-tiny
$py "$src/tools/make_random_checkpoint.py" --out "$dir" --layers 2 --hidden 32 --heads 4 \
  --kv-heads 2 --head-dim 16 --intermediate 64 --seed 3 || fail "make_random_checkpoint"
$py - "$dir" <<'PY' || fail "config of the tiny override"
import json, sys
c = json.load(open(sys.argv[1] + "/config.json"))
assert c["architectures"] == ["Qwen3ForCausalLM"] and c["vocab_size"] == 151936, c
assert c["tie_word_embeddings"] is True and c["head_dim"] == 16 and c["num_hidden_layers"] == 2, c
PY

# Text in, text out through the real Qwen3 tokenizer ("Hello, world" is
# [9707, 11, 1879] in Qwen's vocabulary).
"$pagoda" generate --model "$dir" --prompt "Hello, world" --max-tokens 6 --temperature 0 --ignore-eos \
  --max-model-len 256 --json >"$tmp/gen.json" || fail "generate"
$py - "$tmp/gen.json" <<'PY' || fail "generate output"
import json, sys
r = json.loads(open(sys.argv[1]).readline())
assert r["prompt_token_ids"] == [9707, 11, 1879], r["prompt_token_ids"]
assert len(r["token_ids"]) == 6 and all(0 <= t < 151936 for t in r["token_ids"]), r
PY

# The checkpoint is bf16, so --kv-cache-dtype auto picks a bf16 cache (the
# summary says so), as does an explicit bf16; f32 can still be asked for.
for kv in auto bf16 f32; do
  want=$([[ $kv == f32 ]] && echo f32 || echo bf16)
  "$pagoda" generate --model "$dir" --prompt "Hello, world" --max-tokens 6 --temperature 0 \
    --ignore-eos --max-model-len 256 --kv-cache-dtype "$kv" >"$tmp/gen_$kv.txt" 2>"$tmp/gen_$kv.err" \
    || fail "generate --kv-cache-dtype $kv"
  grep -q "KV cache $want," "$tmp/gen_$kv.err" \
    || fail "--kv-cache-dtype $kv: summary lacks 'KV cache $want': $(cat "$tmp/gen_$kv.err")"
done

# Logits against the independent numpy reference (which rounds K/V to bf16
# as the engine's bf16 cache does: logits JSON says which cache it used).
"$pagoda" logits --model "$dir" --prompt-ids 9707,11,1879,0,151643 --max-tokens 3 \
  --max-model-len 256 --out "$dir/logits.json" || fail "logits"
$py "$src/tools/compare_logits.py" --model "$dir" --pagoda-json "$dir/logits.json" --rtol 1e-4 \
  || fail "reference comparison"
"$pagoda" logits --model "$dir" --prompt-ids 9707,11,1879,0,151643 --max-tokens 3 \
  --max-model-len 256 --kv-cache-dtype f32 --out "$dir/logits_f32kv.json" || fail "logits f32 KV"
$py "$src/tools/compare_logits.py" --model "$dir" --pagoda-json "$dir/logits_f32kv.json" \
  --rtol 1e-4 || fail "reference comparison, f32 KV cache"

# Greedy outputs do not depend on scheduling. head_dim 32 over the bf16
# cache: the flash-attention kernel's shape on avx512bf16 (16 would take the
# f32 path). A prompt pair sharing an 80-token prefix, generated (token ids
# and logprobs, compared exactly) with each prompt in one step and no cache;
# chunked 7 tokens a step; one request at a time with prefix caching (the
# second reuses the first's 5 prefix blocks and computes a 7-row remainder);
# and both at once. A row's attention must not depend on how many rows its
# sequence computes in a step.
dir32=$tmp/qwen3-hd32
$py "$src/tools/make_random_checkpoint.py" --out "$dir32" --layers 2 --hidden 64 --heads 4 \
  --kv-heads 2 --head-dim 32 --intermediate 64 --seed 5 || fail "make_random_checkpoint (head_dim 32)"
$py - "$tmp/shared_prefix.jsonl" <<'PY' || fail "prompts file"
import json, sys
prefix = [(7919 * i) % 150000 + 100 for i in range(80)]
with open(sys.argv[1], "w") as f:
    for tail in ([11, 12, 13], [21, 22, 23, 24, 25, 26, 27]):
        f.write(json.dumps({"prompt_token_ids": prefix + tail}) + "\n")
PY
gen32() {
  local name=$1
  shift
  "$pagoda" generate --model "$dir32" --prompts-file "$tmp/shared_prefix.jsonl" --max-tokens 12 \
    --temperature 0 --ignore-eos --logprobs 1 --json --max-model-len 256 --block-size 16 "$@" \
    >"$tmp/sched_$name.json" 2>"$tmp/sched_$name.err" || fail "generate ($name): $(cat "$tmp/sched_$name.err")"
}
gen32 whole --max-num-seqs 1 --no-prefix-caching
gen32 chunked --max-num-seqs 1 --no-prefix-caching --max-num-batched-tokens 7
gen32 prefix_hit --max-num-seqs 1
gen32 together
grep -q "KV cache bf16," "$tmp/sched_whole.err" || fail "head_dim 32 run: not a bf16 KV cache"
$py - "$tmp" <<'PY' || fail "outputs depend on chunking or prefix caching"
import json, sys
def load(name):
    return [json.loads(l) for l in open(f"{sys.argv[1]}/sched_{name}.json") if l.strip()]
def key(r):
    return r["token_ids"], [(t["token_id"], t["logprob"]) for t in r["logprobs"]]
ref = load("whole")
assert len(ref) == 2 and all(len(r["token_ids"]) == 12 for r in ref), ref
assert all(r["metrics"]["cached_tokens"] == 0 for r in ref), "prefix caching was off"
hit = load("prefix_hit")
assert hit[1]["metrics"]["cached_tokens"] >= 64, hit[1]["metrics"]
for name in ("chunked", "prefix_hit", "together"):
    for i, (a, b) in enumerate(zip(ref, load(name))):
        assert key(a) == key(b), f"{name}, prompt {i}: {key(b)} != {key(a)}"
PY

if [[ $failures -ne 0 ]]; then
  echo "$failures random-checkpoint check(s) failed"
  exit 1
fi
echo "all random-checkpoint checks passed"
