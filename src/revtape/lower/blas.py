"""BLAS and LAPACK for the large matrix instructions, handed to the VM once.

The VM links no BLAS (csrc/kernels/blas.h).  Where scipy is installed,
``scipy.linalg.cython_blas`` and ``cython_lapack`` export their routines as
PyCapsules holding C function pointers (LP64 Fortran signatures); the first
compile that has a large matrix instruction reads the capsules, checks each
one's signature and hands the non-NULL pointers to the VM's slots
(``rt_blas_set``), once per process.  The compiler then marks an instruction
for BLAS (MATMUL's fourth int, the linear-algebra flags bit RT_LA_BLAS) only
when the VM holds every routine that instruction calls and the instruction is
large enough to gain (the thresholds below, measured on the bench's sizes).
A program's path is therefore fixed when it is compiled, and the native tier
leaves such an instruction to the VM's sweep, so every tier runs it alike.

``REVTAPE_BLAS=off`` (read at each compile) marks nothing: the hand kernels;
``REVTAPE_BLAS=all`` marks every size (the tests run the linear-algebra
suites through both paths with it).
The routines run with BLAS's own threads as the user configured them
(OPENBLAS_NUM_THREADS for scipy's OpenBLAS); revtape sets none.

numpy's wheels also carry an OpenBLAS (ILP64, symbols ``scipy_dgemm_64_``
...), but reaching it means naming a file inside numpy's wheel and a symbol
suffix of one build; without scipy the hand kernels run.
"""

import ctypes
import re
import threading

import numpy as np

from .. import config
from .._vm import ffi, lib
from ..core import isa

# The VM's slot numbers (csrc/vm.h: rt_blas_set), and which scipy module
# exports each routine with which signature (scipy's typedef of double
# written as d).
SLOTS = ("dgemm", "dtrsm", "dtrmm", "dpotrf", "dgetrf", "dsyevd", "dsygst")
_SIGNATURES = {
    "dgemm": ("blas", "void (char *, char *, int *, int *, int *, d *, d *, int *, d *, int *, "
                      "d *, d *, int *)"),
    "dtrsm": ("blas", "void (char *, char *, char *, char *, int *, int *, d *, d *, int *, d *, "
                      "int *)"),
    "dtrmm": ("blas", "void (char *, char *, char *, char *, int *, int *, d *, d *, int *, d *, "
                      "int *)"),
    "dpotrf": ("lapack", "void (char *, int *, d *, int *, int *)"),
    "dgetrf": ("lapack", "void (int *, int *, d *, int *, int *, int *)"),
    "dsygst": ("lapack", "void (int *, char *, int *, d *, int *, d *, int *, int *)"),
    "dsyevd": ("lapack", "void (char *, char *, int *, d *, int *, d *, d *, int *, int *, int *, "
                         "int *)"),
}

# Which routines each instruction calls on its BLAS path (csrc/instr/matmul.h,
# csrc/instr/linalg/lapack.h); it is marked only when the VM holds them all.
NEEDS = {
    "MATMUL": ("dgemm",),
    "CHOLESKY": ("dpotrf", "dtrmm", "dsygst"),
    "TRISOLVE": ("dtrsm", "dgemm"),
    "SOLVE": ("dgetrf", "dtrsm", "dgemm"),
    "INV": ("dgetrf", "dtrsm", "dgemm"),
    "SLOGDET": ("dgetrf", "dtrsm"),
    "EIGH": ("dsyevd", "dgemm"),
}
RT_LA_BLAS = 8                 # csrc/instr/linalg/linalg.h
_MATMUL = isa.INSTRS["MATMUL"].opcode
_LINALG = tuple(isa.INSTRS[name].opcode for name in NEEDS if name != "MATMUL")

# Smallest sizes that go to BLAS: a product of M x K and K x N with
# M*K*N >= MATMUL_MIN_FLOPS (and N > 1: the matrix-vector kernels stay), and
# square matrices of order >= LINALG_MIN_N[op].  Below them the hand
# kernels are as fast or faster (the call, the packing, LAPACK's blocking).
MATMUL_MIN_FLOPS = 4096
LINALG_MIN_N = {"CHOLESKY": 16, "TRISOLVE": 16, "SOLVE": 16, "INV": 16, "SLOGDET": 16,
                "EIGH": 8}

_lock = threading.Lock()
_held = None                   # frozenset of the routines the VM holds, after the first load


def _capsule(cap, expected):
    """The function pointer in a scipy capsule whose signature is `expected`, or None."""
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
    get_ptr.restype, get_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    name = get_name(cap)
    if name is None:
        return None
    # scipy spells its double typedef __pyx_t_5scipy_6linalg_11cython_blas_d

    sig = re.sub(r"__pyx_t_\w+?_d\b", "d", name.decode("ascii", "replace"))
    if sig != expected:
        return None
    return get_ptr(cap, name) or None


def _load():
    try:
        from scipy.linalg import cython_blas, cython_lapack
    except ImportError:
        return frozenset()
    modules = {"blas": cython_blas, "lapack": cython_lapack}
    held = set()
    for slot, name in enumerate(SLOTS):
        where, sig = _SIGNATURES[name]
        cap = getattr(modules[where], "__pyx_capi__", {}).get(name)
        ptr = _capsule(cap, sig) if cap is not None else None
        if ptr and lib.rt_blas_set(slot, ffi.cast("void *", ptr)) == lib.RT_OK:
            held.add(name)
    return frozenset(held)


def held():
    """The routines the VM holds, loaded on the first call (an empty set
    without scipy)."""
    global _held
    if _held is None:
        with _lock:
            if _held is None:
                _held = _load()
    return _held


def _mode(name):
    """REVTAPE_BLAS now ("auto", "off", "all"), "off" when the VM lacks a
    routine the instruction `name` calls."""
    mode = config.get("REVTAPE_BLAS")
    return mode if mode == "off" or set(NEEDS[name]) <= held() else "off"


def matmul_word(m, k, n):
    """MATMUL's BLAS word (its fourth int) for an m x k times k x n product:
    1 for BLAS.  Matrix-vector products (n == 1) keep their kernels."""
    if n <= 1 or min(m, k) < 1:
        return 0
    mode = _mode("MATMUL")
    return int(mode == "all" or (mode == "auto" and m * k * n >= MATMUL_MIN_FLOPS))


def linalg_bit(name, n):
    """RT_LA_BLAS for a linear-algebra instruction of order n, or 0."""
    if name not in NEEDS or n < 1:
        return 0
    mode = _mode(name)
    return RT_LA_BLAS if mode == "all" or (mode == "auto" and n >= LINALG_MIN_N[name]) else 0


def load_for(code, ints):
    """Load the routines now when a program made elsewhere (a pickle) asks
    for them, before it is verified and run: a slot filled between two
    replays would change a marked instruction's path between them.
    Unchecked words are read defensively (the verifier judges them next)."""
    if _held is not None or len(code) == 0:
        return
    op = np.asarray(code)[:, 0] & isa.OPCODE_MASK
    c = np.asarray(code)[:, 5].astype(np.int64)
    ints = np.asarray(ints)
    for opcode, word in ((_MATMUL, 3), *((o, 2) for o in _LINALG)):
        at = c[op == opcode] + word
        at = at[(at >= 0) & (at < len(ints))]
        if len(at) and np.any(ints[at] & (1 if word == 3 else RT_LA_BLAS)):
            held()
            return
