#!/usr/bin/env bash
# The README's two commands share build/ and may run in either order: the
# test command's configuration, applied over the demo's, registers the full
# test suite (once the demo's PAGODA_BUILD_TESTS=OFF stuck in the cache and
# the Release stage ran no tests yet passed). Configures throwaway build
# directories with scripts/build.sh --configure-only and the commands' own
# options (scripts/build_configs.sh); nothing is compiled. Also: ctest with
# --no-tests=error fails on a tree without tests, and every ctest call in
# scripts/, .ci/, bench/ and tools/ passes that flag.
set -uo pipefail
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# shellcheck source=../../scripts/build_configs.sh
source "$src/scripts/build_configs.sh"

configure() { bash "$src/scripts/build.sh" --configure-only "$@" || fail "configure $*"; }
count() { ctest --test-dir "$1" -N 2>/dev/null | sed -n 's/^Total Tests: \([0-9]*\)$/\1/p'; }

configure "$tmp/fresh" "${PAGODA_TEST_CMAKE_ARGS[@]}"
full=$(count "$tmp/fresh")
[[ -n $full && $full -gt 0 ]] || fail "the test command's configuration registers no tests ('$full')"

configure "$tmp/shared" "${PAGODA_DEMO_CMAKE_ARGS[@]}"
after_demo=$(count "$tmp/shared")
[[ ${after_demo:-0} -eq 0 ]] || fail "the demo's configuration registers $after_demo tests (expected none)"
# What the Release stage would do here: ctest finding no tests must fail.
if (cd "$tmp/shared" && ctest --no-tests=error >"$tmp/ctest.out" 2>&1); then
  fail "ctest --no-tests=error passed on a tree without tests: $(cat "$tmp/ctest.out")"
fi

configure "$tmp/shared" "${PAGODA_TEST_CMAKE_ARGS[@]}"
after_test=$(count "$tmp/shared")
[[ $after_test == "$full" ]] \
  || fail "demo then test configuration registers $after_test tests, a fresh one $full"

# Every ctest run by the test command, CI and the helper scripts fails when
# it finds no tests.
while IFS= read -r line; do
  [[ $line == *--no-tests=error* ]] || fail "ctest without --no-tests=error: $line"
done < <(grep -rn --include='*.sh' --include='*.py' --include='*.mjs' --include=run \
  -E '(^|[^-[:alnum:]_])ctest( |$)' "$src/scripts" "$src/.ci" "$src/bench" "$src/tools" \
  | grep -v -E ':[0-9]+:[[:space:]]*#')

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "README commands: demo then test configuration registers all $full tests"
