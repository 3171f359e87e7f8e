#!/usr/bin/env bash
# Speculative decoding from the CLI (`--speculative-config`): greedy output
# equals greedy output without it, token for token, with the n-gram
# proposer on stories260k, a tiny random Qwen3 (real tokenizer,
# tools/make_random_checkpoint.py), a tiny DeepSeek V3 (MLA cache) and a
# tiny DeepSeek V4 (compressed caches; also with a layer cut as draft), and
# with a draft model (a layer cut of the target, tools/cut_checkpoint_layers.py)
# on stories260k and the tiny Qwen3, alone and with chunked prefill, a tiny
# KV pool (preemption) and small blocks; the target as its own draft has
# every greedy draft accepted; bad configs and drafts that do not fit the
# target are usage errors (exit 2). MTP (DeepSeek's MTP layer drafts): the
# same equality on tiny V3, V3.2 and V4 checkpoints whose MTP layer mostly
# predicts the main model (drafts accepted and rejected), and the layer's
# logits at every position and its drafts against the numpy reference
# (tools/compare_mtp.py).
set -uo pipefail
pagoda=$1
src=$2
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

ngram='{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1, "adaptive": false}'
spec=$ngram  # the config `same` and `same_ids` run with

# Prompts whose continuations repeat (drafts accepted) and ordinary ones.
cat >"$tmp/prompts.txt" <<'TXT'
Once upon a time
The cat sat. The cat sat. The cat sat. The cat
Tom said hi. Tom said hi. Tom said
a b c d a b c d a b c d a b
Lily liked to play. Lily liked to play. Lily liked to
The little dog
He ran and ran and ran and ran and
Mom said
TXT

# accepted_some NAME STDERR: the run drafted, and some drafts were accepted
# and some rejected (both paths ran).
accepted_some() {
  local line
  line=$(grep "speculative decoding:" "$2") || { fail "$1: no speculative decoding summary"; return; }
  [[ $line =~ ([0-9]+)\ drafts,\ ([0-9]+)\ of\ ([0-9]+)\ draft ]] || { fail "$1: bad summary: $line"; return; }
  (( BASH_REMATCH[1] > 10 && BASH_REMATCH[2] > 0 && BASH_REMATCH[2] < BASH_REMATCH[3] )) ||
    fail "$1: expected accepted and rejected drafts: $line"
}

# same NAME MODEL [flags...]: greedy with and without speculation, same ids.
same() {
  local name=$1 model=$2
  shift 2
  local common=(generate --model "$model" --prompts-file "$tmp/prompts.txt" --temperature 0
                --ignore-eos --json --no-progress "$@")
  "$pagoda" "${common[@]}" >"$tmp/$name.plain.json" 2>"$tmp/$name.plain.err" ||
    { fail "$name: plain generate: $(tail -2 "$tmp/$name.plain.err")"; return; }
  "$pagoda" "${common[@]}" --speculative-config "$spec" >"$tmp/$name.spec.json" \
    2>"$tmp/$name.spec.err" ||
    { fail "$name: speculative generate: $(tail -2 "$tmp/$name.spec.err")"; return; }
  ${check:-accepted_some} "$name" "$tmp/$name.spec.err"
  $py - "$tmp/$name.plain.json" "$tmp/$name.spec.json" "$name" <<'PY' || failures=$((failures + 1))
import json, sys
plain = [json.loads(l) for l in open(sys.argv[1])]
spec = [json.loads(l) for l in open(sys.argv[2])]
assert len(plain) == len(spec) == 8, (len(plain), len(spec))
for i, (p, s) in enumerate(zip(plain, spec)):
    if p["token_ids"] != s["token_ids"] or p["text"] != s["text"]:
        print(f"FAIL: {sys.argv[3]}: prompt {i} differs:\n  plain {p['token_ids']}\n  spec  {s['token_ids']}")
        sys.exit(1)
PY
}

m=$src/models/stories260k
same stories "$m" --max-tokens 64
same stories_chunked "$m" --max-tokens 48 --max-num-batched-tokens 6 --block-size 4
# Room for about one 128-position sequence at 1280 bytes a position:
# requests are preempted and recomputed.
same stories_preempt "$m" --max-tokens 48 --max-model-len 128 --kv-cache-memory 196608 --block-size 4

$py "$src/tools/make_random_checkpoint.py" --out "$tmp/qwen3" --layers 2 --hidden 32 --heads 4 \
  --kv-heads 2 --head-dim 16 --intermediate 64 --seed 3 >/dev/null || fail "make_random_checkpoint"
same qwen3 "$tmp/qwen3" --max-tokens 40 --max-model-len 256
same qwen3_chunked "$tmp/qwen3" --max-tokens 40 --max-model-len 256 --max-num-batched-tokens 5

$py "$src/tools/make_deepseek_checkpoint.py" --out "$tmp/deepseek" --dtype f32 --seed 1 >/dev/null ||
  fail "make_deepseek_checkpoint"
$py - "$tmp/prompts.jsonl" <<'PY'
# The tiny DeepSeek checkpoint has no tokenizer for text prompts: ids instead.
import sys, random
random.seed(5)
with open(sys.argv[1], "w") as f:
    for i in range(8):
        period = random.randint(2, 6)
        base = [random.randint(3, 200) for _ in range(period)]
        ids = (base * 8)[: random.randint(8, 30)] if i % 2 == 0 else [random.randint(3, 200) for _ in range(12)]
        f.write('{"prompt_token_ids": %s}\n' % ids)
PY
same_ids() {
  local name=$1 model=$2
  shift 2
  local common=(generate --model "$model" --prompts-file "$tmp/prompts.jsonl" --temperature 0
                --ignore-eos --json --no-progress "$@")
  "$pagoda" "${common[@]}" >"$tmp/$name.plain.json" 2>"$tmp/$name.err" &&
    "$pagoda" "${common[@]}" --speculative-config "$spec" >"$tmp/$name.spec.json" 2>"$tmp/$name.spec.err" ||
    { fail "$name: generate: $(tail -2 "$tmp/$name.err" "$tmp/$name.spec.err")"; return; }
  accepted_some "$name" "$tmp/$name.spec.err"
  cmp -s <($py -c 'import json,sys; [print(json.loads(l)["token_ids"]) for l in open(sys.argv[1])]' "$tmp/$name.plain.json") \
         <($py -c 'import json,sys; [print(json.loads(l)["token_ids"]) for l in open(sys.argv[1])]' "$tmp/$name.spec.json") ||
    fail "$name: speculative token ids differ from plain"
}
same_ids deepseek "$tmp/deepseek" --max-tokens 32
same_ids deepseek_chunked "$tmp/deepseek" --max-tokens 32 --max-num-batched-tokens 5 --block-size 4

# DeepSeek V4 (compressed entries, sliding windows, compressor states):
# rejected drafts roll back like any other cache's (llm_engine.cpp). The
# n-gram proposer, and a 3-layer cut of the target as its draft (same
# --seed: the same first layers), also in small chunks.
$py "$src/tools/make_deepseek_v4_checkpoint.py" --out "$tmp/v4" --dtype f32 --seed 5 >/dev/null ||
  fail "make_deepseek_v4_checkpoint"
$py "$src/tools/make_deepseek_v4_checkpoint.py" --out "$tmp/v4_cut" --dtype f32 --seed 5 \
  --compress-ratios 0,4,16,0 >/dev/null || fail "make_deepseek_v4_checkpoint (cut)"
same_ids deepseek_v4 "$tmp/v4" --max-tokens 64
same_ids deepseek_v4_chunked "$tmp/v4" --max-tokens 64 --max-num-batched-tokens 5 --block-size 64
spec='{"method": "draft_model", "model": "'$tmp/v4_cut'", "num_speculative_tokens": 3, "adaptive": false}'
same_ids deepseek_v4_draft "$tmp/v4" --max-tokens 48
same_ids deepseek_v4_draft_chunked "$tmp/v4" --max-tokens 48 --max-num-batched-tokens 5 --block-size 64
spec=$ngram

mtp='{"method": "mtp", "num_speculative_tokens": 3, "adaptive": false}'
spec=$mtp
for arch in v3 v32; do
  $py "$src/tools/make_deepseek_checkpoint.py" --out "$tmp/mtp_$arch" --arch $arch --dtype f32 --seed 3 \
    --mtp-copy 0.05 >/dev/null || fail "make_deepseek_checkpoint --mtp-copy ($arch)"
  same_ids mtp_$arch "$tmp/mtp_$arch" --max-tokens 32
  same_ids mtp_${arch}_chunked "$tmp/mtp_$arch" --max-tokens 32 --max-num-batched-tokens 5 --block-size 4
done
# 5 MLA layers (4 + MTP) x 320 bytes a position: room for about 70 positions.
same_ids mtp_v3_preempt "$tmp/mtp_v3" --max-tokens 32 --block-size 4 --max-model-len 64 \
  --kv-cache-memory 115200
# DeepSeek V4's MTP block (SWA attention over the main model's final hc
# streams), on a checkpoint whose block mostly predicts the main model.
$py "$src/tools/make_deepseek_v4_checkpoint.py" --out "$tmp/mtp_v4" --dtype f32 --seed 3 --mtp-copy 0.05 \
  >/dev/null || fail "make_deepseek_v4_checkpoint --mtp-copy"
same_ids mtp_v4 "$tmp/mtp_v4" --max-tokens 32
same_ids mtp_v4_chunked "$tmp/mtp_v4" --max-tokens 32 --max-num-batched-tokens 5 --block-size 64
spec=$ngram

# mtp_check NAME CKPT [pagoda args...]: the MTP layer's logits at every
# position within 1e-4 of the reference, and its drafts the reference's.
mtp_check() {
  local name=$1 ckpt=$2
  shift 2
  "$pagoda" logits --model "$ckpt" --prompt-ids 1,45,300,17,88,102,7,256,511,3,99,140,12,400,23,77,5 \
    --max-tokens 24 --out "$tmp/$name.logits.json" --mtp-out "$tmp/$name.mtp.json" \
    --speculative-config "$mtp" "$@" 2>"$tmp/$name.err" ||
    { fail "$name: pagoda logits --mtp-out: $(tail -2 "$tmp/$name.err")"; return; }
  $py "$src/tools/compare_mtp.py" --model "$ckpt" --pagoda-json "$tmp/$name.mtp.json" --rtol 1e-4 \
    --min-drafts 15 || fail "$name: MTP logits or drafts differ from the reference"
}
mtp_check mtp_ref_v3 "$tmp/deepseek"
mtp_check mtp_ref_v3_chunked "$tmp/deepseek" --block-size 4 --max-num-batched-tokens 3
mtp_check mtp_ref_v3_copy "$tmp/mtp_v3" --block-size 4
mtp_check mtp_ref_v32 "$tmp/mtp_v32" --block-size 4 --max-num-batched-tokens 5
mtp_check mtp_ref_v4 "$tmp/v4" --block-size 64 --max-num-batched-tokens 5
mtp_check mtp_ref_v4_copy "$tmp/mtp_v4"

# accepted_all NAME STDERR: the run drafted and every draft was accepted.
accepted_all() {
  local line
  line=$(grep "speculative decoding:" "$2") || { fail "$1: no speculative decoding summary"; return; }
  [[ $line =~ ([0-9]+)\ drafts,\ ([0-9]+)\ of\ ([0-9]+)\ draft ]] || { fail "$1: bad summary: $line"; return; }
  (( BASH_REMATCH[1] > 10 && BASH_REMATCH[2] == BASH_REMATCH[3] )) ||
    fail "$1: expected every draft accepted: $line"
}

# Draft models: layer cuts of the target (same tokenizer), and the target itself.
draft_of() { # SRC LAYERS OUT
  $py "$src/tools/cut_checkpoint_layers.py" --src "$1" --layers "$2" --out "$3" >/dev/null ||
    fail "cut_checkpoint_layers $1 $2"
}
draft_config() { # MODEL K
  echo "{\"method\": \"draft_model\", \"model\": \"$1\", \"num_speculative_tokens\": $2, \"adaptive\": false}"
}
draft_of "$m" 3 "$tmp/stories3"
spec=$(draft_config "$tmp/stories3" 3)
same draft_stories "$m" --max-tokens 48
same draft_stories_chunked "$m" --max-tokens 48 --max-num-batched-tokens 6 --block-size 4
# 2048 bytes a position (5 target + 3 draft layers of 256): room for about
# one 128-position sequence: preemption and recomputation.
same draft_stories_preempt "$m" --max-tokens 48 --max-model-len 128 --kv-cache-memory 294912 --block-size 4
spec=$(draft_config "$m" 4)
check=accepted_all same draft_is_target "$m" --max-tokens 48 --max-num-batched-tokens 6 --block-size 4
$py "$src/tools/make_random_checkpoint.py" --out "$tmp/qwen3_4l" --layers 4 --hidden 32 --heads 4 \
  --kv-heads 2 --head-dim 16 --intermediate 64 --seed 3 >/dev/null || fail "make_random_checkpoint"
draft_of "$tmp/qwen3_4l" 2 "$tmp/qwen3_2l"
spec=$(draft_config "$tmp/qwen3_2l" 3)
same draft_qwen3 "$tmp/qwen3_4l" --max-tokens 64 --max-model-len 256
same draft_qwen3_chunked "$tmp/qwen3_4l" --max-tokens 64 --max-model-len 256 --max-num-batched-tokens 5
spec=$(draft_config "$tmp/qwen3_4l" 3)
check=accepted_all same draft_qwen3_is_target "$tmp/qwen3_4l" --max-tokens 40 --max-model-len 256

# Drafts that cannot draft for the target: another vocabulary, another
# tokenizer of the same size, no checkpoint.
cp -r "$tmp/stories3" "$tmp/stories3_tok"
$py - "$tmp/stories3_tok/tokenizer.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
v = t["model"]["vocab"]
a, b = sorted(v, key=v.get)[300:302]
v[a], v[b] = v[b], v[a]
json.dump(t, open(sys.argv[1], "w"))
PY
for bad in "$tmp/qwen3:vocabulary" "$tmp/stories3_tok:tokenizer differs" "$tmp/none:config.json"; do
  "$pagoda" generate --model "$m" --prompt hi --max-tokens 2 \
    --speculative-config "$(draft_config "${bad%%:*}" 2)" >"$tmp/bad.out" 2>"$tmp/bad.err"
  rc=$?
  [[ $rc -eq 2 ]] || fail "draft ${bad%%:*}: exit $rc, expected 2"
  grep -q -- "--speculative-config.*${bad#*:}" "$tmp/bad.err" ||
    fail "draft ${bad%%:*}: message lacks '${bad#*:}': $(cat "$tmp/bad.err")"
done

# Bad configs: a usage error naming the flag, no crash.
for bad in '{' '{"method": "ngram"}' '{"method": "eagle", "num_speculative_tokens": 2}' \
           '{"method": "mtp", "num_speculative_tokens": 2}' \
           '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 3, "prompt_lookup_max": 2}' \
           '{"method": "ngram", "num_speculative_tokens": 2, "bogus": 1}'; do
  "$pagoda" generate --model "$m" --prompt hi --max-tokens 2 --speculative-config "$bad" \
    >"$tmp/bad.out" 2>"$tmp/bad.err"
  rc=$?
  [[ $rc -eq 2 ]] || fail "config '$bad': exit $rc, expected 2"
  grep -q -- "--speculative-config" "$tmp/bad.err" || fail "config '$bad': message lacks the flag: $(cat "$tmp/bad.err")"
done

if [[ $failures -ne 0 ]]; then
  echo "$failures speculative decoding check(s) failed"
  exit 1
fi
echo "speculative decoding: all checks passed"
