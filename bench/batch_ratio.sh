#!/usr/bin/env bash
# Batched decode speed-up over the single stream, measured in interleaved
# pairs: a single stream (--input-len 128 --output-len 128) then a batch of B
# (--input-len 128 --output-len 32), each `pagoda bench latency --json` with
# its own roofline probes. A ratio is only meaningful between runs taken in
# the same machine state (a shared host's read bandwidth can change by 2x
# within minutes), hence pairs; each pair also prints the ceiling the two
# rooflines put on the ratio: the batch at the linears' peak over the single
# stream at the read bandwidth.
#
#   bench/batch_ratio.sh MODEL_DIR [pairs=3] [batch=32] [pagoda binary]
# e.g. bench/batch_ratio.sh /tmp/qwen3-0.6b-random (tools/make_random_checkpoint.py)
set -euo pipefail
model=${1:?usage: bench/batch_ratio.sh MODEL_DIR [pairs] [batch] [pagoda binary]}
pairs=${2:-3}
batch=${3:-32}
pagoda=${4:-./build/pagoda}
common=(bench latency --model "$model" --max-model-len 1024 --repeats 5 --json)

for ((i = 1; i <= pairs; ++i)); do
  single=$("$pagoda" "${common[@]}" --kv-cache-memory 800000000 --input-len 128 --output-len 128)
  batched=$("$pagoda" "${common[@]}" --kv-cache-memory 1200000000 --input-len 128 \
    --output-len 32 --batch "$batch")
  python3 - "$single" "$batched" <<'EOF'
import json, sys
s, b = (json.loads(a.splitlines()[-1]) for a in sys.argv[1:3])
ratio = b["decode_tokens_per_s"] / s["decode_tokens_per_s"]
# Roofline tokens/s of each run: rows per step over the roofline's step time.
ceiling = (b["batch"] / b["decode_roofline_ms_per_step"]) / (1 / s["decode_roofline_ms_per_step"])
print(f"single {s['decode_tokens_per_s']:.1f} tok/s (read {s['roofline']['read_gb_per_s']:.1f} GB/s, "
      f"{100 * s['decode_fraction_of_roofline']:.1f}% of roofline) | batch {b['batch']} "
      f"{b['decode_tokens_per_s']:.1f} tok/s ({b['decode_ms_per_step']:.1f} ms/step, "
      f"{100 * b['decode_fraction_of_roofline']:.1f}% of roofline, "
      f"{100 * b['decode_fraction_of_linear_peak']:.1f}% of the compute bound at "
      f"{b['roofline']['bf16_gflops']:.0f} GFLOP/s bf16) | ratio {ratio:.2f}x, "
      f"roofline ceiling {ceiling:.2f}x")
EOF
done
