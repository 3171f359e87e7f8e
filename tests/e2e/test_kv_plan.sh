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

# DeepSeek V4 (fixtures: the real Pro and Flash configs, spec §1.2) against
# spec §5.2/§5.3, computed here from the config's fields: per layer a
# window of min(S, W) entries, floor(S / r) compressed entries, and for
# r = 4 floor(S / 4) indexer keys; e = head_dim x 2 B (bf16) or 584 B (fp8),
# eI = index_head_dim x 2 B (bf16), 132 B (fp8) or 68 B (MXFP4). These are
# the "exact" figures (entries; compressor state excluded, as the spec's).
pro=$src/tests/data/configs/deepseek-v4-pro/config.json
flash=$src/tests/data/configs/deepseek-v4-flash/config.json
v4_exact() {  # CFG E EI: exact bytes at 2^20 tokens, compressor state excluded
  $py - "$1" "$2" "$3" <<'EOF2'
import json, sys
c = json.load(open(sys.argv[1])); e = int(sys.argv[2]); ei = int(sys.argv[3]); S = 2**20
total = 0
for r in c["compress_ratios"][:c["num_hidden_layers"]]:  # the MTP layer keeps no cache
    total += min(S, c["sliding_window"]) * e
    if r: total += S // r * e
    if r == 4: total += S // 4 * ei
print(total)
EOF2
}
plan "$tmp/pro.json" --model "$pro" --context 1048576
want=$(v4_exact "$pro" 1024 256)
[[ $want == 10334371840 ]] || fail "independent V4-Pro bf16 figure $want, spec §5.3 says 10334371840"
got=$(field "$tmp/pro.json" 'j["exact_bytes_without_state"]')
[[ $got == "$want" ]] || fail "V4-Pro bf16 at 2^20: $got exact bytes, want $want (9.62 GiB)"
got=$(field "$tmp/pro.json" 'j["v32_stack"]["bytes_per_sequence"]')
[[ $got == 90060095488 ]] || fail "V3.2-style stack of 61 layers: $got, want 90060095488"
got=$(field "$tmp/pro.json" 'round(j["v32_stack"]["ratio_to_exact_without_state"], 2)')
[[ $got == 8.71 ]] || fail "V4-Pro vs V3.2-style ratio $got, want 8.71 (8.7x)"
got=$(field "$tmp/pro.json" 'sorted(p["page_bytes"] for p in j["pools"])')
[[ $got == "[2304, 16704, 65664]" ]] || fail "V4-Pro bf16 buckets $got"

plan "$tmp/flash.json" --model "$flash" --context 1048576
want=$(v4_exact "$flash" 1024 256)
got=$(field "$tmp/flash.json" 'j["exact_bytes_without_state"]')
[[ $got == "$want" ]] || fail "V4-Flash bf16 at 2^20: $got, want $want"
[[ $($py -c "print(f'{$want / 2**30:.2f}')") == 6.72 ]] || fail "V4-Flash bf16 $want is not 6.72 GiB"

plan "$tmp/pro_fp4.json" --model "$pro" --context 1048576 --kv-cache-dtype fp8 --indexer-cache-dtype fp4
want=$(v4_exact "$pro" 584 68)
got=$(field "$tmp/pro_fp4.json" 'j["exact_bytes_without_state"]')
[[ $got == "$want" ]] || fail "V4-Pro fp8 + fp4 indexer: $got, want $want"
[[ $($py -c "print(f'{$want / 2**30:.2f}')") == 4.92 ]] || fail "V4-Pro fp8+fp4 $want is not 4.92 GiB"

plan "$tmp/pro_fp8.json" --model "$pro" --context 1048576 --kv-cache-dtype fp8 --indexer-cache-dtype fp8
want=$(v4_exact "$pro" 584 132)
got=$(field "$tmp/pro_fp8.json" 'j["exact_bytes_without_state"]')
[[ $got == "$want" ]] || fail "V4-Pro fp8 + fp8 indexer: $got, want $want"
[[ $($py -c "print(f'{$want / 2**30:.2f}')") == 5.39 ]] || fail "V4-Pro fp8+fp8 $want is not 5.39 GiB"
got=$(field "$tmp/pro_fp8.json" 'sorted(p["page_bytes"] for p in j["pools"])')
[[ $got == "[1728, 8640, 37440]" ]] || fail "V4-Pro fp8 buckets $got, want spec §5.4's [1728, 8640, 37440]"
# Pages held (spec §5.4's pages: 256-position blocks; window pages of 64
# positions; state pages of 4 positions (c4 main, c4 indexer) and 8 (c128
# main); a window of W positions in b-position pages holds W / b + 2): per
# c4a layer window 4 + compressed 4096 + state 4 pages of 37,440 B, indexer
# 4096 + its state 4 pages of 8,640 B; per c128a layer window 4 + state 18
# pages of 37,440 B and compressed 4096 pages of 1,728 B.
want=$($py -c "print(30 * ((4 + 4096 + 4) * 37440 + (4096 + 4) * 8640) + 31 * ((4 + 18) * 37440 + 4096 * 1728))")
got=$(field "$tmp/pro_fp8.json" 'j["bytes_per_sequence"]')
[[ $got == "$want" ]] || fail "V4-Pro fp8 pages held at 2^20: $got, want $want"

# The text form names the layer and cache kinds and both totals.
"$pagoda" kv-plan --model "$pro" --context 1048576 >"$tmp/v4text" 2>&1 || fail "kv-plan V4 text"
for word in c4a c128a "compressor state" "indexer keys" window "9.62 GiB" "8.71x" "pages held"; do
  grep -q "$word" "$tmp/v4text" || fail "V4 text lacks '$word'"
done

# Bad input: exit 2 with a message.
"$pagoda" kv-plan --model "$cfg" --context 10 --indexer-cache-dtype fp4 >/dev/null 2>&1
[[ $? -eq 2 ]] || fail "--indexer-cache-dtype fp4 for V3.2 not refused with exit 2"
"$pagoda" kv-plan --model "$pro" --context 10 --indexer-cache-dtype fp7 >/dev/null 2>&1
[[ $? -eq 2 ]] || fail "--indexer-cache-dtype fp7 not refused with exit 2"
"$pagoda" kv-plan --model "$cfg" --context 10 --kv-cache-dtype int4 >/dev/null 2>&1
[[ $? -eq 2 ]] || fail "--kv-cache-dtype int4 not refused with exit 2"
"$pagoda" kv-plan --model "$tmp" --context 10 >/dev/null 2>"$tmp/err"
[[ $? -eq 2 ]] || fail "a directory without config.json not refused with exit 2: $(cat "$tmp/err")"

if [[ $failures -ne 0 ]]; then
  echo "$failures kv-plan check(s) failed"
  exit 1
fi
echo "all kv-plan checks passed"
