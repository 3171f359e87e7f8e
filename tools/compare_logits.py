#!/usr/bin/env python3
"""Checks `pagoda logits` output against the numpy reference.

The reference runs once over prompt + Pagoda's greedy output (teacher
forcing); row i of Pagoda's logits must match the reference at position
len(prompt) - 1 + i within rtol * max|ref|, and Pagoda's token must be the
reference's argmax (up to near-ties: a logit within argmax_rtol * max|ref|
of the best; quantized runs pass a looser one).

DeepSeek V3 checkpoints (architectures DeepseekV3ForCausalLM /
DeepseekV32ForCausalLM) are checked against tools/deepseek_reference.py
(--absorbed runs its attention in the absorbed form; the two forms agree
to ~1e-15), DeepseekV4ForCausalLM against tools/deepseek_v4_reference.py
(kv_cache_dtype "fp8": its 584-B fp8 entry simulation; the JSON's
indexer_cache_dtype "fp4"/"fp8": the indexer-key cache simulation),
every other model against tools/reference_model.py. V3.2 runs
the lightning indexer and top-k sparse MLA at any length. An engine run
reporting kv_cache_dtype "fp8" is compared with the reference's FP8 cache
simulation (spec §5.1), "bf16" with its bf16-rounded latent cache.
"""
import argparse
import json
import os
import sys

import numpy as np

from reference_model import ReferenceModel


def reference_for(model_dir, absorbed=False, fp8_cache=False, indexer_cache=None, **kw):
    """The numpy reference matching the checkpoint's architecture."""
    arch = (json.load(open(os.path.join(model_dir, "config.json"))).get("architectures") or [""])[0]
    if indexer_cache and arch != "DeepseekV4ForCausalLM":
        raise ValueError(f"{model_dir}: indexer_cache_dtype {indexer_cache!r} is modelled for DeepSeek V4 only")
    if arch in ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM"):
        from deepseek_reference import DeepseekReference
        return DeepseekReference(model_dir, absorbed=absorbed, fp8_cache=fp8_cache, **kw)
    if arch == "DeepseekV4ForCausalLM":
        from deepseek_v4_reference import DeepseekV4Reference
        return DeepseekV4Reference(model_dir, fp8_cache=fp8_cache, indexer_cache=indexer_cache, **kw)
    if fp8_cache:
        raise ValueError(f"{model_dir}: the fp8 cache simulation is modelled for DeepSeek only")
    return ReferenceModel(model_dir, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--pagoda-json", required=True)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--argmax-rtol", type=float, default=1e-6)
    ap.add_argument("--absorbed", action="store_true", help="DeepSeek: absorbed-form MLA in the reference")
    a = ap.parse_args()
    got = json.load(open(a.pagoda_json))
    prompt, out, rows = got["prompt_ids"], got["output_ids"], np.array(got["logits"], dtype=np.float64)
    if len(rows) != len(out) or len(out) == 0:
        print(f"FAIL {a.model}: {len(rows)} logit rows for {len(out)} tokens")
        return 1
    # The engine reports its kernel variant; avx512bf16 rounds activations
    # to bf16 before products with bf16 weights, and so must the reference.
    bf16_act = got.get("isa") == "avx512bf16"
    # The reference's activations differ from the engine's f32 ones by f32
    # rounding, and near a bf16 rounding boundary that flips one activation
    # by a bf16 ulp (2^-8 relative): a few 1e-3 of the logits at worst.
    # A bf16 KV cache (reported by the engine) holds K/V rounded to bf16.
    bf16_kv = got.get("kv_cache_dtype") == "bf16"
    fp8_kv = got.get("kv_cache_dtype") == "fp8"
    model = reference_for(a.model, absorbed=a.absorbed, bf16_activations=bf16_act, bf16_kv=bf16_kv,
                          **({"fp8_cache": True} if fp8_kv else {}),
                          **({"indexer_cache": got["indexer_cache_dtype"]} if got.get("indexer_cache_dtype") else {}))
    bf16_act = bool(model.round_for)  # only models with bf16 weights round
    rtol = max(a.rtol, 5e-3) if bf16_act else a.rtol
    ref = model.logits(prompt + out)[len(prompt) - 1 : len(prompt) - 1 + len(out)]
    worst, worst_row = 0.0, -1
    for i in range(len(out)):
        err = np.max(np.abs(rows[i] - ref[i])) / np.max(np.abs(ref[i]))
        if err > worst:
            worst, worst_row = err, i
        best = int(np.argmax(ref[i]))
        if out[i] != best and ref[i][best] - ref[i][out[i]] > a.argmax_rtol * np.max(np.abs(ref[i])):
            print(f"FAIL {a.model}: step {i} token {out[i]} but reference argmax {best}")
            return 1
    status = "ok" if worst <= rtol else "FAIL"
    note = (", bf16 activations" if bf16_act else "") + (", bf16 KV cache" if bf16_kv else "") + (
        ", fp8 KV cache" if fp8_kv else "") + (
        f", {got['indexer_cache_dtype']} indexer cache" if got.get("indexer_cache_dtype") else "")
    print(f"{status} {a.model}: {len(out)} steps, worst relative error {worst:.2e} at step {worst_row}"
          f" (limit {rtol:.0e}{note})")
    return 0 if worst <= rtol else 1


if __name__ == "__main__":
    sys.exit(main())
