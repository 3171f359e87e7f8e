#!/usr/bin/env bash
# Configures and builds into a build directory:
#   build.sh [--configure-only] [BUILD_DIR] [extra cmake args...]
# --configure-only stops after CMake (tests/e2e/test_readme_commands.sh
# checks what the README commands configure without building twice).
set -euo pipefail
cd "$(dirname "$0")/.."
configure_only=0
if [[ ${1:-} == --configure-only ]]; then
  configure_only=1
  shift
fi
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
[[ $configure_only -eq 1 ]] || ninja -C "$dir" -j"$(nproc)"
