#!/usr/bin/env bash
# prompt_logprobs (`pagoda generate --prompt-logprobs N --json`) against the
# independent numpy references (tools/reference_model.py for Llama/Qwen,
# tools/deepseek_reference.py for DeepSeek V3 and V3.2), at every prompt
# position:
# the prompt token's logprob and rank and the top N from a float64
# log_softmax of the reference's logits (tools/compare_prompt_logprobs.py).
# Prefill chunks that split the prompt anywhere (down to one token) must
# give the same entries.
set -uo pipefail
pagoda=$1
src=$2
py=/usr/bin/python3
tools=$src/tools
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

# 17 prompt tokens: several blocks at block size 4.
prompt=1,45,300,17,88,102,7,256,511,3,99,140,12,400,23,77,5
check() {  # check NAME CKPT TOP_N [pagoda args...]
  local name=$1 ckpt=$2 n=$3
  shift 3
  local out=$tmp/$name.json
  if ! "$pagoda" generate --model "$tmp/$ckpt" --prompt-token-ids "$prompt" --max-tokens 2 --temperature 0 \
      --prompt-logprobs "$n" --json --quiet "$@" >"$out" 2>"$tmp/$name.err"; then
    fail "$name: pagoda generate failed: $(tail -3 "$tmp/$name.err")"
    return
  fi
  $py "$tools/compare_prompt_logprobs.py" --model "$tmp/$ckpt" --pagoda-json "$out" --top-n "$n" ||
    failures=$((failures + 1))
}

$py "$tools/make_tiny_checkpoint.py" --out "$tmp/qwen3" --arch qwen3 --dtype f32 --seed 4 >/dev/null ||
  fail "qwen3: could not build the checkpoint"
$py "$tools/make_deepseek_checkpoint.py" --out "$tmp/deepseek" --dtype f32 --seed 1 >/dev/null ||
  fail "deepseek: could not build the checkpoint"

# V3.2 with index_topk 8: positions past 8 attend to the indexer's picks.
$py "$tools/make_deepseek_checkpoint.py" --out "$tmp/deepseek-v32" --arch v32 --dtype f32 --seed 1 \
  >/dev/null || fail "deepseek-v32: could not build the checkpoint"

for ckpt in qwen3 deepseek deepseek-v32; do
  check $ckpt-whole $ckpt 5 --block-size 4
  check $ckpt-chunk1 $ckpt 3 --block-size 4 --max-num-batched-tokens 1
  check $ckpt-chunk5 $ckpt 0 --block-size 4 --max-num-batched-tokens 5
done

if [[ $failures -gt 0 ]]; then
  echo "$failures prompt logprob check(s) failed"
  exit 1
fi
echo "all prompt logprob checks passed"
