#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite: every test
# in a Release build (g++), again under AddressSanitizer +
# UndefinedBehaviorSanitizer, and the unit tests of a clang build.
# Every ctest call passes --no-tests=error: a stage that finds no tests
# (a build configured without them) fails instead of passing silently.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/build_configs.sh
bash scripts/setup.sh --test

echo "== Release build and all tests"
bash scripts/build.sh build "${PAGODA_TEST_CMAKE_ARGS[@]}"
(cd build && ctest --no-tests=error --output-on-failure -j2 --timeout 900)

echo "== ASan + UBSan build and all tests"
bash scripts/build.sh build-asan "${PAGODA_TEST_CMAKE_ARGS[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPAGODA_SANITIZE=ON
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --no-tests=error --output-on-failure -j2 --timeout 900)

echo "== clang build and unit tests"
CXX=clang++ bash scripts/build.sh build-clang "${PAGODA_TEST_CMAKE_ARGS[@]}"
(cd build-clang && ctest --no-tests=error --output-on-failure -j2 -L unit --timeout 900)
