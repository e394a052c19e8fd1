# The C virtual machine is built by cffi in out-of-line API mode; everything
# else about the package lives in pyproject.toml.
from setuptools import setup

setup(cffi_modules=["src/revtape/_build_vm.py:ffibuilder"])
