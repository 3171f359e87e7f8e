#!/usr/bin/env python3
"""Writes a random-weight checkpoint directory of architecture
DeepseekV4ForCausalLM (model_type "deepseek_v4") with the tensor names,
shapes and config.json fields of the published DeepSeek-V4 checkpoints
(deepseek-attention-spec.md §1.2 config, §1.3 layer pattern, §2.2 tensors,
§6.2 tiny sizes). V4 checkpoints use the inference names directly: no
`model.` prefix (`embed.weight`, `layers.{L}.attn.wq_a.weight`, ...,
`head.weight`, `mtp.0.*`).

Formats:
  --dtype bf16|f32   storage dtype of the float tensors. With bf16 the
                     tensors DeepSeek keeps in fp32 stay F32 (spec §2.2):
                     hc_{attn,ffn,head}_{fn,base,scale}, attn.attn_sink,
                     compressor ape, ffn.gate.bias. ffn.gate.tid2eid is I64.
  --fp8              the matrices V4 stores in FP8 (attn.wq_a, wq_b, wkv,
                     wo_a, wo_b, attn.indexer.wq_b, routed and shared
                     experts w1/w2/w3, mtp e_proj/h_proj) become F8_E4M3 +
                     `X.scale` F8_E8M0 [ceil(out/128), ceil(in/128)] for
                     `X.weight` (power-of-two "ue8m0" block scales:
                     s = 2^ceil(log2(max(amax, 1e-4)/448)), code =
                     e4m3_RNE(w/s); dequantised value = e4m3 * s, spec
                     §0.4); config.json gets quantization_config with
                     scale_fmt "ue8m0". Never FP8: embed, head, norms,
                     router gate, compressor wkv/wgate (bf16, computed in
                     fp32), indexer weights_proj.
  --fp4-experts      routed experts (ffn.experts.E.w1/w2/w3, MTP too) in FP4
                     e2m1 as published: `X.weight` I8 [out, in/2], two
                     values per byte along `in`, LOW nibble = even column;
                     nibble = sign<<3 | magnitude code (0, .5, 1, 1.5, 2, 3,
                     4, 6 for codes 0..7); `X.scale` F8_E8M0 [out, in/32]
                     with s = 2^ceil(log2(max(amax, 6*2^-126)/6)) per 32
                     inputs of a row and code = e2m1_RNE(clamp(w/s, +-6))
                     (spec §0.4); config.json gets "expert_dtype": "fp4"
                     (top level, as the official config.json; absent
                     otherwise: experts then have the dtype of the rest, as
                     the "-Base" checkpoints). Combines with --fp8 or not.
The FP8/FP4 tensors quantise the same random f32 weights the plain
variant stores (same --seed).

Tiny defaults (spec §6.2): vocab 512, hidden 256, 6 layers + 1 MTP,
compress_ratios [0, 4, 16, 4, 16, 0] + [0] (MTP entry), sliding_window 16,
8 heads of head_dim 64 (qk_rope_head_dim 16 = the LAST 16 dims), q_lora
96, o_groups 4, o_lora 32, index 16 heads x 32 dims, index_topk 6, hc_mult
4, 20 Sinkhorn iterations, hc_eps 1e-6, 8 experts (2 active, 1 shared),
moe_intermediate 64, num_hash_layers 2, sqrtsoftplus, routed_scaling 1.5,
swiglu_limit 1.0, rope_theta 10000, compress_rope_theta 160000, YaRN
factor 4 over original_max_position_embeddings 4096 (beta 32/1),
max_position_embeddings 512 (2048 with --real-ratio). --real-ratio: the
real c128 ratio, compress_ratios [0, 4, 128, 4, 128, 0] + [0].
Tokenizer: models/stories260k (vocab 512).

--wide: benchmark preset with the DeepSeek-V4-Flash attention widths
(spec §1.2): vocab 129280, hidden 4096, 64 heads x 512 (rope 64), q_lora
1024, o_groups 8 x o_lora 1024, window 128, index 64 x 128 with top-k
512, 4 layers compress_ratios [0, 4, 128, 4] (no MTP block),
num_hash_layers 1, 8 experts of 2048 (2 active, 1 shared), swiglu_limit
10, YaRN factor 16 over 65536, max_position_embeddings 1048576; tensors
are written in 128-row chunks (little RAM; --fp8 --fp4-experts: 3.0 GB
on disk, ~2 minutes). Tokenizer: Llama 3's (vocab 128256 < 129280; use
token-id prompts).

--mtp-copy S: an MTP block that predicts what the main model will (for
acceptance tests of the `mtp` proposer): every residual branch's output
projection (attn.wo_b, experts' and shared experts' w2, in the stack and
the MTP block) and the MTP block's h_proj are scaled by S, so with small S
the main model is nearly a bigram model (the doubly stochastic stream
mixing keeps every stream ~ the embedding: next token ~ argmax
head(norm(embed(token)))); the MTP block gets e_proj = I, enorm = 1 and
its norm = the model's norm, so from (X_t, token t+1) it predicts ~ the
bigram successor of token t+1, the main model's next prediction. Drafts
are then mostly (not always: the S-sized terms differ) accepted.

Random weights (spec §6.2: non-trivial everywhere): linear N(0, 1/sqrt(in));
norms 1 + 0.1 N; embed N(0, 1); head N(0, 2/sqrt(hidden)); attn_sink
N(0, 1); compressor ape N(0, 0.5) (spread the per-dim softmax gates);
compressor wgate N(0, 0.5/sqrt(in)); hc_*_fn N(0, 1/sqrt(hc*dim)) (the mixing
logits are O(1): Sinkhorn converges to ~1e-3 in 20 iterations, spec §6.3
inv. 10), hc_*_base N(0, 0.3),
hc_*_scale 0.5 + 0.2 N; gate.bias U(0, 0.3) (so selection differs from
the unbiased scores); tid2eid: for every token id `num_experts_per_tok`
distinct experts drawn at random. Each tensor draws from its own
generator seeded by (--seed, crc32(name)).
"""
import argparse
import json
import math
import os
import shutil
import zlib

import numpy as np

from safetensors_np import StreamWriter, e4m3_encode, e8m0_encode

HERE = os.path.dirname(os.path.abspath(__file__))
STORIES = os.path.join(HERE, "..", "models", "stories260k")
BLOCK = 128
FP4_BLOCK = 32
E2M1_GRID = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
QUANTIZATION_CONFIG = {  # DeepSeek-V4 config.json (spec §1.2: fp8 e4m3, [128,128], ue8m0)
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "scale_fmt": "ue8m0",
    "weight_block_size": [BLOCK, BLOCK],
}

TINY = dict(vocab=512, hidden=256, layers=6, mtp=1, ratios=[0, 4, 16, 4, 16, 0, 0], window=16, heads=8,
            head_dim=64, rope=16, q_lora=96, o_groups=4, o_lora=32, index_heads=16, index_dim=32, index_topk=6,
            hc=4, sinkhorn=20, hc_eps=1e-6, experts=8, active=2, shared=1, moe_inter=64, hash_layers=2,
            route_scale=1.5, swiglu_limit=1.0, rope_theta=10000.0, compress_rope_theta=160000.0, factor=4.0,
            orig_ctx=4096, beta_fast=32, beta_slow=1, max_pos=512, bos=1, eos=2)
REAL_RATIO = dict(ratios=[0, 4, 128, 4, 128, 0, 0], max_pos=2048)
# Benchmark preset: DeepSeek-V4-Flash attention widths (spec §1.2) with 4
# layers (SWA, c4a, c128a, c4a), 8 experts of the real width, no MTP block.
WIDE = dict(TINY, vocab=129280, hidden=4096, mtp=0, ratios=[0, 4, 128, 4], window=128, heads=64, head_dim=512,
            rope=64, q_lora=1024, o_groups=8, o_lora=1024, index_heads=64, index_dim=128, index_topk=512,
            experts=8, active=2, moe_inter=2048, hash_layers=1, swiglu_limit=10.0, factor=16.0, orig_ctx=65536,
            max_pos=1048576, bos=128000, eos=128001)
LLAMA3_TOKENIZER = os.path.join(HERE, "..", "tests", "data", "tokenizers", "llama3")


# ---- quantisers (spec §0.4) -------------------------------------------------
def fp8_block_quantize_ue8m0(w, block=BLOCK):
    """[out, in] float -> (uint8 e4m3 codes, uint8 e8m0 scale codes
    [ceil(out/block), ceil(in/block)]): per block s = 2^ceil(log2(max(amax,
    1e-4)/448)), code = e4m3_RNE(w/s) (|w/s| <= 448 by construction)."""
    w = np.asarray(w, dtype=np.float64)
    o, i = w.shape
    nb_o, nb_i = -(-o // block), -(-i // block)
    padded = np.zeros((nb_o * block, nb_i * block))
    padded[:o, :i] = np.abs(w)
    amax = padded.reshape(nb_o, block, nb_i, block).max(axis=(1, 3))
    scale_codes = e8m0_encode(np.maximum(amax, 1e-4) / 448.0, "ceil")
    s = np.exp2(scale_codes.astype(np.float64) - 127.0)
    s_full = np.repeat(np.repeat(s, block, 0), block, 1)[:o, :i]
    return e4m3_encode(w / s_full), scale_codes


def e2m1_encode(x):
    """float array -> 4-bit codes (uint8 0..15): sign<<3 | index of the
    nearest magnitude of E2M1_GRID, ties to the even index (RNE: even
    mantissa), magnitudes beyond 6 saturate."""
    x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), 6.0)
    d = np.abs(a[..., None] - E2M1_GRID)
    best = np.argmin(d, axis=-1)  # lowest index on a tie
    nxt = np.minimum(best + 1, 7)
    dn = np.take_along_axis(d, nxt[..., None], -1)[..., 0]
    db = np.take_along_axis(d, best[..., None], -1)[..., 0]
    tie = (nxt != best) & (dn == db)
    best = np.where(tie & (best % 2 == 1), nxt, best)
    return (best | np.where(np.signbit(x), 8, 0)).astype(np.uint8)


def e2m1_decode(codes):
    c = np.asarray(codes, dtype=np.uint8)
    return np.where(c & 8, -1.0, 1.0) * E2M1_GRID[c & 7]


def fp4_quantize(w, block=FP4_BLOCK):
    """[out, in] float -> (uint8 packed bytes [out, in/2] (low nibble = even
    column), uint8 e8m0 scale codes [out, in/block]); spec §0.4 fp4_sim."""
    w = np.asarray(w, dtype=np.float64)
    o, i = w.shape
    if i % block:
        raise ValueError(f"FP4 needs in % {block} == 0, got {i}")
    g = w.reshape(o, i // block, block)
    amax = np.maximum(np.abs(g).max(axis=-1), 6.0 * 2.0 ** -126)
    scale_codes = e8m0_encode(amax / 6.0, "ceil")
    s = np.exp2(scale_codes.astype(np.float64) - 127.0)
    codes = e2m1_encode(np.clip(g / s[..., None], -6.0, 6.0)).reshape(o, i)
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8), scale_codes


# ---- tensor list (spec §2.2) ------------------------------------------------
def tensor_list(c):
    """(name, shape, kind, std, quant) in file order. kind: lin, norm, embed,
    f32 (kept fp32: normal N(mean, std) given as (mean, std)), bias (U(0,
    std)), tid2eid. quant: None, "fp8" (FP8-able matrix) or "expert" (a
    routed expert matrix: FP8 or FP4)."""
    D, H, hd = c["hidden_size"], c["num_attention_heads"], c["head_dim"]
    hc, ql, G, ol = c["hc_mult"], c["q_lora_rank"], c["o_groups"], c["o_lora_rank"]
    HI, DI = c["index_n_heads"], c["index_head_dim"]
    E, mi = c["n_routed_experts"], c["moe_intermediate_size"]
    mix = (2 + hc) * hc
    out = []

    def lin(name, o, i, quant="fp8", std=None):
        out.append((name, (o, i), "lin", std if std is not None else 1.0 / math.sqrt(i), quant))

    def norm(name, n):
        out.append((name, (n,), "norm", 0.1, None))

    def f32(name, shape, mean, std):
        out.append((name, tuple(shape), "f32", (mean, std), None))

    def hc_params(p, which, rows):
        f32(p + f"hc_{which}_fn", (rows, hc * D), 0.0, 1.0 / math.sqrt(hc * D))
        f32(p + f"hc_{which}_base", (rows,), 0.0, 0.3)
        f32(p + f"hc_{which}_scale", (3 if rows == mix else 1,), 0.5, 0.2)

    def compressor(a, ratio, d):
        cd = (2 if ratio == 4 else 1) * d  # overlap (c = 2) iff r == 4, spec §3.2.3
        f32(a + "ape", (ratio, cd), 0.0, 0.5)
        lin(a + "wkv.weight", cd, D, quant=None)
        lin(a + "wgate.weight", cd, D, quant=None, std=0.5 / math.sqrt(D))
        norm(a + "norm.weight", d)

    def block(p, ratio, hash_layer):
        norm(p + "attn_norm.weight", D)
        norm(p + "ffn_norm.weight", D)
        hc_params(p, "attn", mix)
        hc_params(p, "ffn", mix)
        a = p + "attn."
        f32(a + "attn_sink", (H,), 0.0, 1.0)
        lin(a + "wq_a.weight", ql, D)
        norm(a + "q_norm.weight", ql)
        lin(a + "wq_b.weight", H * hd, ql)
        lin(a + "wkv.weight", hd, D)
        norm(a + "kv_norm.weight", hd)
        lin(a + "wo_a.weight", G * ol, H * hd // G)
        lin(a + "wo_b.weight", D, G * ol)
        if ratio:
            compressor(a + "compressor.", ratio, hd)
        if ratio == 4:  # c4a: lightning indexer (spec §3.2.4)
            lin(a + "indexer.wq_b.weight", HI * DI, ql)
            lin(a + "indexer.weights_proj.weight", HI, D, quant=None)
            compressor(a + "indexer.compressor.", 4, DI)
        f = p + "ffn."
        lin(f + "gate.weight", E, D, quant=None)
        if hash_layer:
            out.append((f + "gate.tid2eid", (c["vocab_size"], c["num_experts_per_tok"]), "tid2eid", 0, None))
        else:
            out.append((f + "gate.bias", (E,), "bias", 0.3, None))
        for e in range(E):
            lin(f + f"experts.{e}.w1.weight", mi, D, quant="expert")
            lin(f + f"experts.{e}.w2.weight", D, mi, quant="expert")
            lin(f + f"experts.{e}.w3.weight", mi, D, quant="expert")
        si = mi * c["n_shared_experts"]
        if si:
            lin(f + "shared_experts.w1.weight", si, D)
            lin(f + "shared_experts.w2.weight", D, si)
            lin(f + "shared_experts.w3.weight", si, D)

    out.append(("embed.weight", (c["vocab_size"], D), "embed", 1.0, None))
    L = c["num_hidden_layers"]
    for i in range(L):
        block(f"layers.{i}.", c["compress_ratios"][i], i < c["num_hash_layers"])
    norm("norm.weight", D)
    lin("head.weight", c["vocab_size"], D, quant=None, std=2.0 / math.sqrt(D))
    hc_params("", "head", hc)
    for m in range(c["num_nextn_predict_layers"]):
        # MTP block (spec §2.2, §3.2.7): SWA-only attention, biased MoE, own
        # hc params and hc_head, e_proj/h_proj FP8; embed/head shared.
        p = f"mtp.{m}."
        lin(p + "e_proj.weight", D, D)
        lin(p + "h_proj.weight", D, D)
        norm(p + "enorm.weight", D)
        norm(p + "hnorm.weight", D)
        norm(p + "norm.weight", D)
        hc_params(p, "head", hc)
        block(p, c["compress_ratios"][L + m], False)
    return out


def mtp_copy_spec(spec, scale):
    """--mtp-copy: one tensor_list entry rewritten (see the module doc)."""
    name, shape, kind, std, quant = spec
    if name.endswith(("attn.wo_b.weight", ".w2.weight")) or name.endswith("h_proj.weight"):
        return name, shape, kind, std * scale, quant
    if name.endswith("e_proj.weight"):
        return name, shape, "eye", 0.0, quant
    if name.endswith("enorm.weight"):
        return name, shape, "ones", 0.0, quant
    if name.startswith("mtp.") and name.endswith(".norm.weight") and name.count(".") == 3:
        return name, shape, "norm_of:norm.weight", std, quant
    return spec


def draw(seed, name, kind, shape, std, c):
    """The values of one tensor, yielded in chunks of BLOCK rows (the FP8
    block height, so chunks quantise independently; --wide never holds a
    whole embedding in memory)."""
    if kind.startswith("norm_of:"):  # --mtp-copy: another tensor's values
        yield from draw(seed, kind[len("norm_of:"):], "norm", shape, std, c)
        return
    if kind == "ones":
        yield np.ones(shape, dtype=np.float32)
        return
    if kind == "eye":
        for r in range(0, shape[0], BLOCK):
            n = min(BLOCK, shape[0] - r)
            yield np.eye(shape[0], shape[1], dtype=np.float32)[r:r + n]
        return
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    if kind == "tid2eid":
        E, k = c["n_routed_experts"], c["num_experts_per_tok"]
        yield np.argsort(rng.random((shape[0], E)), axis=1)[:, :k].astype(np.int64)  # k distinct experts per token
        return
    if len(shape) == 1:
        if kind == "f32":
            yield (std[0] + std[1] * rng.standard_normal(shape)).astype(np.float32)
        elif kind == "bias":
            yield rng.uniform(0.0, std, shape).astype(np.float32)
        else:  # norm
            yield (1.0 + std * rng.standard_normal(shape)).astype(np.float32)
        return
    rows, cols = shape
    for r in range(0, rows, BLOCK):
        n = min(BLOCK, rows - r)
        if kind == "f32":
            yield (std[0] + std[1] * rng.standard_normal((n, cols))).astype(np.float32)
        else:
            yield rng.standard_normal((n, cols), dtype=np.float32) * np.float32(std)


def build_config(a, p):
    c = {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "vocab_size": p["vocab"],
        "hidden_size": p["hidden"],
        "num_hidden_layers": p["layers"],
        "num_nextn_predict_layers": p["mtp"],
        "num_hash_layers": p["hash_layers"],
        "num_attention_heads": p["heads"],
        "num_key_value_heads": 1,
        "head_dim": p["head_dim"],
        "qk_rope_head_dim": p["rope"],
        "q_lora_rank": p["q_lora"],
        "o_groups": p["o_groups"],
        "o_lora_rank": p["o_lora"],
        "sliding_window": p["window"],
        "compress_ratios": list(p["ratios"]),
        "compress_rope_theta": p["compress_rope_theta"],
        "rope_theta": p["rope_theta"],
        "rope_scaling": {"type": "yarn", "factor": p["factor"], "original_max_position_embeddings": p["orig_ctx"],
                         "beta_fast": p["beta_fast"], "beta_slow": p["beta_slow"]},
        "max_position_embeddings": p["max_pos"],
        "index_n_heads": p["index_heads"],
        "index_head_dim": p["index_dim"],
        "index_topk": p["index_topk"],
        "hc_mult": p["hc"],
        "hc_sinkhorn_iters": p["sinkhorn"],
        "hc_eps": p["hc_eps"],
        "rms_norm_eps": 1e-6,
        "n_routed_experts": p["experts"],
        "n_shared_experts": p["shared"],
        "num_experts_per_tok": p["active"],
        "moe_intermediate_size": p["moe_inter"],
        "scoring_func": "sqrtsoftplus",
        "routed_scaling_factor": p["route_scale"],
        "topk_method": "noaux_tc",
        "norm_topk_prob": True,
        "swiglu_limit": p["swiglu_limit"],
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "bos_token_id": p["bos"],
        "eos_token_id": p["eos"],
        "torch_dtype": {"f32": "float32", "bf16": "bfloat16"}[a.dtype],
    }
    if a.fp4_experts:
        c["expert_dtype"] = "fp4"
    if a.fp8:
        c["quantization_config"] = dict(QUANTIZATION_CONFIG)
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--fp8", action="store_true", help="FP8 e4m3 weights with E8M0 128x128 block scales (X.scale)")
    ap.add_argument("--fp4-experts", action="store_true", help="routed experts in FP4 e2m1 (I8 packed) + E8M0/32")
    ap.add_argument("--real-ratio", action="store_true", help="compress_ratios [0,4,128,4,128,0]+[0]")
    ap.add_argument("--wide", action="store_true", help="benchmark preset: V4-Flash attention widths, 4 layers")
    ap.add_argument("--broken", choices=["missing-scale", "scale-shape", "fp4-scale-shape", "unknown-scale-fmt"],
                    help="a bad checkpoint for refusal tests: layers.0.attn.wq_a loses its .scale (--fp8) or gets "
                         "one scale column too many (--fp8); layers.0.ffn.experts.0.w1.scale gets one column too "
                         "many (--fp4-experts); quantization_config.scale_fmt 'ue4m3' (--fp8)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--compress-ratios", help="comma-separated, num_hidden_layers + MTP entries")
    ap.add_argument("--mtp-copy", type=float, default=None, metavar="S",
                    help="an MTP block built to predict the main model's next token (see above)")
    ints = {"vocab": "vocab_size", "hidden": "hidden_size", "window": "sliding_window", "heads": "num_attention_heads",
            "head_dim": "head_dim", "rope": "qk_rope_head_dim", "q_lora": "q_lora_rank", "o_groups": "o_groups",
            "o_lora": "o_lora_rank", "index_heads": "index_n_heads", "index_dim": "index_head_dim",
            "index_topk": "index_topk", "hc": "hc_mult", "sinkhorn": "hc_sinkhorn_iters",
            "experts": "n_routed_experts", "active": "num_experts_per_tok", "shared": "n_shared_experts",
            "moe_inter": "moe_intermediate_size", "hash_layers": "num_hash_layers", "orig_ctx":
            "rope_scaling.original_max_position_embeddings", "max_pos": "max_position_embeddings"}
    for k, field in ints.items():
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=None, help=field)
    for k in ("route_scale", "swiglu_limit", "rope_theta", "compress_rope_theta", "factor"):
        ap.add_argument("--" + k.replace("_", "-"), type=float, default=None)
    a = ap.parse_args()

    p = dict(WIDE if a.wide else TINY)
    if a.real_ratio and a.wide:
        ap.error("--real-ratio and --wide exclude each other")
    if a.real_ratio:
        p.update(REAL_RATIO)
    for k in list(ints) + ["route_scale", "swiglu_limit", "rope_theta", "compress_rope_theta", "factor"]:
        if getattr(a, k) is not None:
            p[k] = getattr(a, k)
    if a.compress_ratios:
        p["ratios"] = [int(x) for x in a.compress_ratios.split(",")]
        p["layers"] = len(p["ratios"]) - p["mtp"]
    else:
        p["layers"] = len(p["ratios"]) - p["mtp"]
    if p["layers"] < 1 or any(r < 0 or r == 1 for r in p["ratios"]) or any(p["ratios"][p["layers"]:]):
        ap.error("compress_ratios: entries 0 or >= 2, the MTP entries 0")
    if p["heads"] % p["o_groups"]:
        ap.error("num_attention_heads must divide into o_groups")
    if p["rope"] % 2 or p["rope"] > min(p["head_dim"], p["index_dim"]):
        ap.error("qk_rope_head_dim must be even and <= head_dim, index_head_dim")
    if p["index_dim"] & (p["index_dim"] - 1):
        ap.error("index_head_dim must be a power of two (Hadamard, spec §0.5)")
    if a.fp4_experts and (p["hidden"] % 32 or p["moe_inter"] % 32):
        ap.error("--fp4-experts needs hidden and moe_intermediate multiples of 32")
    if p["vocab"] < 512:
        ap.error("vocab must be >= 512 (the copied tokenizer's size)")
    if a.broken in ("missing-scale", "scale-shape", "unknown-scale-fmt") and not a.fp8:
        ap.error(f"--broken {a.broken} needs --fp8")
    if a.broken == "fp4-scale-shape" and not a.fp4_experts:
        ap.error("--broken fp4-scale-shape needs --fp4-experts")
    c = build_config(a, p)
    if a.broken == "unknown-scale-fmt":
        c["quantization_config"]["scale_fmt"] = "ue4m3"
    specs = tensor_list(c)
    if a.mtp_copy is not None:
        if not p["mtp"]:
            ap.error("--mtp-copy needs an MTP block")
        specs = [mtp_copy_spec(spec, a.mtp_copy) for spec in specs]

    os.makedirs(a.out, exist_ok=True)
    float_dt = {"f32": "F32", "bf16": "BF16"}[a.dtype]
    units = []  # a tensor plus its scale; never split across shards
    for name, shape, kind, std, quant in specs:
        if kind == "tid2eid":
            units.append([(name, "I64", shape, kind, std, None)])
        elif kind in ("f32", "bias"):
            units.append([(name, "F32", shape, kind, std, None)])
        elif quant == "expert" and a.fp4_experts:
            sname = name[: -len(".weight")] + ".scale"
            units.append([(name, "I8", (shape[0], shape[1] // 2), kind, std, ("fp4", shape)),
                          (sname, "F8_E8M0", (shape[0], shape[1] // FP4_BLOCK), "scale", 0, None)])
        elif quant and a.fp8:
            sname = name[: -len(".weight")] + ".scale"
            units.append([(name, "F8_E4M3", shape, kind, std, ("fp8", shape)),
                          (sname, "F8_E8M0", (-(-shape[0] // BLOCK), -(-shape[1] // BLOCK)), "scale", 0, None)])
        else:
            units.append([(name, float_dt, shape, kind, std, None)])
    for u in units:
        if a.broken == "missing-scale" and u[0][0] == "layers.0.attn.wq_a.weight":
            del u[1:]
        if (a.broken == "scale-shape" and u[0][0] == "layers.0.attn.wq_a.weight") or (
                a.broken == "fp4-scale-shape" and u[0][0] == "layers.0.ffn.experts.0.w1.weight"):
            n, dt, sh, kind, std, q = u[1]
            u[1] = (n, dt, (sh[0], sh[1] + 1), "badscale", std, q)
    shards = max(1, a.shards)
    files = ["model.safetensors"] if shards == 1 else [
        f"model-{s + 1:05d}-of-{shards:05d}.safetensors" for s in range(shards)]
    weight_map = {}
    for s, fname in enumerate(files):
        mine = [t for u in units[s::shards] for t in u]
        with StreamWriter(os.path.join(a.out, fname), [(n, d, sh) for n, d, sh, *_ in mine],
                          metadata={"format": "pt"}) as w:
            pending = None
            for name, dt, shape, kind, std, q in mine:
                weight_map[name] = fname
                if kind == "scale":
                    w.write(name, pending)
                    continue
                if kind == "badscale":  # --broken: the right scales plus a column of 1.0 (code 127)
                    w.write(name, np.pad(pending, [(0, 0), (0, 1)], constant_values=127))
                    continue
                lshape = q[1] if q else shape
                scales = []
                for v in draw(a.seed, name, kind, lshape, std, c):
                    if q and q[0] == "fp8":
                        codes, sc = fp8_block_quantize_ue8m0(v)
                        w.write(name, codes)
                        scales.append(sc)
                    elif q and q[0] == "fp4":
                        packed, sc = fp4_quantize(v)
                        w.write(name, packed.view(np.int8))
                        scales.append(sc)
                    else:
                        w.write(name, v)
                if scales:
                    pending = np.concatenate(scales, axis=0)
    if shards > 1:
        json.dump({"metadata": {}, "weight_map": weight_map},
                  open(os.path.join(a.out, "model.safetensors.index.json"), "w"), indent=2)
    json.dump(c, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    json.dump({"bos_token_id": p["bos"], "eos_token_id": p["eos"]},
              open(os.path.join(a.out, "generation_config.json"), "w"))
    tok = LLAMA3_TOKENIZER if p["vocab"] >= 128256 else STORIES  # both produce ids < vocab_size
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok, f), a.out)


if __name__ == "__main__":
    main()
