#!/usr/bin/env python3
"""Writes a random-weight Hugging Face checkpoint of a real model's shape,
for benchmarks: config.json, generation_config.json, one bf16 (or f32)
model.safetensors and the real tokenizer files, so `pagoda generate`,
`pagoda bench latency` and `pagoda serve` run on it as on the real model.

The default preset is Qwen3-0.6B's exact shape (hidden 1024, 28 layers,
16 q / 8 kv heads, head_dim 128, intermediate 3072, vocab 151936, tied
embeddings, q/k RMSNorm): 1.19 GB in bf16. Any field can be overridden,
e.g. `--layers 2 --hidden 64 --intermediate 128` for a tiny test model
with the real Qwen3 tokenizer.

Tensors are generated and written in chunks, so memory stays small even
for large shapes. Weights are N(0, 1/sqrt(fan_in)) and norms ~1, which
keeps activations finite at any depth (the values are not a trained model).
"""
import argparse
import json
import os
import shutil
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZERS = os.path.join(HERE, "..", "tests", "data", "tokenizers")

# Real configs (Hugging Face config.json fields that matter here).
PRESETS = {
    "qwen3-0.6b": dict(arch="Qwen3ForCausalLM", model_type="qwen3", tokenizer="qwen3", hidden=1024,
                       layers=28, heads=16, kv_heads=8, head_dim=128, intermediate=3072,
                       vocab=151936, tied=True, qk_norm=True, rope_theta=1000000.0,
                       max_position_embeddings=40960, rms_norm_eps=1e-6, bos=151643, eos=151645),
    "qwen3-1.7b": dict(arch="Qwen3ForCausalLM", model_type="qwen3", tokenizer="qwen3", hidden=2048,
                       layers=28, heads=16, kv_heads=8, head_dim=128, intermediate=6144,
                       vocab=151936, tied=True, qk_norm=True, rope_theta=1000000.0,
                       max_position_embeddings=40960, rms_norm_eps=1e-6, bos=151643, eos=151645),
    "llama3.2-1b": dict(arch="LlamaForCausalLM", model_type="llama", tokenizer="llama3", hidden=2048,
                        layers=16, heads=32, kv_heads=8, head_dim=64, intermediate=8192,
                        vocab=128256, tied=True, qk_norm=False, rope_theta=500000.0,
                        max_position_embeddings=131072, rms_norm_eps=1e-5, bos=128000,
                        eos=128001),
}

CHUNK = 1 << 22  # values generated per numpy call


def tensor_list(p):
    """(name, shape, kind) in file order; kind: 'mat' (fan-in scaled),
    'embed' or 'norm'."""
    H, hd, I = p["hidden"], p["head_dim"], p["intermediate"]
    qd, kvd = p["heads"] * hd, p["kv_heads"] * hd
    out = [("model.embed_tokens.weight", (p["vocab"], H), "embed")]
    for i in range(p["layers"]):
        q = f"model.layers.{i}."
        out += [(q + "input_layernorm.weight", (H,), "norm"),
                (q + "self_attn.q_proj.weight", (qd, H), "mat"),
                (q + "self_attn.k_proj.weight", (kvd, H), "mat"),
                (q + "self_attn.v_proj.weight", (kvd, H), "mat"),
                (q + "self_attn.o_proj.weight", (H, qd), "mat")]
        if p["qk_norm"]:
            out += [(q + "self_attn.q_norm.weight", (hd,), "norm"),
                    (q + "self_attn.k_norm.weight", (hd,), "norm")]
        out += [(q + "post_attention_layernorm.weight", (H,), "norm"),
                (q + "mlp.gate_proj.weight", (I, H), "mat"),
                (q + "mlp.up_proj.weight", (I, H), "mat"),
                (q + "mlp.down_proj.weight", (H, I), "mat")]
    out.append(("model.norm.weight", (H,), "norm"))
    if not p["tied"]:
        out.append(("lm_head.weight", (p["vocab"], H), "mat"))
    return out


def to_bf16_bits(a):
    """f32 -> bf16 bits, round to nearest even (finite inputs)."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)


def write_safetensors(path, tensors, dtype, rng):
    elem = 2 if dtype == "BF16" else 4
    header, offset = {}, 0
    for name, shape, _ in tensors:
        n = int(np.prod(shape)) * elem
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name, shape, kind in tensors:
            total = int(np.prod(shape))
            scale = 1.0 / np.sqrt(shape[-1]) if kind == "mat" else 0.1
            for start in range(0, total, CHUNK):
                n = min(CHUNK, total - start)
                v = rng.standard_normal(n, dtype=np.float32) * np.float32(scale)
                if kind == "norm":
                    v += np.float32(1.0)
                f.write(to_bf16_bits(v).tobytes() if dtype == "BF16" else v.tobytes())
    return offset


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--preset", choices=PRESETS, default="qwen3-0.6b")
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--seed", type=int, default=0)
    for field in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab"):
        ap.add_argument("--" + field.replace("_", "-"), type=int, help=f"override the preset's {field}")
    a = ap.parse_args()

    p = dict(PRESETS[a.preset])
    for field in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab"):
        if getattr(a, field) is not None:
            p[field] = getattr(a, field)
    if p["heads"] % p["kv_heads"]:
        ap.error("--heads must be a multiple of --kv-heads")

    cfg = {
        "architectures": [p["arch"]], "model_type": p["model_type"], "hidden_size": p["hidden"],
        "intermediate_size": p["intermediate"], "num_hidden_layers": p["layers"],
        "num_attention_heads": p["heads"], "num_key_value_heads": p["kv_heads"], "head_dim": p["head_dim"],
        "vocab_size": p["vocab"], "max_position_embeddings": p["max_position_embeddings"],
        "rms_norm_eps": p["rms_norm_eps"], "rope_theta": p["rope_theta"], "hidden_act": "silu",
        "tie_word_embeddings": p["tied"], "attention_bias": False, "bos_token_id": p["bos"],
        "eos_token_id": p["eos"], "torch_dtype": {"bf16": "bfloat16", "f32": "float32"}[a.dtype],
    }
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": p["bos"], "eos_token_id": p["eos"]}, f)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZERS, p["tokenizer"], name), a.out)
    tensors = tensor_list(p)
    nbytes = write_safetensors(os.path.join(a.out, "model.safetensors"), tensors,
                               {"bf16": "BF16", "f32": "F32"}[a.dtype], np.random.default_rng(a.seed))
    params = sum(int(np.prod(s)) for _, s, _ in tensors)
    print(f"{a.out}: {a.preset} preset{' (overridden)' if p != PRESETS[a.preset] else ''}, {params / 1e6:.1f}M parameters, {nbytes / 1e9:.3f} GB {a.dtype}")


if __name__ == "__main__":
    main()
