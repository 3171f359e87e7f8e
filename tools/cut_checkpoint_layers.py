#!/usr/bin/env python3
"""Writes a copy of a Hugging Face checkpoint that keeps only its first N
decoder layers (plus embeddings, final norm and LM head): a draft model
for speculative decoding (`--speculative-config '{"method": "draft_model",
"model": OUT, ...}'`) that shares the source's tokenizer and vocabulary.

Tensor bytes are copied as they are (any dtype); config.json gets
num_hidden_layers = N; every other file (tokenizer, generation config)
is copied. Shards (*.safetensors with an index) become one model.safetensors.

  cut_checkpoint_layers.py --src DIR --out DIR --layers N
"""
import argparse
import json
import os
import re
import shutil
import struct

LAYER = re.compile(r"(^|\.)layers\.(\d+)\.")


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)), 8 + n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, required=True, help="decoder layers to keep (the first N)")
    a = ap.parse_args()
    with open(os.path.join(a.src, "config.json")) as f:
        config = json.load(f)
    total = config["num_hidden_layers"]
    if not 1 <= a.layers <= total:
        ap.error(f"--layers {a.layers}: the source has {total} layers")
    shards = sorted(f for f in os.listdir(a.src) if f.endswith(".safetensors"))
    if not shards:
        ap.error(f"no *.safetensors in {a.src}")
    os.makedirs(a.out, exist_ok=True)
    kept = []  # (name, entry, shard path, absolute offset)
    for shard in shards:
        path = os.path.join(a.src, shard)
        header, base = read_header(path)
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            m = LAYER.search(name)
            if m and int(m.group(2)) >= a.layers:
                continue
            kept.append((name, entry, path, base))
    out_header, offset = {}, 0
    for name, entry, _, _ in kept:
        b, e = entry["data_offsets"]
        out_header[name] = {"dtype": entry["dtype"], "shape": entry["shape"], "data_offsets": [offset, offset + e - b]}
        offset += e - b
    blob = json.dumps(out_header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(os.path.join(a.out, "model.safetensors"), "wb") as out:
        out.write(struct.pack("<Q", len(blob)))
        out.write(blob)
        for name, entry, path, base in kept:
            b, e = entry["data_offsets"]
            with open(path, "rb") as f:
                f.seek(base + b)
                left = e - b
                while left > 0:
                    chunk = f.read(min(left, 1 << 24))
                    out.write(chunk)
                    left -= len(chunk)
    config["num_hidden_layers"] = a.layers
    for key in ("layer_types", "mlp_only_layers"):  # per-layer lists follow the cut
        if isinstance(config.get(key), list):
            config[key] = config[key][: a.layers]
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for name in os.listdir(a.src):
        src = os.path.join(a.src, name)
        if name == "config.json" or name.endswith(".safetensors") or name.endswith(".safetensors.index.json"):
            continue
        if os.path.isfile(src):
            shutil.copy(src, os.path.join(a.out, name))
    print(f"{a.out}: {a.layers} of {total} layers, {len(kept)} tensors, {offset} bytes")


if __name__ == "__main__":
    main()
