#!/usr/bin/env python3
"""Writes a random-weight Hugging Face checkpoint directory for a Llama,
Qwen2 or Qwen3 decoder, small enough for tests but exercising GQA, biases,
q/k norms, explicit head_dim, tied/untied heads, RoPE scaling, sliding
windows, shards and dtypes. The tokenizer files come from the demo model
(vocab 512), so the checkpoint is directly usable by `pagoda generate`.
"""
import argparse
import json
import os
import shutil

import numpy as np

from safetensors_np import save

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER_DIR = os.path.join(HERE, "..", "models", "stories260k")
ARCH = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--arch", choices=ARCH, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=["f32", "bf16", "f16"], default="f32")
    ap.add_argument("--tied", action="store_true", help="tie lm_head to the embeddings")
    ap.add_argument("--rope-scaling", choices=["none", "linear", "llama3"], default="none")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--intermediate", type=int, default=96)
    ap.add_argument("--sliding-window", type=int, default=0)
    ap.add_argument("--layer-types", default="", help="comma list of full_attention/sliding_attention")
    ap.add_argument("--max-window-layers", type=int, default=0, help="qwen2: layers >= this use the window")
    a = ap.parse_args()

    rng = np.random.default_rng(a.seed)
    vocab, H, L = 512, a.hidden, a.layers
    hd = a.head_dim if a.arch == "qwen3" else H // a.heads
    qd, kvd, I = a.heads * hd, a.kv_heads * hd, a.intermediate

    def mat(rows, cols, scale=None):
        return rng.standard_normal((rows, cols)) * (scale or 1.0 / np.sqrt(cols))

    def norm(n):
        return 1.0 + 0.1 * rng.standard_normal(n)

    t = {"model.embed_tokens.weight": rng.standard_normal((vocab, H)), "model.norm.weight": norm(H)}
    if not a.tied:
        t["lm_head.weight"] = mat(vocab, H, 2.0 / np.sqrt(H))
    for i in range(L):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = norm(H)
        t[p + "post_attention_layernorm.weight"] = norm(H)
        t[p + "self_attn.q_proj.weight"] = mat(qd, H)
        t[p + "self_attn.k_proj.weight"] = mat(kvd, H)
        t[p + "self_attn.v_proj.weight"] = mat(kvd, H)
        t[p + "self_attn.o_proj.weight"] = mat(H, qd)
        if a.arch == "qwen2":
            for n, d in (("q", qd), ("k", kvd), ("v", kvd)):
                t[p + f"self_attn.{n}_proj.bias"] = 0.1 * rng.standard_normal(d)
        if a.arch == "qwen3":
            t[p + "self_attn.q_norm.weight"] = norm(hd)
            t[p + "self_attn.k_norm.weight"] = norm(hd)
        t[p + "mlp.gate_proj.weight"] = mat(I, H)
        t[p + "mlp.up_proj.weight"] = mat(I, H)
        t[p + "mlp.down_proj.weight"] = mat(H, I)

    cfg = {
        "architectures": [ARCH[a.arch]], "model_type": a.arch, "hidden_size": H, "intermediate_size": I,
        "num_hidden_layers": L, "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
        "vocab_size": vocab, "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "hidden_act": "silu", "tie_word_embeddings": a.tied, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}[a.dtype],
    }
    if a.arch == "qwen3":
        cfg["head_dim"] = hd
        cfg["attention_bias"] = False
    if a.arch == "llama":
        cfg["attention_bias"] = False
        cfg["mlp_bias"] = False
    if a.rope_scaling == "linear":
        cfg["rope_scaling"] = {"rope_type": "linear", "factor": 4.0}
    elif a.rope_scaling == "llama3":
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    if a.sliding_window:
        cfg["sliding_window"] = a.sliding_window
        if a.layer_types:
            cfg["layer_types"] = a.layer_types.split(",")
        elif a.arch == "qwen2":
            cfg["use_sliding_window"] = True
            cfg["max_window_layers"] = a.max_window_layers

    os.makedirs(a.out, exist_ok=True)
    json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    json.dump({"bos_token_id": 1, "eos_token_id": 2}, open(os.path.join(a.out, "generation_config.json"), "w"))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER_DIR, f), a.out)
    dtype = {"f32": "F32", "bf16": "BF16", "f16": "F16"}[a.dtype]
    names = list(t)
    if a.shards <= 1:
        save(os.path.join(a.out, "model.safetensors"), t, dtype)
        return
    weight_map = {}
    for s in range(a.shards):
        part = names[s::a.shards]
        fname = f"model-{s + 1:05d}-of-{a.shards:05d}.safetensors"
        save(os.path.join(a.out, fname), {n: t[n] for n in part}, dtype)
        weight_map.update({n: fname for n in part})
    json.dump({"metadata": {}, "weight_map": weight_map},
              open(os.path.join(a.out, "model.safetensors.index.json"), "w"), indent=2)


if __name__ == "__main__":
    main()
