#!/usr/bin/env python3
"""Checks the prompt_logprobs of `pagoda generate --json --prompt-logprobs N`
against the numpy reference's logits at every prompt position.

For prompt position k >= 1 the reference's log_softmax of the logits at
position k - 1 (float64) gives the prompt token's logprob, its rank (how
many ids have a logit >= its own, vLLM's count) and the top N. Pagoda's
logits carry f32 rounding, so values are compared within a tolerance of
rtol * max|reference logit| of the row (twice that for a logprob, which
also carries the normalizer's error), and ranks and the top N only up to
ids whose reference logits are that close (near-ties may order either way).
Use f32 checkpoints: the reference is not told about bf16 activations.
"""
import argparse
import json
import sys

import numpy as np

from compare_logits import reference_for


def log_softmax(row):
    mx = np.max(row)
    return row - (mx + np.log(np.sum(np.exp(row - mx))))


def check_entry(k, entry, token, row, n, rtol):
    """Problems with Pagoda's entry for prompt position k, as strings."""
    tol = rtol * np.max(np.abs(row))
    lp = log_softmax(row)
    problems = []
    if str(token) not in entry:
        return [f"position {k}: no entry for the prompt token {token}"]
    got = entry[str(token)]
    if abs(got["logprob"] - lp[token]) > 2 * tol:
        problems.append(f"position {k}: logprob {got['logprob']} vs reference {lp[token]:.6f}")
    # In the top N the prompt token's entry holds its top-N place (vLLM's
    # dict keeps the later value); outside it, its own rank, which is > N.
    in_top = got["rank"] <= n
    top = sorted((e["rank"], int(i)) for i, e in entry.items() if int(i) != token or in_top)
    # The rank may fall anywhere among ids tied with the token within tol.
    lo = int(np.sum(row > row[token] + tol)) + 1
    hi = int(np.sum(row >= row[token] - tol))
    if not (lo <= got["rank"] <= hi):
        problems.append(f"position {k}: rank {got['rank']} outside the reference's [{lo}, {hi}]")
    ranked = sorted(row, reverse=True)
    if [r for r, _ in top] != list(range(1, n + 1)):
        problems.append(f"position {k}: top ranks {[r for r, _ in top]}, want 1..{n}")
    for r, i in top:
        # The r-th listed id must be as likely as the reference's r-th best.
        if abs(row[i] - ranked[r - 1]) > tol:
            problems.append(f"position {k}: rank {r} is id {i} (logit {row[i]:.6f}), "
                            f"reference's rank {r} logit is {ranked[r - 1]:.6f}")
        if abs(entry[str(i)]["logprob"] - lp[i]) > 2 * tol:
            problems.append(f"position {k}: id {i} logprob {entry[str(i)]['logprob']} vs {lp[i]:.6f}")
    expected_keys = n + (0 if in_top else 1)
    if len(entry) != expected_keys:
        problems.append(f"position {k}: {len(entry)} entries, want {expected_keys}")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--pagoda-json", required=True, help="one line of `pagoda generate --json` output")
    ap.add_argument("--top-n", type=int, required=True, help="the --prompt-logprobs N it ran with")
    ap.add_argument("--rtol", type=float, default=1e-4)
    a = ap.parse_args()
    got = json.loads(open(a.pagoda_json).readline())
    ids, pl = got["prompt_token_ids"], got.get("prompt_logprobs")
    if pl is None or len(pl) != len(ids) or pl[0] is not None:
        print(f"FAIL {a.model}: prompt_logprobs {pl!r:.200} for {len(ids)} prompt tokens")
        return 1
    ref = reference_for(a.model).logits(ids)
    problems = []
    for k in range(1, len(ids)):
        problems += check_entry(k, pl[k], ids[k], np.asarray(ref[k - 1], dtype=np.float64), a.top_n, a.rtol)
    for p in problems[:10]:
        print(f"FAIL {a.model}: {p}")
    if not problems:
        print(f"ok {a.model}: prompt logprobs at {len(ids) - 1} positions (top {a.top_n}) match the reference")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
