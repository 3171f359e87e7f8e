#!/usr/bin/env bash
# A build without MPI refuses --tensor-parallel-size > 1 with exit code 2
# and says why.
set -uo pipefail
out=$("$1" generate --model "$2/models/stories260k" --prompt hi --tp 2 2>&1)
code=$?
[[ $code -eq 2 ]] || { echo "FAIL: exit code $code: $out"; exit 1; }
grep -q "built without MPI" <<<"$out" || { echo "FAIL: message: $out"; exit 1; }
echo "ok: $out"
