#!/usr/bin/env python3
"""Checks `pagoda logits --mtp-out` (DeepSeek's MTP layer as the `mtp`
speculative proposer runs it) against tools/deepseek_reference.py (V3,
V3.2) or tools/deepseek_v4_reference.py (V4).

* MTP logits: the engine's row at position t (the layer on the main
  model's hidden state at t and token t+1, predicting t+2) must match the
  reference's mtp_logits(ids)[t] within rtol * max|ref| at every position
  the engine ran it: every position of the prompt and output, whatever
  chunks, verify steps and recomputes computed it, except the last step's
  (a request that finishes is not caught up: at most --max-missing
  positions, k + 1 for k drafts a step).
* Drafts: each proposal (after num_tokens tokens) must be the reference's
  greedy chain mtp_propose(ids[:num_tokens], k). A draft that differs is
  allowed only at a near-tie (the engine's token within argmax_rtol *
  max|row| of the best), after which that chain is not compared further
  (its inputs differ); at least --min-drafts drafts must be compared.
"""
import argparse
import json
import sys

import numpy as np

from deepseek_reference import DeepseekReference
from deepseek_v4_reference import DeepseekV4Reference


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--pagoda-json", required=True)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--argmax-rtol", type=float, default=1e-5)
    ap.add_argument("--min-drafts", type=int, default=1)
    ap.add_argument("--max-missing", type=int, default=4)
    a = ap.parse_args()
    got = json.load(open(a.pagoda_json))
    ids, rows = got["ids"], np.array(got["mtp_logits"], dtype=np.float64)
    arch = (json.load(open(f"{a.model}/config.json")).get("architectures") or [""])[0]
    m = (DeepseekV4Reference if arch == "DeepseekV4ForCausalLM" else DeepseekReference)(a.model)
    ref = m.mtp_logits(ids)
    ok = True
    if not len(ref) - a.max_missing <= len(rows) <= len(ref):
        print(f"FAIL {a.model}: {len(rows)} MTP rows for {len(ids)} tokens (want {len(ref)} less at most "
              f"{a.max_missing})")
        return 1
    ref = ref[: len(rows)]
    # (a row of zeros happens: position 0's embedding is zeroed, and an
    # --mtp-copy layer's eh_proj then passes nothing)
    err = np.max(np.abs(rows - ref), axis=-1) / np.maximum(np.max(np.abs(ref), axis=-1), 1e-30)
    err = np.where(np.isfinite(err), err, np.inf)
    worst = int(np.argmax(err))
    print(f"MTP logits: {len(ref)} positions, max relative error {err[worst]:.2e} at position {worst}")
    if err[worst] > a.rtol:
        print(f"FAIL {a.model}: MTP logits differ at position {worst} by {err[worst]:.2e} > {a.rtol}")
        ok = False
    compared = 0
    for d in got["drafts"]:
        n, drafts = d["num_tokens"], d["drafts"]
        want, ref_rows = m.mtp_propose(ids[:n], len(drafts))
        for j, (g, w) in enumerate(zip(drafts, want)):
            compared += 1
            if g == w:
                continue
            row = ref_rows[j]
            if row[w] - row[g] > a.argmax_rtol * np.max(np.abs(row)):
                print(f"FAIL {a.model}: after {n} tokens draft {j} is {g}, the reference's chain gives {w} "
                      f"(drafts {drafts}, reference {want})")
                ok = False
            break
    print(f"drafts: {compared} compared over {len(got['drafts'])} proposals")
    if compared < a.min_drafts:
        print(f"FAIL {a.model}: only {compared} drafts compared (want >= {a.min_drafts})")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
