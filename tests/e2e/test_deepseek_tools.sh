#!/usr/bin/env bash
# The DeepSeek V3 tools (tools/): FP8 codec self-check, the random
# checkpoint writer (tiny bf16, f32+FP8, sharded, q_lora null, --broken
# FP8 variants the reference must refuse) and the numpy
# reference's self-test (absorbed == non-absorbed MLA, MoE routing
# invariants, causality, FP8 dequantisation), plus the compare_logits.py
# plumbing on the reference's own greedy output. Runs without the engine:
# args are (pagoda binary, source dir) like every e2e script; the binary is
# ignored.
set -uo pipefail
src=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
py=/usr/bin/python3
tools=$src/tools
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

(cd "$tools" && $py safetensors_np.py) || fail "safetensors_np FP8 self-check"

write() {  # write NAME [make_deepseek_checkpoint args...]
  local name=$1; shift
  $py "$tools/make_deepseek_checkpoint.py" --out "$tmp/$name" "$@" || fail "writer $name"
}
write bf16 --dtype bf16 --seed 1
write fp8 --dtype bf16 --fp8 --seed 1
write fp8-shards --dtype f32 --fp8 --shards 3 --seed 2 --q-lora-rank 0

# Names, dtypes and shapes as DeepSeek publishes them.
TOOLS=$tools $py - "$tmp" <<'PY' || fail "checkpoint layout"
import json, os, sys
sys.path.insert(0, os.environ["TOOLS"])
from safetensors_np import load_dir_dtypes
tmp = sys.argv[1]
cfg = json.load(open(f"{tmp}/fp8/config.json"))
assert cfg["architectures"] == ["DeepseekV3ForCausalLM"] and cfg["model_type"] == "deepseek_v3"
assert cfg["quantization_config"] == {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                      "weight_block_size": [128, 128]}
assert "quantization_config" not in json.load(open(f"{tmp}/bf16/config.json"))
d = load_dir_dtypes(f"{tmp}/fp8")
assert d["model.layers.1.self_attn.q_b_proj.weight"] == "F8_E4M3"
assert d["model.layers.1.self_attn.q_b_proj.weight_scale_inv"] == "F32"
assert d["model.layers.2.mlp.experts.7.down_proj.weight"] == "F8_E4M3"
assert d["model.layers.0.mlp.gate_proj.weight"] == "F8_E4M3"
for n in ("model.embed_tokens.weight", "lm_head.weight", "model.layers.1.mlp.gate.weight",
          "model.layers.1.input_layernorm.weight", "model.layers.4.eh_proj.weight"):
    assert d[n] == "BF16", n
assert d["model.layers.1.mlp.gate.e_score_correction_bias"] == "F32"
mtp = [n for n in d if n.startswith("model.layers.4.")]
for leaf in ("enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight",
             "shared_head.head.weight", "embed_tokens.weight", "self_attn.kv_b_proj.weight",
             "mlp.experts.0.up_proj.weight"):
    assert "model.layers.4." + leaf in mtp, leaf
assert sum(1 for n in d if n.endswith("_scale_inv")) == sum(1 for v in d.values() if v == "F8_E4M3")
s = load_dir_dtypes(f"{tmp}/fp8-shards")
assert "model.layers.1.self_attn.q_proj.weight" in s and not any("q_a_proj" in n for n in s)
idx = json.load(open(f"{tmp}/fp8-shards/model.safetensors.index.json"))["weight_map"]
assert set(idx) == set(s) and len(set(idx.values())) == 3
assert all(idx[n] == idx[n[: -len("_scale_inv")]] for n in idx if n.endswith("_scale_inv"))
print("checkpoint layout ok")
PY

(cd "$tools" && $py deepseek_reference.py --self-test >"$tmp/selftest.log") \
  || { cat "$tmp/selftest.log"; fail "deepseek_reference self-test"; }
grep -c '^ok' "$tmp/selftest.log" | sed 's/^/reference self-test checks passed: /'
(cd "$tools" && $py deepseek_reference.py --self-test --model "$tmp/fp8" >"$tmp/selftest-fp8.log") \
  || { cat "$tmp/selftest-fp8.log"; fail "deepseek_reference self-test on the bf16+FP8 checkpoint"; }

# Bad FP8 checkpoints (for the engine's refusal tests) are refused by the reference too.
for b in missing-scale scale-shape unknown-quant-method; do
  write "broken-$b" --fp8 --broken "$b"
  if (cd "$tools" && $py -c "import sys; from deepseek_reference import DeepseekReference as R; R(sys.argv[1])" \
      "$tmp/broken-$b" 2>/dev/null); then
    fail "reference accepted the --broken $b checkpoint"
  fi
done

# compare_logits.py on the reference's own greedy run (the absorbed form
# against the non-absorbed one), so the e2e comparison path works before
# the engine runs DeepSeek.
for m in fp8 fp8-shards; do
  $py "$tools/deepseek_reference.py" --model "$tmp/$m" --ids 1,45,300,17,88,102,7 --greedy 8 --absorbed \
    --out "$tmp/$m.json" >/dev/null || fail "reference CLI on $m"
  $py "$tools/compare_logits.py" --model "$tmp/$m" --pagoda-json "$tmp/$m.json" --rtol 1e-10 \
    || fail "compare_logits on $m"
done

if [[ $failures -ne 0 ]]; then
  echo "$failures DeepSeek tool check(s) failed"
  exit 1
fi
echo "all DeepSeek tool checks passed"
