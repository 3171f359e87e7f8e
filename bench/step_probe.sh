#!/usr/bin/env bash
# Per-step timeline of a pagoda run with no rebuild: uprobes on
# LLMEngine::step and ModelRunner::execute (a step's forward pass) of a
# private copy of the binary (a uprobe belongs to a file, so nobody else
# running the original is traced), then bench/step_probe.py's summary.
# Needs root (perf probe).
#
#   bench/step_probe.sh BINARY OUT.data ARGS...   runs the copy with ARGS under perf record
#   bench/step_probe.sh BINARY                    only sets up the copy and its probes (for a
#                                                 server: start the printed copy, then
#                                                 perf record -e 'probe_pagoda:*' -o OUT.data -p PID)
#   python3 bench/step_probe.py OUT.data...       summaries
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:?usage: bench/step_probe.sh BINARY [OUT.data ARGS...]}
copy=/tmp/pagoda-step-probe/pagoda
mkdir -p "$(dirname "$copy")"
perf probe -q -d 'probe_pagoda:*' 2>/dev/null || true
cp "$bin" "$copy"
addr() { nm -C "$copy" | awk -v s="$1" '$2 == "T" && substr($0, 20) == s { print "0x" $1 }'; }
step=$(addr 'pagoda::LLMEngine::step()')
execute=$(addr 'pagoda::ModelRunner::execute(pagoda::SchedulerOutput const&, pagoda::StepLogits*)')
[[ -n $step && -n $execute ]] || { echo "step_probe: symbols not found in $bin" >&2; exit 1; }
for p in "stepin=$step" "stepout=$step%return" "exin=$execute" "exout=$execute%return"; do
  perf probe -q -x "$copy" -a "$p"
done
echo "probes on $copy" >&2
(($# >= 3)) || exit 0
out=$2
shift 2
perf record -q -e 'probe_pagoda:*' -o "$out" -- "$copy" "$@"
python3 "$here/step_probe.py" "$out"
