#!/usr/bin/env python3
"""Writes a random-weight Hugging Face checkpoint directory of architecture
DeepseekV3ForCausalLM (model_type "deepseek_v3"), or with --arch v32
DeepseekV32ForCausalLM ("deepseek_v32", V3 plus the DSA lightning indexer),
with the real tensor names and config.json fields of the published
DeepSeek-V3 / V3.2 checkpoints (deepseek-attention-spec.md §1.1 / §2.1).

Variants:
  --dtype bf16|f32   storage dtype of every float tensor (except
                     e_score_correction_bias and weight_scale_inv: F32, as
                     DeepSeek stores them)
  --fp8              the linear weights DeepSeek stores in FP8 (q_a/q_b/q/
                     kv_a/kv_b/o_proj, dense MLP, routed and shared experts)
                     become F8_E4M3 + `<name>_scale_inv` (i.e.
                     `...weight_scale_inv`) F32 [ceil(out/128), ceil(in/128)];
                     config.json gets DeepSeek's quantization_config. The
                     FP8 weight is the block quantisation of the same random
                     f32 weight the bf16/f32 variant stores (same --seed).
  --wide             benchmark preset: the real V3 attention widths (hidden
                     7168, 128 heads, q_lora 1536, kv_lora 512, nope 128,
                     rope 64, v 128, vocab 129280) with 2 layers (dense with
                     intermediate 4096, then MoE with 8 experts of 2048, 2
                     active, 1 shared) and no MTP layer; written tensor by
                     tensor in row chunks (fp8 ~4.6 GB, bf16 ~5.4 GB on
                     disk, little RAM). Tokenizer: Llama 3's (vocab 128256
                     < 129280); ids >= 128256 have no text, so use token-id
                     prompts (`bench`, --prompt-ids) with it.
Defaults: spec §6.1's V3.2-tiny minus the indexer (vocab 512, hidden 256,
4 layers + 1 MTP, layer 0 dense, 4 heads, q_lora 96, kv_lora 64, nope 32,
rope 16, v 32, inter 512, moe_inter 64, 8 experts, 1 shared, 2 active,
4 groups, top-2 groups, sigmoid, routed_scaling_factor 2.5, YaRN factor 4
over 1024 positions, beta 32/1, mscale 1/1), with the demo model's
tokenizer (models/stories260k, vocab 512). max_position_embeddings defaults
to factor * original_max_position_embeddings (4096 tiny, 163840 wide, as
V3's 40 * 4096), not the spec's max_seq_len 2048: some transformers
versions derive the YaRN factor from that ratio, so keeping it equal to
`factor` makes every loader build the same RoPE table.
--mtp-copy S: an MTP layer that predicts what the main model will: every
residual branch's output projection (o_proj, down_proj of the dense MLP,
experts and shared experts, in the stack and the MTP block) is scaled by S,
so with small S the main model is nearly a bigram model (next token ~
argmax lm_head(norm(embed(token)))); the MTP layer gets enorm = 1,
eh_proj = [I, 0] (the embedding half only) and shared_head.norm =
model.norm, so from (h_t, token t+1) it predicts ~ the bigram successor of
token t+1, i.e. the main model's next prediction. Drafts are then mostly
(not always: the S-sized context terms differ) accepted, for acceptance
tests of the `mtp` proposer.
--broken missing-scale|scale-shape|unknown-quant-method (with --fp8) writes
a bad checkpoint for the engine's refusal tests.
--tokenizer DIR copies DIR's tokenizer.json / tokenizer_config.json instead
(e.g. tests/data/tokenizers/deepseek_v3, DeepSeek V3's own, with --vocab
129280 and --bos 0 --eos 1 as the real config).

--arch v32: DeepseekV32ForCausalLM (model_type "deepseek_v32", spec §1.1):
config.json adds index_n_heads / index_head_dim / index_topk (the HF
DeepseekV32Config names; tiny defaults 16 / 32 / 8, spec §6.1; --wide
defaults 64 / 128 / 2048 as the real model), and every decoder layer, the
MTP layer included, gets the lightning indexer (spec §2.1, HF names):
  self_attn.indexer.wq_b.weight          [HI*D, q_lora_rank]  FP8 with --fp8
  self_attn.indexer.wk.weight            [D, hidden]          FP8 with --fp8
  self_attn.indexer.k_norm.weight, .bias [D]                  --dtype (LayerNorm)
  self_attn.indexer.weights_proj.weight  [HI, hidden]         --dtype, never FP8
(HI = index_n_heads, D = index_head_dim). weights_proj's checkpoint dtype
is unconfirmed (spec §8.4; HF keeps the module in fp32 in memory): we
store it like the other non-FP8 matrices (bf16 by default) and the
engine should widen it to f32. V3.2 needs q_lora_rank (the indexer reads
the q LoRA output). Indexer weights: wq_b N(0, 1/sqrt(q_lora)), wk
N(0, 1/sqrt(hidden)) (so q, k have O(1) elements and q.k/sqrt(D) is
O(1)), k_norm weight 1 + 0.1 N, bias 0.1 N, weights_proj
N(0, --index-weights-std / sqrt(hidden)): scores are O(1) (the std is a
pure scale of every score: relative top-k margins do not depend on it).
The scores are continuous, so top-k ties do not occur; on 200-token
random sequences the smallest relative gap between the k-th and (k+1)-th
score over all queries and layers is ~3e-6..7e-5 (median ~1.6e-2): check
a test sequence with `deepseek_reference.py --check-margins` or compare
sets only where --topk-out's per-query margin is clear.

Weights: linear N(0, 1/sqrt(in)); norms 1 + 0.1 N(0,1); embeddings N(0,1);
lm_head N(0, 2/sqrt(hidden)) (logits O(1)); router N(0, 1/sqrt(hidden))
(sigmoid scores spread over ~0.2..0.8, all distinct); the
e_score_correction_bias is U(0, 0.15) (U(0, 0.02) with softmax scoring):
non-zero so it changes which experts are selected, and positive so the
biased scores stay > 0 (HF masks non-selected groups with 0.0, vLLM with
-inf; positive scores make both agree). Each tensor draws from its own
generator seeded by (--seed, crc32(name)), so values do not depend on
shard count, dtype or the order tensors are written.
"""
import argparse
import json
import os
import shutil
import zlib

import numpy as np

from safetensors_np import StreamWriter, fp8_block_quantize

HERE = os.path.dirname(os.path.abspath(__file__))
STORIES = os.path.join(HERE, "..", "models", "stories260k")
LLAMA3_TOKENIZER = os.path.join(HERE, "..", "tests", "data", "tokenizers", "llama3")
BLOCK = 128
QUANTIZATION_CONFIG = {  # verbatim from DeepSeek-V3's README_WEIGHTS.md / config.json
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "weight_block_size": [BLOCK, BLOCK],
}

TINY = dict(vocab=512, hidden=256, layers=4, dense_layers=1, moe_layer_freq=1, heads=4, q_lora=96, kv_lora=64,
            nope=32, rope=16, v=32, inter=512, moe_inter=64, experts=8, shared=1, active=2, groups=4,
            topk_groups=2, route_scale=2.5, rope_theta=10000.0, factor=4.0, orig_ctx=1024, beta_fast=32,
            beta_slow=1, mscale=1.0, mscale_all_dim=1.0, mtp=1, bos=1, eos=2)
WIDE = dict(TINY, vocab=129280, hidden=7168, layers=2, dense_layers=1, heads=128, q_lora=1536, kv_lora=512,
            nope=128, rope=64, v=128, inter=4096, moe_inter=2048, experts=8, shared=1, active=2, groups=4,
            topk_groups=2, factor=40.0, orig_ctx=4096, mtp=0, bos=128000, eos=128001)

# spec §6.1 (V3.2-tiny indexer) and §1.1 (the real model's)
V32_TINY = dict(index_n_heads=16, index_head_dim=32, index_topk=8)
V32_WIDE = dict(index_n_heads=64, index_head_dim=128, index_topk=2048)


def is_moe_layer(c, i):
    """HF DeepseekV3 rule: MoE iff routed experts exist, i >= first_k_dense_replace
    and i % moe_layer_freq == 0 (the MTP layer is always MoE in V3)."""
    return (c["n_routed_experts"] is not None and i >= c["first_k_dense_replace"]
            and i % c["moe_layer_freq"] == 0)


def tensor_list(c, mtp_layers):
    """(name, shape, kind, std, fp8able) in file order. kind: lin (N(0,std)),
    norm, embed, bias. fp8able: stored as F8_E4M3 + scale with --fp8 (spec
    §2.1: the attention projections and every FFN matrix; never embeddings,
    norms, router, lm_head, eh_proj)."""
    H, nh = c["hidden_size"], c["num_attention_heads"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    out = []

    def lin(name, o, i, fp8=True, std=None):
        out.append((name, (o, i), "lin", std if std is not None else 1.0 / np.sqrt(i), fp8))

    def norm(name, n):
        out.append((name, (n,), "norm", 0.1, False))

    def indexer(a):
        # DSA lightning indexer (spec §2.1, §3.1.3); names as in HF's
        # DeepseekV32Indexer / the published V3.2 checkpoint.
        HI, D = c["index_n_heads"], c["index_head_dim"]
        lin(a + "indexer.wq_b.weight", HI * D, c["q_lora_rank"])
        lin(a + "indexer.wk.weight", D, H)
        norm(a + "indexer.k_norm.weight", D)
        out.append((a + "indexer.k_norm.bias", (D,), "nbias", 0.1, False))
        lin(a + "indexer.weights_proj.weight", HI, H, fp8=False, std=c["_index_weights_std"] / np.sqrt(H))

    def mlp(p, inter):
        lin(p + "gate_proj.weight", inter, H)
        lin(p + "up_proj.weight", inter, H)
        lin(p + "down_proj.weight", H, inter)

    def layer(i):
        p = f"model.layers.{i}."
        norm(p + "input_layernorm.weight", H)
        a = p + "self_attn."
        if c["q_lora_rank"]:
            lin(a + "q_a_proj.weight", c["q_lora_rank"], H)
            norm(a + "q_a_layernorm.weight", c["q_lora_rank"])
            lin(a + "q_b_proj.weight", nh * qk, c["q_lora_rank"])
        else:
            lin(a + "q_proj.weight", nh * qk, H)
        lin(a + "kv_a_proj_with_mqa.weight", c["kv_lora_rank"] + c["qk_rope_head_dim"], H)
        norm(a + "kv_a_layernorm.weight", c["kv_lora_rank"])
        lin(a + "kv_b_proj.weight", nh * (c["qk_nope_head_dim"] + c["v_head_dim"]), c["kv_lora_rank"])
        lin(a + "o_proj.weight", H, nh * c["v_head_dim"])
        if "index_topk" in c:
            indexer(a)
        norm(p + "post_attention_layernorm.weight", H)
        if i >= c["num_hidden_layers"] or is_moe_layer(c, i):
            E = c["n_routed_experts"]
            lin(p + "mlp.gate.weight", E, H, fp8=False)
            bias_hi = 0.15 if c["scoring_func"] == "sigmoid" else 0.02
            out.append((p + "mlp.gate.e_score_correction_bias", (E,), "bias", bias_hi, False))
            for e in range(E):
                mlp(p + f"mlp.experts.{e}.", c["moe_intermediate_size"])
            if c["n_shared_experts"]:
                mlp(p + "mlp.shared_experts.", c["moe_intermediate_size"] * c["n_shared_experts"])
        else:
            mlp(p + "mlp.", c["intermediate_size"])

    out.append(("model.embed_tokens.weight", (c["vocab_size"], H), "embed", 1.0, False))
    for i in range(c["num_hidden_layers"]):
        layer(i)
    for m in range(mtp_layers):
        # MTP module (DeepSeek-V3 README_WEIGHTS.md, spec §2.1): its own copies of
        # the shared embedding and head, enorm/hnorm, eh_proj [H, 2H] (a plain
        # bf16 linear in the published checkpoint), shared_head.norm, plus a
        # full decoder layer at index num_hidden_layers + m.
        L = c["num_hidden_layers"] + m
        p = f"model.layers.{L}."
        out.append((p + "embed_tokens.weight", (c["vocab_size"], H), "embed", 1.0, False))
        norm(p + "enorm.weight", H)
        norm(p + "hnorm.weight", H)
        lin(p + "eh_proj.weight", H, 2 * H, fp8=False)
        layer(L)
        norm(p + "shared_head.norm.weight", H)
        lin(p + "shared_head.head.weight", c["vocab_size"], H, fp8=False, std=2.0 / np.sqrt(H))
    norm("model.norm.weight", H)
    lin("lm_head.weight", c["vocab_size"], H, fp8=False, std=2.0 / np.sqrt(H))
    return out


def mtp_copy_spec(spec, scale):
    """--mtp-copy: one tensor_list entry rewritten (see the module doc)."""
    name, shape, kind, std, fp8 = spec
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        return name, shape, kind, std * scale, fp8
    if name.endswith("eh_proj.weight"):
        return name, shape, "eye_left", 0.0, fp8
    if name.endswith("enorm.weight"):
        return name, shape, "ones", 0.0, fp8
    if name.endswith("shared_head.norm.weight"):
        return name, shape, "norm_of:model.norm.weight", std, fp8
    return spec


def draw(seed, name, kind, shape, std):
    """The float32 values of one tensor, yielded in chunks of BLOCK rows (the
    FP8 block height, so the chunks quantise independently). The MTP copies
    of the embedding and head draw under the main tensors' names, so they
    hold the same values, as in the published checkpoint."""
    if name.endswith("embed_tokens.weight"):
        name = "model.embed_tokens.weight"
    if name.endswith("shared_head.head.weight"):
        name = "lm_head.weight"
    if kind == "ones":
        yield np.ones(shape, dtype=np.float32)
        return
    if kind == "eye_left":  # [I, 0]: rows pick the first half of the input
        for r in range(0, shape[0], BLOCK):
            n = min(BLOCK, shape[0] - r)
            chunk = np.zeros((n, shape[1]), dtype=np.float32)
            chunk[np.arange(n), r + np.arange(n)] = 1.0
            yield chunk
        return
    if kind.startswith("norm_of:"):  # the values of another norm (named after the ':')
        name, kind = kind.split(":", 1)[1], "norm"
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    if len(shape) == 1:
        if kind == "bias":
            yield rng.uniform(0.0, std, shape).astype(np.float32)
        elif kind == "nbias":  # LayerNorm bias: N(0, std)
            yield (std * rng.standard_normal(shape)).astype(np.float32)
        else:
            yield (1.0 + std * rng.standard_normal(shape)).astype(np.float32)
        return
    rows, cols = shape
    for r in range(0, rows, BLOCK):
        n = min(BLOCK, rows - r)
        yield (rng.standard_normal((n, cols), dtype=np.float32) * np.float32(std))


def build_config(a, p):
    q_lora = None if a.q_lora_rank == 0 else a.q_lora_rank
    rope_scaling = {"type": a.rope_type, "factor": p["factor"], "original_max_position_embeddings": p["orig_ctx"],
                    "beta_fast": p["beta_fast"], "beta_slow": p["beta_slow"], "mscale": p["mscale"],
                    "mscale_all_dim": p["mscale_all_dim"]}
    # max_position_embeddings = factor * original: newer transformers derive the
    # YaRN factor from this ratio, older ones (and vLLM) read `factor`; with
    # both equal every loader builds the same table.
    max_pos = a.max_position_embeddings or int((p["factor"] or 1) * p["orig_ctx"])
    c = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": p["vocab"],
        "hidden_size": p["hidden"],
        "intermediate_size": p["inter"],
        "moe_intermediate_size": p["moe_inter"],
        "num_hidden_layers": p["layers"],
        "num_nextn_predict_layers": p["mtp"],
        "num_attention_heads": p["heads"],
        "num_key_value_heads": p["heads"],
        "n_shared_experts": p["shared"],
        "n_routed_experts": p["experts"],
        "num_experts_per_tok": p["active"],
        "n_group": p["groups"],
        "topk_group": p["topk_groups"],
        "routed_scaling_factor": p["route_scale"],
        "scoring_func": a.scoring,
        "topk_method": "noaux_tc",
        "norm_topk_prob": not a.no_norm_topk_prob,
        "first_k_dense_replace": p["dense_layers"],
        "moe_layer_freq": p["moe_layer_freq"],
        "q_lora_rank": q_lora,
        "kv_lora_rank": p["kv_lora"],
        "qk_nope_head_dim": p["nope"],
        "qk_rope_head_dim": p["rope"],
        "v_head_dim": p["v"],
        "rope_theta": p["rope_theta"],
        "rope_scaling": rope_scaling if p["factor"] else None,
        "max_position_embeddings": max_pos,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "bos_token_id": p["bos"],
        "eos_token_id": p["eos"],
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
        "torch_dtype": {"f32": "float32", "bf16": "bfloat16"}[a.dtype],
    }
    if a.arch == "v32":
        # spec §1.1; field names of HF's DeepseekV32Config
        c["architectures"], c["model_type"] = ["DeepseekV32ForCausalLM"], "deepseek_v32"
        c["index_n_heads"], c["index_head_dim"], c["index_topk"] = p["index_n_heads"], p["index_head_dim"], p["index_topk"]
    if a.fp8:
        c["quantization_config"] = dict(QUANTIZATION_CONFIG)
        if a.broken == "unknown-quant-method":
            c["quantization_config"]["quant_method"] = "fp7"
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--fp8", action="store_true", help="FP8 e4m3 weights with 128x128 f32 block scales")
    ap.add_argument("--wide", action="store_true", help="real V3 attention widths, 2 layers, 8 experts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arch", choices=["v3", "v32"], default="v3",
                    help="v32: DeepseekV32ForCausalLM with the lightning indexer (spec §1.1, §2.1)")
    ap.add_argument("--index-n-heads", type=int, default=None, help="v32: index_n_heads (tiny 16)")
    ap.add_argument("--index-head-dim", type=int, default=None, help="v32: index_head_dim (tiny 32)")
    ap.add_argument("--index-topk", type=int, default=None, help="v32: index_topk (tiny 8)")
    ap.add_argument("--index-weights-std", type=float, default=1.0,
                    help="v32: weights_proj std times sqrt(hidden)")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--scoring", choices=["sigmoid", "softmax"], default="sigmoid")
    ap.add_argument("--no-norm-topk-prob", action="store_true")
    ap.add_argument("--rope-type", choices=["yarn", "deepseek_yarn"], default="yarn")
    ap.add_argument("--max-position-embeddings", type=int, default=0, help="default factor * original")
    ap.add_argument("--q-lora-rank", type=int, default=None, help="0: null (q_proj instead of q_a/q_b)")
    ap.add_argument("--mtp-copy", type=float, default=None, metavar="S",
                    help="an MTP layer built to predict the main model's next token (see above)")
    ap.add_argument("--broken", choices=["missing-scale", "scale-shape", "unknown-quant-method"],
                    help="with --fp8: a bad checkpoint for refusal tests (layer 0's q_a_proj/q_proj loses "
                         "its weight_scale_inv, or gets one column too many; or quant_method 'fp7')")
    sizes = {"vocab": "vocab_size", "hidden": "hidden_size", "layers": "num_hidden_layers",
             "dense_layers": "first_k_dense_replace", "moe_layer_freq": "moe_layer_freq",
             "heads": "num_attention_heads", "kv_lora": "kv_lora_rank", "nope": "qk_nope_head_dim",
             "rope": "qk_rope_head_dim", "v": "v_head_dim", "inter": "intermediate_size",
             "moe_inter": "moe_intermediate_size", "experts": "n_routed_experts", "shared": "n_shared_experts",
             "active": "num_experts_per_tok", "groups": "n_group", "topk_groups": "topk_group",
             "mtp": "num_nextn_predict_layers"}
    for k, field in sizes.items():
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=None, help=field)
    for k in ("route_scale", "rope_theta", "factor", "mscale", "mscale_all_dim"):
        ap.add_argument("--" + k.replace("_", "-"), type=float, default=None)
    ap.add_argument("--orig-ctx", type=int, default=None, help="rope_scaling.original_max_position_embeddings")
    ap.add_argument("--tokenizer", default=None, help="directory whose tokenizer files to copy")
    ap.add_argument("--bos", type=int, default=None, help="bos_token_id")
    ap.add_argument("--eos", type=int, default=None, help="eos_token_id")
    a = ap.parse_args()

    p = dict(WIDE if a.wide else TINY)
    p.update(V32_WIDE if a.wide else V32_TINY)
    for k in ("index_n_heads", "index_head_dim", "index_topk"):
        if getattr(a, k) is not None:
            p[k] = getattr(a, k)
    if a.arch == "v32":
        if not a.q_lora_rank and a.q_lora_rank is not None:
            ap.error("--arch v32 needs a q LoRA (the indexer reads its output)")
        D = p["index_head_dim"]
        if D & (D - 1) or D < p["rope"] or p["rope"] % 2:
            ap.error("index_head_dim must be a power of two (Hadamard, spec §0.5) >= qk_rope_head_dim")
    for k in list(sizes) + ["route_scale", "rope_theta", "factor", "mscale", "mscale_all_dim", "orig_ctx", "bos",
                            "eos"]:
        if getattr(a, k) is not None:
            p[k] = getattr(a, k)
    if a.q_lora_rank is None:
        a.q_lora_rank = p["q_lora"]
    if p["experts"] % p["groups"] or p["topk_groups"] > p["groups"]:
        ap.error("n_routed_experts must divide into n_group groups, topk_group <= n_group")
    if p["active"] > p["experts"] // p["groups"] * p["topk_groups"]:
        ap.error("num_experts_per_tok exceeds the experts of the topk_group groups")
    if p["vocab"] < 512:
        ap.error("vocab must be >= 512 (the copied tokenizer's size)")
    if a.tokenizer:
        with open(os.path.join(a.tokenizer, "tokenizer.json")) as f:
            t = json.load(f)
        ids = list(t["model"]["vocab"].values()) + [x["id"] for x in t.get("added_tokens", [])]
        if max(ids) >= p["vocab"]:
            ap.error(f"--tokenizer has ids up to {max(ids)}, outside --vocab {p['vocab']}")
    if a.broken and not a.fp8:
        ap.error("--broken needs --fp8")
    c = build_config(a, p)
    c["_index_weights_std"] = a.index_weights_std
    specs = tensor_list(c, p["mtp"])
    if a.mtp_copy is not None:
        if not p["mtp"]:
            ap.error("--mtp-copy needs an MTP layer (--mtp >= 1)")
        specs = [mtp_copy_spec(spec, a.mtp_copy) for spec in specs]

    os.makedirs(a.out, exist_ok=True)
    float_dt = {"f32": "F32", "bf16": "BF16"}[a.dtype]
    # Units: a tensor plus (with --fp8) its scale; a unit never straddles shards.
    units = []
    victim = next(n for n, *_ in specs if n.startswith("model.layers.0.self_attn.q_"))
    for name, shape, kind, std, fp8able in specs:
        if kind == "bias":
            units.append([(name, "F32", shape, kind, std, False)])
        elif a.fp8 and fp8able:
            sshape = (-(-shape[0] // BLOCK), -(-shape[1] // BLOCK))
            unit = [(name, "F8_E4M3", shape, kind, std, True),
                    (name + "_scale_inv", "F32", sshape, "scale", 0, False)]
            if name == victim and a.broken == "missing-scale":
                unit = unit[:1]
            elif name == victim and a.broken == "scale-shape":
                unit[1] = (name + "_scale_inv", "F32", (sshape[0], sshape[1] + 1), "scale", 0, False)
            units.append(unit)
        else:
            units.append([(name, float_dt, shape, kind, std, False)])
    shards = max(1, a.shards)
    files = ["model.safetensors"] if shards == 1 else [
        f"model-{s + 1:05d}-of-{shards:05d}.safetensors" for s in range(shards)]
    weight_map = {}
    for s, fname in enumerate(files):
        mine = [t for u in units[s::shards] for t in u]
        with StreamWriter(os.path.join(a.out, fname), [(n, d, sh) for n, d, sh, *_ in mine],
                          metadata={"format": "pt"}) as w:
            pending_scale = None
            for name, dt, shape, kind, std, quant in mine:
                weight_map[name] = fname
                if kind == "scale":
                    sc = np.concatenate(pending_scale, axis=0)
                    if sc.shape != tuple(shape):  # --broken scale-shape
                        sc = np.pad(sc, [(0, 0), (0, shape[1] - sc.shape[1])], constant_values=1.0)
                    w.write(name, sc)
                    pending_scale = None
                    continue
                if quant:
                    pending_scale = []
                for chunk in draw(a.seed, name, kind, shape, std):
                    if quant:
                        codes, scale = fp8_block_quantize(chunk, BLOCK)
                        pending_scale.append(scale)
                        w.write(name, codes)
                    else:
                        w.write(name, chunk)
    if shards > 1:
        json.dump({"metadata": {}, "weight_map": weight_map},
                  open(os.path.join(a.out, "model.safetensors.index.json"), "w"), indent=2)
    del c["_index_weights_std"]
    json.dump(c, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    json.dump({"bos_token_id": p["bos"], "eos_token_id": p["eos"]},
              open(os.path.join(a.out, "generation_config.json"), "w"))
    tok = a.tokenizer or (LLAMA3_TOKENIZER if p["vocab"] >= 128256 else STORIES)  # ids < vocab_size
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok, f), a.out)


if __name__ == "__main__":
    main()
