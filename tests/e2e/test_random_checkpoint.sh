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

if [[ $failures -ne 0 ]]; then
  echo "$failures random-checkpoint check(s) failed"
  exit 1
fi
echo "all random-checkpoint checks passed"
