#!/usr/bin/env bash
# Minutes-long server checks under hostile clients (slowloris at the default
# deadlines, a 500-stream burst, repeated graceful shutdowns); the fast
# versions run in the normal suite. Usage: scripts/soak.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
[[ -x $dir/pagoda ]] || { echo "soak: build $dir/pagoda first (scripts/build.sh $dir)" >&2; exit 2; }
[[ -d tests/js/node_modules ]] || (cd tests/js && npm ci --silent --no-audit --no-fund)
ulimit -n "$(ulimit -Hn)"  # the test opens hundreds of sockets
PAGODA_BINARY=$PWD/$dir/pagoda PAGODA_MODEL=$PWD/models/stories260k \
  node --test tests/js/server_soak.test.mjs
