#!/usr/bin/python3
# Benchmark-only stand-in for llama.cpp's convert_hf_to_gguf.py (bench/llama_cpp_compare.sh,
# bench/every_cpu.md), which imports torch at the top and reads the BPE vocabulary through
# transformers.AutoTokenizer (neither is installed here). Uses only numpy and the gguf-py of a
# llama.cpp checkout, which nothing else in this project needs. Qwen3 dense, bf16 only; one
# model.safetensors or shards listed in model.safetensors.index.json; tied or untied LM head.
#   PYTHONPATH=LLAMA_CPP/gguf-py /usr/bin/python3 tools/qwen3_to_gguf.py HF_DIR OUT.gguf
import json, struct, sys
from pathlib import Path
import numpy as np
import gguf

def fail(msg):
    sys.exit(f"qwen3_to_gguf.py: {msg}")

if len(sys.argv) != 3:
    fail("usage: qwen3_to_gguf.py HF_DIR OUT.gguf")
src, out = Path(sys.argv[1]), sys.argv[2]
cfg = json.load(open(src / "config.json"))
if cfg.get("model_type") != "qwen3":
    fail(f"{src}/config.json: model_type {cfg.get('model_type')!r}, not 'qwen3'")

w = gguf.GGUFWriter(out, "qwen3")
w.add_type(gguf.GGUFType.MODEL)
w.add_name(src.name)
w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
w.add_context_length(cfg["max_position_embeddings"])
w.add_embedding_length(cfg["hidden_size"])
w.add_block_count(cfg["num_hidden_layers"])
w.add_feed_forward_length(cfg["intermediate_size"])
w.add_head_count(cfg["num_attention_heads"])
w.add_head_count_kv(cfg["num_key_value_heads"])
w.add_key_length(cfg["head_dim"])
w.add_value_length(cfg["head_dim"])
w.add_rope_freq_base(cfg["rope_theta"])
w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])

# Vocabulary as the official converter writes it for Qwen: byte-level BPE ("gpt2"), pre-tokenizer
# "qwen2", padded to vocab_size with unused [PADi] entries; an added token is a control token
# when it is special or looks special (<|...|>, as the converter's does_token_look_special has
# it), else user-defined (Qwen3's <think>, <tool_call>, ...).
tok = json.load(open(src / "tokenizer.json"))
vocab = dict(tok["model"]["vocab"])
added = {a["id"]: a for a in tok["added_tokens"]}
rev = {i: t for t, i in vocab.items()}
def looks_special(t):
    return (t.startswith("<|") and t.endswith("|>")) or (t.startswith("<\uff5c") and t.endswith("\uff5c>"))
tokens, types = [], []
for i in range(cfg["vocab_size"]):
    if i in added:
        a = added[i]
        tokens.append(a["content"])
        control = a.get("special", False) or looks_special(a["content"])
        types.append(gguf.TokenType.CONTROL if control else gguf.TokenType.USER_DEFINED)
    elif i in rev:
        tokens.append(rev[i]); types.append(gguf.TokenType.NORMAL)
    else:
        tokens.append(f"[PAD{i}]"); types.append(gguf.TokenType.UNUSED)
w.add_tokenizer_model("gpt2")
w.add_tokenizer_pre("qwen2")
w.add_token_list(tokens)
w.add_token_types(types)
special = gguf.SpecialVocab(src, load_merges=True, n_vocab=len(tokens))
special.add_to_gguf(w)

# Tensors straight from the safetensors file(s): 2-D weights stay bf16, norms become f32 (as the
# official converter does). A tied LM head is token_embd (no output.weight); an untied one is
# output.weight.
index = src / "model.safetensors.index.json"
if index.exists():
    files = sorted(set(json.load(open(index))["weight_map"].values()))
elif (src / "model.safetensors").exists():
    files = ["model.safetensors"]
else:
    fail(f"{src}: neither model.safetensors nor model.safetensors.index.json")
names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
         "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
         "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
         "post_attention_layernorm": "ffn_norm"}
def gguf_name(hf):
    if hf == "model.embed_tokens.weight": return "token_embd.weight"
    if hf == "model.norm.weight": return "output_norm.weight"
    if hf == "lm_head.weight": return "output.weight"
    parts = hf.split(".")  # model.layers.N.<module>.<proj>.weight
    module = ".".join(parts[3:-1])
    if len(parts) < 5 or parts[:2] != ["model", "layers"] or module not in names:
        fail(f"tensor {hf!r}: not a Qwen3 dense tensor this converter knows")
    return f"blk.{parts[2]}.{names[module]}.weight"
for name in files:
    f = open(src / name, "rb")
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    base = 8 + n
    for hf, info in header.items():
        if hf == "__metadata__": continue
        if info["dtype"] != "BF16":
            fail(f"{name}: tensor {hf!r} is {info['dtype']}; this converter writes bf16 checkpoints only")
        if hf == "lm_head.weight" and cfg.get("tie_word_embeddings", False):
            continue  # tied: token_embd serves as the head
        a, b = info["data_offsets"]
        f.seek(base + a)
        raw = np.frombuffer(f.read(b - a), dtype=np.uint16).reshape(info["shape"])
        if raw.ndim == 1:
            w.add_tensor(gguf_name(hf), (raw.astype(np.uint32) << 16).view(np.float32))
        else:
            w.add_tensor(gguf_name(hf), raw, raw_dtype=gguf.GGMLQuantizationType.BF16)

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print("wrote", out)
