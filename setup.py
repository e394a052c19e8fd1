# The C virtual machine is built by cffi in out-of-line API mode; everything
# else about the package lives in pyproject.toml.
from setuptools import setup

# The benchmark's hand-written C references are a second, separate module
# (revtape.bench._ref), so the runtime extension exports only the VM.
setup(cffi_modules=["src/revtape/_build_vm.py:ffibuilder",
                    "src/revtape/bench/_build_ref.py:ffibuilder"])
