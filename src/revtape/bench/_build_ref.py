"""cffi build script for ``revtape.bench._ref``: the benchmark's hand-written C
value-and-gradient references (csrc/bench/reference.c), run by setup.py through
cffi_modules beside the runtime's ``revtape._vm``.  They live in their own
extension so the runtime exports nothing that only the benchmark uses."""

import os
import pathlib

from cffi import FFI

CSRC = pathlib.Path(__file__).resolve().parents[3] / "csrc" / "bench"


def _cdef(text):
    return "\n".join(line for line in text.splitlines() if not line.strip().startswith("#"))


ffibuilder = FFI()
ffibuilder.cdef(_cdef((CSRC / "reference.h").read_text()))
ffibuilder.set_source(
    "revtape.bench._ref",
    '#include "reference.h"',
    # setuptools insists on paths relative to setup.py's directory
    sources=[os.path.relpath(CSRC / "reference.c")],
    include_dirs=[os.path.relpath(CSRC)],
    # -O2 as "what a human would write and compile"; no -ffast-math, so results
    # compare to numpy to the last few ulps
    extra_compile_args=["-O2", "-std=c99", "-fno-math-errno", "-D_DEFAULT_SOURCE"],
    libraries=["m"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
