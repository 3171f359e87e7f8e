#!/usr/bin/env bash
# Installs dependencies, builds Pagoda and generates a story with the demo
# model that ships in models/stories260k.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/build_configs.sh
bash scripts/setup.sh
bash scripts/build.sh build "${PAGODA_DEMO_CMAKE_ARGS[@]}"
./build/pagoda generate --model models/stories260k --prompt "Once upon a time" \
  --max-tokens 64 --temperature 0 "$@"
