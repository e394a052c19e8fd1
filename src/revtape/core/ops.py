"""The op table: the single source of truth for every operation revtape records.

Each row declares, in one place, an operation's name, family, numpy forward,
reverse rule and (for elementwise families) the C expressions of its value
and local partials.  Everything else is derived from this table:

* the primitives (``ops.P.sin`` ...) that tracked values dispatch to,
* the reference replay (tape.py) and the traced reverse pass (HessianTape),
* the VM opcode list and ``csrc/generated/ops_generated.h`` (see ``_codegen.py``),
* the op-table hash that a built extension and a pickled program must match.

Reverse rules are written with the primitives themselves, as in HIPS
autograd, so the same rule runs on plain arrays (reference replay) and on
tracked values (recording a gradient onto a new tape for Hessians).

Elementwise rules give local partials; the replay engine turns a partial d
into ``azmul(g, d)`` -- a multiply in which an exactly-zero adjoint stays zero
even when d is inf or nan (CppAD's azmul) -- and unbroadcasts once for all.
"""

import hashlib
import math
import operator
from dataclasses import dataclass, field

import numpy as np

from . import cspecial as _cspecial, lazyscipy, specfun as _specfun

from ..errors import UnsupportedError, VerificationError

# scipy is optional.  Every row exists with or without it (the C VM, the
# opcodes and the table hash never depend on scipy); only the numpy forward
# of a scipy-backed row differs: scipy's own function when scipy imports,
# else a scipy-free forward (_specfun.py) or, failing that, one that says to
# install scipy.  To add a scipy-backed row: `_scipy("name", fallback)` as
# its numpy forward (see gammaln below).  scipy is imported at the first call
# of such a forward, never by `import revtape` (lazyscipy.py).


def _scipy(name, fallback=None):
    """A forward calling scipy.special.<name> if scipy imports, else fallback,
    else raising UnsupportedError naming scipy.  scipy is looked up at the
    first call; the row's scipy ufunc (for __array_ufunc__) is registered
    when scipy.special is imported (scipy_ufuncs below)."""
    def needs_scipy(*args, **kwargs):
        raise UnsupportedError(f"scipy.special.{name} needs scipy installed (pip install scipy)")

    chosen = []

    def forward(*args, **kwargs):
        if not chosen:
            sps = lazyscipy.special()
            chosen.append(getattr(sps, name) if sps is not None else fallback or needs_scipy)
        return chosen[0](*args, **kwargs)
    forward.__name__ = name
    forward._scipy_name = name
    return forward


def _polygamma_fwd(n):
    def forward(x):
        sps = lazyscipy.special()
        return sps.polygamma(n, x) if sps is not None else _specfun.polygamma(n, x)
    return forward

# Families.  The elementwise ones are generated into the C VM from their
# expressions; the others have a hand-written kernel in csrc/instr/ (or are
# lowered by the compiler into those kernels).
UNARY, BINARY, UNARY_ND, BINARY_ND = "unary", "binary", "unary_nd", "binary_nd"
WHERE, CLIP, REDUCE, MATMUL, GUARD = "where", "clip", "reduce", "matmul", "guard"
STRUCT = "struct"  # reshape/take/item/scatter_add/concat: lowered to aliases, gathers, scatters
LINALG = "linalg"  # dense matrix kernels in csrc/instr/linalg/: one opcode each
PYCALL = "pycall"  # a user's @rt.primitive: the VM calls back into Python (primitives.py)


@dataclass(eq=False)
class Op:
    name: str
    family: str
    fwd: object                       # numpy forward on plain values
    partials: tuple = ()              # elementwise: d(out)/d(arg_i) as fn(ans, *args)
    vjp: object = None                # other families: fn(i, g, ans, *args, **params)
    c_fwd: str = ""                   # C expression in x (and y)
    c_partials: tuple = ()            # C expressions in x, y and f (the output)
    doc: str = ""
    diff: bool = True
    sfwd: object = None               # fast forward on Python floats (None: numpy only)
    # How users reach the row; every dispatch list (UFUNC_OPS, ..., at the end of
    # this file) is derived from these fields, so a new row needs no edit elsewhere.
    ufuncs: tuple = None              # numpy/scipy ufuncs whose call records this row;
    #                                   None: the row's numpy forward if it is a ufunc
    special: str = ""                 # scipy.special's name of the row: rt.special.<special>
    #                                   is the row, scipy's ufunc (when scipy imports) dispatches
    guard: tuple = None               # comparisons: (C/Python symbol, predicate on floats);
    #                                   a scalar comparison branches, recording a guard
    power: float = None               # x ** power (a constant) records this row (square: 2.0)
    reduces: tuple = ()               # reductions: the ufuncs whose .reduce records this row
    mask: bool = False                # its 0/1 result may index: x[mask] (comparisons, logical_*)
    # How the compiler lowers a row that is not elementwise (compiler._Lowering
    # reads these; it names no op), so a new structure or linear-algebra row
    # needs no edit there:
    view: object = None               # STRUCT: the result is a run of its operand's slots,
    #                                   never an instruction: fn(params) -> (first element,
    #                                   length; None: all of them)
    lower: str = ""                   # other STRUCT rows: the instruction they lower to,
    #                                   "GATHER" (a contiguous run of indices: an offset, as
    #                                   view), "GATHER_IDX", "SCATTER_ADD" or "SCATTER"
    indices: object = None            # GATHER/SCATTER_ADD: fn(params) -> the flat indices
    pieces: object = None             # SCATTER: fn(operand shapes, params) -> each operand's
    #                                   flat positions in the result
    linalg: object = None             # LINALG: its instruction's lengths and ints record
    #                                   (Linalg, below; csrc/instr/linalg/linalg.h)
    index: int = field(default=-1)    # position in OPS

    def __repr__(self):
        return f"<op {self.name}>"

    # Ops are table rows: copies and pickles refer to the row by name.
    def __deepcopy__(self, memo):
        return self

    def __copy__(self):
        return self

    def __reduce__(self):
        return (op_named, (self.name,))

    def __setattr__(self, name, value):
        # A row changed after the table was built (a test or a user patching a
        # rule): cached rt.grad programs were compiled from the old rule and
        # guard on EPOCH, so they re-record.
        if _SEALED:
            EPOCH[0] += 1
        object.__setattr__(self, name, value)


def op_named(name):
    """The row called name (how pickles refer to a row)."""
    row = OPS.get(name) if type(name) is str else None
    if row is None:
        raise VerificationError(f"a pickle names op {name!r}, which this revtape's op table "
                                "does not have; pickle it again with this version")
    return row


OPS = {}
_SCIPY_UFUNC_ROWS = []   # (scipy.special name, row): joined to UFUNC_OPS by _scipy_ufuncs
# Bumped whenever a rule changes after import (Op.__setattr__ once the table
# is sealed, rt.defvjp/defjvp); cached rt.grad programs guard on it.
EPOCH = [0]
_SEALED = False


def _def(name, family, fwd, **kw):
    if kw.get("ufuncs") is None:
        # numpy's ufuncs now; scipy's (rows with special= or a _scipy forward)
        # join UFUNC_OPS when scipy.special is imported (scipy_ufuncs)
        u = getattr(fwd, "__wrapped__", fwd)
        kw["ufuncs"] = (u,) if isinstance(u, np.ufunc) else ()
        scipy_name = kw.get("special") or getattr(fwd, "_scipy_name", None)
    else:
        scipy_name = None
    op = Op(name, family, fwd, **kw)
    op.index = len(OPS)
    OPS[name] = op
    if scipy_name:
        _SCIPY_UFUNC_ROWS.append((scipy_name, op))
    return op


def _quiet(f):
    """numpy forward without floating-point warnings: nan/inf are results, not errors."""
    def g(*args, **params):
        with np.errstate(all="ignore"):
            return f(*args, **params)
    g.__name__ = getattr(f, "__name__", "fwd")
    g.__wrapped__ = f     # the row's default ufunc (see _def)
    return g


class _Primitives:
    """Namespace of primitive callables, one per op: ``P.sin(x)``."""


P = _Primitives()


def apply(op, args, params):
    """Run op on args: records onto the args' tape if any is tracked, else numpy."""
    for a in args:
        if getattr(a, "_is_tracked", False) and a._id >= 0:
            return a._tape._record(op, args, params)
    vals = [a._const if getattr(a, "_is_tracked", False) else a for a in args]
    return op.fwd(*vals, **params)


def _make_primitive(op):
    def prim(*args, **params):
        return apply(op, args, params)
    prim.__name__ = op.name
    prim.__qualname__ = f"P.{op.name}"
    prim.op = op
    return prim


# ---------------------------------------------------------------- shape helpers
# Used by reverse rules; written with primitives so they trace too.

def shape_of(v):
    return v.shape if hasattr(v, "shape") else ()


def expand_reduced(g, in_shape, axis, keepdims):
    """Broadcast a reduction's adjoint g back to the input shape."""
    if not keepdims:
        kept = list(in_shape)
        for ax in (range(len(in_shape)) if axis is None else axis):
            kept[ax] = 1
        g = P.reshape(g, shape=tuple(kept))
    return broadcast_to(g, tuple(in_shape))


def broadcast_to(v, shape):
    shape = tuple(shape)
    if tuple(shape_of(v)) == shape:
        return v
    src = np.arange(int(np.prod(shape_of(v), dtype=np.int64))).reshape(shape_of(v))
    idx = np.ascontiguousarray(np.broadcast_to(src, shape))
    return P.take(v, idx=idx)


def unbroadcast(g, shape):
    """Sum g over the axes that broadcasting added or stretched to reach shape."""
    gshape = tuple(shape_of(g))
    shape = tuple(shape)
    if gshape == shape:
        return g
    lead = len(gshape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and gshape[lead + i] != 1)
    if axes:
        g = P.sum(g, axis=axes, keepdims=False)
    if tuple(shape_of(g)) != shape:
        g = P.reshape(g, shape=shape)
    return g


def _as_tuple_axis(axis, ndim):
    """Normalise a numpy axis argument to a sorted tuple of non-negative ints (or None)."""
    if axis is None:
        return None
    if isinstance(axis, (int, np.integer)):
        axis = (axis,)
    out = []
    for a in axis:
        a = int(a)
        if not -ndim <= a < ndim:
            raise np.exceptions.AxisError(a, ndim)
        out.append(a % ndim)
    return tuple(sorted(set(out)))


# ---------------------------------------------------------------- elementwise, unary
# sfwd=: a forward on Python floats for the scalar recording path (no numpy
# call per instruction).  It may raise where numpy returns inf/nan; the
# recorder then falls back to the numpy forward.

def _sq(x):
    return x * x


def _recip(x):
    return 1.0 / x


# _unary(name, numpy forward, C value, partial as fn(ans, x), C partial in x, f)

def _unary(name, fwd, c_fwd, partial, c_partial, doc="", **kw):
    return _def(name, UNARY, _quiet(fwd), partials=(partial,), c_fwd=c_fwd,
                c_partials=(c_partial,), doc=doc, **kw)


_unary("neg", np.negative, "-x", lambda f, x: -1.0, "-1.0", sfwd=operator.neg)
_unary("copy", lambda x: np.array(x, dtype=np.float64), "x", lambda f, x: 1.0, "1.0", sfwd=float)
_unary("exp", np.exp, "exp(x)", lambda f, x: f, "f", sfwd=math.exp)
_unary("log", np.log, "log(x)", lambda f, x: P.reciprocal(x), "1.0 / x", sfwd=math.log)
_unary("log1p", np.log1p, "rt_log1p(x)", lambda f, x: P.reciprocal(P.add(x, 1.0)), "1.0 / (1.0 + x)",
       sfwd=math.log1p)
_unary("expm1", np.expm1, "expm1(x)", lambda f, x: P.add(f, 1.0), "f + 1.0", sfwd=math.expm1)
_unary("sqrt", np.sqrt, "sqrt(x)", lambda f, x: P.div(0.5, f), "0.5 / f",
       sfwd=math.sqrt, power=0.5)
_unary("cbrt", np.cbrt, "cbrt(x)", lambda f, x: P.div(1.0 / 3.0, P.square(f)),
       "(1.0 / 3.0) / (f * f)", sfwd=math.cbrt)
_unary("square", np.square, "x * x", lambda f, x: P.mul(2.0, x), "2.0 * x", sfwd=_sq, power=2.0)
_unary("reciprocal", lambda x: np.divide(1.0, x), "1.0 / x", lambda f, x: P.neg(P.square(f)),
       "-(f * f)", sfwd=_recip, power=-1.0, ufuncs=(np.reciprocal,))
_unary("sin", np.sin, "sin(x)", lambda f, x: P.cos(x), "cos(x)", sfwd=math.sin)
_unary("cos", np.cos, "cos(x)", lambda f, x: P.neg(P.sin(x)), "-sin(x)", sfwd=math.cos)
_unary("tan", np.tan, "tan(x)", lambda f, x: P.add(1.0, P.square(f)), "1.0 + f * f",
       sfwd=math.tan)
_unary("tanh", np.tanh, "tanh(x)", lambda f, x: P.sub(1.0, P.square(f)), "1.0 - f * f",
       sfwd=math.tanh)
_unary("sinh", np.sinh, "sinh(x)", lambda f, x: P.cosh(x), "cosh(x)", sfwd=math.sinh)
_unary("cosh", np.cosh, "cosh(x)", lambda f, x: P.sinh(x), "sinh(x)", sfwd=math.cosh)
_unary("arctan", np.arctan, "atan(x)", lambda f, x: P.reciprocal(P.add(1.0, P.square(x))),
       "1.0 / (1.0 + x * x)", sfwd=math.atan)
# abs'(0) = 0 (autograd's convention): the partial is sign(x) -- nan at nan, as np.sign.
_unary("abs", np.abs, "fabs(x)", lambda f, x: P.sign(x),
       "x != x ? x : (double)((x > 0) - (x < 0))", sfwd=abs, ufuncs=(np.absolute, np.fabs))
_unary("gammaln", _scipy("gammaln", _specfun.gammaln), "rt_gammaln(x)",
       lambda f, x: P.digamma(x), "rt_digamma(x)", special="gammaln")
_unary("digamma", _scipy("digamma", _specfun.digamma), "rt_digamma(x)",
       lambda f, x: P.trigamma(x), "rt_trigamma(x)", special="digamma")
_unary("trigamma", _polygamma_fwd(1), "rt_trigamma(x)",
       lambda f, x: _polygamma2(x), "rt_tetragamma(x)")
_unary("expit", _scipy("expit", _specfun.expit), "rt_expit(x)",
       lambda f, x: P.mul(f, P.sub(1.0, f)), "f * (1.0 - f)", special="expit")
_unary("log_expit", _scipy("log_expit", _specfun.log_expit), "rt_log_expit(x)",
       lambda f, x: P.expit(P.neg(x)), "rt_expit(-x)", special="log_expit")
_unary("erf", _scipy("erf", _specfun.erf), "erf(x)",
       lambda f, x: P.mul(2.0 / math.sqrt(math.pi), P.exp(P.neg(P.square(x)))),
       "M_2_SQRTPI * exp(-x * x)", sfwd=math.erf, special="erf")


# Second wave (issue 13).  Inverse trigonometric/hyperbolic: the partials
# factor 1 - x^2 as (1 - x)(1 + x), exact near |x| = 1 where x*x rounds.
_unary("arcsin", np.arcsin, "asin(x)",
       lambda f, x: P.reciprocal(P.sqrt(P.mul(P.sub(1.0, x), P.add(1.0, x)))),
       "1.0 / sqrt((1.0 - x) * (1.0 + x))", sfwd=math.asin)
_unary("arccos", np.arccos, "acos(x)",
       lambda f, x: P.neg(P.reciprocal(P.sqrt(P.mul(P.sub(1.0, x), P.add(1.0, x))))),
       "-1.0 / sqrt((1.0 - x) * (1.0 + x))", sfwd=math.acos)
_unary("arcsinh", np.arcsinh, "asinh(x)",
       lambda f, x: P.reciprocal(P.sqrt(P.add(1.0, P.square(x)))), "1.0 / sqrt(1.0 + x * x)",
       sfwd=math.asinh)
_unary("arccosh", np.arccosh, "acosh(x)",
       lambda f, x: P.reciprocal(P.sqrt(P.mul(P.sub(x, 1.0), P.add(x, 1.0)))),
       "1.0 / sqrt((x - 1.0) * (x + 1.0))", sfwd=math.acosh)
_unary("arctanh", np.arctanh, "atanh(x)",
       lambda f, x: P.reciprocal(P.mul(P.sub(1.0, x), P.add(1.0, x))),
       "1.0 / ((1.0 - x) * (1.0 + x))", sfwd=math.atanh)


def _sinc_partial(f, x):
    # (cos(pi x) - sinc x) / x, and its Taylor series where |pi x| < 1/4 (no
    # cancellation there); the same two branches as rt_sinc_deriv in C.
    t = P.mul(math.pi, x)
    t2 = P.square(t)
    poly = P.add(-1.0 / 3, P.mul(t2, P.add(1.0 / 30, P.mul(t2, P.add(-1.0 / 840, P.mul(
        t2, P.add(1.0 / 45360, P.mul(t2, P.add(-1.0 / 3991680, P.mul(t2, 1.0 / 518918400))))))))))
    near = P.lt(P.abs(t), 0.25)
    series = P.mul(math.pi, P.mul(t, poly))
    far = P.div(P.sub(P.cos(t), f), P.where(near, 1.0, x))
    return P.where(near, series, far)


_unary("sinc", np.sinc, "rt_sinc(x)", _sinc_partial, "rt_sinc_deriv(x, f)")


def _scipy_special(name):
    """scipy.special.<name> when scipy imports, else the row's own C function
    run on plain arrays by the extension (rt_elementwise): the reference
    replay then computes exactly what the VM does."""
    return _scipy(name, lambda *a: c_elementwise(name, *a))


def c_elementwise(name, *args):
    """The row `name`'s own C value function (what the VM runs) on plain arrays."""
    return _cspecial.evaluate(OPCODE[name.upper() if len(args) == 1 else f"{name.upper()}_VV"],
                              *args)


_SQRT_2_PI = math.sqrt(2.0 / math.pi)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
_unary("erfc", _scipy_special("erfc"), "erfc(x)",
       lambda f, x: P.mul(-2.0 / math.sqrt(math.pi), P.exp(P.neg(P.square(x)))),
       "-M_2_SQRTPI * exp(-x * x)", sfwd=math.erfc, special="erfc")
# erfcx' = 2x erfcx - 2/sqrt(pi); the C partial avoids that difference's
# cancellation for x >= 2 (a continued fraction), the traced rule keeps the
# formula (its error, ~x^2 ulps, only reaches third derivatives).
_unary("erfcx", _scipy_special("erfcx"), "rt_erfcx(x)",
       lambda f, x: P.sub(P.mul(P.mul(2.0, x), f), 2.0 / math.sqrt(math.pi)),
       "rt_erfcx_deriv(x, f)", special="erfcx")
_unary("ndtr", _scipy_special("ndtr"), "rt_ndtr(x)",
       lambda f, x: P.mul(1.0 / _SQRT_2PI, P.exp(P.mul(-0.5, P.square(x)))),
       "0.39894228040143267794 * exp(-0.5 * x * x)", special="ndtr")
# d/dx log ndtr = phi/Phi = sqrt(2/pi) / erfcx(-x/sqrt 2): finite in both tails.
_unary("log_ndtr", _scipy_special("log_ndtr"), "rt_log_ndtr(x)",
       lambda f, x: P.div(_SQRT_2_PI, P.erfcx(P.mul(-math.sqrt(0.5), x))),
       "rt_log_ndtr_deriv(x)", special="log_ndtr")
_unary("ndtri", _scipy_special("ndtri"), "rt_ndtri(x)",
       lambda f, x: P.mul(_SQRT_2PI, P.exp(P.mul(0.5, P.square(f)))),
       "2.50662827463100050242 * exp(0.5 * f * f)", special="ndtri")


def _erfinv_c():
    """C value of erfinv.  Where |x| < 1/4, its Maclaurin series (Carlitz's
    coefficients c_k/(2k+1) (sqrt(pi)/2)^(2k+1), c_0 = 1, c_k = sum_m
    c_m c_(k-1-m) / ((m+1)(2m+1)); 14 terms reach 1 ulp there): ndtri((1+x)/2)
    would lose x's low bits when 1+x rounds.  Elsewhere ndtri of (1-|x|)/2,
    exact for |x| >= 1/2 (Sterbenz) and within 2 ulps of erfinv above 1/4."""
    from fractions import Fraction
    c = [Fraction(1)]
    for k in range(1, 14):
        c.append(sum(c[m] * c[k - 1 - m] / ((m + 1) * (2 * m + 1)) for m in range(k)))
    h = math.sqrt(math.pi) / 2
    coef = [float(ck / (2 * k + 1)) * h ** (2 * k + 1) for k, ck in enumerate(c)]
    series = repr(coef[-1])
    for a in reversed(coef[:-1]):
        series = f"{a!r} + x * x * ({series})"
    return (f"fabs(x) < 0.25 ? x * ({series}) : (x < 0.0 ? rt_ndtri(0.5 * (1.0 + x)) "
            ": -rt_ndtri(0.5 * (1.0 - x))) * M_SQRT1_2")


# erfinv' = sqrt(pi)/2 exp(erfinv(x)^2), from the output f
_unary("erfinv", _scipy_special("erfinv"), _erfinv_c(),
       lambda f, x: P.mul(math.sqrt(math.pi) / 2, P.exp(P.square(f))),
       "0.88622692545275801365 * exp(f * f)", special="erfinv")
_unary("logit", _scipy_special("logit"), "rt_logit(x)",
       lambda f, x: P.reciprocal(P.mul(x, P.sub(1.0, x))), "1.0 / (x * (1.0 - x))",
       special="logit")
# i0e' = i1e - sign(x) i0e;  i1e' = i0e - i1e/x - sign(x) i1e, which is 1/2 at 0.
_unary("i0e", _scipy_special("i0e"), "rt_i0e(x)",
       lambda f, x: P.sub(P.i1e(x), P.mul(P.sign(x), f)),
       "rt_i1e(x) - (double)((x > 0) - (x < 0)) * f", special="i0e")
_unary("i1e", _scipy_special("i1e"), "rt_i1e(x)",
       lambda f, x: P.where(P.eq(x, 0.0), 0.5, P.sub(P.sub(P.i0e(x), P.div(
           f, P.where(P.eq(x, 0.0), 1.0, x))), P.mul(P.sign(x), f))),
       "x == 0.0 ? 0.5 : rt_i0e(x) - f / x - (double)((x > 0) - (x < 0)) * f", special="i1e")


def _rgamma_partial(f, x):
    # 1/Gamma is entire: for x <= 0, where -rgamma psi is 0 * inf at the poles,
    # the derivative of its reflection Gamma(1-x) sin(pi x)/pi, which is
    # (-1)^n n! at x = -n and differentiates on (the second derivative too)
    neg = P.le(x, 0.0)
    y = P.sub(1.0, P.where(neg, x, 0.0))
    px = P.mul(math.pi, x)
    refl = P.mul(P.gamma(y), P.sub(P.cos(px), P.mul(P.digamma(y), P.div(P.sin(px), math.pi))))
    return P.where(neg, refl, P.neg(P.mul(f, P.digamma(P.where(neg, 1.0, x)))))


# Gamma and Bessel functions (csrc/kernels/specfun.c; scipy's
# values at poles and infinities).  gamma' = gamma psi, rgamma' = -rgamma psi;
# J0' = -J1, Y0' = -Y1, J1' = J0 - J1/x (1/2 at 0), Y1' = Y0 - Y1/x.
_unary("gamma", _scipy_special("gamma"), "rt_gamma(x)",
       lambda f, x: P.mul(f, P.digamma(x)), "f * rt_digamma(x)", special="gamma")
_unary("rgamma", _scipy_special("rgamma"), "rt_rgamma(x)", _rgamma_partial,
       "x <= 0.0 ? rt_gamma(1.0 - x) * (cos(3.14159265358979323846 * x) - rt_digamma(1.0 - x)"
       " * sin(3.14159265358979323846 * x) / 3.14159265358979323846) : -f * rt_digamma(x)",
       special="rgamma")
_unary("j0", _scipy_special("j0"), "rt_j0(x)", lambda f, x: P.neg(P.j1(x)), "-rt_j1(x)",
       special="j0")
_unary("j1", _scipy_special("j1"), "rt_j1(x)",
       lambda f, x: P.where(P.eq(x, 0.0), 0.5, P.sub(P.j0(x), P.div(f, P.where(
           P.eq(x, 0.0), 1.0, x)))),
       "x == 0.0 ? 0.5 : rt_j0(x) - f / x", special="j1")
_unary("y0", _scipy_special("y0"), "rt_y0(x)", lambda f, x: P.neg(P.y1(x)), "-rt_y1(x)",
       special="y0")
_unary("y1", _scipy_special("y1"), "rt_y1(x)",
       lambda f, x: P.sub(P.y0(x), P.div(f, x)), "rt_y0(x) - f / x", special="y1")


def _polygamma2(x):
    if getattr(x, "_is_tracked", False):
        raise UnsupportedError("fourth derivatives of gammaln (derivatives of trigamma "
                               "inside a Hessian) are not supported")
    return _polygamma_fwd(2)(x)


# ---------------------------------------------------------------- elementwise, binary
# _binary(name, numpy forward, C value, partials as fn(ans, x, y), C partials in x, y, f)

def _binary(name, fwd, c_fwd, partials, c_partials, doc="", **kw):
    return _def(name, BINARY, _quiet(fwd), partials=partials, c_fwd=c_fwd,
                c_partials=c_partials, doc=doc, **kw)


_binary("add", np.add, "x + y", (lambda f, x, y: 1.0, lambda f, x, y: 1.0), ("1.0", "1.0"),
        sfwd=operator.add)
_binary("sub", np.subtract, "x - y", (lambda f, x, y: 1.0, lambda f, x, y: -1.0), ("1.0", "-1.0"),
        sfwd=operator.sub)
_binary("mul", np.multiply, "x * y", (lambda f, x, y: y, lambda f, x, y: x), ("y", "x"),
        sfwd=operator.mul)
_binary("div", np.divide, "x / y",
        (lambda f, x, y: P.reciprocal(y), lambda f, x, y: P.neg(P.div(f, y))),
        ("1.0 / y", "-f / y"), sfwd=operator.truediv)
# power: autograd's conventions -- d/dx is 0 where y == 0, d/dy is 0 where x == 0,
# selected (not multiplied by a mask), so that they stay 0 when the other
# factor is nan or inf (x**0 is 1 for every x, nan and inf included).
# np.power reaches this row through tracked.power, which picks the rows whose
# power= names a constant exponent (x**2 -> square); hence ufuncs=() here.
_binary("pow", np.power, "pow(x, y)",
        (lambda f, x, y: P.where(P.eq(y, 0.0), 0.0, P.mul(y, P.pow(x, P.sub(y, 1.0)))),
         lambda f, x, y: P.where(P.eq(x, 0.0), 0.0, P.mul(P.log(x), f))),
        ("y == 0.0 ? 0.0 : y * pow(x, y - 1.0)", "x == 0.0 ? 0.0 : log(x) * f"),
        sfwd=math.pow, ufuncs=())
# maximum/minimum: ties split the adjoint evenly (autograd's balanced_eq).
_binary("maximum", np.maximum, "(x > y || x != x) ? x : y",
        (lambda f, x, y: P.add(P.gt(x, y), P.mul(0.5, P.eq(x, y))),
         lambda f, x, y: P.add(P.gt(y, x), P.mul(0.5, P.eq(x, y)))),
        ("(x > y) + 0.5 * (x == y)", "(y > x) + 0.5 * (x == y)"))
_binary("minimum", np.minimum, "(x < y || x != x) ? x : y",
        (lambda f, x, y: P.add(P.lt(x, y), P.mul(0.5, P.eq(x, y))),
         lambda f, x, y: P.add(P.lt(y, x), P.mul(0.5, P.eq(x, y)))),
        ("(x < y) + 0.5 * (x == y)", "(y < x) + 0.5 * (x == y)"))
_binary("logaddexp", np.logaddexp, "rt_logaddexp(x, y)",
        (lambda f, x, y: P.exp(P.sub(x, f)), lambda f, x, y: P.exp(P.sub(y, f))),
        ("exp(x - f)", "exp(y - f)"))
# xlogy/xlog1py: d/dy is 0 where x == 0 (there the function is 0 for every y;
# x / y would be 0/0 = nan at y == 0), selected as pow's d/dy is.
_binary("xlogy", _scipy("xlogy", _specfun.xlogy), "rt_xlogy(x, y)",
        (lambda f, x, y: P.log(y), lambda f, x, y: P.where(P.eq(x, 0.0), 0.0, P.div(x, y))),
        ("log(y)", "x == 0.0 ? 0.0 : x / y"),
        special="xlogy")
_binary("arctan2", np.arctan2, "atan2(x, y)",
        (lambda f, x, y: P.div(y, P.add(P.square(x), P.square(y))),
         lambda f, x, y: P.neg(P.div(x, P.add(P.square(x), P.square(y))))),
        ("y / (x * x + y * y)", "-x / (x * x + y * y)"), sfwd=math.atan2)
_binary("xlog1py", _scipy_special("xlog1py"), "rt_xlog1py(x, y)",
        (lambda f, x, y: P.log1p(y),
         lambda f, x, y: P.where(P.eq(x, 0.0), 0.0, P.div(x, P.add(1.0, y)))),
        ("log1p(y)", "x == 0.0 ? 0.0 : x / (1.0 + y)"), special="xlog1py")
# betaln: one row (not gammaln(a) + gammaln(b) - gammaln(a + b)), because for
# a >> b those terms cancel to nothing (scipy itself loses 8 digits at
# a = 1e4, b = 0.2); rt_betaln subtracts the Stirling forms analytically.
_binary("betaln", _scipy_special("betaln"), "rt_betaln(x, y)",
        (lambda f, x, y: P.sub(P.digamma(x), P.digamma(P.add(x, y))),
         lambda f, x, y: P.sub(P.digamma(y), P.digamma(P.add(x, y)))),
        ("rt_digamma(x) - rt_digamma(x + y)", "rt_digamma(y) - rt_digamma(x + y)"),
        special="betaln")


# remainder (np.remainder, np.mod, %) and fmod: numpy's sign conventions (the
# result has the divisor's sign, resp. the dividend's), in C branch for branch
# as numpy's npy_remainder/npy_fmod.  The derivatives are autograd's: 1 in x,
# -floor(x / y) (remainder) and -trunc(x / y) (fmod) in y -- piecewise
# constant, so their own derivatives vanish and Hessians see only the jumps'
# absence.  trunc(q) is written floor/ceil by q's sign (no row of its own).
def _trunc(q):
    return P.where(P.ge(q, 0.0), P.floor(q), P.ceil(q))


_binary("remainder", np.remainder, "rt_remainder(x, y)",
        (lambda f, x, y: 1.0, lambda f, x, y: P.neg(P.floor(P.div(x, y)))),
        ("1.0", "-floor(x / y)"))
_binary("fmod", np.fmod, "fmod(x, y)",
        (lambda f, x, y: 1.0, lambda f, x, y: P.neg(_trunc(P.div(x, y)))),
        ("1.0", "-trunc(x / y)"))


def _no_shape_derivative(f, a, x):
    raise UnsupportedError("the derivative of gammainc/gammaincc with respect to the shape a "
                           "is not implemented; pass a as a constant (only x may be tracked)")


# Regularised incomplete gamma P(a, x) and Q(a, x): differentiable in x only
# (the callers refuse a tracked a when recording, so a's C partial is never
# needed and is written as 0; scipy's ufuncs reach them through
# tracked._gammainc_in_x, which refuses a tracked a, hence ufuncs=()).
_binary("gammainc", _scipy_special("gammainc"), "rt_gammainc(x, y)",
        (_no_shape_derivative, lambda f, a, x: P.exp(P.sub(P.sub(
            P.xlogy(P.sub(a, 1.0), x), x), P.gammaln(a)))),
        ("0.0", "rt_gammainc_dx(x, y)"), special="gammainc", ufuncs=())
_binary("gammaincc", _scipy_special("gammaincc"), "rt_gammaincc(x, y)",
        (_no_shape_derivative, lambda f, a, x: P.neg(P.exp(P.sub(P.sub(
            P.xlogy(P.sub(a, 1.0), x), x), P.gammaln(a))))),
        ("0.0", "-rt_gammainc_dx(x, y)"), special="gammaincc", ufuncs=())
def _no_order_derivative(f, v, x):
    raise UnsupportedError("the derivative of a Bessel function with respect to its order is "
                           "not implemented; pass the order as a constant (only x may be tracked)")


def _bessel_fwd(name, integer):
    """The row's numpy forward: scipy's function (or, without scipy, the C
    kernel) at the orders the C kernel takes -- finite, and for jn/yn
    integers of at most 1e6 -- and nan at the others, as the C kernel (scipy's
    answers at infinite orders follow no one rule; rt.special refuses such
    orders on tracked values and gives scipy's own answer on plain ones)."""
    inner = _scipy_special(name)

    def forward(v, x):
        v = np.asarray(v, dtype=np.float64)
        ok = np.isfinite(v)
        if integer:
            ok &= (v == np.floor(v)) & (np.abs(v) <= 1e6)
        with np.errstate(all="ignore"):
            return np.where(ok, inner(np.where(ok, v, 0.0), x), np.nan)[()]
    forward.__name__ = name
    return forward


# Bessel functions of an order v and x, differentiable in x only (the order's
# C partial is never needed: rt.special and scipy's ufuncs refuse a tracked
# order, hence ufuncs=()).  J_n' = (J_(n-1) - J_(n+1))/2, the same for Y_n,
# I_v' = (I_(v-1) + I_(v+1))/2, and ive = exp(-|x|) I_v has ive' =
# (ive(v-1) + ive(v+1))/2 - sign(x) ive.  jn/yn take integer orders (nan
# otherwise; rt.special refuses a non-integer one).
_binary("jn", _bessel_fwd("jn", True), "rt_jn(x, y)",
        (_no_order_derivative, lambda f, n, x: P.mul(0.5, P.sub(
            P.jn(P.sub(n, 1.0), x), P.jn(P.add(n, 1.0), x)))),
        ("0.0", "0.5 * (rt_jn(x - 1.0, y) - rt_jn(x + 1.0, y))"), special="jn", ufuncs=())
_binary("yn", _bessel_fwd("yn", True), "rt_yn(x, y)",
        (_no_order_derivative, lambda f, n, x: P.mul(0.5, P.sub(
            P.yn(P.sub(n, 1.0), x), P.yn(P.add(n, 1.0), x)))),
        ("0.0", "0.5 * (rt_yn(x - 1.0, y) - rt_yn(x + 1.0, y))"), special="yn", ufuncs=())
_binary("iv", _bessel_fwd("iv", False), "rt_bessel_iv(x, y)",
        (_no_order_derivative, lambda f, v, x: P.mul(0.5, P.add(
            P.iv(P.sub(v, 1.0), x), P.iv(P.add(v, 1.0), x)))),
        ("0.0", "0.5 * (rt_bessel_iv(x - 1.0, y) + rt_bessel_iv(x + 1.0, y))"), special="iv",
        ufuncs=())
_binary("ive", _bessel_fwd("ive", False), "rt_bessel_ive(x, y)",
        (_no_order_derivative, lambda f, v, x: P.sub(P.mul(0.5, P.add(
            P.ive(P.sub(v, 1.0), x), P.ive(P.add(v, 1.0), x))), P.mul(P.sign(x), f))),
        ("0.0", "0.5 * (rt_bessel_ive(x - 1.0, y) + rt_bessel_ive(x + 1.0, y)) "
         "- (double)((y > 0) - (y < 0)) * f"), special="ive", ufuncs=())
# azmul: absolute-zero multiply, 0 * anything = 0.  Reverse rules use it so that a
# zero adjoint never becomes nan through an infinite partial.
_binary("azmul", lambda x, y: np.where(np.asarray(x) == 0, 0.0, np.multiply(x, y))[()],
        "x == 0.0 ? 0.0 : x * y",
        (lambda f, x, y: y, lambda f, x, y: x), ("y", "x"))

# ---------------------------------------------------------------- elementwise, not differentiable
# Masks are float64 arrays of 0.0 and 1.0, so they live in the same arenas.


def _mask(f):
    return _quiet(lambda *a: np.asarray(f(*a), dtype=np.float64)[()])


# A comparison row's guard= is (symbol, predicate on floats): a comparison of
# two scalars returns a bool for Python to branch on and records a guard
# (GUARD_<NAME> in the VM, in this order); of arrays, a tracked 0/1 mask.
for _n, _f, _sym, _pred in [("lt", np.less, "<", operator.lt),
                            ("le", np.less_equal, "<=", operator.le),
                            ("gt", np.greater, ">", operator.gt),
                            ("ge", np.greater_equal, ">=", operator.ge),
                            ("eq", np.equal, "==", operator.eq),
                            ("ne", np.not_equal, "!=", operator.ne)]:
    _def(_n, BINARY_ND, _mask(_f), c_fwd=f"(double)(x {_sym} y)", diff=False, ufuncs=(_f,),
         guard=(_sym, _pred), mask=True)
for _n, _f, _c in [("logical_and", np.logical_and, "x != 0.0 && y != 0.0"),
                   ("logical_or", np.logical_or, "x != 0.0 || y != 0.0")]:
    _def(_n, BINARY_ND, _mask(_f), c_fwd=f"(double)({_c})", diff=False, ufuncs=(_f,), mask=True)

_def("logical_not", UNARY_ND, _mask(np.logical_not), c_fwd="(double)(x == 0.0)", diff=False,
     ufuncs=(np.logical_not,), mask=True)
_def("sign", UNARY_ND, _quiet(np.sign), c_fwd="x != x ? x : (double)((x > 0) - (x < 0))",
     diff=False)
_def("floor", UNARY_ND, _quiet(np.floor), c_fwd="floor(x)", diff=False)
_def("ceil", UNARY_ND, _quiet(np.ceil), c_fwd="ceil(x)", diff=False)
# the sign of Gamma (scipy.special.gammasgn): piecewise constant, nan at its poles
_def("gammasgn", UNARY_ND, _scipy("gammasgn", _specfun.gammasgn), c_fwd="rt_gammasgn(x)", diff=False,
     special="gammasgn")
# rt.stop_gradient (JAX): the value passes through, no derivative flows back
# (diff=False: no adjoint, no tangent, nothing in a traced reverse pass).
_def("stop_gradient", UNARY_ND, lambda x: np.array(x, dtype=np.float64)[()], c_fwd="x",
     diff=False)

# ---------------------------------------------------------------- select and clip


def _where_vjp(i, g, ans, c, x, y):
    if i == 1:
        return P.where(c, g, 0.0)
    return P.where(c, 0.0, g)


_def("where", WHERE, _quiet(lambda c, x, y: np.where(np.asarray(c) != 0, x, y)[()]),
     vjp=_where_vjp, doc="select: out = c != 0 ? x : y; no guard, both sides computed")


def _clip_vjp(i, g, ans, x, lo, hi):
    # Zero at the bounds, like autograd -- selected, not multiplied by a 0/1
    # mask, so that an infinite adjoint gives exactly 0 at a bound (as the C
    # kernel does), not inf * 0 = nan.
    return P.where(P.logical_and(P.ne(ans, lo), P.ne(ans, hi)), g, 0.0)


_def("clip", CLIP, _quiet(lambda x, lo, hi: np.clip(x, lo, hi)[()]), vjp=_clip_vjp,
     doc="lo and hi are scalar constants (an unbounded side is +-inf)")

# ---------------------------------------------------------------- reductions
# params: axis (sorted tuple or None), keepdims.  The compiler lowers them to
# segmented kernels over contiguous runs (transposing first when needed).


def _reduce_fwd(f):
    return _quiet(lambda x, axis=None, keepdims=False: np.asarray(
        f(x, axis=axis, keepdims=keepdims), dtype=np.float64)[()])


def _sum_vjp(i, g, ans, x, axis=None, keepdims=False):
    return expand_reduced(g, shape_of(x), axis, keepdims)


def _maxmin_vjp(i, g, ans, x, axis=None, keepdims=False):
    # Ties split the adjoint evenly among the maximal elements, g * (1/count);
    # the other elements are not selected and get exactly 0 (not g * 0, which
    # is nan for an infinite g), as in the C kernel.  A nan result matches no
    # element (count 0): every element gets nan.
    shape = shape_of(x)
    hit = P.eq(x, expand_reduced(ans, shape, axis, keepdims))
    count = expand_reduced(P.sum(hit, axis=axis, keepdims=keepdims), shape, axis, keepdims)
    gx = expand_reduced(g, shape, axis, keepdims)
    return P.where(hit, P.azmul(gx, P.div(1.0, count)),
                   P.where(P.eq(count, 0.0), P.azmul(gx, np.nan), 0.0))


def _prod_vjp(i, g, ans, x, axis=None, keepdims=False):
    # The product of the other elements, exact when x holds zeros.
    shape = shape_of(x)
    zero = P.eq(x, 0.0)
    nonzero = P.where(zero, 1.0, x)
    p_nz = expand_reduced(P.prod(nonzero, axis=axis, keepdims=keepdims), shape, axis, keepdims)
    n_zero = expand_reduced(P.sum(zero, axis=axis, keepdims=keepdims), shape, axis, keepdims)
    # selects, not products with 0/1 masks: an element beside a zero gets
    # exactly 0 even when another element is inf or nan (as the C kernel)
    others = P.where(zero, P.where(P.eq(n_zero, 1.0), p_nz, 0.0),
                     P.where(P.eq(n_zero, 0.0), P.div(p_nz, nonzero), 0.0))
    return P.azmul(expand_reduced(g, shape, axis, keepdims), others)


def _lse_vjp(i, g, ans, x, axis=None, keepdims=False):
    shape = shape_of(x)
    return P.azmul(expand_reduced(g, shape, axis, keepdims),
                   P.exp(P.sub(x, expand_reduced(ans, shape, axis, keepdims))))


_def("sum", REDUCE, _reduce_fwd(np.sum), vjp=_sum_vjp, reduces=(np.add,))
_def("max", REDUCE, _reduce_fwd(np.max), vjp=_maxmin_vjp, reduces=(np.maximum,))
_def("min", REDUCE, _reduce_fwd(np.min), vjp=_maxmin_vjp, reduces=(np.minimum,))
_def("prod", REDUCE, _reduce_fwd(np.prod), vjp=_prod_vjp, reduces=(np.multiply,))
_def("logsumexp", REDUCE, _reduce_fwd(_scipy("logsumexp", _specfun.logsumexp)),
     vjp=_lse_vjp, reduces=(np.logaddexp,))
_def("all", REDUCE, _reduce_fwd(lambda x, axis, keepdims: np.all(x != 0, axis=axis, keepdims=keepdims)),
     diff=False, reduces=(np.logical_and,))
_def("any", REDUCE, _reduce_fwd(lambda x, axis, keepdims: np.any(x != 0, axis=axis, keepdims=keepdims)),
     diff=False, reduces=(np.logical_or,))

# ---------------------------------------------------------------- matmul (1-D and 2-D operands)


def _matmul_vjp(i, g, ans, a, b):
    sa, sb = shape_of(a), shape_of(b)
    if len(sa) == 1 and len(sb) == 1:
        return P.mul(g, b) if i == 0 else P.mul(g, a)
    if i == 0:
        if len(sa) == 1:            # (k,) @ (k,n): g is (n,)
            return P.matmul(b, g)
        if len(sb) == 1:            # (m,k) @ (k,): g is (m,)
            return P.matmul(P.reshape(g, shape=(sa[0], 1)), P.reshape(b, shape=(1, sb[0])))
        return P.matmul(g, transpose(b))
    if len(sa) == 1:
        return P.matmul(P.reshape(a, shape=(sa[0], 1)), P.reshape(g, shape=(1, sb[1])))
    return P.matmul(transpose(a), g)


def _matmul_fwd(a, b):
    if np.ndim(a) not in (1, 2) or np.ndim(b) not in (1, 2):
        raise UnsupportedError("matmul of tracked values supports 1-D and 2-D operands; "
                               "reshape batched operands and loop")
    return np.matmul(a, b)[()]


_def("matmul", MATMUL, _quiet(_matmul_fwd), vjp=_matmul_vjp)

# ---------------------------------------------------------------- structure
# reshape and item are aliases in a compiled program (no instruction); take is
# a gather with a flat index array (slices, transposes, fancy indexing,
# broadcasting); scatter_add is its adjoint; concat lowers to scatters.


def transpose(x, axes=None):
    shape = shape_of(x)
    if len(shape) < 2:
        return x
    idx = np.ascontiguousarray(np.arange(int(np.prod(shape))).reshape(shape).transpose(axes))
    return P.take(x, idx=idx)


_def("reshape", STRUCT, lambda x, shape: np.reshape(x, shape),
     vjp=lambda i, g, ans, x, shape: P.reshape(g, shape=shape_of(x)),
     view=lambda params: (0, None))
_def("item", STRUCT, lambda x, i: float(x.flat[i]),
     vjp=lambda i_, g, ans, x, i: P.scatter_add(g, idx=np.array(i), shape=shape_of(x)),
     view=lambda params: (params["i"], 1))


def _take_fwd(x, idx):
    return np.asarray(x).ravel()[idx]


def _scatter_add_fwd(g, idx, shape):
    out = np.zeros(int(np.prod(shape, dtype=np.int64)))
    np.add.at(out, np.asarray(idx).ravel(), np.asarray(g, dtype=np.float64).ravel())
    return out.reshape(shape)[()]


_def("take", STRUCT, _take_fwd,
     vjp=lambda i, g, ans, x, idx: P.scatter_add(g, idx=idx, shape=shape_of(x)),
     lower="GATHER", indices=lambda params: params["idx"])
_def("scatter_add", STRUCT, _quiet(_scatter_add_fwd),
     vjp=lambda i, g, ans, x, idx, shape: P.take(g, idx=idx),
     lower="SCATTER_ADD", indices=lambda params: params["idx"])


# take_idx: a gather whose flat indices are a value on the tape (a data input
# holding whole numbers as float64), not a constant -- minibatch indices that
# rt.grad draws afresh on every replay (_draws.py).  The C kernel checks each
# index on every sweep (GATHER_IDX, csrc/instr/index.h); so does the forward.


def _take_idx_fwd(x, idx):
    flat = np.asarray(x, dtype=np.float64).ravel()
    i = np.asarray(idx, dtype=np.float64)
    if not (np.all(i >= 0) and np.all(i < flat.size) and np.array_equal(np.floor(i), i)):
        raise IndexError(f"a gather index is not a whole number in [0, {flat.size})")
    return flat[i.astype(np.int64)]


def _take_idx_vjp(i, g, ans, x, idx):
    if i == 1:
        return np.zeros(np.shape(idx))        # the indices are data: no gradient
    return P.scatter_add(g, idx=np.asarray(idx).astype(np.int64), shape=shape_of(x))


_def("take_idx", STRUCT, _take_idx_fwd, vjp=_take_idx_vjp, lower="GATHER_IDX")


def concat_pieces(shapes, axis):
    """Flat positions of each concatenated piece inside the result."""
    sizes = [s[axis] for s in shapes]
    out_shape = list(shapes[0])
    out_shape[axis] = sum(sizes)
    pos = np.arange(int(np.prod(out_shape))).reshape(out_shape)
    cuts = np.cumsum(sizes)[:-1]
    return [np.ascontiguousarray(p) for p in np.split(pos, cuts, axis=axis)]


def _concat_vjp(i, g, ans, *xs, axis):
    return P.take(g, idx=concat_pieces([shape_of(x) for x in xs], axis)[i])


_def("concat", STRUCT, lambda *xs, axis: np.concatenate([np.asarray(x) for x in xs], axis=axis),
     vjp=_concat_vjp, lower="SCATTER",
     pieces=lambda shapes, params: concat_pieces(shapes, params["axis"]))

# ---------------------------------------------------------------- linear algebra
# One instruction each (csrc/instr/linalg/: one file with its forward, reverse
# and tangent kernels); square 2-D matrices only (the user-facing functions in
# linalg.py refuse the rest).  Failed factorizations give nan results -- a
# value a sampler can reject -- in the reference replay and in C alike:
# cholesky of a matrix that is not positive definite is all nan, solve/inv of
# an exactly singular matrix (a zero pivot) all nan, slogdet of one (0, -inf)
# as numpy.  The reverse rules are written with these primitives (so Hessians
# work) and match the C kernels to rounding.

def tri_mask(shape, k=0, lower=True):
    """0/1 mask of np.tril(x, k) (lower) or np.triu(x, k) as a float constant."""
    n, m = shape[-2], shape[-1]
    mask = np.tri(n, m, k) if lower else 1.0 - np.tri(n, m, k - 1)
    return np.ascontiguousarray(np.broadcast_to(mask, tuple(shape)), dtype=np.float64)


def tril(x, k=0):
    return P.where(tri_mask(shape_of(x), k, True), x, 0.0)


def triu(x, k=0):
    return P.where(tri_mask(shape_of(x), k, False), x, 0.0)


@dataclass(frozen=True)
class Linalg:
    """A dense kernel's instruction, declared once.  The lengths are C
    expressions in N and M (the first two words of its ints record): the
    compiler evaluates `scratch` to size the kernel's workspace, and _codegen
    writes all of them into ops_generated.h (RT_LINALG_LENGTHS), from which
    the C verifier checks a program's words.  `record` gives (N, M, flags
    word) of one call from its operand shapes and params."""
    out: str                          # the output's length
    scratch: str = ""                 # the workspace in the arena ("": none)
    b: str = ""                       # operand b's length ("": no b)
    a: str = "N * N"                  # operand a's length
    square: bool = True               # M must equal N (a kernel on A alone)
    flags: int = 0                    # the largest flags word the kernel takes
    record: object = None             # fn(shapes, params) -> (N, M, flags); None: _square_record

    def ints(self, shapes, params):
        """(N, M, flags, scratch length or None) of an instruction."""
        N, M, bits = (self.record or _square_record)(shapes, params)
        return N, M, bits, eval(self.scratch, {"N": N, "M": M}) if self.scratch else None


def _square_record(shapes, params):
    """A square n x n A (and a B of n rows: m columns, m = 1 for a vector,
    m = n without B)."""
    n = shapes[0][0]
    return n, n if len(shapes) == 1 else (1 if len(shapes[1]) == 1 else shapes[1][1]), 0


def _trisolve_record(shapes, params):
    n, m, _ = _square_record(shapes, params)
    return n, m, int((params["lower"] and 1) | (params["trans"] and 2) | (params["unit"] and 4))


def _scan_record(shapes, params):
    """A scan along the last axis: N rows of M."""
    m = shapes[0][-1]
    size = int(np.prod(shapes[0], dtype=np.int64))
    return size // m if m else 0, m, 0


def _nan_on(error, f):
    """numpy forward whose failure (LinAlgError) becomes an all-nan result."""
    def g(*args, **params):
        try:
            with np.errstate(all="ignore"):
                return f(*args, **params)
        except np.linalg.LinAlgError:
            return error(*args, **params)
    return g


def _outer_or_matmul(u, w):
    """u w^T for vectors (outer product), u @ w^T for matrices."""
    if len(shape_of(u)) == 1:
        return P.mul(P.reshape(u, shape=(shape_of(u)[0], 1)), P.reshape(w, shape=(1, shape_of(w)[0])))
    return P.matmul(u, transpose(w))


def lower_fold(abar):
    """The adjoint of a function of A's lower triangle (read as the symmetric
    matrix it defines) from the adjoint abar of that symmetric matrix:
    abar + abar^T below the diagonal, abar on it, 0 above."""
    n = shape_of(abar)[0]
    return P.where(tri_mask((n, n), -1), P.add(abar, transpose(abar)),
                   P.where(np.eye(n), abar, 0.0))


def _cholesky_vjp(i, g, L, A):
    # Murray (2016): S = L^-T phi(L^T G) L^-1, phi = lower triangle with the
    # diagonal halved; numpy reads A's lower triangle only, so the exact
    # gradient is S + S^T below the diagonal, S on it, 0 above (JAX and
    # autograd symmetrise instead; the two agree on symmetric perturbations).
    n = shape_of(L)[0]
    half = np.where(np.eye(n) == 1, 0.5, 1.0)
    phi = P.where(tri_mask((n, n)), P.mul(P.matmul(transpose(L), tril(g)), half), 0.0)
    y = P.trisolve(L, phi, lower=True, trans=True, unit=False)          # L^-T phi
    st = P.trisolve(L, transpose(y), lower=True, trans=True, unit=False)  # S^T
    return lower_fold(P.mul(P.add(st, transpose(st)), 0.5))


def _cholesky_fwd(a):
    L = np.linalg.cholesky(a)
    # as the C kernel: an infinite pivot is a failure too
    return L if np.isfinite(np.diagonal(L)).all() else np.full(np.shape(a), np.nan)


_def("cholesky", LINALG, _nan_on(lambda a: np.full(np.shape(a), np.nan), _cholesky_fwd),
     vjp=_cholesky_vjp, linalg=Linalg(out="N * N", scratch="N * N"),
     doc="L = cholesky(A), reads A's lower triangle only; not PD -> all nan")


def _trisolve_fwd(a, b, lower, trans, unit):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    m = np.tril(a) if lower else np.triu(a)
    if unit:
        np.fill_diagonal(m, 1.0)
    if not np.all(np.diagonal(m)):
        return np.full(np.shape(b), np.nan)
    sla = lazyscipy.linalg()
    if sla is not None:
        return sla.solve_triangular(a, b, lower=lower, trans=int(trans),
                                              unit_diagonal=unit, check_finite=False)
    return np.linalg.solve(m.T if trans else m, b)


def _trisolve_vjp(i, g, x, a, b, lower, trans, unit):
    bbar = P.trisolve(a, g, lower=lower, trans=not trans, unit=unit)
    if i == 1:
        return bbar
    lbar = _outer_or_matmul(x, bbar) if trans else _outer_or_matmul(bbar, x)
    n = shape_of(a)[0]
    mask = tri_mask((n, n), (-1 if unit else 0) if lower else (1 if unit else 0), lower)
    return P.where(mask, P.neg(lbar), 0.0)


_def("trisolve", LINALG, _quiet(_trisolve_fwd), vjp=_trisolve_vjp,
     linalg=Linalg(out="N * M", b="N * M", scratch="N * M", square=False, flags=7,
                   record=_trisolve_record),
     doc="X = op(A)^-1 B, op = A or A^T (trans), A lower or upper (unit: diagonal 1)")


def _solve_vjp(i, g, x, a, b):
    bbar = P.solve(transpose(a), g)
    if i == 1:
        return bbar
    return P.neg(_outer_or_matmul(bbar, x))


_def("solve", LINALG,
     _nan_on(lambda a, b: np.full(np.shape(b), np.nan), lambda a, b: np.linalg.solve(a, b)),
     vjp=_solve_vjp, linalg=Linalg(out="N * M", b="N * M", scratch="N * N + N + N * M",
                                     square=False),
     doc="X = A^-1 B (LU, partial pivoting); singular -> all nan")


def _inv_vjp(i, g, x, a):
    xt = transpose(x)
    return P.neg(P.matmul(P.matmul(xt, g), xt))


_def("inv", LINALG,
     _nan_on(lambda a: np.full(np.shape(a), np.nan), lambda a: np.linalg.inv(a)),
     vjp=_inv_vjp, linalg=Linalg(out="N * N", scratch="2 * N * N + N"),
     doc="A^-1; singular -> all nan")


def _slogdet_fwd(a):
    sign, logdet = np.linalg.slogdet(a)
    return np.array([sign, logdet], dtype=np.float64)


_def("slogdet", LINALG, _quiet(_slogdet_fwd),
     vjp=lambda i, g, ans, a: P.mul(P.item(g, i=1), transpose(P.inv(a))),
     linalg=Linalg(out="2", scratch="2 * N * N + N"),
     doc="[sign, log|det A|]; only log|det A| is differentiable")

def eigh_signs(V):
    """Each column's largest-magnitude entry (the first of equal ones) made
    positive: the sign convention of the EIGH kernel (LAPACK's is arbitrary)."""
    V = np.array(V, dtype=np.float64)
    if V.size == 0:
        return V
    m = np.argmax(np.abs(V), axis=0)
    flip = V[m, np.arange(V.shape[1])] < 0
    V[:, flip] *= -1.0
    return V


def _eigh_fwd(a):
    a = np.asarray(a, dtype=np.float64)
    n = a.shape[0]
    if not np.isfinite(np.tril(a)).all():
        return np.full(n + n * n, np.nan)
    w, V = np.linalg.eigh(a)
    return np.concatenate([w, eigh_signs(V).ravel()])


def _eigh_vjp(i, g, ans, a):
    # A-bar = sym(V (diag(w-bar) + F o (V^T V-bar)) V^T), F[i, j] = 1/(w[j] - w[i])
    n = shape_of(a)[0]
    w = P.take(ans, idx=np.arange(n))
    V = P.reshape(P.take(ans, idx=np.arange(n, n + n * n)), shape=(n, n))
    wbar = P.take(g, idx=np.arange(n))
    Vbar = P.reshape(P.take(g, idx=np.arange(n, n + n * n)), shape=(n, n))
    eye = np.eye(n)
    diff = P.sub(P.reshape(w, shape=(1, n)), P.reshape(w, shape=(n, 1)))
    F = P.where(eye, 0.0, P.reciprocal(P.where(eye, 1.0, diff)))
    M = P.where(eye, broadcast_to(P.reshape(wbar, shape=(1, n)), (n, n)),
                P.azmul(P.matmul(transpose(V), Vbar), F))
    return lower_fold(P.matmul(P.matmul(V, M), transpose(V)))


_def("eigh", LINALG, _quiet(_eigh_fwd), vjp=_eigh_vjp, linalg=Linalg(out="N + N * N", scratch="3 * N * N"),
     doc="[w ascending | V row-major] of A's lower triangle; see eigh_signs")

# ---------------------------------------------------------------- scans (last axis)
# cumsum/cumprod along the last axis (structure.py moves another axis last with
# gathers); sequential, in numpy's order, so the compiled replay is bit-for-bit.

def flip_last(x):
    s = shape_of(x)
    idx = np.ascontiguousarray(np.arange(int(np.prod(s, dtype=np.int64))).reshape(s)[..., ::-1])
    return P.take(x, idx=idx)


_SCAN = Linalg(out="N * M", a="N * M", square=False, record=_scan_record)


def _cumprod_vjp(i, g, y, x):
    if getattr(g, "_is_tracked", False) or getattr(x, "_is_tracked", False):
        # traced (second derivatives): revcumsum(g y) / x, which needs x != 0
        return P.div(flip_last(P.cumsum(flip_last(P.mul(g, y)))), x)
    # plain values: the C kernel's zero-safe recurrence, dx[i] = y[i-1] r[i],
    # r[i] = g[i] + x[i+1] r[i+1]
    g, x, y = (np.asarray(v, dtype=np.float64) for v in (g, x, y))
    m = x.shape[-1]
    dx = np.empty_like(x)
    if m:
        r = g[..., m - 1].copy()
        for k in range(m - 1, -1, -1):
            dx[..., k] = (y[..., k - 1] if k > 0 else 1.0) * r
            if k > 0:
                r = g[..., k - 1] + x[..., k] * r
    return dx


_def("cumsum", LINALG, _quiet(lambda x: np.cumsum(x, axis=-1)),
     vjp=lambda i, g, ans, x: flip_last(P.cumsum(flip_last(g))), linalg=_SCAN,
     doc="cumulative sum along the last axis")
_def("cumprod", LINALG, _quiet(lambda x: np.cumprod(x, axis=-1)), vjp=_cumprod_vjp,
     linalg=_SCAN,
     doc="cumulative product along the last axis; zero-safe reverse")
# ---------------------------------------------------------------- Python callbacks
# One instruction per call of an @rt.primitive on tracked values.  params
# {"site": primitives.CallSite} holds the primitive, its static arguments and
# which positions the tracked operands fill; forward and VJP are the user's
# Python, re-run at every replay (never values kept from the recording).


def _pycall_fwd(*vals, site):
    return site.forward(vals)


def _pycall_vjp(i, g, ans, *vals, site):
    return site.vjp(i, g, ans, vals)


_def("pycall", PYCALL, _pycall_fwd, vjp=_pycall_vjp,
     doc="a call of a user's @rt.primitive; the VM calls back into Python")

# ---------------------------------------------------------------- guards
# A guard records the outcome of a comparison that Python branched on.  It has
# no output; replays re-evaluate the exact predicate and stop when it differs.

# Derived from the comparison rows' guard= fields: {name: (symbol, predicate)}.
GUARD_PREDICATES = {op.name: op.guard for op in OPS.values() if op.guard is not None}
_def("guard", GUARD, None, diff=False,
     doc="params: pred (lt/le/gt/ge/eq/ne), expected (bool), where (source line)")

for _op in OPS.values():
    setattr(P, _op.name, _make_primitive(_op))

# ---------------------------------------------------------------- derived dispatch lists
# What the numpy API dispatches on, derived from the rows' fields (tracked.py
# and numpy_api.py read these; nothing else lists ops).
UFUNC_OPS = {u: op for op in OPS.values() if op.guard is None for u in op.ufuncs}
UFUNC_COMPARE = {u: op.name for op in OPS.values() if op.guard is not None for u in op.ufuncs}
REDUCE_UFUNCS = {u: op.name for op in OPS.values() if op.family == REDUCE for u in op.reduces}


def _scipy_ufuncs(sps):
    """scipy.special's ufuncs record their rows: added to UFUNC_OPS as soon as
    scipy.special is imported, before user code can call one."""
    for name, op in _SCIPY_UFUNC_ROWS:
        u = getattr(sps, name, None)
        if isinstance(u, np.ufunc):
            UFUNC_OPS.setdefault(u, op)


lazyscipy.when_imported("scipy.special", _scipy_ufuncs)
POWER_SPECIAL = {op.power: op for op in OPS.values() if op.power is not None}
SPECIAL_ROWS = {op.special: op for op in OPS.values() if op.special}
MASK_OPS = frozenset(op.name for op in OPS.values() if op.mask)

# ---------------------------------------------------------------- the VM's opcodes
# Derived from the table: one opcode per unary op, three operand-kind variants
# per binary op (array-array, array-scalar, scalar-array), one kernel each for
# the other families.  The VM never asks whether an operand is a scalar.

BINARY_VARIANTS = ("VV", "VS", "SV")
# Superinstructions the compiler fuses from pairs whose inner result is used
# once, with the same roundings as the pair and one dispatch and one arena
# round trip fewer: AXPY = a + b*c (b one scalar), SQDIFF = (a - b)**2 (the
# residual of every Gaussian log density and least-squares loss), and CSUM,
# a run of scalar `s = s + t` / `s = s - t` as one instruction (CppAD's
# cumulative sum: how scalar code adds up its terms).
VM_STRUCT = ("GATHER", "SCATTER_ADD", "SCATTER", "MATMUL", "CLIP", "AXPY", "SQDIFF", "CSUM",
             "PYCALL",
             # GAXPY = a[idx] + b*z: AXPY whose first operand is a gather (a
             # regression's per-group intercept plus slope times covariate)
             "GAXPY",
             # SSD = np.sum((a - b)**2): REDUCE_SUM of a whole SQDIFF, pairwise
             # like numpy, the squares never stored
             "SSD",
             # GATHER_IDX = a[(int)v[c+k]]: a gather whose indices are data
             # (minibatch indices drawn afresh per replay; csrc/instr/index.h)
             "GATHER_IDX",
             # BLOCK ... ENDBLOCK: the instructions between them run tile by
             # tile (csrc/instr/block.h; formed by src/revtape/lower/blocks.py)
             "BLOCK", "ENDBLOCK")


def _vm_opcodes():
    names = []
    for op in OPS.values():
        if op.family in (UNARY, UNARY_ND):
            names.append(op.name.upper())
        elif op.family in (BINARY, BINARY_ND):
            names += [f"{op.name.upper()}_{v}" for v in BINARY_VARIANTS]
        elif op.family == WHERE:
            names += [f"WHERE_{v}" for v in BINARY_VARIANTS]
        elif op.family == REDUCE:
            names.append(f"REDUCE_{op.name.upper()}")
        elif op.family == GUARD:
            names += [f"GUARD_{p.upper()}" for p in GUARD_PREDICATES]
        elif op.family == LINALG:
            names.append(op.name.upper())
    return names + list(VM_STRUCT)


VM_OPCODES = _vm_opcodes()
OPCODE = {name: i for i, name in enumerate(VM_OPCODES)}


def table_fingerprint():
    """A hash of everything the C VM is generated from; a build must match it."""
    h = hashlib.sha256()
    for op in OPS.values():
        h.update(repr((op.name, op.family, op.c_fwd, op.c_partials)).encode())
        if op.linalg is not None:         # its lengths are generated into the C verifier
            L = op.linalg
            h.update(repr((L.out, L.scratch, L.b, L.a, L.square, L.flags)).encode())
    h.update(repr(VM_OPCODES).encode())
    return h.hexdigest()[:16]


OP_TABLE_HASH = table_fingerprint()
_SEALED = True
