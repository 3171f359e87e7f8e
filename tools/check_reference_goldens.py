#!/usr/bin/env python3
"""Validates the numpy reference itself: greedy decoding of the demo model
must reproduce the goldens that llama2.c produced (models/stories260k)."""
import json
import os
import sys

from reference_model import ReferenceModel

model_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "models", "stories260k")
model = ReferenceModel(model_dir)
ok = True
for line in open(os.path.join(model_dir, "golden.jsonl")):
    g = json.loads(line)
    got = model.greedy(g["prompt_token_ids"], len(g["greedy_token_ids"]))
    if got != g["greedy_token_ids"]:
        ok = False
        print(f"FAIL reference on {g['prompt']!r}: {got} != {g['greedy_token_ids']}")
print("reference reproduces the goldens" if ok else "reference is wrong")
sys.exit(0 if ok else 1)
