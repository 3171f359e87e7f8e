#!/usr/bin/env bash
# Installs what Pagoda needs from Debian packages (with --test also the test
# tools, Open MPI, the Python package's build tools and the pinned npm test
# oracles; with --mpi Open MPI for tensor parallelism; with --python what
# `pip install .` of the Python package needs). Idempotent and quiet when
# everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."

want_tests=0
want_mpi=0
want_python=0
for arg in "$@"; do
  case $arg in
    --test) want_tests=1 want_mpi=1 want_python=1 ;;
    --mpi) want_mpi=1 ;;
    --python) want_python=1 ;;
    *) echo "usage: $0 [--test] [--mpi] [--python]" >&2; exit 2 ;;
  esac
done

packages=(g++ cmake ninja-build pkg-config nlohmann-json3-dev libpcre2-dev libcli11-dev
          libfmt-dev libspdlog-dev libxxhash-dev libicu-dev libhttp-parser-dev)
if (( want_tests )); then
  packages+=(libgtest-dev libgmock-dev python3-numpy python3-jinja2 python3-pytest clang libomp-dev)
  command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)
fi
# Tensor parallelism across processes (the tensor-parallel tests fail without).
(( want_mpi )) && packages+=(libopenmpi-dev openmpi-bin)
# The Python package (python/pagoda): pybind11 module, venv, offline pip.
(( want_python )) && packages+=(python3-dev pybind11-dev python3-venv python3-setuptools python3-wheel)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if (( ${#missing[@]} )); then
  echo "setup: installing ${missing[*]}"
  apt_get=(apt-get)
  [[ $(id -u) -ne 0 ]] && apt_get=(sudo apt-get)
  "${apt_get[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive "${apt_get[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if (( want_tests )) && [[ -f tests/js/package-lock.json ]]; then
  if [[ ! -d tests/js/node_modules ]] || [[ tests/js/package-lock.json -nt tests/js/node_modules ]]; then
    echo "setup: npm ci (tests/js)"
    (cd tests/js && npm ci --silent --no-audit --no-fund)
  fi
fi
