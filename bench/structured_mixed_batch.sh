#!/usr/bin/env bash
# Issue 21's acceptance line "a constrained request never slows the
# unconstrained requests in its batch by more than the mask cost", as one
# command: `pagoda bench structured --mixed-pairs N` times N interleaved
# pairs of batch-32 decode runs (all rows free vs one row constrained by a
# JSON schema) and prints the free rows' step-time difference beside the
# constrained row's mask cost per step (the same run's walks). Makes the
# Qwen3-0.6B-shape random checkpoint if MODEL_DIR does not exist. Run it on
# a quiet machine: the difference is a few tenths of a millisecond on a
# step of hundreds.
#
#   bench/structured_mixed_batch.sh [MODEL_DIR=/tmp/qwen3-0.6b-random] [pairs=5] [pagoda=./build/pagoda]
set -euo pipefail
model=${1:-/tmp/qwen3-0.6b-random}
pairs=${2:-5}
pagoda=${3:-./build/pagoda}
here=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -e "$model/config.json" ]; then
  /usr/bin/python3 "$here/tools/make_random_checkpoint.py" --out "$model"
fi
echo "load before: $(cat /proc/loadavg)"
"$pagoda" bench structured --model "$model" --walks 4 --max-steps 200 --output-len 16 --max-model-len 512 \
  --kv-cache-memory 1073741824 --mixed-pairs "$pairs"
echo "load after: $(cat /proc/loadavg)"
