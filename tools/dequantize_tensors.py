#!/usr/bin/env python3
"""Writes chosen tensors of a checkpoint directory, as the numpy DeepSeek V4
reference (deepseek_v4_reference.py) reads them, to one F32 safetensors
file: an FP4 `X.weight` (I8 bytes [out, in/2] + F8_E8M0 `X.scale` [out,
in/32]) and an FP8 one (F8_E4M3 + E8M0 128x128 `X.scale`) dequantised by
that module's dequant_fp4 / dequant_fp8; integer tensors (tid2eid) as I32;
anything else as stored, widened to f32. The C++ loader tests compare
their own dequantisation with this file (an independent implementation of
the same layout).

usage: dequantize_tensors.py MODEL_DIR OUT.safetensors NAME [NAME ...]
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deepseek_v4_reference import dequant_fp4, dequant_fp8  # noqa: E402
from safetensors_np import load_dir, load_dir_dtypes, save  # noqa: E402


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    model, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    raw, dtypes = load_dir(model, raw_fp8=True), load_dir_dtypes(model)
    tensors, out_dtypes = {}, {}
    for name in names:
        dt = dtypes[name]
        if dt in ("I8", "F8_E4M3"):
            scale = raw[name[: -len(".weight")] + ".scale"]
            tensors[name] = dequant_fp4(raw[name], scale) if dt == "I8" else dequant_fp8(raw[name], scale)
        elif dt in ("I64", "I32"):
            tensors[name] = raw[name].astype(np.int32)
            out_dtypes[name] = "I32"
        else:
            tensors[name] = raw[name].astype(np.float32)
    save(out, tensors, out_dtypes)


if __name__ == "__main__":
    main()
