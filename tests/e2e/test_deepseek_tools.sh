#!/usr/bin/env bash
# The DeepSeek V3 tools (tools/): FP8 codec self-check, the random
# checkpoint writer (tiny bf16, f32+FP8, sharded, q_lora null, --broken
# FP8 variants the reference must refuse) and the numpy
# reference's self-test (absorbed == non-absorbed MLA, MoE routing
# invariants, causality, FP8 dequantisation), plus the compare_logits.py
# plumbing on the reference's own greedy output; and the same for
# DeepSeek V3.2 (--arch v32: indexer tensors and config, the reference's
# sparse-attention and FP8-cache self-test, top-k sets and margins, fp8
# cache logits through compare_logits.py); and DeepSeek V4
# (make_deepseek_v4_checkpoint.py layout and config, the float64 V4
# reference's self-test, and its decoder's greedy logits through
# compare_logits.py). Runs without the engine:
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
write v32 --arch v32 --dtype bf16 --seed 1
write v32-fp8 --arch v32 --fp8 --seed 1 --shards 2

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

# V3.2 (spec §1.1, §2.1): config fields and the indexer tensors of every layer, MTP included
for name in ("v32", "v32-fp8"):
    cfg = json.load(open(f"{tmp}/{name}/config.json"))
    assert cfg["architectures"] == ["DeepseekV32ForCausalLM"] and cfg["model_type"] == "deepseek_v32"
    assert (cfg["index_n_heads"], cfg["index_head_dim"], cfg["index_topk"]) == (16, 32, 8)
    d = load_dir_dtypes(f"{tmp}/{name}")
    fp8 = name == "v32-fp8"
    for L in range(5):
        a = f"model.layers.{L}.self_attn.indexer."
        assert d[a + "wq_b.weight"] == ("F8_E4M3" if fp8 else "BF16"), (name, L)
        assert d[a + "wk.weight"] == ("F8_E4M3" if fp8 else "BF16")
        assert (a + "wq_b.weight_scale_inv" in d) == fp8 and (a + "wk.weight_scale_inv" in d) == fp8
        for leaf in ("k_norm.weight", "k_norm.bias", "weights_proj.weight"):
            assert d[a + leaf] == "BF16", (name, leaf)
    assert not any("indexer" in n for n in load_dir_dtypes(f"{tmp}/bf16"))
from safetensors_np import load_dir
w = load_dir(f"{tmp}/v32-fp8", raw_fp8=True)
a = "model.layers.4.self_attn.indexer."
shapes = {n: w[a + n].shape for n in ("wq_b.weight", "wq_b.weight_scale_inv", "wk.weight", "wk.weight_scale_inv",
                                      "k_norm.weight", "k_norm.bias", "weights_proj.weight")}
assert shapes == {"wq_b.weight": (512, 96), "wq_b.weight_scale_inv": (4, 1), "wk.weight": (32, 256),
                  "wk.weight_scale_inv": (1, 2), "k_norm.weight": (32,), "k_norm.bias": (32,),
                  "weights_proj.weight": (16, 256)}, shapes
print("V3.2 checkpoint layout ok")
PY

(cd "$tools" && $py deepseek_reference.py --self-test >"$tmp/selftest.log") \
  || { cat "$tmp/selftest.log"; fail "deepseek_reference self-test"; }
grep -c '^ok' "$tmp/selftest.log" | sed 's/^/reference self-test checks passed: /'
(cd "$tools" && $py deepseek_reference.py --self-test --model "$tmp/fp8" >"$tmp/selftest-fp8.log") \
  || { cat "$tmp/selftest-fp8.log"; fail "deepseek_reference self-test on the bf16+FP8 checkpoint"; }
(cd "$tools" && $py deepseek_reference.py --self-test --model "$tmp/v32-fp8" >"$tmp/selftest-v32.log") \
  || { cat "$tmp/selftest-v32.log"; fail "deepseek_reference self-test on the V3.2 bf16+FP8 checkpoint"; }

# V3.2 top-k margins of a 200-token random sequence, and the top-k sets file.
$py "$tools/deepseek_reference.py" --model "$tmp/v32" --random 200 --seed 1 --check-margins --min-margin 1e-6 \
  | tail -1 || fail "V3.2 top-k margins"
$py "$tools/deepseek_reference.py" --model "$tmp/v32" --random 40 --topk-out "$tmp/sets.json" >/dev/null \
  || fail "reference --topk-out"
$py - "$tmp/sets.json" <<'PY' || fail "top-k sets file"
import json, sys
d = json.load(open(sys.argv[1]))
k = d["index_topk"]
assert sorted(d["layers"]) == ["0", "1", "2", "3"] and len(d["ids"]) == 40
for layer, sets in d["layers"].items():
    for t, s in enumerate(sets):
        assert len(s) == min(k, t + 1) and s == sorted(set(s)) and s[-1] <= t, (layer, t, s)
        assert (d["margins"][layer][t] is None) == (t + 1 <= k)
print("top-k sets file ok")
PY

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
# V3.2 past index_topk (20 + 8 tokens > 8), exact and with the FP8 caches
# (the JSON's kv_cache_dtype "fp8" selects the reference's FP8 cache simulation).
for fp8c in "" --fp8-cache; do
  $py "$tools/deepseek_reference.py" --model "$tmp/v32-fp8" --random 20 --seed 2 --greedy 8 --absorbed $fp8c \
    --out "$tmp/v32$fp8c.json" >/dev/null || fail "reference CLI on v32-fp8 $fp8c"
  $py "$tools/compare_logits.py" --model "$tmp/v32-fp8" --pagoda-json "$tmp/v32$fp8c.json" --rtol 1e-10 \
    || fail "compare_logits on v32-fp8 $fp8c"
done

# DeepSeek V4 (spec §1.2, §2.2, §6.2): writer layout and config.
v4write() {  # v4write NAME [make_deepseek_v4_checkpoint args...]
  local name=$1; shift
  $py "$tools/make_deepseek_v4_checkpoint.py" --out "$tmp/$name" "$@" || fail "V4 writer $name"
}
v4write v4 --dtype bf16 --seed 1
v4write v4-q --fp8 --fp4-experts --shards 2 --seed 1
v4write v4-r128 --real-ratio --dtype f32 --seed 1
TOOLS=$tools $py - "$tmp" <<'PY' || fail "V4 checkpoint layout"
import json, os, sys
sys.path.insert(0, os.environ["TOOLS"])
from safetensors_np import load_dir_dtypes, load_dir
tmp = sys.argv[1]
cfg = json.load(open(f"{tmp}/v4-q/config.json"))
assert cfg["architectures"] == ["DeepseekV4ForCausalLM"] and cfg["model_type"] == "deepseek_v4"
assert cfg["compress_ratios"] == [0, 4, 16, 4, 16, 0, 0] and cfg["num_hidden_layers"] == 6
assert cfg["quantization_config"]["scale_fmt"] == "ue8m0" and cfg["expert_dtype"] == "fp4"
for k, v in dict(sliding_window=16, num_attention_heads=8, head_dim=64, qk_rope_head_dim=16, q_lora_rank=96,
                 o_groups=4, o_lora_rank=32, index_n_heads=16, index_head_dim=32, index_topk=6, hc_mult=4,
                 hc_sinkhorn_iters=20, num_hash_layers=2, scoring_func="sqrtsoftplus", swiglu_limit=1.0,
                 num_nextn_predict_layers=1, compress_rope_theta=160000.0, rope_theta=10000.0).items():
    assert cfg[k] == v, (k, cfg[k])
assert cfg["rope_scaling"]["type"] == "yarn" and cfg["rope_scaling"]["original_max_position_embeddings"] == 4096
assert "quantization_config" not in json.load(open(f"{tmp}/v4/config.json"))
assert json.load(open(f"{tmp}/v4-r128/config.json"))["compress_ratios"] == [0, 4, 128, 4, 128, 0, 0]
d = load_dir_dtypes(f"{tmp}/v4-q")
w = load_dir(f"{tmp}/v4-q", raw_fp8=True)
want = {"embed.weight": ("BF16", (512, 256)), "head.weight": ("BF16", (512, 256)),
        "hc_head_fn": ("F32", (4, 1024)), "hc_head_base": ("F32", (4,)), "hc_head_scale": ("F32", (1,)),
        "layers.1.hc_attn_fn": ("F32", (24, 1024)), "layers.1.hc_ffn_scale": ("F32", (3,)),
        "layers.1.attn.attn_sink": ("F32", (8,)),
        "layers.1.attn.wq_b.weight": ("F8_E4M3", (512, 96)), "layers.1.attn.wq_b.scale": ("F8_E8M0", (4, 1)),
        "layers.1.attn.wo_a.weight": ("F8_E4M3", (128, 128)), "layers.1.attn.wo_b.weight": ("F8_E4M3", (256, 128)),
        "layers.1.attn.compressor.ape": ("F32", (4, 128)), "layers.1.attn.compressor.wkv.weight": ("BF16", (128, 256)),
        "layers.2.attn.compressor.ape": ("F32", (16, 64)), "layers.2.attn.compressor.wgate.weight": ("BF16", (64, 256)),
        "layers.1.attn.indexer.wq_b.weight": ("F8_E4M3", (512, 96)),
        "layers.1.attn.indexer.weights_proj.weight": ("BF16", (16, 256)),
        "layers.1.attn.indexer.compressor.ape": ("F32", (4, 64)),
        "layers.1.attn.indexer.compressor.norm.weight": ("BF16", (32,)),
        "layers.1.ffn.gate.tid2eid": ("I64", (512, 2)), "layers.2.ffn.gate.bias": ("F32", (8,)),
        "layers.2.ffn.experts.7.w1.weight": ("I8", (64, 128)), "layers.2.ffn.experts.7.w1.scale": ("F8_E8M0", (64, 8)),
        "layers.2.ffn.experts.7.w2.weight": ("I8", (256, 32)), "layers.2.ffn.experts.7.w2.scale": ("F8_E8M0", (256, 2)),
        "layers.2.ffn.shared_experts.w2.weight": ("F8_E4M3", (256, 64)),
        "mtp.0.e_proj.weight": ("F8_E4M3", (256, 256)), "mtp.0.hc_head_fn": ("F32", (4, 1024)),
        "mtp.0.ffn.gate.bias": ("F32", (8,)), "mtp.0.attn.wkv.weight": ("F8_E4M3", (64, 256))}
for n, (dt, sh) in want.items():
    assert d[n] == dt and tuple(w[n].shape) == sh, (n, d[n], w[n].shape)
assert not any(n.startswith(("layers.0.attn.compressor", "layers.0.attn.indexer", "layers.2.attn.indexer",
                             "mtp.0.attn.compressor", "model.")) for n in d)
assert not any("tid2eid" in n for n in d if n.startswith(("layers.2.", "mtp.")))
idx = json.load(open(f"{tmp}/v4-q/model.safetensors.index.json"))["weight_map"]
assert all(idx[n] == idx[n[: -len(".scale")] + ".weight"] for n in idx if n.endswith(".scale"))
print("V4 checkpoint layout ok")
PY
(cd "$tools" && $py deepseek_v4_reference.py --self-test >"$tmp/selftest-v4.log") \
  || { cat "$tmp/selftest-v4.log"; fail "deepseek_v4_reference self-test"; }
grep -c '^ok' "$tmp/selftest-v4.log" | sed 's/^/V4 reference self-test checks passed: /'
# The reference's incremental decoder (--decode) against its full recompute
# through compare_logits.py, past the window and several c4/c16 entries
# (v4-r128: across the first c128 entry, completed by token 127).
for m in v4-q:40 v4-r128:124; do
  T=${m#*:}; m=${m%:*}
  $py "$tools/deepseek_v4_reference.py" --model "$tmp/$m" --random "$T" --seed 3 --greedy 8 --decode \
    --out "$tmp/$m.json" >/dev/null || fail "V4 reference CLI on $m"
  $py "$tools/compare_logits.py" --model "$tmp/$m" --pagoda-json "$tmp/$m.json" --rtol 1e-10 \
    || fail "compare_logits on $m"
done
# Bad V4 checkpoints (for the engine's refusal tests) are refused by the V4 reference too.
for b in missing-scale scale-shape fp4-scale-shape unknown-scale-fmt; do
  v4write "v4-broken-$b" --fp8 --fp4-experts --broken "$b"
  if (cd "$tools" && $py -c "import sys; from deepseek_v4_reference import DeepseekV4Reference as R; R(sys.argv[1])" \
      "$tmp/v4-broken-$b" 2>/dev/null); then
    fail "V4 reference accepted the --broken $b checkpoint"
  fi
done
# c4a top-k margins of a 200-token random sequence, and the top-k sets file.
$py "$tools/deepseek_v4_reference.py" --model "$tmp/v4" --random 200 --seed 1 --check-margins --min-margin 1e-6 \
  | tail -1 || fail "V4 top-k margins"
$py "$tools/deepseek_v4_reference.py" --model "$tmp/v4" --random 40 --topk-out "$tmp/v4-sets.json" >/dev/null \
  || fail "V4 reference --topk-out"
$py - "$tmp/v4-sets.json" <<'PY' || fail "V4 top-k sets file"
import json, sys
d = json.load(open(sys.argv[1]))
k = d["index_topk"]
assert sorted(d["layers"]) == ["1", "3"] and len(d["ids"]) == 40
for layer, sets in d["layers"].items():
    for t, s in enumerate(sets):
        n = (t + 1) // 4  # spec §4.1: entries i < floor((t+1)/4) are valid
        assert len(s) == min(k, n) and s == sorted(set(s)) and (not s or s[-1] < n), (layer, t, s)
        assert (d["margins"][layer][t] is None) == (n <= k)
print("V4 top-k sets file ok")
PY
# The quantised caches (spec §5.1: 584-B fp8 entries, MXFP4 indexer keys):
# the JSON's kv_cache_dtype / indexer_cache_dtype select the same simulation.
$py "$tools/deepseek_v4_reference.py" --model "$tmp/v4-q" --random 40 --seed 4 --greedy 6 --decode --fp8-cache \
  --indexer-cache fp4 --out "$tmp/v4-qc.json" >/dev/null || fail "V4 reference CLI with quantised caches"
$py "$tools/compare_logits.py" --model "$tmp/v4-q" --pagoda-json "$tmp/v4-qc.json" --rtol 1e-10 \
  || fail "compare_logits on v4-q with quantised caches"

if [[ $failures -ne 0 ]]; then
  echo "$failures DeepSeek tool check(s) failed"
  exit 1
fi
echo "all DeepSeek tool checks passed"
