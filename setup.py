# The C virtual machine is built by cffi in out-of-line API mode; everything
# else about the package lives in pyproject.toml.
import os

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class StrippedBuildExt(build_ext):
    """Links every extension with its debug info stripped (the interpreter's
    CFLAGS carry -g: 4.7 MB of DWARF in a 1.7 MB wheel otherwise).  The symbol
    table stays, so profilers still name the C functions."""

    def build_extension(self, ext):
        if sys.platform.startswith("linux"):
            ext.extra_link_args = list(ext.extra_link_args or []) + ["-Wl,--strip-debug"]
        super().build_extension(ext)


# The benchmark's hand-written C references are a second, separate module
# (revtape.bench._ref), so the runtime extension exports only the VM.
# revtape._checked is the one module written against the Python C API (the
# limited API of 3.11, one abi3 build for every later Python): the argument
# checks of ctape.value_and_gradient(x, out=g) (csrc/pyext/checked.c).
checked = Extension(
    "revtape._checked", sources=["csrc/pyext/checked.c"], include_dirs=["csrc"],
    depends=["csrc/vm.h", "csrc/generated/ops_generated.h"],
    define_macros=[("Py_LIMITED_API", "0x030B0000")], py_limited_api=True,
    extra_compile_args=[] if os.name == "nt" else ["-O2", "-std=c99"],
    libraries=[] if os.name == "nt" else ["dl"])

# One wheel for every Python from 3.11 on: all three modules use the limited
# API only (cffi builds its modules with py_limited_api by default), so the
# wheel is tagged cp311-abi3 (docs/release.md).
setup(cffi_modules=["src/revtape/_build_vm.py:ffibuilder",
                    "src/revtape/bench/_build_ref.py:ffibuilder"],
      ext_modules=[checked], cmdclass={"build_ext": StrippedBuildExt},
      options={"bdist_wheel": {"py_limited_api": "cp311"}})
