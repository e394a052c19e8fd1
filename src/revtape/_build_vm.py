"""cffi build script (out-of-line API mode), run by setup.py through cffi_modules.

It compiles the VM's C sources (csrc/: SOURCES) into the extension module ``revtape._vm``.  The cdef is
read from the C headers themselves (preprocessor lines dropped), so the C
declarations are written once; cffi's compile step then checks them against
the real headers.
"""

import os
import pathlib
import re

from cffi import FFI

CSRC = pathlib.Path(__file__).resolve().parents[2] / "csrc"
HEADERS = ["vm.h", "compile/tapeflow.h"]
# the VM first: its sweeps lead .text.hot (vm/internal.h: RT_HOT)
SOURCES = ["vm/sweeps.c", "vm/scalar_path.c", "vm/blocks.c", "vm/verify.c", "vm/entry.c",
           "vm/hot.c", "vm/batch.c", "vm/soa.c",
           "kernels/kernels.c", "kernels/specfun.c", "kernels/blas.c", "instr/linalg/linalg.c",
           "compile/tapeflow.c", "runtime/pool.c", "runtime/par.c"]


def _cdef_from_header(text):
    keep = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("#"):
            # cffi understands "#define NAME <integer>" only
            if re.match(r"#define\s+\w+\s+(0x[0-9a-fA-F]+|\d+)\s*$", s):
                keep.append(s)
            continue
        keep.append(line)
    return "\n".join(keep)


def _abi_block():
    """The word layout and statuses of ops_generated.h (generated from isa.py):
    the block between its ABI markers is plain cdef-able C."""
    text = (CSRC / "generated" / "ops_generated.h").read_text()
    begin = "/* ---- ABI constants"
    return _cdef_from_header(text[text.index(begin):text.index("/* ---- end of ABI constants")])


ffibuilder = FFI()
ffibuilder.cdef(_abi_block())
ffibuilder.cdef("\n".join(_cdef_from_header((CSRC / h).read_text()) for h in HEADERS))
# The one function the VM calls back into: cffi generates it (API mode) and it
# re-acquires the GIL around the Python handler registered with
# ffi.def_extern (primitives.py); the C code only ever sees a function pointer.
ffibuilder.cdef('extern "Python" int rt_py_callback(void *ctx, int32_t mode, int64_t pc);')
# ctape.bind's one-call path reports a hot program through this (runtime/handoff.py).
ffibuilder.cdef('extern "Python" void rt_py_hot(void *ctx);')
ffibuilder.set_source(
    "revtape._vm",
    "\n".join(f'#include "{h}"' for h in HEADERS),
    # setuptools insists on paths relative to setup.py's directory
    sources=[os.path.relpath(CSRC / s) for s in SOURCES],
    include_dirs=[os.path.relpath(CSRC)],
    # a header-only change (csrc/instr/*.h, csrc/generated/ops_generated.h) rebuilds too
    depends=sorted(os.path.relpath(h) for h in CSRC.rglob("*.h")),
    extra_compile_args=["-O2", "-std=c99", "-fno-math-errno", "-D_DEFAULT_SOURCE",
                        "-DRT_WITH_POOL",    # kernels.c splits large arrays (par.h)
                        "-DRT_VM_BLAS"],     # MATMUL may call BLAS (kernels/blas.h); native code never does
    libraries=["m"] + ([] if os.name == "nt" else ["pthread"]),   # pool.c
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
