#!/usr/bin/env bash
# Single-stream decode with and without speculative decoding (n-gram by
# default, or the config given: a draft model), in interleaved pairs
# (plain, then speculative, same flags): `pagoda bench latency --json` on a
# workload, printing each pair's decode tokens/s, the speed-up, ms per step,
# the drafts' acceptance and each step's forward time in the target and in
# the proposer's model.
#
#   bench/speculative_decoding.sh MODEL_DIR WORKLOAD [pairs=3] [speculative config] [pagoda]
# WORKLOAD: editing  (--prompt-period 16: the prompt repeats a 16-token
#                     text, which the random model's greedy output repeats)
#           rejected (--prompt-alphabet 8 --temperature 0.8 --output-len 48:
#                     drafts are proposed but almost never accepted; longer
#                     sampled outputs of the random model start to loop)
# e.g. bench/speculative_decoding.sh /tmp/qwen3-0.6b-random editing
#      bench/speculative_decoding.sh /tmp/qwen3-0.6b-random editing 2 \
#        '{"method": "draft_model", "model": "DRAFT", "num_speculative_tokens": 3}'
#      (DRAFT: tools/cut_checkpoint_layers.py --src MODEL_DIR --out DRAFT --layers 2)
set -euo pipefail
model=${1:?usage: bench/speculative_decoding.sh MODEL_DIR WORKLOAD [pairs] [config] [pagoda]}
workload=${2:?editing or rejected}
pairs=${3:-3}
config=${4:-'{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 1}'}
pagoda=${5:-./build/pagoda}
case $workload in
  editing) flags=(--prompt-period 16 --output-len 128) ;;
  rejected) flags=(--prompt-alphabet 8 --temperature 0.8 --output-len 48) ;;
  *) echo "unknown workload $workload" >&2; exit 2 ;;
esac
common=(bench latency --model "$model" --max-model-len 1024 --kv-cache-memory 1000000000
        --input-len 128 --repeats 2 --warmup 1 --no-roofline --json "${flags[@]}")
echo "load before: $(cat /proc/loadavg)"
for ((i = 1; i <= pairs; ++i)); do
  plain=$("$pagoda" "${common[@]}" 2>/dev/null | tail -1)
  spec=$("$pagoda" "${common[@]}" --speculative-config "$config" 2>/dev/null | tail -1)
  /usr/bin/python3 - "$plain" "$spec" <<'PY'
import json, sys
p, s = (json.loads(a) for a in sys.argv[1:3])
sp = s["speculative"]
print(f"plain {p['decode_tokens_per_s']:.2f} tok/s ({p['decode_ms_per_step']:.1f} ms/step) | "
      f"speculative {s['decode_tokens_per_s']:.2f} tok/s ({s['decode_ms_per_step']:.1f} ms/step) | "
      f"speed-up {s['decode_tokens_per_s'] / p['decode_tokens_per_s']:.2f}x | "
      f"acceptance {100 * sp['acceptance_rate']:.1f}%, {sp['num_drafts']} drafts, "
      f"mean length {sp['mean_acceptance_length']:.2f} (break-even {sp.get('break_even_tokens_per_step', float('nan')):.2f}), per position "
      f"{[round(x, 2) for x in sp['acceptance_per_position']]} | forward per step: target "
      f"{sp['target_ms_per_step']:.1f} ms, proposer {sp['proposer_ms_per_step']:.1f} ms")
PY
done
echo "load after: $(cat /proc/loadavg)"
