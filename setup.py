# The C virtual machine is built by cffi in out-of-line API mode; everything
# else about the package lives in pyproject.toml.
import hashlib
import os
import pathlib
import shutil

import sys

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

# The native tier compiles generated C that includes csrc/'s headers and links
# the kernels (csrc/kernels/*.c): an installed revtape carries them in its
# package, revtape/_csrc/, with the SHA256SUMS the native tier checks before
# it compiles against them (revtape.runtime.native._find_csrc).
NATIVE_SOURCES = ("kernels/kernels.c", "kernels/specfun.c")


class build_py_with_csrc(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return                       # an editable install reads the tree's csrc/
        here = pathlib.Path(__file__).resolve().parent / "csrc"
        dest = pathlib.Path(self.build_lib) / "revtape" / "_csrc"
        shutil.rmtree(dest, ignore_errors=True)
        names = sorted({*(f.relative_to(here).as_posix() for f in here.rglob("*.h")),
                        *NATIVE_SOURCES})
        for name in names:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(here / name, dest / name)
        (dest / "SHA256SUMS").write_text("".join(
            f"{hashlib.sha256((dest / n).read_bytes()).hexdigest()}  {n}\n" for n in names))

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
      ext_modules=[checked],
      cmdclass={"build_py": build_py_with_csrc, "build_ext": StrippedBuildExt},
      options={"bdist_wheel": {"py_limited_api": "cp311"}})
