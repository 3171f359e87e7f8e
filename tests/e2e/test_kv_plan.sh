#!/usr/bin/env bash
# `pagoda kv-plan` against the byte figures of the DeepSeek V3.2 seed and
# spec §5.3/§5.4, computed here independently from the config's fields:
# the real V3.2 config (tests/data/configs) at 2^20 tokens holds
# 61 x 2^20 x (512 + 64 + 128) bf16 values = 90,060,095,488 B (83.9 GiB);
# with vLLM's fp8 formats (656-byte MLA entries, 132-byte indexer keys)
# 61 x 2^20 x 788 B; pages of 64 tokens are 41,984 B (MLA) and 8,448 B
# (indexer keys) in fp8. And the dense models' K/V: 2 x layers x kv_heads x
# head_dim x 2 bytes per token.
set -uo pipefail
pagoda=$1
src=$2
py=/usr/bin/python3
cfg=$src/tests/data/configs/deepseek-v3.2/config.json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

# field FILE EXPR: evaluates a Python expression over the JSON object `j`.
field() { $py -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"; }

plan() {  # plan OUT args...
  local out=$1
  shift
  "$pagoda" kv-plan "$@" --json >"$out" 2>"$out.err" || fail "kv-plan $*: $(cat "$out.err")"
}

plan "$tmp/bf16.json" --model "$cfg" --context 1048576
want=$($py -c "import json; c=json.load(open('$cfg')); print(c['num_hidden_layers'] * 2**20 * (c['kv_lora_rank'] + c['qk_rope_head_dim'] + c['index_head_dim']) * 2)")
[[ $want == 90060095488 ]] || fail "independent bf16 figure $want"
got=$(field "$tmp/bf16.json" 'j["bytes_per_sequence"]')
[[ $got == "$want" ]] || fail "V3.2 bf16 at 2^20 tokens: $got bytes, want $want (83.9 GiB)"

plan "$tmp/fp8.json" --model "$(dirname "$cfg")" --context 1048576 --kv-cache-dtype fp8
want=$($py -c "import json; c=json.load(open('$cfg')); l=c['kv_lora_rank']; print(c['num_hidden_layers'] * 2**20 * ((l + l // 128 * 4 + c['qk_rope_head_dim'] * 2) + (c['index_head_dim'] + 4)))")
got=$(field "$tmp/fp8.json" 'j["bytes_per_sequence"]')
[[ $got == "$want" ]] || fail "V3.2 fp8 at 2^20 tokens: $got bytes, want $want (46.94 GiB)"
pages=$(field "$tmp/fp8.json" 'sorted(p["page_bytes"] for p in j["pools"])')
[[ $pages == "[8448, 41984]" ]] || fail "V3.2 fp8 page sizes $pages, want [8448, 41984]"
blocks=$(field "$tmp/fp8.json" 'j["block_size"]')
[[ $blocks == 64 ]] || fail "V3.2 default block size $blocks, want 64"

# The text form names both cache kinds and the GiB total.
"$pagoda" kv-plan --model "$cfg" --context 1048576 >"$tmp/text" 2>&1 || fail "kv-plan text"
grep -q "83.88 GiB" "$tmp/text" || fail "text total: $(tail -1 "$tmp/text")"
grep -q "indexer_k" "$tmp/text" || fail "text lacks the indexer cache"

# A dense model (the demo): 2 x layers x kv_heads x head_dim x 4 bytes (f32) per token.
plan "$tmp/dense.json" --model "$src/models/stories260k" --context 1000 --kv-cache-dtype f32 --block-size 8
want=$($py -c "import json; c=json.load(open('$src/models/stories260k/config.json')); hd=c['hidden_size']//c['num_attention_heads']; print(2*c['num_hidden_layers']*c.get('num_key_value_heads', c['num_attention_heads'])*hd*4*1000)")
got=$(field "$tmp/dense.json" 'j["bytes_per_sequence"]')
[[ $got == "$want" ]] || fail "stories260k f32 at 1000 tokens: $got, want $want"

# Bad input: exit 2 with a message.
"$pagoda" kv-plan --model "$cfg" --context 10 --kv-cache-dtype int4 >/dev/null 2>&1
[[ $? -eq 2 ]] || fail "--kv-cache-dtype int4 not refused with exit 2"
"$pagoda" kv-plan --model "$tmp" --context 10 >/dev/null 2>"$tmp/err"
[[ $? -eq 2 ]] || fail "a directory without config.json not refused with exit 2: $(cat "$tmp/err")"

if [[ $failures -ne 0 ]]; then
  echo "$failures kv-plan check(s) failed"
  exit 1
fi
echo "all kv-plan checks passed"
