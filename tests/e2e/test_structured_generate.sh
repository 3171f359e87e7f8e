#!/usr/bin/env bash
# `pagoda generate --json-schema / --regex / --grammar / --choice` on a tiny
# random Qwen3 (real tokenizer): outputs checked by Python's json and re
# (independent of Pagoda's grammar code), and bad constraints exit 2 with
# the problem named.
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
  --kv-heads 2 --head-dim 16 --intermediate 64 --seed 11 || fail "make_random_checkpoint"
gen() { "$pagoda" generate --model "$dir" --max-model-len 1024 --temperature 1 --json --no-progress -q "$@"; }

cat >"$tmp/schema.json" <<'JSON'
{"type": "object", "properties": {"id": {"type": "integer", "minimum": 10, "maximum": 999},
 "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,4}$"}, "minItems": 1, "maxItems": 3},
 "ok": {"type": "boolean"}}, "required": ["id", "tags"]}
JSON
for seed in 1 2 3; do
  gen --prompt "Data:" --seed $seed --max-tokens 200 --json-schema "$tmp/schema.json" >"$tmp/s$seed.json" \
    || fail "generate --json-schema seed $seed"
  $py - "$tmp/s$seed.json" <<'PY' || fail "schema output seed $seed"
import json, re, sys
out = json.loads(open(sys.argv[1]).read())
assert out["finish_reason"] == "stop", out
v = json.loads(out["text"])
assert set(v) <= {"id", "tags", "ok"} and "id" in v and "tags" in v, v
assert isinstance(v["id"], int) and 10 <= v["id"] <= 999, v
assert 1 <= len(v["tags"]) <= 3 and all(re.fullmatch(r"[a-z]{1,4}", t) for t in v["tags"]), v
assert isinstance(v.get("ok", True), bool), v
PY
done

gen --prompt "Call" --seed 4 --max-tokens 40 --regex '\(\d{3}\) \d{3}-\d{4}' >"$tmp/r.json" || fail "generate --regex"
$py -c 'import json,re,sys; t=json.load(open(sys.argv[1]))["text"]; assert re.fullmatch(r"\(\d{3}\) \d{3}-\d{4}", t), t' \
  "$tmp/r.json" || fail "regex output"
gen --prompt "Mood" --seed 5 --choice happy --choice sad --choice "so so" >"$tmp/c.json" || fail "generate --choice"
$py -c 'import json,sys; t=json.load(open(sys.argv[1]))["text"]; assert t in ("happy","sad","so so"), t' \
  "$tmp/c.json" || fail "choice output"
printf 'root ::= "(" [0-9]{1,2} ("," [0-9]{1,2}){0,2} ")"\n' >"$tmp/g.gbnf"
gen --prompt "T" --seed 6 --max-tokens 40 --grammar "$tmp/g.gbnf" >"$tmp/g.json" || fail "generate --grammar"
$py -c 'import json,re,sys; t=json.load(open(sys.argv[1]))["text"]; assert re.fullmatch(r"\(\d{1,2}(,\d{1,2}){0,2}\)", t), t' \
  "$tmp/g.json" || fail "grammar output"

# Bad constraints: exit 2 and a message naming the problem.
expect_error() {
  local want=$1
  shift
  "$pagoda" generate --model "$dir" --prompt x "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [[ $rc -eq 2 ]] || fail "$* exited $rc, expected 2"
  grep -q -- "$want" "$tmp/err" || fail "$*: no '$want' in: $(cat "$tmp/err")"
}
echo '{"type": "string", "format": "hostname"}' >"$tmp/bad.json"
expect_error 'unsupported format "hostname"' --json-schema "$tmp/bad.json"
echo '{"type": "object", "not": {}}' >"$tmp/bad2.json"
expect_error 'unsupported keyword "not"' --json-schema "$tmp/bad2.json"
expect_error 'lookaround is not supported' --regex 'a(?=b)'
printf 'root ::= item\n' >"$tmp/bad.gbnf"
expect_error "rule 'item' is used but never defined" --grammar "$tmp/bad.gbnf"
expect_error 'at most one of' --regex a --choice b
expect_error "cannot read" --json-schema "$tmp/missing.json"

# `pagoda bench structured` (the mask-cost benchmark and its mixed-batch
# pairs) runs end to end and reports what it promises: every constraint's
# walks with finite costs, one pair per --mixed-pairs with positive step
# times, and the verdict's figures. (Speed itself is not judged here.)
"$pagoda" bench structured --model "$dir" --max-model-len 512 --kv-cache-memory 50000000 \
  --walks 1 --max-steps 20 --output-len 6 --batch 4 --mixed-pairs 2 --json >"$tmp/bench.json" \
  2>"$tmp/bench.err" || fail "bench structured: $(tail -3 "$tmp/bench.err")"
$py - "$tmp/bench.json" <<'PY' || fail "bench structured --json"
import json, math, sys
text = open(sys.argv[1]).read()
out = json.loads(text[text.index("\n{\n") + 1:])  # the object after the text tables
m = out["mixed_batch"]
assert m["pairs"] == 2 and len(m["free_ms_per_step"]) == 2 and len(m["one_constrained_ms_per_step"]) == 2, m
assert all(x > 0 for x in m["free_ms_per_step"] + m["one_constrained_ms_per_step"]), m
diffs = sorted(b - a for a, b in zip(m["free_ms_per_step"], m["one_constrained_ms_per_step"]))
assert abs(m["slowdown_ms"] - (diffs[0] + diffs[1]) / 2) < 1e-9, m  # the median of the pairs' differences
assert math.isfinite(m["mask_ms_mean"]) and m["mask_ms_mean"] > 0, m
PY

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "structured generate: ok"
