#!/usr/bin/env bash
# ctest python_package: run.sh BUILD_DIR SOURCE_DIR PAGODA_BINARY
# A fresh venv, the package installed with the README's command (pip
# offline, Debian's setuptools; PAGODA_CMAKE_BUILD_DIR makes setup.py build
# the module in this CMake tree, already built, rather than a second tree
# from scratch), then pytest from outside the source tree so `import pagoda`
# is the installed package.
set -euo pipefail
build=$(realpath "$1")
src=$(realpath "$2")
pagoda=$(realpath "$3")
venv=$build/python-test-venv
rm -rf "$venv"
/usr/bin/python3 -m venv --system-site-packages "$venv"
PAGODA_CMAKE_BUILD_DIR=$build "$venv/bin/pip" install --no-build-isolation --no-index --quiet --no-cache-dir \
  --disable-pip-version-check "$src"
cd "$build"
PAGODA_BINARY=$pagoda PAGODA_SOURCE_DIR=$src "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  "$src/tests/python"
