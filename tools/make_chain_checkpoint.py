#!/usr/bin/env python3
"""Writes a tiny Qwen3-shaped checkpoint (real Qwen3 tokenizer and chat
template) whose next token depends only on the current one, following a
given chain: after CHAIN[i] it writes CHAIN[i+1]. Attention and MLP
outputs are zero (o_proj, down_proj), so the last hidden state is the
current token's embedding, a unit vector of its own; lm_head maps that
vector to the next token's logit. A test can thus make `pagoda serve`
write a known text (a tool call in a model's format) through the real
forward pass, sampler and detokenizer, with no test-only code path.

The chain's ids must be distinct (one successor each); tokens outside it
have zero embeddings and produce all-zero logits.

  make_chain_checkpoint.py --out DIR --chain 198,151667,...,151645
"""
import argparse
import json
import os
import shutil
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER = os.path.join(HERE, "..", "tests", "data", "tokenizers", "qwen3")
VOCAB, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE = 151936, 2, 1, 16, 32
# The next token's logit (all others 0). Sampled at temperature 1 over the
# 151936-token vocabulary it must still win: at 20 another token came out
# once in ~3,000 steps (151935 / e^20), enough to fail a tool-call test now
# and then (CI, session 22); at 40 that is ~6e-13 per step.
LOGIT = 40.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--chain", required=True, help="comma-separated token ids")
    a = ap.parse_args()
    chain = [int(t) for t in a.chain.split(",")]
    if len(set(chain)) != len(chain):
        ap.error("the chain's ids must be distinct: a token can have one successor only")
    if any(t < 0 or t >= VOCAB for t in chain):
        ap.error(f"ids must be in [0, {VOCAB})")
    hidden = max(32, len(chain))
    embed = np.zeros((VOCAB, hidden), np.float32)
    lm_head = np.zeros((VOCAB, hidden), np.float32)
    for i, (cur, nxt) in enumerate(zip(chain, chain[1:])):
        embed[cur, i] = 1.0
        # The final RMSNorm scales a unit axis by sqrt(hidden).
        lm_head[nxt, i] = LOGIT / np.sqrt(hidden)
    qd, kvd = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    tensors = [("model.embed_tokens.weight", embed)]
    q = "model.layers.0."
    tensors += [(q + "input_layernorm.weight", np.ones(hidden, np.float32)),
                (q + "self_attn.q_proj.weight", np.zeros((qd, hidden), np.float32)),
                (q + "self_attn.k_proj.weight", np.zeros((kvd, hidden), np.float32)),
                (q + "self_attn.v_proj.weight", np.zeros((kvd, hidden), np.float32)),
                (q + "self_attn.o_proj.weight", np.zeros((hidden, qd), np.float32)),
                (q + "self_attn.q_norm.weight", np.ones(HEAD_DIM, np.float32)),
                (q + "self_attn.k_norm.weight", np.ones(HEAD_DIM, np.float32)),
                (q + "post_attention_layernorm.weight", np.ones(hidden, np.float32)),
                (q + "mlp.gate_proj.weight", np.zeros((INTERMEDIATE, hidden), np.float32)),
                (q + "mlp.up_proj.weight", np.zeros((INTERMEDIATE, hidden), np.float32)),
                (q + "mlp.down_proj.weight", np.zeros((hidden, INTERMEDIATE), np.float32)),
                ("model.norm.weight", np.ones(hidden, np.float32)),
                ("lm_head.weight", lm_head)]
    header, offset = {}, 0
    for name, t in tensors:
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, t in tensors:
            f.write(np.ascontiguousarray(t).tobytes())
    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": hidden,
           "intermediate_size": INTERMEDIATE, "num_hidden_layers": 1, "num_attention_heads": HEADS,
           "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "vocab_size": VOCAB,
           "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
           "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False,
           "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "float32"}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 151643, "eos_token_id": 151645}, f)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER, name), a.out)
    print(f"{a.out}: chain of {len(chain)} tokens, hidden {hidden}")


if __name__ == "__main__":
    main()
