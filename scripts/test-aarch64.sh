#!/usr/bin/env bash
# Builds Pagoda for AArch64 with Debian's cross compiler and runs its tests
# under qemu-user: the unit tests (every ISA's kernels against the scalar
# reference, the stories260k goldens through the engine) on a CPU model
# with the dot-product and BF16 extensions (-cpu max: the neon, neondot and
# neonbf16 kernels all run), the kernel and golden tests again on one
# without them (cortex-a53: plain NEON, so detection falls back), and the
# `pagoda` binary's greedy stories260k output against the goldens with every
# --isa the CPU model has. Not part of scripts/test.sh: emulation makes it
# slow (README "AArch64" says how slow). Speed on real ARM hardware cannot
# be measured here.
#   scripts/test-aarch64.sh [BUILD_DIR]   (default build-aarch64)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-aarch64}

# Host tools (cmake, ninja, the oracles of the tokenizer tests) and the
# amd64 packages whose headers the cross build shares.
bash scripts/setup.sh --test

# The cross compiler, qemu-user, and the arm64 libraries from Debian
# multiarch (header-only dependencies come from the host packages).
# libhttp-parser-dev is not multiarch: its arm64 runtime library with the
# host's header (cmake/aarch64-linux-gnu.cmake).
arm64=(libfmt-dev:arm64 libpcre2-dev:arm64 libicu-dev:arm64 libhttp-parser2.9:arm64
       libgtest-dev:arm64 libgmock-dev:arm64 libgomp1:arm64 libstdc++6:arm64)
host=(g++-aarch64-linux-gnu qemu-user)
as_root=()
[[ $(id -u) -ne 0 ]] && as_root=(sudo)
missing=()
for p in "${host[@]}" "${arm64[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if (( ${#missing[@]} )); then
  echo "test-aarch64: installing ${missing[*]}"
  dpkg --print-foreign-architectures | grep -qx arm64 || "${as_root[@]}" dpkg --add-architecture arm64
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

echo "== cross build ($dir)"
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGODA_BUILD_TESTS=ON \
  -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DPAGODA_WITH_MPI=OFF >/dev/null
ninja -C "$dir" -j"$(nproc)"

qemu=(qemu-aarch64 -L /)
failures=0

echo "== unit tests, -cpu max (neon, neondot, neonbf16)"
# Not under emulation: QuantizedModel.EmbeddingLookupsLeaveNoPageMapped
# counts the checkpoint pages the kernel keeps mapped, which depends on
# MADV_RANDOM splitting the embedding table's mapping off (fault-around
# stops at its end); qemu-user (7.2) accepts MADV_RANDOM without passing it
# on, so reads of the table's last rows map the next tensor's pages too.
# Nor the WeightStore tests ReleasedRowsLeaveTheNeighbouringTensorsMapped,
# CopiesOfAHugePageOrMoreGetTheirOwnHugePageMapping and
# RepackedMatricesShareHugePageSlabs: they read the
# kernel's page state of the process (/proc/self/pagemap's present bits,
# smaps' VmFlags), under qemu-user the emulator's process with its own
# mappings and advice, not what a native aarch64 run would see.
not_under_qemu='QuantizedModel\.EmbeddingLookupsLeaveNoPageMapped|WeightStore\.ReleasedRowsLeaveTheNeighbouringTensorsMapped|WeightStore\.CopiesOfAHugePageOrMoreGetTheirOwnHugePageMapping|WeightStore\.RepackedMatricesShareHugePageSlabs'
echo "(left out under qemu-user: $not_under_qemu; they run in scripts/test.sh)"
(cd "$dir" && QEMU_CPU=max ctest --no-tests=error --output-on-failure -j"$(nproc)" -L unit \
  -E "$not_under_qemu" --timeout 1800) || failures=$((failures + 1))

echo "== kernel and golden tests, -cpu cortex-a53 (neon only)"
# gtest's own filter: the ops tests and the engine's golden generations.
for t in "ops:*" "engine:Generate*"; do
  QEMU_CPU=cortex-a53 "${qemu[@]}" "$dir/tests/test_${t%%:*}" --gtest_brief=1 \
    --gtest_filter="${t#*:}" || failures=$((failures + 1))
done

echo "== pagoda generate: stories260k goldens on every --isa"
model=models/stories260k
golden=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["text"])' \
  "$model/golden.jsonl")
check_cli() {  # cpu model, isa, model dir
  local out
  out=$(QEMU_CPU=$1 "${qemu[@]}" "$dir/pagoda" generate --model "$3" --prompt "Once upon a time" \
    --max-tokens 64 --temperature 0 --isa "$2" 2>/dev/null) || {
    echo "FAIL: -cpu $1 --isa $2 $3 exited $?"; failures=$((failures + 1)); return; }
  if [[ $out == "Once upon a time$golden" ]]; then
    echo "ok: -cpu $1 --isa $2 $3"
  else
    echo "FAIL: -cpu $1 --isa $2 $3: $out"; failures=$((failures + 1))
  fi
}
for isa in scalar neon neondot neonbf16; do
  check_cli max "$isa" "$model"
  check_cli max "$isa" tests/data/stories260k-bf16
done
check_cli cortex-a53 neon "$model"
# A variant the CPU model lacks is a usage error (exit 2), as on x86.
for isa in neondot avx2; do
  status=0
  QEMU_CPU=cortex-a53 "${qemu[@]}" "$dir/pagoda" generate --model "$model" --prompt hi \
    --isa "$isa" >/dev/null 2>&1 || status=$?
  if [[ $status -eq 2 ]]; then
    echo "ok: -cpu cortex-a53 --isa $isa refused"
  else
    echo "FAIL: -cpu cortex-a53 --isa $isa exited $status, expected 2"; failures=$((failures + 1))
  fi
done

if (( failures )); then
  echo "test-aarch64: $failures failed"
  exit 1
fi
echo "test-aarch64: all passed"
