"""The native tier: a verified program translated to C, compiled by the system
compiler, and installed under the VM's entry points (docs/guide/native.md).

``rt.compile(tape, native=True)`` builds it now; ``native="auto"`` (the
default) arms a call/time budget counted in C (arm), and the call that spends
it (status RT_OK_HOT) queues a build for one background thread (hot,
_builder), which installs the sweeps with rt_set_native, an atomic store.

``translate`` writes one C statement block per instruction, every offset a
literal.  The expressions are not rewritten: the generated file includes
csrc/generated/ops_generated.h and turns each X-macro row into a static inline function
(``nf_EXP``, ``ndx_POW`` ...), so a native EXP evaluates the very expression
the VM's EXP case evaluates, under the same compiler flags plus
-ffp-contract=off (no fused multiply-add the VM would not do).  Array
instructions call the VM's own kernels (csrc/kernels/kernels.c, built once
into a shared kernels library that every program's library links);
instructions without a translation here run the VM's own sweep over their
range (rtn_vm_fwd / rtn_vm_rev / rtn_vm_tan).  Scalar programs get a fused
value_and_grad with C locals (_translate_scalar); programs that use one get a
tangent sweep (_tangent_section, _wants_tangent).  Results are therefore bit for bit those of
the VM; tests/test_native.py checks it.

The library reads and writes only the program's arenas, through the
``rt_program`` it is given: it holds no pointer of its own, never calls back
into Python (programs with PYCALL stay on the VM), and is content-addressed
(its file name is a hash of its generated C, of this generator, of the C
sources and of the compiler command), so every CompiledTape with the same
program -- a deep copy, an unpickled copy, another process -- may share one
loaded library.  The disk cache verifies every library against the sha256 its
build recorded before it is loaded (see "building" below).
"""
import hashlib
import math
import os
import pathlib
import platform
import re
import shlex
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import typing

import numpy as np

from .. import config
from ..core import ops
from ..errors import NativeCompileError, NativeWarning, RevtapeError, UnsupportedError
from ..errors import user_site, warn_at

FLAGS = ("-O2", "-std=c99", "-fno-math-errno", "-ffp-contract=off", "-D_DEFAULT_SOURCE",
         "-fPIC", "-shared")
# Instructions per generated C function: gcc's optimiser is superlinear in
# function size, so long programs are cut into pieces of bounded length.
CHUNK = 100


def _find_csrc():
    """The C the generated code includes and links: the copy an installed revtape
    carries in its package (revtape/_csrc, written by setup.py's build), else the
    source tree's csrc/ (an editable install or a checkout on PYTHONPATH)."""
    pkg = pathlib.Path(__file__).resolve().parents[1]
    installed = pkg / "_csrc"
    return installed if (installed / "vm.h").is_file() else pkg.parents[1] / "csrc"


CSRC = _find_csrc()

compiles = 0          # libraries built by this process (the tests read it: cache hits build none)




def _families():
    """Opcode name -> family, read from the generated header (the VM's own table)."""
    text = (CSRC / "generated" / "ops_generated.h").read_text()
    fam = {}
    for macro, kind in (("RT_UNARY", "u"), ("RT_UNARY_ND", "und"), ("RT_BINARY", "b"),
                        ("RT_BINARY_ND", "bnd"), ("RT_GUARDS", "g")):
        body = text.split(f"#define {macro}(X) \\\n", 1)[1].split("\n\n", 1)[0]
        for line in body.splitlines():
            line = line.strip()
            if line.startswith("X("):
                name = line[2:].split(",", 1)[0].rstrip(")")
                if kind in ("u", "b"):
                    _PARTIALS[name] = tuple(_literal(e) for e in _args(line)[2:])
                if kind in ("b", "bnd"):
                    for v in ("VV", "VS", "SV"):
                        fam[f"{name}_{v}"] = (kind, name, v)
                elif kind == "g":
                    fam[f"GUARD_{name}"] = (kind, name, None)
                else:
                    fam[name] = (kind, name, None)
    return fam


_FAM = None
_PARTIALS = {}   # row name -> its partials' values where the table writes a number (ADD: 1.0, 1.0)


def _args(line):
    """The top-level arguments of one X-macro line `X(NAME, (e1), (e2)) \\`."""
    body = line[2:line.rindex(")")]
    out, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += (ch == "(") - (ch == ")")
        cur += ch
    return out + [cur.strip()]


def _literal(expr):
    """The value of a partial written as a plain number, e.g. `(-1.0)`; else None."""
    m = re.fullmatch(r"\(\s*(-?\d+\.\d*(?:[eE][-+]?\d+)?)\s*\)", expr)
    return float(m.group(1)) if m else None
_PRELUDE = r"""/* GENERATED by revtape.runtime.native from one verified program.  Do not edit. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "vm.h"
#include "generated/ops_generated.h"
#include "kernels/specfun.h"
#include "kernels/kernels.h"
#include "instr/instr.h"   /* the hand instructions' kernels: rt_fwd_/rt_rev_/rt_tan_NAME */
#ifndef M_2_SQRTPI
#define M_2_SQRTPI 1.12837916709551257390
#endif
/* The VM's expressions, one inline function per table row. */
#define NU_(NAME, FX, DX) \
    static inline double nf_##NAME(const double x) { return FX; } \
    static inline double nd_##NAME(const double x, const double f) { (void)x; (void)f; return DX; }
#define NUND_(NAME, FX) static inline double nf_##NAME(const double x) { return FX; }
#define NB_(NAME, FXY, DX, DY) \
    static inline double nf_##NAME(const double x, const double y) { return FXY; } \
    static inline double ndx_##NAME(const double x, const double y, const double f) \
        { (void)x; (void)y; (void)f; return DX; } \
    static inline double ndy_##NAME(const double x, const double y, const double f) \
        { (void)x; (void)y; (void)f; return DY; }
#define NBND_(NAME, FXY) static inline double nf_##NAME(const double x, const double y) { return FXY; }
#define NG_(NAME, PRED) static inline int64_t ng_##NAME(const double x, const double y) { return (int64_t)(PRED); }
RT_UNARY(NU_)
RT_UNARY_ND(NUND_)
RT_BINARY(NB_)
RT_BINARY_ND(NBND_)
RT_GUARDS(NG_)
/* Pieces stay separate functions: gcc would inline a static function called
 * once, and its optimiser is superlinear in function size. */
#if defined(__GNUC__)
#define RTN_PIECE static __attribute__((noinline))
#else
#define RTN_PIECE static
#endif
/* Instructions left to the VM (linear algebra and cumulative kernels, in
 * csrc/instr/linalg/): its own sweeps over [lo, hi). */
static int (*rtn_vm_fwd)(rt_program *, int64_t, int64_t);
static int (*rtn_vm_rev)(rt_program *, int64_t, int64_t);
static int (*rtn_vm_tan)(rt_program *, int64_t, int64_t);
"""

_EPILOGUE = r"""
/* The VM's sweeps over instruction ranges the translation leaves to it
 * (rtn_init: set once per process, before any program uses the table). */
void rtn_init(void *fwd_range, void *rev_range, void *tan_range)
{
    rtn_vm_fwd = (int (*)(rt_program *, int64_t, int64_t))fwd_range;
    rtn_vm_rev = (int (*)(rt_program *, int64_t, int64_t))rev_range;
    rtn_vm_tan = (int (*)(rt_program *, int64_t, int64_t))tan_range;
}

const rt_native *rtn_table(void) { return &rtn_native; }
"""


class _VM(Exception):
    """This instruction is left to the VM's sweep (rtn_vm_fwd / rtn_vm_rev)."""


def _fwd(name, n, o, a, b, c, ints, pc=0):
    """C for one instruction's forward step (mirrors a case of csrc/vm/sweeps.c's forward)."""
    fam = _FAM.get(name)
    if fam is not None:
        kind, base, var = fam
        if kind in ("u", "und"):
            return f"v[{o}] = nf_{base}(v[{a}]);" if n == 1 else f"rt_kf_{name}({n}, v, {o}, {a});"
        if kind in ("b", "bnd"):
            return (f"v[{o}] = nf_{base}(v[{a}], v[{b}]);" if n == 1
                    else f"rt_kf_{name}({n}, v, {o}, {a}, {b});")
        return (f"if (ng_{base}(v[{a}], v[{b}]) != {n}) "
                f"{{ p->failed_guard = {o}; p->failed_pc = {pc}; return RT_GUARD_FAILED; }}")
    if name in ("WHERE_VV", "WHERE_VS", "WHERE_SV", "CLIP"):
        return f"rt_kf_{name}({n}, v, {o}, {a}, {b}, {c});"
    if name == "AXPY" and n == 1:
        return f"{{ const double prod = v[{b}] * v[{c}]; v[{o}] = v[{a}] + prod; }}"
    if name == "SQDIFF" and n == 1:
        return f"{{ const double t = v[{a}] - v[{b}]; v[{o}] = t * t; }}"
    if name == "AXPY":
        return (f"{{ const double t = v[{b}]; int64_t i; for (i = 0; i < {n}; i++) "
                f"{{ const double prod = t * v[{c} + i]; v[{o} + i] = v[{a} + i] + prod; }} }}")
    if name == "SQDIFF":
        return (f"{{ int64_t i; for (i = 0; i < {n}; i++) "
                f"{{ const double t = v[{a} + i] - v[{b} + i]; v[{o} + i] = t * t; }} }}")
    if name == "CSUM":
        terms = "".join(f" acc = acc + v[{e}];" if e >= 0 else f" acc = acc - v[{~e}];"
                        for e in ints[c:c + n])
        return f"{{ double acc = v[{a}];{terms} v[{o}] = acc; }}"
    if name == "REDUCE_SUM":
        return (f"{{ int64_t s; for (s = 0; s < {n}; s++) v[{o} + s] = 0.0 + "
                f"rt_k_pairwise_sum(v + {a} + s * {b}, {b}); }}")
    if name in ("REDUCE_ALL", "REDUCE_ANY"):
        hit, init, res = ("x[i] == 0.0", "1.0", "0.0") if name == "REDUCE_ALL" else \
            ("x[i] != 0.0", "0.0", "1.0")
        return (f"{{ int64_t s, i; for (s = 0; s < {n}; s++) {{ const double *x = v + {a} + s * {b};"
                f" double r = {init}; for (i = 0; i < {b}; i++) if ({hit}) {{ r = {res}; break; }}"
                f" v[{o} + s] = r; }} }}")
    if name == "GATHER":
        return f"{{ int64_t i; for (i = 0; i < {n}; i++) v[{o} + i] = v[{a} + ints[{c} + i]]; }}"
    if name == "SCATTER_ADD":
        return (f"{{ int64_t i; for (i = 0; i < {b}; i++) v[{o} + i] = 0.0; "
                f"for (i = 0; i < {n}; i++) v[{o} + ints[{c} + i]] += v[{a} + i]; }}")
    if name == "SCATTER":
        return f"{{ int64_t i; for (i = 0; i < {n}; i++) v[{o} + ints[{c} + i]] = v[{a} + i]; }}"
    if name == "SSD":                                       # csrc/kernels/kernels.c
        return f"rt_kf_SSD({n}, v, {o}, {a}, {b});"
    if name == "GAXPY":                                     # csrc/kernels/gaxpy.h
        return (f"{{ const double t = v[{b}]; int64_t i; for (i = 0; i < {n}; i++) "
                f"{{ const double prod = t * v[{ints[c]} + i]; "
                f"v[{o} + i] = v[{a} + ints[{c + 2} + i]] + prod; }} }}")
    _blas_to_vm(name, c, ints)
    return _hand("fwd", name, 0, n, o, a, b, c)


def _rev(name, fl, n, o, a, b, c, ints):
    """C for one instruction's reverse step (mirrors a case of csrc/vm/sweeps.c's reverse)."""
    fam = _FAM.get(name)
    if fam is not None:
        kind, base, var = fam
        if kind == "u":
            if n != 1:
                return f"rt_kr_{name}({fl}u, {n}, d, v, {o}, {a});"
            return (f"{{ const double g = d[{o}]; if (g != 0.0) "
                    f"d[{a}] += g * (nd_{base}(v[{a}], v[{o}])); }}")
        if kind == "b":
            if n != 1:
                return f"rt_kr_{name}({fl}u, {n}, d, v, {o}, {a}, {b});"
            dx = f"ndx_{base}(v[{a}], v[{b}], v[{o}])"
            dy = f"ndy_{base}(v[{a}], v[{b}], v[{o}])"
            if var == "VV":
                body = ((f" d[{a}] += g * ({dx});" if fl & 1 else "")
                        + (f" d[{b}] += g * ({dy});" if fl & 2 else ""))
                return f"{{ const double g = d[{o}]; if (g != 0.0) {{{body} }} }}"
            if var == "VS":
                body = ((f" d[{a}] += g * ({dx});" if fl & 1 else "")
                        + (f" sy += g * ({dy});" if fl & 2 else ""))
                tail = f" d[{b}] += sy;" if fl & 2 else ""
                return (f"{{ double sy = 0.0; const double g = d[{o}]; (void)sy; "
                        f"if (g != 0.0) {{{body} }}{tail} }}")
            body = ((f" sx += g * ({dx});" if fl & 1 else "")
                    + (f" d[{b}] += g * ({dy});" if fl & 2 else ""))
            tail = f" d[{a}] += sx;" if fl & 1 else ""
            return (f"{{ double sx = 0.0; const double g = d[{o}]; (void)sx; "
                    f"if (g != 0.0) {{{body} }}{tail} }}")
        return ""                                   # no derivative: masks, guards
    if name in ("REDUCE_ALL", "REDUCE_ANY"):
        return ""
    if name in ("WHERE_VV", "WHERE_VS", "WHERE_SV", "CLIP"):
        return f"rt_kr_{name}({fl}u, {n}, d, v, {o}, {a}, {b}, {c});"
    if name == "AXPY":
        return (f"{{ const double t = v[{b}]; double sb = 0.0; int64_t i; (void)t; (void)sb; "
                f"for (i = 0; i < {n}; i++) {{ const double g = d[{o} + i]; if (g != 0.0) {{"
                + (f" d[{a} + i] += g;" if fl & 1 else "")
                + (f" sb += g * v[{c} + i];" if fl & 2 else "")
                + (f" d[{c} + i] += g * t;" if fl & 4 else "")
                + " } }" + (f" d[{b}] += sb;" if fl & 2 else "") + " }")
    if name == "SQDIFF":
        return (f"{{ int64_t i; for (i = 0; i < {n}; i++) {{ const double g = d[{o} + i]; "
                f"if (g != 0.0) {{ const double t = v[{a} + i] - v[{b} + i], gt = g * (2.0 * t); "
                f"if (gt != 0.0) {{"
                + (f" d[{a} + i] += gt * 1.0;" if fl & 1 else "")
                + (f" d[{b} + i] += gt * -1.0;" if fl & 2 else "") + " } } } }")
    if name == "CSUM":
        terms = "".join(f" d[{e}] += g * 1.0;" if e >= 0 else f" d[{~e}] += g * -1.0;"
                        for e in ints[c:c + n])
        head = f" d[{a}] += g * 1.0;" if fl & 1 else ""
        return f"{{ const double g = d[{o}]; if (g != 0.0) {{{head}{terms} }} }}"
    if name == "REDUCE_SUM":
        if not fl & 1:
            return ""
        return (f"{{ int64_t s; for (s = 0; s < {n}; s++) {{ const double g = d[{o} + s]; "
                f"if (g != 0.0) rt_k_add_scalar({b}, d + {a} + s * {b}, g); }} }}")
    if name == "GATHER":
        return ("" if not fl & 1 else
                f"{{ int64_t i; for (i = 0; i < {n}; i++) d[{a} + ints[{c} + i]] += d[{o} + i]; }}")
    if name in ("SCATTER_ADD", "SCATTER"):
        return ("" if not fl & 1 else
                f"{{ int64_t i; for (i = 0; i < {n}; i++) d[{a} + i] += d[{o} + ints[{c} + i]]; }}")
    if name == "SSD":
        return f"rt_kr_SSD({fl}u, {n}, d, v, {o}, {a}, {b});"
    if name == "GAXPY":                                     # csrc/kernels/gaxpy.h
        z = ints[c]
        return (f"{{ const double t = v[{b}]; double sb = 0.0; int64_t i; (void)t; (void)sb; "
                f"for (i = 0; i < {n}; i++) {{ const double g = d[{o} + i]; if (g != 0.0) {{"
                + (f" d[{a} + ints[{c + 2} + i]] += g;" if fl & 1 else "")
                + (f" sb += g * v[{z} + i];" if fl & 2 else "")
                + (f" d[{z} + i] += g * t;" if fl & 4 else "")
                + " } }" + (f" d[{b}] += sb;" if fl & 2 else "") + " }")
    _blas_to_vm(name, c, ints)
    return _hand("rev", name, fl, n, o, a, b, c)


def untranslatable(code):
    """Why the native tier cannot take these words (a sentence), or None."""
    ops_used = {ops.VM_OPCODES[op & 0xFFFF] for op in np.unique(code[:, 0]).tolist()}
    if "PYCALL" in ops_used:
        return ("it calls custom primitives (PYCALL), which call back into Python: "
                "the VM runs it")
    return None


def translate(code, ints, layout=None):
    """C source for the verified words `code` (n_instr x 6 int32) and side table
    `ints`.  Hand instructions without a translation of their own call their
    csrc/instr/ kernels (_hand); linear algebra and cumulative kernels are runs
    of the VM's own sweep over their range.  Raises UnsupportedError for a program the tier refuses
    (untranslatable)."""
    global _FAM
    if _FAM is None:
        _FAM = _families()
    code = np.asarray(code, dtype=np.int32).reshape(-1, 6)
    why = untranslatable(code)
    if why is not None:
        raise UnsupportedError(f"native=True cannot translate this program: {why}; "
                               f"compile with native=False")
    rows = code.tolist()
    ints = ints.tolist()
    tangent = layout is None or len(layout) < 8 or layout[7]
    runs = _periodic_runs(rows) if len(rows) >= ROLL_MIN else []
    if (layout is not None and _scalar_program(rows, layout[3], layout[5])
            and sum(p_ * r_ for _, p_, r_ in runs) * 2 < len(rows)):
        return _with_tangent(_assemble_scalar(rows, ints, layout), rows, tangent, ints)
    fwd, rev = [], []
    block_end = -1
    for k, (op, n, o, a, b, c) in enumerate(rows):
        name = ops.VM_OPCODES[op & 0xFFFF]
        fl = (op & 0xFFFFFFFF) >> 16
        if name == "BLOCK":
            block_end = k + o + 1
        if k <= block_end:
            # a tiled block (csrc/instr/block.h) runs whole, on the VM: its
            # members name scratch slots and never run on their own
            fwd.append(None)
            rev.append(None)
            continue
        try:
            f = _fwd(name, n, o, a, b, c, ints, k)
            r = _rev(name, fl, n, o, a, b, c, ints) if fl else ""
        except _VM:
            f, r = None, (None if fl else "")  # the VM's sweep over this instruction
        fwd.append(f)
        rev.append(r)
    _roll(rows, ints, runs, fwd, rev)
    return _with_tangent(_assemble(fwd, rev), rows, tangent, ints)


# ------------------------------------------------------------------ loops
# Straight-line code grows with the program: chain L=1e4 (30000 scalar
# instructions) became 2.2 MB of machine code, more than L2 holds, and its
# replay ran at the speed of instruction fetches from L3 (2.3x the VM).  A
# program that repeats a block of instructions whose offsets move by fixed
# strides (an unrolled Python loop: chain, a loop of scalar updates) gets
# that block as a C loop instead: the same statements in the same order
# (forward: repetitions ascending; reverse: descending, each block's
# statements last to first), only the offsets computed, so the bits are the
# VM's.  Programs of ROLL_MIN instructions or more whose runs cover at least
# half of them take this path even when they are scalar (the fused
# generator's locals need straight-line code).
ROLL_MIN = 4000
ROLL_PERIOD = 8            # longest block looked for
ROLL_REPEATS = 8           # fewest repetitions worth a loop
_ROLLABLE_HAND = {"AXPY", "SQDIFF", "WHERE_VV", "WHERE_VS", "WHERE_SV", "CLIP"}


def _rollable(name):
    """Instructions whose C is a function of (n, o, a, b, c) alone (no side
    table, no program counter): offsets may then be expressions."""
    fam = _FAM.get(name)
    return name in _ROLLABLE_HAND if fam is None else fam[0] != "g"


def _periodic_runs(rows):
    """[(start, period, repeats)]: maximal runs of a block of `period`
    rollable instructions repeated with the same opcodes, flags and counts
    and offsets moving by a fixed stride per repetition."""
    ok = [_rollable(ops.VM_OPCODES[r[0] & 0xFFFF]) for r in rows]
    n = len(rows)
    runs, i = [], 0
    while i < n:
        best = (0, 0)
        for P in range(1, ROLL_PERIOD + 1):
            if i + 2 * P > n or not all(ok[i:i + P]):
                break
            head, nxt = rows[i:i + P], rows[i + P:i + 2 * P]
            if any(h[0] != x[0] or h[1] != x[1] for h, x in zip(head, nxt)) or not all(ok[i + P:i + 2 * P]):
                continue
            step = [[x[f] - h[f] for f in range(2, 6)] for h, x in zip(head, nxt)]
            R = 2
            while i + (R + 1) * P <= n:
                blk = rows[i + R * P:i + (R + 1) * P]
                if not all(ok[i + R * P:i + (R + 1) * P]) or any(
                        x[0] != h[0] or x[1] != h[1]
                        or any(x[f] != h[f] + R * st[f - 2] for f in range(2, 6))
                        for h, x, st in zip(head, blk, step)):
                    break
                R += 1
            if R * P > best[0] * best[1]:
                best = (P, R)
        P, R = best
        if R >= ROLL_REPEATS:
            runs.append((i, P, R))
            i += P * R
        else:
            i += 1
    return runs


def _roll(rows, ints, runs, fwd, rev):
    """Put each run's loop at its first instruction (forward) and its last
    (reverse); the other instructions of the run emit nothing."""
    for start, P, R in runs:
        if any(fwd[k] is None for k in range(start, start + P * R)):
            continue                  # members of a tiled block: the VM runs it whole
        head, nxt = rows[start:start + P], rows[start + P:start + 2 * P]
        fl_, rl_ = [], []
        for j, (h, x) in enumerate(zip(head, nxt)):
            op, n = h[0], h[1]
            name = ops.VM_OPCODES[op & 0xFFFF]
            fl = (op & 0xFFFFFFFF) >> 16
            off = [h[f] if x[f] == h[f] else f"({h[f]} + {x[f] - h[f]} * k_)" for f in range(2, 6)]
            fl_.append(_fwd(name, n, *off, ints, start + j))
            rl_.append(_rev(name, fl, n, *off, ints) if fl else "")
        body_f = " ".join(fl_)
        body_r = " ".join(t for t in reversed(rl_) if t)
        for k in range(start, start + P * R):
            fwd[k] = ""
            rev[k] = ""
        fwd[start] = (f"{{ int64_t k_; for (k_ = 0; k_ < {R}; k_++) {{ {body_f} }} }}")
        if body_r:
            rev[start + P * R - 1] = (f"{{ int64_t k_; for (k_ = {R - 1}; k_ >= 0; k_--) "
                                      f"{{ {body_r} }} }}")


# ------------------------------------------------------------------ scalar programs
# A program of scalar instructions only (every n == 1: eight-schools, the
# Rosenbrock loop, most hand-written log densities) gets a fused
# value_and_grad in which every value and every adjoint is a C local: the
# forward sweep still stores each value into the arena (the arena holds the
# replay, as the VM leaves it), but nothing is loaded back, the adjoint arena
# is never zeroed, and only the gradient is written to it.  The operations and
# their order are the VM's (the same inline functions, the same `g != 0.0`
# skips, an adjoint starting at 0.0 and accumulated in reverse instruction
# order), so the bits are too.  Long programs are cut into pieces of
# SCALAR_CHUNK instructions (separate functions: gcc's optimiser is
# superlinear in function size); an adjoint crossing a piece boundary goes
# through the arena, assigned by the first piece that touches it.
SCALAR_CHUNK = 400
_SCALAR_OPS = ("AXPY", "SQDIFF", "CSUM", "WHERE_VV", "WHERE_VS", "WHERE_SV", "CLIP")


def _scalar_program(rows, n_fixed, out_len):
    """True when every instruction is a scalar form this generator writes, and
    every slot is written once (then a slot is one C local)."""
    if out_len != 1:
        return False
    written = set()
    for op, n, o, a, b, c in rows:
        name = ops.VM_OPCODES[op & 0xFFFF]
        fam = _FAM.get(name)
        if n != 1 and not (name == "CSUM" or (fam is not None and fam[0] == "g")):
            return False
        if fam is None and name not in _SCALAR_OPS:
            return False
        if fam is not None and fam[0] == "g":
            continue                                   # out is a guard number, not a slot
        if o in written or o < n_fixed:
            return False
        written.add(o)
    return True


def _lit(c):
    """A C double literal of exactly c (repr round-trips; C's strtod is exact)."""
    return f"({c!r})" if c < 0 else repr(c)


class _Piece:
    """Names of one generated function: values x<slot>, adjoints a<slot>.

    The reverse sweep knows some adjoints' values where it writes them
    (`known`): every adjoint starts at 0.0 (the seed at 1.0), and the sum of
    a known adjoint and a known term is known (Python floats add as C
    doubles do).  A known adjoint is a literal where it is read, its
    `g != 0.0` test is decided here, and an addition into it becomes an
    assignment.  One fact holds for every adjoint: it is never -0.0 (it
    starts at +0.0 or 1.0 and only ever has something added to it, and
    x + y is -0.0 only when both are).  Hence `a += t` with t = +-0.0 leaves
    `a` as it was, so an addition whose term stays finite when g is zero
    (g * 1.0, g * -1.0, the difference's gt) needs no `g != 0.0` test, and
    0.0 + t is t when t itself is never -0.0.  tests/test_native_fused.py
    checks the bits on signed zeros, nan and inf."""

    def __init__(self, defined, started=(), seed=None):
        self.defined = defined          # slots written in this piece
        self.loaded = set()             # external values loaded into locals
        self.adj = set()                # adjoints this piece touches
        self.out = []
        self.touch = []                 # adjoints touched by the statement being written
        self.started = started          # adjoints that come in through the arena (unknown)
        self.seed = seed                # the output's slot: its adjoint starts at 1.0
        self.known = {}                 # adjoint -> its value at this point, when known
        self.held = set()               # ... whose local a<slot> holds that value
        self.pre = []                   # statements before the current `if`

    def _first(self, s):
        if s not in self.adj:
            self.adj.add(s)
            if s not in self.started:
                self.known[s] = 1.0 if s == self.seed else 0.0
                self.held.add(s)

    def g(self, s):
        """An adjoint read as a value: (C text, its value when known)."""
        self._first(s)
        if s in self.known:
            return _lit(self.known[s]), self.known[s]
        return f"a{s}", None

    def add(self, s, t, tk=None, t_nz=False, cond=False):
        """C for the VM's `d[s] += t`, bit for bit (t: C text; tk: t's value
        when known; t_nz: t is never -0.0; cond: inside an `if` that may
        skip it, where the local must hold the adjoint's value)."""
        self._first(s)
        self.touch.append(s)
        if s not in self.known:
            return f"a{s} += {t};"
        c = self.known.pop(s)
        held = s in self.held
        self.held.discard(s)
        if cond:
            if not held:                            # skipped: the local must still be c
                self.pre.append(f"a{s} = {_lit(c)};")
            return f"a{s} = {t};" if c == 0.0 and t_nz else f"a{s} += {t};"
        if tk is not None and math.isfinite(c + tk):
            self.known[s] = c + tk                  # 0.0 + 1.0 and the like: no code
            return ""
        if c == 0.0 and t_nz:
            return f"a{s} = {t};"
        return f"a{s} = {_lit(c)} + {t};"

    def a(self, s):
        """An adjoint as a C lvalue for code that reads or adds to it directly
        (not through g/add): it is unknown from here on, and a known value
        its local does not hold is assigned first, in the same expression."""
        self._first(s)
        self.touch.append(s)
        if s in self.known:
            c = self.known.pop(s)
            if s not in self.held:
                return f"*(a{s} = {_lit(c)}, &a{s})"
            self.held.discard(s)
        return f"a{s}"

    def x(self, s):
        if s not in self.defined and s not in self.loaded:
            self.loaded.add(s)
            self.out.append(f"const double x{s} = v[{s}];")
        return f"x{s}"


def _scalar_fwd(P, k, name, n, o, a, b, c, ints):
    kind, base, _ = _FAM.get(name) or (None, name, None)
    X = P.x
    if kind == "g":
        return (f"if (ng_{base}({X(a)}, {X(b)}) != {n}) "
                f"{{ p->failed_guard = {o}; p->failed_pc = {k}; return RT_GUARD_FAILED; }}")
    if kind in ("u", "und"):
        e = f"nf_{base}({X(a)})"
    elif kind in ("b", "bnd"):
        e = f"nf_{base}({X(a)}, {X(b)})"
    elif name == "AXPY":
        e = f"{X(a)} + {X(b)} * {X(c)}"            # -ffp-contract=off: MUL, then ADD
    elif name == "SQDIFF":
        P.out.append(f"const double t{o} = {X(a)} - {X(b)};")
        e = f"t{o} * t{o}"
    elif name.startswith("WHERE_"):                # kernels.c rt_kwp_*: a != 0 ? b : c
        e = f"{X(a)} != 0.0 ? {X(b)} : {X(c)}"
    elif name == "CLIP":                           # kernels.c rt_kcp: nan flows, lo > hi: hi
        lo, hi = X(b), X(c)
        P.out.append(f"double c{o} = {X(a)}; c{o} = !(c{o} >= {lo} || c{o} != c{o}) ? {lo} : c{o}; "
                     f"c{o} = !(c{o} <= {hi} || c{o} != c{o}) ? {hi} : c{o};")
        e = f"c{o}"
    else:                                          # CSUM, left to right
        acc = X(a)
        for e_ in ints[c:c + n]:
            acc = f"({acc} + {X(e_)})" if e_ >= 0 else f"({acc} - {X(~e_)})"
        e = acc
    P.out.append(f"const double x{o} = {e};")
    return f"v[{o}] = x{o};"                       # a store: _STORE below


def _scalar_rev(P, name, fl, n, o, a, b, c, ints):
    """The VM's reverse step of one scalar instruction as statements
    [(C text, adjoints written)], bit for bit (see _Piece for the facts
    used: known adjoints, never -0.0)."""
    kind, base, var = _FAM.get(name) or (None, name, None)
    X = P.x
    if kind in ("und", "bnd", "g") or not fl:
        return []
    g, gk = P.g(o)
    if gk == 0.0:
        return []                                  # the VM's test skips it
    test = gk is None                              # `g != 0.0` decided at run time
    out = []

    def stmt(parts, cond):
        """One statement of additions; cond: under the VM's `g != 0.0`."""
        body = " ".join(p_ for p_ in parts if p_)
        pre, P.pre = P.pre, []
        writes = set(P.touch)
        P.touch = []
        if cond and body:
            body = f"if ({g} != 0.0) {{ {body} }}"
        text = " ".join(pre + [body]).strip()
        if text:
            out.append((text, writes))

    # A partial the table writes as a number L is finite: g * L adds +-0.0
    # when g is 0.0, so the VM's test changes nothing there (see _Piece).
    lits = _PARTIALS.get(base, ())
    if kind == "u":
        L = lits[0] if lits else None
        if L is not None:
            stmt([P.add(a, f"{g} * ({L!r})", tk=None if gk is None else gk * L,
                        t_nz=L == 1.0)], False)
        else:
            stmt([P.add(a, f"{g} * (nd_{base}({X(a)}, {X(o)}))", cond=test)], test)
        return out
    if kind == "b":
        Lx, Ly = lits if len(lits) == 2 else (None, None)
        if var == "VV" and (Lx is not None or not fl & 1) and (Ly is not None or not fl & 2):
            parts = [P.add(s_, f"{g} * ({L!r})", tk=None if gk is None else gk * L,
                           t_nz=L == 1.0)
                     for bit, s_, L in ((1, a, Lx), (2, b, Ly)) if fl & bit]
            stmt(parts, False)
            return out
        dx = f"ndx_{base}({X(a)}, {X(b)}, {X(o)})"
        dy = f"ndy_{base}({X(a)}, {X(b)}, {X(o)})"
        ta = (a, f"{g} * ({dx})", False) if fl & 1 else None
        tb = (b, f"{g} * ({dy})", False) if fl & 2 else None
        if var == "VS" and tb:              # VM: sy = 0.0 + g * dy, added after a's term
            tb = (b, f"0.0 + {g} * ({dy})", True)
        if var == "SV":                     # VM: b's term first, then sx = 0.0 + g * dx
            ta = ta and (a, f"0.0 + {g} * ({dx})", True)
            ta, tb = tb, ta
        parts = [P.add(x[0], x[1], t_nz=x[2], cond=test) for x in (ta, tb) if x]
        stmt(parts, test)
        return out
    if name == "AXPY":
        if fl & 1:                          # g * 1: no test needed (see _Piece)
            stmt([P.add(a, f"{g} * 1.0", tk=gk, t_nz=True)], False)
        parts = []
        if fl & 4:
            parts.append(P.add(c, f"{g} * {X(b)}", cond=test))
        if fl & 2:                          # VM: sb = 0.0 + g * c, added last
            parts.append(P.add(b, f"0.0 + {g} * {X(c)}", t_nz=True, cond=test))
        stmt(parts, test)
        return out
    if name.startswith("WHERE_") or name == "CLIP":
        stmt([_scalar_select_rev(P, name, fl, o, a, b, c, g)], False)
        return out
    if name == "SQDIFF":
        # the VM's inner `gt != 0.0` test needs no code: gt * +-1.0 is finite
        # when gt is +-0.0, and adds nothing then
        parts = [f"const double t = {X(a)} - {X(b)}, gt = {g} * (2.0 * t);"]
        if fl & 1:
            parts.append(P.add(a, "gt * 1.0", cond=test))
        if fl & 2:
            parts.append(P.add(b, "gt * -1.0", cond=test))
        body = " ".join(parts)
        pre, P.pre = P.pre, []
        writes = set(P.touch)
        P.touch = []
        text = f"{{ {body} }}" if not test else f"if ({g} != 0.0) {{ {body} }}"
        out.append((" ".join(pre + [text]), writes))
        return out
    # CSUM: one statement per term (the scheduler sinks each to where its
    # adjoint is next touched); g * +-1.0 needs no `g != 0.0` test
    terms = ([(a, 1.0)] if fl & 1 else []) + [(e, 1.0) if e >= 0 else (~e, -1.0)
                                             for e in ints[c:c + n]]
    for s_, sg in terms:
        t = f"{g} * 1.0" if sg > 0 else f"{g} * -1.0"
        tk = None if gk is None else gk * sg
        stmt([P.add(s_, t, tk=tk, t_nz=sg > 0)], False)
    return out


def _scalar_select_rev(P, name, fl, o, a, b, c, g):
    """WHERE/CLIP's reverse step, kernels.c's one-element case written out:
    the same selects, the same order, the same -0.0 added where nothing
    passes (rt_kwr_pass, rt_kcr) and the same 0.0-started sum for a scalar
    branch operand (rt_kwr_sum)."""
    X, A = P.x, P.a
    take = {True: f"{X(a)} != 0.0", False: f"{X(a)} == 0.0"}
    pass_ = lambda s, t: f" {A(s)} += {g} != 0.0 && {take[t]} ? {g} : -0.0;"
    sum_ = lambda s, t: f" {A(s)} += 0.0 + ({g} != 0.0 && {take[t]} ? {g} : -0.0);"
    if name == "CLIP":
        f, lo, hi = X(o), X(b), X(c)
        return (f"{A(a)} += {g} != 0.0 && {f} != {lo} && {f} != {hi} ? {g} : -0.0;"
                if fl & 1 else "")
    parts = []
    if name == "WHERE_VV":                   # by slot: b's term first iff b >= c
        order = ((2, b, True), (4, c, False)) if b >= c else ((4, c, False), (2, b, True))
        parts = [pass_(s, t) for bit, s, t in order if fl & bit]
    elif name == "WHERE_VS":
        parts = ([pass_(b, True)] if fl & 2 else []) + ([sum_(c, False)] if fl & 4 else [])
    else:                                    # WHERE_SV
        parts = ([pass_(c, False)] if fl & 4 else []) + ([sum_(b, True)] if fl & 2 else [])
    return "{" + "".join(parts) + " }" if parts else ""


_STORE = re.compile(r"v\[(\d+)\] = x\1;$")


class _Sinker:
    """Reverse-sweep statements emitted as late as their adjoints allow.

    A statement reads one final adjoint (its instruction's output: every
    contribution to it came from later instructions, already written) and adds
    into others.  Moving it later changes no bits as long as it stays before
    every later statement that reads or adds into what it adds into (then each
    accumulator sees the same additions in the same order).  Sinking shortens
    the adjoints' live ranges: a CSUM of 99 terms would otherwise start 99
    accumulators at once, more than the registers can hold."""

    def __init__(self, out):
        self.out = out
        self.pending = []                            # (text, reads, writes), in order

    @staticmethod
    def _clash(p, q):
        return bool(p[2] & (q[1] | q[2]) or q[2] & p[1])

    def add(self, text, reads, writes):
        new = (text, reads, writes)
        keep, go = [], []
        for p in reversed(self.pending):             # p clashes with new, or with one going
            (go if self._clash(p, new) or any(self._clash(p, q) for q in go) else keep).append(p)
        self.out.extend((p[0], p[2]) for p in reversed(go))
        self.pending = keep[::-1] + [new]

    def flush_all(self):
        self.out.extend((p[0], p[2]) for p in self.pending)
        self.pending = []


def _translate_scalar(rows, ints, layout):
    n_vals, n_in, n_grad, n_fixed, out_off, out_len = layout[:6]
    nr = len(rows)
    K = max(1, -(-nr // SCALAR_CHUNK))
    bounds = [(k * SCALAR_CHUNK, min(nr, (k + 1) * SCALAR_CHUNK)) for k in range(K)]
    names = [ops.VM_OPCODES[r[0] & 0xFFFF] for r in rows]
    is_guard = [(_FAM.get(nm) or ("",))[0] == "g" for nm in names]
    # forward pieces (shared by forward and value_and_grad when K > 1)
    fwd_bodies, rev_parts = [], []
    for k, (lo, hi) in enumerate(bounds):
        defined = {rows[i][2] for i in range(lo, hi) if not is_guard[i]}
        P = _Piece(defined)
        for i in range(lo, hi):
            op, n, o, a, b, c = rows[i]
            P.out.append(_scalar_fwd(P, i, names[i], n, o, a, b, c, ints))
        fwd_bodies.append((P, defined))
    # reverse pieces, last piece first: who touches an adjoint first decides
    # its start (0.0, 1.0 for the output), later pieces take it from the arena
    started = set()
    for k in reversed(range(K)):
        lo, hi = bounds[k]
        defined = fwd_bodies[k][1]
        R = _Piece(defined if K == 1 else set(), started=set(started), seed=out_off)
        if K == 1:                                   # one function: the forward's locals
            R.loaded = fwd_bodies[0][0].loaded
        stmts = []
        sched = _Sinker(stmts)
        for i in reversed(range(lo, hi)):
            op, n, o, a, b, c = rows[i]
            fl = (op & 0xFFFFFFFF) >> 16
            R.out = []
            st = _scalar_rev(R, names[i], fl, n, o, a, b, c, ints)
            stmts.extend((t, ()) for t in R.out)     # value loads: at once
            for text, writes in st:                  # CSUM: a statement per term
                sched.add(text, {o}, writes - {o})
            R.touch = []
        sched.flush_all()
        decls = []
        for s_ in sorted(R.adj):
            init = "d[%d]" % s_ if s_ in started else ("1.0" if s_ == out_off else "0.0")
            decls.append(f"double a{s_} = {init};")
        # An adjoint this piece hands back (an input's gradient, or one an
        # earlier piece continues) is stored right after the last statement
        # that adds to it: its local dies there instead of living, spilled,
        # to the end of the reverse sweep.
        last = {}
        for j, (_, writes) in enumerate(stmts):
            for s_ in writes:
                last[s_] = j
        after = {}
        backs = []
        for s_ in sorted(R.adj):
            if s_ in defined:
                continue
            text = f"d[{s_}] = {_lit(R.known[s_]) if s_ in R.known else f'a{s_}'};"
            if s_ in last and s_ not in R.known:
                after.setdefault(last[s_], []).append(text)
            else:
                backs.append(text)
        stmts = [t for j, (text, _) in enumerate(stmts) for t in [text] + after.get(j, [])]
        # an adjoint defined here and touched by a later piece came in through
        # the arena (started); defined-only-here adjoints need no write-back
        started |= R.adj
        rev_parts.append((k, decls, stmts, backs))
    rev_parts.reverse()
    untouched = [s_ for s_ in range(n_grad) if s_ not in started]
    return fwd_bodies, rev_parts, untouched


def _assemble_scalar(rows, ints, layout):
    fwd_bodies, rev_parts, untouched = _translate_scalar(rows, ints, layout)
    out_off = layout[4]
    # What a value_and_grad leaves observable in the value arena besides the
    # inputs: the output and the extra outputs (has_aux).  Every other entry
    # point runs the forward sweep, which stores every value, before reading
    # one; storing the rest here costs more than the whole reverse sweep.
    keep = {out_off} | {off + i for off, size in (layout[6] if len(layout) > 6 else ())
                        for i in range(size)}
    K = len(fwd_bodies)
    out = [_PRELUDE]
    head = ("(rt_program *p)\n{\n    double *const restrict v = p->vals; "
            "double *const restrict d = p->adj;\n    (void)v; (void)d;\n")
    for k, (P, _) in enumerate(fwd_bodies):
        out.append(f"RTN_PIECE int rtn_fwd_{k}{head}")
        out.extend("    " + s_ + "\n" for s_ in P.out)
        out.append("    return RT_OK;\n}\n")
    out.append("static int rtn_fwd(rt_program *p)\n{\n    int st;\n")
    out.extend(f"    if ((st = rtn_fwd_{k}(p)) != RT_OK) return st;\n" for k in range(K))
    out.append("    return RT_OK;\n}\n")
    seeds = "".join(f"    d[{s_}] = {'1.0' if s_ == out_off else '0.0'};\n" for s_ in untouched)
    if K == 1:
        (P, _), (_, decls, stmts, backs) = fwd_bodies[0], rev_parts[0]
        out.append(f"static int rtn_vg{head}")
        fwd = [s_ for s_ in P.out if not ((m := _STORE.match(s_)) and int(m.group(1)) not in keep)]
        fwd, stmts = _defer_last_sum(rows, ints, fwd, stmts)
        out.extend("    " + s_ + "\n" for s_ in fwd + decls + stmts + backs)
        out.append(seeds + "    return RT_OK;\n}\n")
    else:
        for k, decls, stmts, backs in rev_parts:
            out.append(f"RTN_PIECE void rtn_vgrev_{k}{head}")
            out.extend("    " + s_ + "\n" for s_ in decls + stmts + backs)
            out.append("}\n")
        out.append("static int rtn_vg(rt_program *p)\n{\n    int st;\n")
        out.append("    if ((st = rtn_fwd(p)) != RT_OK) return st;\n")
        out.extend(f"    rtn_vgrev_{k}(p);\n" for k in reversed(range(K)))
        out.append(seeds.replace("d[", "p->adj[") + "    return RT_OK;\n}\n")
    out.append("static const rt_native rtn_native = { rtn_fwd, NULL, rtn_vg, RTN_TAN };\n")
    out.append(_EPILOGUE)
    return "".join(out)


def _defer_last_sum(rows, ints, fwd, stmts):
    """A program ending in a long CSUM (a log density's sum of terms, the
    Rosenbrock loop's sum) adds its terms in a chain of dependent additions
    that nothing in the reverse sweep waits for: its partial sums move into
    the reverse statements, spread evenly, so the chain's latency overlaps
    the reverse work.  The same additions in the same order: the same bits."""
    op, n, o, a, b, c = rows[-1]
    if ops.VM_OPCODES[op & 0xFFFF] != "CSUM" or n < 8 or any(
            o in (r[3], r[4], r[5]) for r in rows[:-1]):
        return fwd, stmts
    define, store = f"const double x{o} = ", f"v[{o}] = x{o};"
    if sum(s_.startswith(define) for s_ in fwd) != 1 or store not in fwd:
        return fwd, stmts
    fwd = [s_ for s_ in fwd if not s_.startswith(define) and s_ != store]
    sums, prev = [], f"x{a}"
    for k, e in enumerate(ints[c:c + n]):
        sums.append(f"const double c{o}_{k} = {prev} {'+' if e >= 0 else '-'} x{e if e >= 0 else ~e};")
        prev = f"c{o}_{k}"
    step = max(1, len(stmts) // n)
    merged = []
    for j, s_ in enumerate(stmts):
        if j % step == 0 and sums:
            merged.append(sums.pop(0))
        merged.append(s_)
    return fwd, merged + sums + [f"v[{o}] = {prev};"]


def _vm_runs(stmts, lo, hi, sweep):
    """Statements of instructions [lo, hi) in sweep order, consecutive VM
    instructions merged into one call of the VM's sweep over their range."""
    out, k = [], lo
    idx = range(lo, hi) if sweep in ("fwd", "tan") else range(hi - 1, lo - 1, -1)
    run = None                                 # [first, last] of the pending VM run
    def flush():
        if run is not None:
            a, b = min(run), max(run) + 1
            out.append(f"if ((st = rtn_vm_{sweep}(p, {a}, {b})) != RT_OK) return st;")
    for k in idx:
        s = stmts[k]
        if s is None:
            run = [k, k] if run is None else [run[0], k]
            continue
        flush()
        run = None
        if s:
            out.append(s)
    flush()
    return out


def _chunks(fwd, n):
    """[lo, hi) pieces of about CHUNK instructions; a piece never ends inside
    a run of VM instructions (a tiled block is one: the VM's range entry
    points refuse a range that cuts it)."""
    out, lo = [], 0
    while lo < n or not out:
        hi = min(n, lo + CHUNK)
        while 0 < hi < n and fwd[hi - 1] is None and fwd[hi] is None:
            hi += 1
        out.append((lo, hi))
        lo = hi
    return out


def _assemble(fwd, rev):
    out = [_PRELUDE]
    # The two arenas are separate allocations: restrict lets gcc keep values
    # in registers across the other arena's stores (it changes no rounding).
    head = ("(rt_program *p)\n{\n    double *const restrict v = p->vals; "
            "double *const restrict d = p->adj;\n"
            "    const int32_t *const ints = p->ints;\n    int st = RT_OK;\n"
            "    (void)v; (void)d; (void)ints; (void)st;\n")
    n = len(fwd)
    bounds = _chunks(fwd, n)
    nf = len(bounds)
    for k in range(nf):
        lo, hi = bounds[k]
        out.append(f"RTN_PIECE int rtn_fwd_{k}{head}")
        out.extend("    " + s + "\n" for s in _vm_runs(fwd, lo, hi, "fwd"))
        out.append("    return RT_OK;\n}\n")
        out.append(f"RTN_PIECE int rtn_rev_{k}{head}")
        out.extend("    " + s + "\n" for s in _vm_runs(rev, lo, hi, "rev"))
        out.append("    return RT_OK;\n}\n")
    out.append("static int rtn_fwd(rt_program *p)\n{\n    int st;\n")
    out.extend(f"    if ((st = rtn_fwd_{k}(p)) != RT_OK) return st;\n" for k in range(nf))
    out.append("    return RT_OK;\n}\n")
    out.append("static int rtn_rev(rt_program *p)\n{\n    int st;\n")
    out.extend(f"    if ((st = rtn_rev_{k}(p)) != RT_OK) return st;\n" for k in reversed(range(nf)))
    out.append("    return RT_OK;\n}\n")
    out.append("static const rt_native rtn_native = { rtn_fwd, rtn_rev, NULL, RTN_TAN };\n")
    out.append(_EPILOGUE)
    return "".join(out)


# ------------------------------------------------------------------ tangent sweeps
# The tangent sweep (rt_jvp, rt_jacobian_fwd, and a HessianTape's hvp, which
# is forward-over-reverse: its tangent sweep runs over the gradient program)
# mirrors csrc/vm/sweeps.c's rt_run_tangent_range case by case: an instruction without flags is
# skipped (its tangent stays the caller's 0), a scalar unary or _VV binary is
# the VM's one-element path written out with literal offsets, arrays call
# kernels.c's rt_kt_ loops, the hand instructions call their own rt_tan_
# kernels from csrc/instr/ (inlined: static inline, literal arguments), a
# checked one returns its status, and linear algebra runs the VM's tangent
# sweep over its range (rtn_vm_tan).  Same code, same order: the VM's bits.
_XLISTS = None


def _xlist(macro):
    """Names listed by an X-macro of ops_generated.h (RT_HAND, RT_CHECKED ...)."""
    global _XLISTS
    if _XLISTS is None:
        text = (CSRC / "generated" / "ops_generated.h").read_text()
        _XLISTS = {}
        for m in ("RT_HAND", "RT_HAND_ND", "RT_CHECKED", "RT_LINALG"):
            body = text.split(f"#define {m}(X) \\\n", 1)[1].split("\n\n", 1)[0]
            _XLISTS[m] = {ln.strip().rstrip("\\").strip()[2:].split(",", 1)[0].rstrip(")")
                          for ln in body.splitlines() if ln.strip().startswith("X(")}
    return _XLISTS[macro]


# Index maps up to this long are written out with their indices as literals
# (a HessianTape's program scatters each gradient element with n = 1).
_TAN_UNROLL = 8


def _tan_indexed(name, n, o, a, c, ints):
    """GATHER/SCATTER/SCATTER_ADD tangents with the side table's entries as
    literals: csrc/instr/index.h's loops, unrolled in their order."""
    idx = ints[c:c + n]
    if name == "GATHER":
        return " ".join(f"t[{o + i}] = t[{a + k}];" for i, k in enumerate(idx))
    if name == "SCATTER":
        return " ".join(f"t[{o + k}] = t[{a + i}];" for i, k in enumerate(idx))
    return " ".join(f"t[{o + k}] += t[{a + i}];" for i, k in enumerate(idx))   # SCATTER_ADD


def _blas_to_vm(name, c, ints):
    """A MATMUL whose BLAS word is set (or unknown) runs on the VM's sweep:
    the VM holds BLAS's routines, a native library does not, and the VM's
    bits are the native tier's by construction (lower/blas.py)."""
    if name == "MATMUL" and (ints is None or ints[c + 3]):
        raise _VM(name)


def _hand(sweep, name, fl, n, o, a, b, c):
    """Any other hand instruction (reductions, MATMUL, GATHER_IDX ...): a call
    of its own static inline kernel from csrc/instr/, as csrc/vm/sweeps.c's FWD_HAND /
    REV_HAND / TAN_HAND cases make it, inlined here with literal arguments;
    a checked kernel's status (RT_BAD_INDEX) returned as the VM returns it.
    Linear algebra (csrc/instr/linalg/, not linked) raises _VM: the VM's range sweep."""
    args = {"fwd": "v, ints", "rev": f"{fl}u, v, d, ints", "tan": f"{fl}u, v, t, ints"}[sweep]
    call = f"rt_{sweep}_{name}({args}, {n}, {o}, {a}, {b}, {c})"
    if name in _xlist("RT_HAND"):
        return call + ";"
    if name in _xlist("RT_CHECKED"):
        return f"if ((st = {call}) != RT_OK) return st;"
    if name in _xlist("RT_HAND_ND"):
        return "" if sweep != "fwd" else call + ";"
    raise _VM(name)


def _tan(name, fl, n, o, a, b, c, ints=None):
    """C for one instruction's tangent step (csrc/vm/sweeps.c's TAN_* cases); "" when the
    VM skips it; raises _VM for instructions left to the VM's sweep."""
    if not fl:
        return ""                              # no operand has a tangent: out's stays 0
    fam = _FAM.get(name)
    if fam is not None:
        kind, base, var = fam
        if kind == "u":
            if n != 1:
                return f"rt_kt_{name}({n}, t, v, {o}, {a});"
            return (f"{{ const double ta = t[{a}]; "
                    f"if (ta != 0.0) t[{o}] = ta * nd_{base}(v[{a}], v[{o}]); }}")
        if kind == "b":
            if n != 1 or var != "VV":
                return f"rt_kt_{name}({fl}u, {n}, t, v, {o}, {a}, {b});"
            # an operand whose flag is off has tangent 0.0: its tests are
            # dropped here rather than left to gcc (compile time)
            decl = ", ".join(([f"ta = t[{a}]"] if fl & 1 else []) + ([f"tb = t[{b}]"] if fl & 2 else []))
            test = " || ".join(([f"ta != 0.0"] if fl & 1 else []) + ([f"tb != 0.0"] if fl & 2 else []))
            terms = ((f" if (ta != 0.0) r += ta * ndx_{base}(x, y, f);" if fl & 1 else "")
                     + (f" if (tb != 0.0) r += tb * ndy_{base}(x, y, f);" if fl & 2 else ""))
            return (f"{{ const double {decl}; if ({test}) {{ "
                    f"const double x = v[{a}], y = v[{b}], f = v[{o}]; double r = 0.0;"
                    f"{terms} t[{o}] = r; }} }}")
        return ""                              # masks and guards carry no flags
    if ints is not None and name == "CSUM":    # fused.h's rt_tan_CSUM, terms as literals
        terms = "".join(f" r += t[{e}];" if e >= 0 else f" r -= t[{~e}];"
                        for e in ints[c:c + n])
        return f"{{ double r = {f't[{a}]' if fl & 1 else '0.0'};{terms} t[{o}] = r; }}"
    if ints is not None and name in ("GATHER", "SCATTER", "SCATTER_ADD") and n <= _TAN_UNROLL:
        return _tan_indexed(name, n, o, a, c, ints)
    _blas_to_vm(name, c, ints)
    return _hand("tan", name, fl, n, o, a, b, c)


def _tangent_section(rows, ints=None):
    """The generated tangent sweep: pieces of CHUNK instructions, rtn_tan."""
    stmts = []
    block_end, block_st = -1, None
    for k, (op, n, o, a, b, c) in enumerate(rows):
        name, fl = ops.VM_OPCODES[op & 0xFFFF], (op & 0xFFFFFFFF) >> 16
        if name == "BLOCK":                    # csrc/instr/block.h: run whole by the VM
            block_end, block_st = k + o + 1, (None if fl else "")
        if k <= block_end:
            stmts.append(block_st)             # (no flag: no member has tangent work)
            continue
        try:
            stmts.append(_tan(name, fl, n, o, a, b, c, ints))
        except _VM:
            stmts.append(None)
    head = ("(rt_program *p)\n{\n    const double *const restrict v = p->vals; "
            "double *const restrict t = p->adj;\n"
            "    const int32_t *const ints = p->ints;\n    int st = RT_OK;\n"
            "    (void)v; (void)t; (void)ints; (void)st;\n")
    bounds = _chunks(stmts, len(rows))         # no cut inside a VM run (a block)
    K = len(bounds)
    out = []
    for k, (lo, hi) in enumerate(bounds):
        out.append(f"RTN_PIECE int rtn_tan_{k}{head}")
        out.extend("    " + s_ + "\n" for s_ in _vm_runs(stmts, lo, hi, "tan"))
        out.append("    return RT_OK;\n}\n")
    out.append("static int rtn_tan(rt_program *p)\n{\n    int st;\n")
    out.extend(f"    if ((st = rtn_tan_{k}(p)) != RT_OK) return st;\n" for k in range(K))
    out.append("    return RT_OK;\n}\n")
    return "".join(out)


_TABLE = "static const rt_native rtn_native ="


def _with_tangent(src, rows, tangent=True, ints=None):
    """src (a forward/reverse generator's output) with the tangent sweep added
    before its table, whose tangent member is RTN_TAN (NULL: the VM's sweep)."""
    i = src.index(_TABLE)
    sec = _tangent_section(rows, ints) + "#define RTN_TAN rtn_tan\n" if tangent else \
        "#define RTN_TAN NULL\n"
    return src[:i] + sec + src[i:]


# ------------------------------------------------------------------ building
# The runtime every library links (kernels.c, specfun.c) is one shared library
# per compiler and source version, revtape_kernels_<key>.so, that each program's
# library names as its dependency: a program's library holds only its own code.
#
# The cache trusts nothing it did not write.  Its directory must be the user's
# and writable by no one else (else a private temporary directory serves, with
# one warning); every library's sha256 is recorded at build time in a file
# beside it (revtape_<key>.sha256, which also names the key), and a library is
# hashed right before its dlopen; a file that is not the user's, or does not
# match, is never dlopen'ed but rebuilt.  (Only the user can change a file of
# the directory between the two; revtape itself never rewrites one in place.)  The key of a program's
# library is a hash of its generated C, of this module's source (the code
# generator), of the C sources it includes and of the compiler command.
_OBJECTS = ("kernels/specfun.c", "kernels/kernels.c")
_SOURCES = ("vm.h", "generated/ops_generated.h", "kernels/specfun.h", "kernels/kernels.h", *_OBJECTS)
_ffi = None
_loaded = {}                      # program key -> (lib, path, table address): immutable, shared
_lock = threading.Lock()          # guards _loaded, _key_locks and the per-process caches
_key_locks = {}                   # program key -> the lock its build holds
_keep = []                        # every library loaded: never closed (tapes point into them)
_objects_lock = threading.Lock()
_kernels = {}                     # path of a verified kernels library -> its handle
_compilers = {}                   # ($REVTAPE_CC, $CC, $CFLAGS) -> (Compiler, compiler id)
_EUID = os.geteuid() if hasattr(os, "geteuid") else None   # None: no owners to check (Windows)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_HOST = hashlib.sha256(platform.node().encode()).hexdigest()[:8]
STALE_SECONDS = 86400             # a temporary older than this is stale whoever made it


def cache_dir():
    """The configured cache directory ($REVTAPE_CACHE_DIR, else the user's cache)."""
    d = config.get("REVTAPE_CACHE_DIR")
    if d is not None:
        return d
    if sys.platform == "darwin":
        return pathlib.Path.home() / "Library" / "Caches" / "revtape"
    return (config.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "revtape"


def _ours(st):
    """A regular file (never a link) that belongs to this user."""
    return stat.S_ISREG(st.st_mode) and (_EUID is None or st.st_uid == _EUID)


def _check_dir(d):
    """None if d may hold this user's libraries (created 0700 if missing), else why not."""
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.stat(d)
    except OSError as e:
        return f"cannot be created ({e.strerror or e})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if _EUID is not None and st.st_uid != _EUID:
        return f"belongs to another user (uid {st.st_uid})"
    if os.name == "posix" and st.st_mode & 0o022:
        return f"is writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    if not os.access(d, os.W_OK | os.X_OK):
        return "is read-only"
    return None


_private = None
_refused = set()                  # cache directories refused (warned about) in this process


def _private_dir():
    """This process's own cache directory (0700, removed at exit)."""
    global _private
    with _lock:
        if _private is None:
            import atexit
            try:
                _private = pathlib.Path(tempfile.mkdtemp(prefix="revtape-native-"))
            except OSError as e:
                raise NativeCompileError(
                    f"the native tier found no directory to build in ({e}); set "
                    f"REVTAPE_CACHE_DIR to a directory only you can write, or compile with "
                    f"native=False to use the VM") from e
            pid = os.getpid()          # a forked child leaves its parent's directory alone
            atexit.register(lambda p=_private: os.getpid() == pid and
                            shutil.rmtree(p, ignore_errors=True))
        return _private


def _refuse(d, why):
    with _lock:
        first = str(d) not in _refused
        _refused.add(str(d))
    if first:
        _warn(f"revtape: the native cache directory {d} {why}, so it is not used; this "
              f"process builds its native libraries in a private temporary directory "
              f"instead.  Set REVTAPE_CACHE_DIR to a directory only you can write.")


def _usable_dir():
    d = cache_dir()
    if str(d) in _refused:
        return _private_dir()
    why = _check_dir(d)
    if why is None:
        return d
    _refuse(d, why)
    return _private_dir()


class _Unwritable(Exception):
    """Writing into the cache directory failed (read-only file system, full disk ...)."""


def _read_record(path, key):
    """The sha256 recorded for the library at path under key, or None."""
    try:
        fd = os.open(path.with_suffix(".sha256"), os.O_RDONLY | _NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        words = os.read(fd, 256).decode("ascii", "replace").split() \
            if _ours(st) and st.st_size <= 256 else []
    finally:
        os.close(fd)
    return words[1] if len(words) == 2 and words[0] == key else None


def _dlopen_verified(path, key):
    """dlopen the library at path if it is this user's file and its bytes hash to
    what its build recorded under key; None (never a dlopen) if it is not."""
    want = _read_record(path, key)
    if want is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not _ours(st) or st.st_size == 0:
            return None
        h = hashlib.sha256()
        with os.fdopen(fd, "rb", closefd=False) as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        if h.hexdigest() != want:
            return None
        try:
            # by its path: the name /proc/self/fd/N would be reused by the next
            # library, and the dynamic loader takes a known name for a loaded object
            return _get_ffi().dlopen(str(path))
        except OSError as e:
            if not os.path.exists(path):
                return None                    # evicted by another process meanwhile: rebuild
            raise NativeCompileError(
                f"the native library {path} matches its recorded hash but could not be "
                f"loaded ({e}); delete it, or compile with native=False to use the VM") from e
    finally:
        os.close(fd)


def _publish(built, path, key):
    """Move a finished library into place with its record, each by an atomic
    rename: a reader sees the old file, or the new one and its hash."""
    try:
        h = hashlib.sha256(built.read_bytes()).hexdigest()
    except OSError as e:
        raise NativeCompileError(f"the C compiler reported success but wrote no library "
                                 f"({e}); compile with native=False to use the VM") from e
    rec = built.with_suffix(".sha256")
    try:
        rec.write_text(f"{key} {h}\n")
        os.replace(built, path)
        os.replace(rec, path.with_suffix(".sha256"))
    except OSError as e:
        raise _Unwritable(e) from e


class _BuildDir:
    """A temporary directory in the cache, named for its process so that the
    next build can delete the ones of a process that died mid-way."""

    def __init__(self, d):
        self.d = d

    def __enter__(self):
        try:
            self.path = pathlib.Path(tempfile.mkdtemp(prefix=f"tmp-{os.getpid()}@{_HOST}-",
                                                      dir=self.d))
        except OSError as e:
            raise _Unwritable(e) from e
        return self.path

    def __exit__(self, *exc):
        shutil.rmtree(self.path, ignore_errors=True)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    try:                                          # a zombie is dead too
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _clean_stale(d):
    """Delete the temporaries of builds that died: those of a process of this
    host that no longer runs, and any older than STALE_SECONDS."""
    import time
    now = time.time()
    try:
        entries = list(os.scandir(d))
    except OSError:
        return
    for e in entries:
        if not e.name.startswith("tmp"):
            continue
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        owner = e.name[4:].split("-", 1)[0].split("@")
        mine = e.name.startswith("tmp-") and len(owner) == 2 and owner[1] == _HOST \
            and owner[0].isdigit()
        if (mine and not _alive(int(owner[0]))) or now - st.st_mtime > STALE_SECONDS:
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(e.path, ignore_errors=True)
            else:
                try:
                    os.unlink(e.path)
                except OSError:
                    pass


class _FileLock:
    """One build per key across processes: flock on a lock file in the cache
    (256 stripes by the key's first byte, never deleted).  Where fcntl does
    not exist (Windows) builds are not serialised across processes; the atomic
    publish keeps each result whole."""

    def __init__(self, d, name):
        self.file = d / f".lock-{name}"

    def __enter__(self):
        try:
            import fcntl
        except ImportError:
            self.fd = None
            return self
        try:
            self.fd = os.open(self.file, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600)
        except OSError as e:
            raise _Unwritable(e) from e
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)              # releases the lock


def _touch(path):
    try:
        os.utime(path)                     # the LRU bound's "last used"
    except OSError:
        pass


def _evict(d, keep):
    """Delete the least recently used libraries beyond $REVTAPE_CACHE_MAX_MB."""
    limit = config.get("REVTAPE_CACHE_MAX_MB") * 2 ** 20
    libs = []
    try:
        for e in os.scandir(d):
            if e.name.startswith("revtape_") and e.name.endswith((".so", ".sha256")):
                st = e.stat(follow_symlinks=False)
                libs.append((st.st_mtime, st.st_size, e.name))
    except OSError:
        return
    sizes = {}
    for mtime, size, name in libs:
        stem = name.rsplit(".", 1)[0]
        t, s = sizes.get(stem, (mtime, 0))
        sizes[stem] = (max(t, mtime) if name.endswith(".so") else t, s + size)
    total = sum(s for _, s in sizes.values())
    for stem, (_, size) in sorted(sizes.items(), key=lambda kv: kv[1][0]):
        if total <= limit:
            break
        if stem in keep:
            continue
        for suffix in (".so", ".sha256"):
            try:
                os.unlink(d / (stem + suffix))
            except OSError:
                pass
        total -= size


class Compiler(typing.NamedTuple):
    """How the native tier runs the C compiler: argv (the binary's path, then
    the words that followed it in $CC, e.g. -pthread), and cflags ($CFLAGS),
    which go after revtape's own FLAGS."""
    argv: tuple
    cflags: tuple

    def __str__(self):
        return " ".join(self.argv)


def compiler():
    """The C compiler, as setuptools and cffi choose it: $REVTAPE_CC (revtape's
    own override), else $CC, else the compiler Python was built with
    (sysconfig's CC), else cc, else gcc on PATH; with $CFLAGS."""
    return _compiler()[0]


def find_compiler():
    """The C compiler's path (see compiler())."""
    return _compiler()[0].argv[0]


def _compiler():
    own, cc, cflags = (config.get(v) for v in ("REVTAPE_CC", "CC", "CFLAGS"))
    hit = _compilers.get((own, cc, cflags))
    if hit is not None:
        return hit
    chosen = own or cc
    built_with = tuple(shlex.split(sysconfig.get_config_var("CC") or ""))
    for words in [chosen] if chosen else [built_with, ("cc",), ("gcc",)]:
        path = shutil.which(words[0]) if words else None
        if path:
            path = os.path.realpath(path)
            # Path, size and mtime of the binary: a compiler upgrade changes the
            # key without running `cc --version` in every process.
            st = os.stat(path)
            cc_id = f"{path}:{st.st_size}:{st.st_mtime_ns}"
            if words[1:] or cflags:
                cc_id += f"|{shlex.join(words[1:])}|{shlex.join(cflags)}"
            hit = _compilers[(own, cc, cflags)] = (Compiler((path, *words[1:]), cflags), cc_id)
            return hit
    # .missing says what is missing in words that fit native="auto"'s warning too
    if chosen:
        var = "REVTAPE_CC" if own else "CC"
        missing = f"the C compiler {chosen[0]} (${var}) was not found on PATH"
        e = NativeCompileError(
            f"native=True needs a C compiler, and {chosen[0]} (${var}) was not found on PATH; "
            f"install it or set {var} to another one, or compile with native=False to use "
            f"the VM")
    else:
        missing = "no C compiler (sysconfig's CC, cc, gcc) was found on PATH"
        e = NativeCompileError(
            "native=True needs a C compiler, and none (sysconfig's CC, cc, gcc) was found on "
            "PATH; install one (or set CC), or compile with native=False to use the VM")
    e.missing = missing
    raise e


_digest = None
_gen_digest = None
_GENERATOR = pathlib.Path(__file__)      # the code generator: this module's source


def _sources_digest():
    """Hash of the C the generated code is built from: the compiled runtime
    sources and every header under CSRC (whatever a header includes is in it).
    An installed copy (revtape/_csrc) is first checked against the SHA256SUMS
    its build wrote."""
    global _digest
    if _digest is None:
        sums = CSRC / "SHA256SUMS"
        if sums.is_file():
            for line in sums.read_text().splitlines():
                want, name = line.split(None, 1)
                try:
                    got = hashlib.sha256((CSRC / name).read_bytes()).hexdigest()
                except OSError:
                    got = None
                if got != want:
                    raise NativeCompileError(
                        f"revtape's installed C sources were modified ({CSRC / name} does "
                        f"not match {sums}); reinstall revtape, or compile with native=False")
        h = hashlib.sha256()
        names = sorted({*_SOURCES, *(f.relative_to(CSRC).as_posix() for f in CSRC.rglob("*.h"))})
        for name in names:
            h.update(name.encode() + b"\0" + (CSRC / name).read_bytes())
        _digest = h.digest()
    return _digest


def _generator_digest():
    """Hash of the code generator (this module) and the op table it reads: a
    change to either is a new key without anyone bumping a version by hand."""
    global _gen_digest
    if _gen_digest is None:
        _gen_digest = hashlib.sha256(_GENERATOR.read_bytes() + b"|" +
                                     str(ops.OP_TABLE_HASH).encode()).digest()
    return _gen_digest


def _key(code, ints, layout, cc_id):
    """A program's key in this process (_loaded): its words, side table and layout,
    the generator, the C sources and the compiler; cheap (no translation)."""
    h = hashlib.sha256()
    h.update(f"{cc_id}|{' '.join(FLAGS)}|{CHUNK}|{SCALAR_CHUNK}|{ROLL_MIN}|{ROLL_PERIOD}|"
             f"{ROLL_REPEATS}|{layout}|".encode())
    h.update(_generator_digest())
    h.update(_sources_digest())
    h.update(np.ascontiguousarray(code, dtype=np.int32).tobytes())
    h.update(b"|")
    h.update(np.ascontiguousarray(ints, dtype=np.int32).tobytes())
    return h.hexdigest()[:32]


def _disk_key(src, cc_id, kernels):
    """A library's name in the cache: a hash of its generated C, the generator,
    the C sources it includes, the compiler command and the kernels it links."""
    h = hashlib.sha256(f"program|{cc_id}|{' '.join(FLAGS)}|{pathlib.Path(kernels).name}|"
                       .encode())
    h.update(_generator_digest())
    h.update(_sources_digest())
    h.update(src.encode())
    return h.hexdigest()[:32]


def _kernels_key(cc_id):
    # C only (no generator digest): the kernels survive a change to this module
    h = hashlib.sha256(f"kernels|{cc_id}|{' '.join(FLAGS)}|{sys.platform}|".encode())
    h.update(_sources_digest())
    return h.hexdigest()[:32]


def _get_ffi():
    global _ffi
    if _ffi is None:
        import cffi
        _ffi = cffi.FFI()
        # void *: the table is read through the VM's own ffi (rt_native *).
        _ffi.cdef("void rtn_init(void *fwd_range, void *rev_range, void *tan_range);\n"
                  "void *rtn_table(void);")
    return _ffi


def _timeout():
    return config.get("REVTAPE_NATIVE_TIMEOUT")


def load(code, ints, layout, auto=False):
    """The native library for this program: from memory, from the disk cache, or
    built now.  Returns (table address, path, seconds spent compiling or 0.0).
    auto=True (the builder thread): a program whose build failed before in
    this process fails again at once instead of running the compiler again."""
    if not CSRC.is_dir():
        raise NativeCompileError(f"the native tier needs revtape's C sources at {CSRC}")
    timeout = _timeout()        # a bad setting is the caller's error, never one cached below
    config.get("REVTAPE_CACHE_MAX_MB")
    cc, cc_id = _compiler()
    key = _key(code, ints, layout, cc_id)
    with _lock:
        hit = _loaded.get(key)
        if hit is not None:
            return hit[2], hit[1], 0.0
        if auto and key in _failed:
            raise _failed[key]
        klock = _key_locks.setdefault(key, threading.Lock())
    # One build per program at a time in this process (other programs build
    # alongside); other processes wait on the cache's file lock (_FileLock).
    with klock:
        hit = _loaded.get(key)
        if hit is not None:
            return hit[2], hit[1], 0.0
        try:
            return _build(code, ints, layout, key, cc, cc_id, timeout)
        except RevtapeError as e:
            _failed[key] = e
            raise


def _build(code, ints, layout, key, cc, cc_id, timeout):
    """Find (verified) or compile the library of this program and load it."""
    import time
    src = translate(code, ints, layout)          # UnsupportedError before any compiler runs
    deadline = time.monotonic() + timeout
    d = _usable_dir()
    try:
        lib, path, spent = _build_in(d, src, cc, cc_id, deadline)
    except _Unwritable as e:
        if d == _private:
            raise NativeCompileError(f"the native tier cannot write to {d} ({e}); compile "
                                     f"with native=False to use the VM") from e
        _refuse(d, f"cannot be written ({e})")
        lib, path, spent = _build_in(_private_dir(), src, cc, cc_id, deadline)
    from .._vm import ffi as vm_ffi, lib as vm_lib
    nffi = _get_ffi()
    hooks = [nffi.cast("void *", int(vm_ffi.cast("uintptr_t", vm_ffi.addressof(vm_lib, f))))
             for f in ("rt_vm_forward_range", "rt_vm_reverse_range", "rt_vm_tangent_range")]
    lib.rtn_init(*hooks)
    table = int(nffi.cast("uintptr_t", lib.rtn_table()))
    with _lock:
        _keep.append(lib)
        _loaded[key] = (lib, path, table)
    return table, path, spent


def _build_in(d, src, cc, cc_id, deadline):
    import time
    global compiles
    (kernels,) = _runtime_objects(cc, cc_id, d, deadline)   # loaded first: the dependency
    dkey = _disk_key(src, cc_id, kernels)
    path = d / f"revtape_{dkey}.so"
    lib = _dlopen_verified(path, dkey)
    if lib is not None:
        _touch(path)
        return lib, path, 0.0
    with _FileLock(d, dkey[:2]):
        lib = _dlopen_verified(path, dkey)     # another process built it meanwhile
        if lib is not None:
            return lib, path, 0.0
        _clean_stale(d)
        t0 = time.perf_counter()
        with _BuildDir(d) as tmp:
            c_file = tmp / f"revtape_{dkey}.c"
            out = tmp / "lib.so"
            try:
                c_file.write_text(src)
            except OSError as e:
                raise _Unwritable(e) from e
            _run([*cc.argv, *FLAGS, *cc.cflags, f"-I{CSRC}", "-o", str(out), str(c_file),
                  kernels, "-lm"], cc, deadline)
            _publish(out, path, dkey)
        spent = time.perf_counter() - t0
        compiles += 1
        lib = _dlopen_verified(path, dkey)
        if lib is None:
            raise NativeCompileError(f"the native library {path} changed between its build and "
                                     f"its load; compile with native=False to use the VM")
        _evict(d, keep={path.stem, pathlib.Path(kernels).stem})
    return lib, path, spent


def _link_name(name, path):
    """The kernels library's own name, which each program's library records as
    its dependency; it is loaded (verified) before them, so the dynamic loader
    finds it among the loaded objects and never searches the file system."""
    if sys.platform == "darwin":
        return [f"-Wl,-install_name,{path}"]
    return [f"-Wl,-soname,{name}"]


def _run(cmd, cc, deadline):
    """Run the compiler in its own process group: a timeout (or an interrupt)
    kills the group, so nothing it started outlives it."""
    import signal
    import time
    left = deadline - time.monotonic()
    if left <= 0:
        raise NativeTimeout(f"the C compiler {cc} took longer than REVTAPE_NATIVE_TIMEOUT="
                            f"{_timeout():g} s; compile with native=False to use the VM")
    posix = os.name == "posix"
    try:
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, errors="replace",
                             start_new_session=posix)
    except OSError as e:
        raise NativeCompileError(f"the C compiler {cc} failed to run: {e}; "
                                 f"compile with native=False to use the VM") from e
    try:
        _, err = p.communicate(timeout=left)
    except BaseException as e:
        try:
            if posix:
                os.killpg(p.pid, signal.SIGKILL)
            else:
                p.kill()
        except OSError:
            pass
        p.wait()
        for f in (p.stdout, p.stderr):
            f.close()
        if isinstance(e, subprocess.TimeoutExpired):
            raise NativeTimeout(f"the C compiler {cc} took longer than REVTAPE_NATIVE_TIMEOUT="
                                f"{_timeout():g} s; compile with native=False to use the "
                                f"VM") from e
        raise
    if p.returncode != 0:
        raise NativeCompileError(
            f"the C compiler {cc} failed (exit {p.returncode}): {err[-2000:]}; "
            f"compile with native=False to use the VM")


def _runtime_objects(cc, cc_id, d, deadline):
    """The kernels library (_OBJECTS compiled into one shared library) of this
    compiler and source version in d: verified, loaded, built if missing
    (kernels.c alone takes seconds).  Returns [its path]."""
    key = _kernels_key(cc_id)
    name = f"revtape_kernels_{key}.so"
    path = d / name
    with _objects_lock:
        if path in _kernels:
            return [str(path)]
        lib = _dlopen_verified(path, key)
        if lib is None:
            with _FileLock(d, "kernels"):
                lib = _dlopen_verified(path, key)
                if lib is None:
                    _clean_stale(d)
                    with _BuildDir(d) as tmp:
                        out = tmp / name
                        _run([*cc.argv, *FLAGS, *cc.cflags, f"-I{CSRC}", *_link_name(name, path),
                              "-o", str(out), *(str(CSRC / n) for n in _OBJECTS), "-lm"],
                             cc, deadline)
                        _publish(out, path, key)
                    lib = _dlopen_verified(path, key)
                    if lib is None:
                        raise NativeCompileError(
                            f"the kernels library {path} changed between its build and its "
                            f"load; compile with native=False to use the VM")
        else:
            _touch(path)
        _keep.append(lib)
        _kernels[path] = lib
    return [str(path)]


# The user's line whose call made the tape being built hot (set on the builder
# thread for each build): the builder's warnings point there, not into its own
# stack, which holds no user frame.
_site = threading.local()


def _warn(message):
    """A NativeWarning pointing at the user's line: the first frame outside
    revtape, or on the builder thread the line that made the tape hot."""
    warn_at(message, NativeWarning, getattr(_site, "where", None))


def _layout(ct, tangent=True):
    """What the generated code depends on besides the words (part of the key):
    the arena layout, the has_aux extras, and whether it has a tangent sweep."""
    prog = ct._program
    extras = tuple((int(off), int(np.prod(shape, dtype=np.int64))) for off, shape in prog.extras)
    return (prog.n_vals, prog.n_in, prog.n_grad, prog.n_fixed, prog.out_off, prog.out_len,
            extras, bool(tangent))


def _wants_tangent(ct):
    """native="auto" builds a tangent sweep only for programs that use one: a
    HessianTape's (hessian, hvp), or one that already served a jvp/Jacobian
    by tangents.  It costs compile time (about as much again as the rest on
    eight-schools) that a gradient-only program would pay for nothing; such a
    program's first jvp rebuilds it with one (add_tangent)."""
    return getattr(ct, "_tangent_program", False) or bool(ct.__dict__.get("_tangent_used"))


def _install(ct, table, path, spent):
    from .._vm import ffi as vm_ffi, lib as vm_lib
    ct._native_path, ct.native_compile_seconds = path, spent
    ct._native_state = "native"
    # An atomic release store in C: a replay running on another thread
    # finishes on the sweeps it started with, the next one runs native code.
    vm_lib.rt_set_native(ct._p, vm_ffi.cast("rt_native *", table))


def attach(ct):
    """native=True: build (or find) the native code now and switch ct to it."""
    why = untranslatable(ct._code)
    if why is not None:
        raise UnsupportedError(f"native=True cannot translate this program: {why}; "
                               f"use native=False")
    table, path, spent = load(ct._code, ct._ints, _layout(ct))
    _install(ct, table, path, spent)


# ------------------------------------------------------------------ native="auto"
class NativeTimeout(NativeCompileError):
    """The C compiler took longer than $REVTAPE_NATIVE_TIMEOUT seconds."""


_queue = None            # (weakref to a CompiledTape, key) jobs for the builder thread
_warned = set()          # kinds of failure already warned about in this process
_failed = {}             # cache key -> why its build failed (not retried in this process)


def auto_enabled():
    """native="auto" is on unless $REVTAPE_NATIVE is off."""
    return config.get("REVTAPE_NATIVE")


def arm(ct):
    """native="auto" at construction: the VM serves now; the program becomes hot
    after $REVTAPE_NATIVE_CALLS calls or $REVTAPE_NATIVE_SECONDS of replay
    (counted in C), and then compiles in the background (hot)."""
    import time
    ct._native_event = threading.Event()
    on = auto_enabled()
    if on:
        # While the native tier is on, every compile reads its settings: a bad
        # one is this call's ConfigError, not a warning from the builder thread.
        calls, secs = config.get("REVTAPE_NATIVE_CALLS"), config.get("REVTAPE_NATIVE_SECONDS")
        _timeout()
        config.get("REVTAPE_CACHE_MAX_MB")
    # An installation without revtape's C sources has no native tier to
    # offer: "auto" is the VM there, without a warning.
    if not on or not CSRC.is_dir() or untranslatable(ct._code) is not None:
        ct._native_state = "off"
        ct._native_event.set()
        return
    ct._native_state = "vm"
    try:
        cc_id = _compiler()[1]
        hit = (_loaded.get(_key(ct._code, ct._ints, _layout(ct, True), cc_id))
               or _loaded.get(_key(ct._code, ct._ints, _layout(ct, False), cc_id)))
    except NativeCompileError:
        hit = None                           # hot will say so, once
    if hit is not None:                      # a copy of a tape that is already native
        _install(ct, hit[2], hit[1], 0.0)
        ct._native_event.set()
        return
    p = ct._p
    p.hot_calls = p.hot_ns = 0
    p.hot_max_ns = min(int(secs * 1e9), 2 ** 62)
    p.hot_max_calls = max(calls, 1)


def hot(ct):
    """The call that made ct hot (status RT_OK_HOT) lands here: queue its build
    for the builder thread and return at once."""
    global _queue
    if ct._native_state != "vm":
        return
    ct._native_state = "compiling"
    with _lock:
        if _queue is None:
            import queue
            _queue = queue.SimpleQueue()
            threading.Thread(target=_builder, args=(_queue,), name="revtape-native",
                             daemon=True).start()
    import weakref
    _queue.put((weakref.ref(ct), ct._code, ct._ints, _layout(ct, _wants_tangent(ct)),
                user_site()))


def add_tangent(ct):
    """A native="auto" program built without a tangent sweep (it served only
    gradients before it got hot) is asked for its first jvp: rebuild it with
    one in the background.  Its current native code keeps serving (the VM's
    tangent sweep meanwhile); the new table replaces it atomically."""
    from .._vm import ffi as vm_ffi
    nat = ct._p.native
    if ct._native != "auto" or ct._native_state != "native" or nat == vm_ffi.NULL \
            or nat.tangent != vm_ffi.NULL:
        return
    ct._native_event.clear()
    ct._native_state = "vm"
    hot(ct)


def _builder(q):
    """The builder thread: one build at a time (a compiler is a heavy process),
    never an exception to anyone; a failure leaves the VM serving, with one
    warning per kind of failure per process."""
    while True:
        ref, code, ints, layout, _site.where = q.get()
        ct = ref()
        if ct is None:
            continue                          # dropped while it waited
        del ct                                # a long build must not keep it alive
        try:
            table, path, spent = load(code, ints, layout, auto=True)
        except BaseException as e:            # noqa: BLE001 - the VM keeps serving
            # warned before the event is set: whoever waits for the build (wait_native)
            # sees the warning already issued
            _warn_once(e)
            ct = ref()
            if ct is not None:
                ct._native_state = "failed"
                ct._native_error = e
                ct._native_event.set()
            continue
        ct = ref()
        if ct is not None:
            _install(ct, table, path, spent)
            ct._native_event.set()
        del ct


def _warn_once(e):
    kind = ("timeout" if isinstance(e, NativeTimeout) else
            "compiler" if isinstance(e, NativeCompileError) else type(e).__name__)
    with _lock:
        if kind in _warned:
            return
        _warned.add(kind)
    try:
        # native=True's advice (use native=False) is what "auto" does already
        why = re.sub(r"[;,]? (or )?compile with native=False to use the VM$", "", str(e))
        missing = getattr(e, "missing", None)
        _warn(f"revtape: this tape got hot, but native='auto' could not build native code "
              f"for it: {missing or why}.  The VM keeps serving it (the same results, only "
              f"slower).  " + ("Install a C compiler or set CC to one; set " if missing else
                               "Set ") + "REVTAPE_NATIVE=0 to stop trying (and silence this "
              "warning).")
    except BaseException:                     # noqa: BLE001 - e.g. warnings turned into errors
        pass
