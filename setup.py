# The C virtual machine is built by cffi in out-of-line API mode; everything
# else about the package lives in pyproject.toml.
import os

from setuptools import Extension, setup

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

setup(cffi_modules=["src/revtape/_build_vm.py:ffibuilder",
                    "src/revtape/bench/_build_ref.py:ffibuilder"],
      ext_modules=[checked])
