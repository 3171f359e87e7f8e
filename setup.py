"""Builds and installs the `pagoda` Python package:

    python3 -m venv --system-site-packages .venv
    .venv/bin/pip install --no-build-isolation --no-index .

Debian's setuptools drives this project's CMake build of the pybind11
module (target _pagoda, python/pagoda/_pagoda.cpp); nothing is fetched.
PAGODA_CMAKE_BUILD_DIR names an existing CMake build tree to build the
module in instead of a fresh one (the tests reuse the tree they run from);
CMAKE_CXX_COMPILER_LAUNCHER=ccache is passed on to CMake as usual."""

import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCE_DIR = os.path.dirname(os.path.abspath(__file__))
REUSED_TREE = os.environ.get("PAGODA_CMAKE_BUILD_DIR")


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if REUSED_TREE:
            tree = os.path.abspath(REUSED_TREE)
        else:
            tree = os.path.abspath(os.path.join(self.build_temp, "cmake"))
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            subprocess.check_call(["cmake", "-S", SOURCE_DIR, "-B", tree, *generator,
                                   "-DCMAKE_BUILD_TYPE=Release", "-DPAGODA_BUILD_TESTS=OFF",
                                   "-DPAGODA_BUILD_PYTHON=ON",
                                   f"-DPython3_EXECUTABLE={sys.executable}"])
        subprocess.check_call(["cmake", "--build", tree, "--target", "_pagoda",
                               "--parallel", str(os.cpu_count() or 1)])
        built = glob.glob(os.path.join(tree, "python", "_pagoda*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one _pagoda module in {tree}/python, found {built}")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built[0], dest)


# Out of the way of the CMake trees in build*/ (in a reused tree, under it).
options = {"build": {"build_base": "build-python"}}
if REUSED_TREE:
    base = os.path.join(os.path.abspath(REUSED_TREE), "setuptools")
    os.makedirs(base, exist_ok=True)
    options = {"build": {"build_base": base}, "egg_info": {"egg_base": base}}

setup(
    packages=["pagoda"],
    package_dir={"": "python"},
    ext_modules=[CMakeExtension("pagoda._pagoda")],
    cmdclass={"build_ext": CMakeBuild},
    options=options,
)
