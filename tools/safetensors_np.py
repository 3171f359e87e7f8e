"""Minimal safetensors reader/writer on numpy (no torch, no safetensors package).

bf16 is handled as the upper 16 bits of float32 (round-to-nearest-even when
writing). Used by the tiny-checkpoint generator and the numpy reference.
"""
import json
import os
import struct

import numpy as np

_NP = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "U8": np.uint8, "I8": np.int8}


def f32_to_bf16_bits(a):
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_bits_to_f32(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def save(path, tensors, dtype="F32"):
    """tensors: name -> float array; dtype: F32 | BF16 | F16 for float tensors."""
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        arr = np.asarray(arr)
        if dtype == "BF16":
            raw = f32_to_bf16_bits(arr).tobytes()
        elif dtype == "F16":
            raw = arr.astype(np.float16).tobytes()
        else:
            raw = arr.astype(np.float32).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_file(path):
    """Returns name -> float32 (or integer) numpy array."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = data[base + b : base + end]
        if e["dtype"] == "BF16":
            arr = bf16_bits_to_f32(np.frombuffer(raw, dtype=np.uint16))
        else:
            arr = np.frombuffer(raw, dtype=_NP[e["dtype"]]).astype(np.float32)
        out[name] = arr.reshape(e["shape"])
    return out


def _files(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        return sorted(set(json.load(open(index))["weight_map"].values()))
    return ["model.safetensors"]


def load_dir(model_dir):
    """All tensors of a model directory (single file or sharded with an index)."""
    out = {}
    for f in _files(model_dir):
        out.update(load_file(os.path.join(model_dir, f)))
    return out


def load_dir_dtypes(model_dir):
    """name -> stored dtype string ("BF16", "F32", ...) of every tensor."""
    out = {}
    for f in _files(model_dir):
        with open(os.path.join(model_dir, f), "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        out.update({k: e["dtype"] for k, e in header.items() if k != "__metadata__"})
    return out
