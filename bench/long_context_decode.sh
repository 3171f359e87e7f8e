#!/usr/bin/env bash
# Decode ms/token at long contexts for a DeepSeek V3.2 checkpoint: sparse
# (its index_topk), dense (the same weights with index_topk raised past the
# context, in a copy of the config next to symlinks of the weights) and V3
# (the same weights as DeepseekV3ForCausalLM: dense MLA, no indexer), in
# interleaved rounds so the VM's bandwidth swings hit every model alike.
# One JSON per run in OUT (bench latency --context-len --json); see
# bench/long_context_decode.md.
#   bench/long_context_decode.sh V32_DIR OUT [rounds] [contexts...]
set -euo pipefail
src=$1 out=$2 rounds=${3:-3}
shift 3 || shift $#
contexts=("${@:-256 4096 16384 65536}")
read -r -a contexts <<<"${contexts[*]}"
pagoda=${PAGODA:-./build/pagoda}
mkdir -p "$out"
variant() {  # variant DIR EDIT: a copy of the config, symlinks to the rest
  local dir=$1 edit=$2
  mkdir -p "$dir"
  for f in "$src"/*; do [[ $(basename "$f") == config.json ]] || ln -sf "$(realpath "$f")" "$dir/"; done
  /usr/bin/python3 -c "import json, sys; c = json.load(open(sys.argv[1])); $edit; json.dump(c, open(sys.argv[2], 'w'), indent=2)" \
    "$src/config.json" "$dir/config.json"
}
variant "$out/v3" "c.update(architectures=['DeepseekV3ForCausalLM'], model_type='deepseek_v3'); [c.pop(k) for k in ('index_n_heads', 'index_head_dim', 'index_topk')]"
max=0
for n in "${contexts[@]}"; do ((n > max)) && max=$n; done
for n in "${contexts[@]}"; do variant "$out/dense$n" "c['index_topk'] = $n + 64"; done
for ((r = 1; r <= rounds; r++)); do
  for n in "${contexts[@]}"; do
    for v in sparse dense v3; do
      case $v in sparse) m=$src ;; dense) m=$out/dense$n ;; v3) m=$out/v3 ;; esac
      echo "round $r $v $n, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
      "$pagoda" bench latency --model "$m" --context-len "$n" --output-len 16 --repeats 3 --warmup 1 \
        --max-model-len $((max + 64)) --kv-cache-memory 1000000000 --json 2>/dev/null >"$out/$r-$v-$n.json"
    done
  done
done
# The table of bench/long_context_decode.md: medians over the rounds; the
# excess over each model's shortest context.
/usr/bin/python3 - "$out" <<'PY'
import glob, json, statistics, sys
rows = {}
for f in glob.glob(f"{sys.argv[1]}/*-*-*.json"):
    r, v, n = f.split("/")[-1][:-5].split("-")
    rows.setdefault((v, int(n)), []).append(json.load(open(f)))
print("| model | context | ms/token (rounds) | beyond shortest | KV held/seq MiB | kv-plan MiB | KV read/token MiB | of bandwidth roofline | read GB/s |")
print("|---|---|---|---|---|---|---|---|---|")
for v in ("sparse", "dense", "v3"):
    keys = sorted(n for (w, n) in rows if w == v)
    med = {n: statistics.median(j["decode_ms_per_step"] for j in rows[(v, n)]) for n in keys}
    for n in keys:
        js = rows[(v, n)]
        print(f"| {v} | {n} | {med[n]:.1f} ({', '.join('%.1f' % j['decode_ms_per_step'] for j in js)}) | "
              f"{med[n] - med[keys[0]]:+.1f} | {js[0]['kv_bytes_per_sequence'] / 2**20:.1f} | "
              f"{js[0]['kv_plan_bytes_per_sequence'] / 2**20:.1f} | {js[0]['kv_read_bytes_per_token'] / 2**20:.1f} | "
              f"{statistics.median(j['decode_fraction_of_roofline'] for j in js) * 100:.0f}% | "
              f"{', '.join('%.0f' % j['roofline']['read_gb_per_s'] for j in js)} |")
PY
