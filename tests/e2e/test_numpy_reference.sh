#!/usr/bin/env bash
# Pagoda's logits against the independent numpy reference (tools/) for tiny
# random Llama / Qwen2 / Qwen3 checkpoints: prefill and every decode step of
# a 32-token greedy generation must agree within 1e-4 relative.
set -uo pipefail
pagoda=$1
src=$2
py=/usr/bin/python3
tools=$src/tools
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

$py "$tools/check_reference_goldens.py" "$src/models/stories260k" || failures=$((failures + 1))

prompt=1,45,300,17,88,102,7,256,511,3,99,140
check() {  # check NAME [make_tiny_checkpoint args...] -- [pagoda args...]
  local name=$1
  shift
  local gen_args=() run_args=()
  while [[ $# -gt 0 && $1 != "--" ]]; do gen_args+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  run_args=("$@")
  local dir=$tmp/$name
  if ! $py "$tools/make_tiny_checkpoint.py" --out "$dir" "${gen_args[@]}"; then
    echo "FAIL $name: could not build the checkpoint"; failures=$((failures + 1)); return
  fi
  if ! "$pagoda" logits --model "$dir" --prompt-ids "$prompt" --max-tokens 32 --out "$dir/logits.json" "${run_args[@]}"; then
    echo "FAIL $name: pagoda logits failed"; failures=$((failures + 1)); return
  fi
  $py "$tools/compare_logits.py" --model "$dir" --pagoda-json "$dir/logits.json" --rtol 1e-4 || failures=$((failures + 1))
}

check llama-f32-untied-gqa --arch llama --dtype f32
check llama-bf16-tied-llama3rope --arch llama --dtype bf16 --tied --rope-scaling llama3 --seed 1
check llama-f16-3shards-linearrope --arch llama --dtype f16 --shards 3 --rope-scaling linear --seed 2
check qwen2-f32-bias-tied --arch qwen2 --dtype f32 --tied --seed 3
check qwen3-f32-untied-qknorm --arch qwen3 --dtype f32 --seed 4
check qwen3-bf16-tied --arch qwen3 --dtype bf16 --tied --seed 5
check qwen3-mha-block1 --arch qwen3 --kv-heads 8 --seed 6 -- --block-size 1 --threads 1
check llama-chunked-prefill --arch llama --seed 7 -- --max-num-batched-tokens 5 --block-size 4
check mistral-sliding-window --arch llama --sliding-window 8 --seed 8 -- --block-size 4
check qwen2-mixed-window-layers --arch qwen2 --sliding-window 6 --max-window-layers 1 --seed 9
# A bf16 KV cache (the reference rounds K/V alike; the logits JSON names
# the cache dtype): forced on f32 weights, where nothing else rounds, so
# 1e-4 still holds; and f32 forced on a bf16 checkpoint.
check llama-f32-bf16kv --arch llama --dtype f32 --seed 10 -- --kv-cache-dtype bf16
check qwen3-f32-bf16kv-block1 --arch qwen3 --seed 11 -- --kv-cache-dtype bf16 --block-size 1 --threads 1
check qwen3-bf16-f32kv --arch qwen3 --dtype bf16 --seed 12 -- --kv-cache-dtype f32

if [[ $failures -ne 0 ]]; then
  echo "$failures reference check(s) failed"
  exit 1
fi
echo "all reference checks passed"
