"""rt.special: scipy.special's functions, for tracked and plain values.

scipy.special's ufuncs (gammaln, digamma, expit, log_expit, erf, xlogy) also
work straight from scipy.special on tracked values (they dispatch through
__array_ufunc__).  scipy's Python functions (logsumexp, polygamma) convert
with np.asarray; SCIPY_ROUTED below are routed here on tracked arguments
only (see _scipy_dispatch: plain calls reach scipy's original unchanged).
Everything here works without scipy installed.

Adding a function: define it here with scipy.special's name and signature,
recording through the op table's primitives (``P.<row>``) on tracked
values; honour every argument or refuse it with UnsupportedError naming
it; add it to __all__.  A plain (untracked) call returns what scipy returns.
"""

import math
import operator

import numpy as np

from . import scipy_dispatch as _scipy_dispatch
from ..errors import UnsupportedError
from ..core import lazyscipy
from ..core.ops import P, SPECIAL_ROWS, unbroadcast as _unbroadcast
from ..core.primitives import defjvp as _defjvp, defvjp as _defvjp, primitive as _primitive
from .functions import _polygamma
from ..trace.tracked import DROP_INS, istracked
from ..trace.tracked import value as _value
from .functions import logsumexp as _tracked_logsumexp

# ufuncs: one op-table row each, every row with special="<scipy name>"
# (plain inputs run the row's numpy forward: scipy's own function when scipy
# imports); the functions below replace gammainc/gammaincc's.
for _name, _op in SPECIAL_ROWS.items():
    globals()[_name] = getattr(P, _op.name)
psi = digamma   # noqa: F821 (a row, bound by the loop above)


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """scipy.special.logsumexp; on tracked values one REDUCE instruction, or,
    with b= or return_sign=, log|sum(b exp(a - m))| + m with the maximum m
    held constant (the value does not depend on it, so neither does any
    derivative) and the sign of the sum returned as scipy does."""
    if istracked(a) or istracked(b):
        if b is None and not return_sign:
            return _tracked_logsumexp(a, axis=axis, keepdims=keepdims)
        return _weighted_logsumexp(a, axis, b, keepdims, return_sign)
    sps = lazyscipy.special()
    if sps is not None:
        return sps.logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=return_sign)
    if b is not None or return_sign:
        with np.errstate(all="ignore"):
            out = _weighted_logsumexp(np.asarray(a, dtype=np.float64), axis,
                                      None if b is None else np.asarray(b, dtype=np.float64),
                                      keepdims, return_sign)
        return out
    from ..core import specfun as _specfun
    return _specfun.logsumexp(a, axis=axis, keepdims=keepdims)


def _weighted_logsumexp(a, axis, b, keepdims, return_sign):
    if b is not None:
        # broadcast both (adding plain zeros: no value changes)
        z = np.zeros(np.broadcast_shapes(np.shape(_value(a)), np.shape(_value(b))))
        a, b = a + z, b + z
    av = np.asarray(_value(a))
    if av.size == 0:
        m = 0.0
    else:
        # scipy's shift: the maximum of a where b != 0, 0 where that is not
        # finite; recorded (each replay shifts by its own maximum) but held
        # constant: the value does not depend on it
        top = np.max(a if b is None else P.where(P.ne(b, 0.0), a, -np.inf),
                     axis=axis, keepdims=True)
        m = P.stop_gradient(P.where(P.lt(P.abs(top), np.inf), top, 0.0))
    e = np.exp(a - m)
    s = np.sum(e if b is None else b * e, axis=axis, keepdims=True)
    if return_sign:
        out = np.log(np.abs(s)) + m
        sgn = P.sign(s)
    else:
        out = np.log(s) + m            # nan for a negative sum, as scipy
    if not keepdims:
        ax = tuple(range(np.ndim(av))) if axis is None else axis
        out = np.squeeze(out, axis=ax)
        if return_sign:
            sgn = np.squeeze(sgn, axis=ax)
    return (out, sgn) if return_sign else out


# Gamma and Bessel functions: one row each (jn, yn, iv, ive differentiable in
# x only: the order must be a plain number; jn and yn integer orders) and
# compositions that are exact: i0 = i0e exp|x|, erfcinv(y) = -ndtri(y/2)/sqrt 2,
# beta = sign * exp(betaln).
def _order_in_x(name, integer):
    row = getattr(P, name)

    def f(v, x):
        if istracked(v):
            raise UnsupportedError(
                f"scipy.special.{name}(v, x) on tracked values is differentiable in x only: "
                "the derivative with respect to the order is not implemented; pass the order "
                "as a plain number or array")
        if not istracked(x):
            sps = lazyscipy.special()
            return getattr(sps, name)(v, x) if sps is not None else row(v, x)
        vv = np.asarray(v, dtype=np.float64)
        if not np.all(np.isfinite(vv)):
            raise UnsupportedError(f"scipy.special.{name} on tracked values takes finite orders")
        if integer and np.any((vv != np.round(vv)) | (np.abs(vv) > 1e6)):
            raise UnsupportedError(
                f"scipy.special.{name} on tracked values takes integer orders only (scipy's jn "
                "is jv, Bessel's function of a real order: not implemented)")
        return row(v, x)
    f.__name__ = name
    f.__doc__ = (f"scipy.special.{name}(v, x): differentiable in x only (a tracked order "
                 "raises UnsupportedError)" + (", integer orders." if integer else "."))
    return f


jn = _order_in_x("jn", True)
yn = _order_in_x("yn", True)
iv = _order_in_x("iv", False)
ive = _order_in_x("ive", False)


def i0(x):
    """scipy.special.i0: i0e(x) exp(|x|)."""
    return P.mul(P.i0e(x), P.exp(P.abs(x)))


def i1(x):
    """scipy.special.i1: i1e(x) exp(|x|)."""
    return P.mul(P.i1e(x), P.exp(P.abs(x)))


def erfcinv(y):
    """scipy.special.erfcinv: -ndtri(y/2) / sqrt(2) (erfc(z) = 2 ndtr(-z sqrt 2));
    y/2 is exact, so this is as accurate as ndtri."""
    return P.mul(P.ndtri(P.mul(y, 0.5)), -math.sqrt(0.5))


def beta(a, b):
    """scipy.special.beta: the sign of Gamma(a) Gamma(b) / Gamma(a + b) times
    exp(betaln(a, b)); betaln is one row, accurate where the gammas cancel."""
    sgn = P.mul(P.mul(P.gammasgn(a), P.gammasgn(b)), P.gammasgn(P.add(a, b)))
    return P.mul(sgn, P.exp(P.betaln(a, b)))


def _register_ufuncs(sps):
    from .functions import _UFUNC_SPECIAL
    _UFUNC_SPECIAL.update({sps.betainc: betainc, sps.stdtr: stdtr, sps.jn: jn, sps.yn: yn, sps.iv: iv, sps.ive: ive, sps.i0: i0,
                           sps.i1: i1, sps.erfcinv: erfcinv, sps.beta: beta})


# The regularised incomplete beta function I_x(a, b): one call of a Python
# primitive (the VM calls back for it: the op table has no three-operand
# elementwise family), differentiable in x, dI/dx = x^(a-1) (1-x)^(b-1) / B(a, b)
# written with rows, so that it traces for Hessians; a and b must be plain.
@_primitive
def _betainc_prim(a, b, x):
    sps = lazyscipy.special()
    if sps is not None:
        return np.asarray(sps.betainc(a, b, x), dtype=np.float64)[()]
    from ..core import specfun as _specfun
    return _specfun.betainc(a, b, x)


def _betainc_dx(a, b, x):
    return P.exp(P.sub(P.add(P.xlogy(P.sub(a, 1.0), x), P.xlog1py(P.sub(b, 1.0), P.neg(x))),
                       P.betaln(a, b)))


def _betainc_vjp(ans, a, b, x):
    return lambda g: _unbroadcast(P.mul(g, _betainc_dx(a, b, x)), np.shape(_value(x)))


_defvjp(_betainc_prim, None, None, _betainc_vjp)
_defjvp(_betainc_prim, None, None, lambda g, ans, a, b, x: P.mul(g, _betainc_dx(a, b, x)))


def betainc(a, b, x):
    """scipy.special.betainc(a, b, x): differentiable in x only (a tracked a or
    b raises UnsupportedError); nan outside 0 <= x <= 1, as scipy."""
    if istracked(a) or istracked(b):
        raise UnsupportedError(
            "scipy.special.betainc(a, b, x) on tracked values is differentiable in x only: "
            "the derivative with respect to a and b is not implemented; pass them as plain "
            "numbers or arrays")
    if not istracked(x):
        return _betainc_prim(a, b, x)
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    shape = np.broadcast_shapes(a.shape, b.shape, np.shape(_value(x)))
    if np.shape(_value(x)) != shape:
        x = x + np.zeros(shape)
    return _betainc_prim(a, b, x)


# Student's t distribution function (scipy.special.stdtr(df, t)): a primitive
# like betainc, differentiable in t, whose derivative is the t density -- a
# smooth function of t everywhere, where the chain rule through
# betainc(df/2, 1/2, df/(df + t^2)) would meet 0 * inf at t = 0.
@_primitive
def _stdtr_prim(df, t):
    sps = lazyscipy.special()
    if sps is not None:
        return np.asarray(sps.stdtr(df, t), dtype=np.float64)[()]
    from ..core import specfun as _specfun
    df, t = np.asarray(df, dtype=np.float64), np.asarray(t, dtype=np.float64)
    with np.errstate(all="ignore"):
        tail = 0.5 * _specfun.betainc(0.5 * df, 0.5, df / (df + t * t))
        return np.where(t > 0, 1.0 - tail, tail)[()]


def _stdtr_dt(df, t):
    # the t density: Gamma((df+1)/2) / (sqrt(df pi) Gamma(df/2)) (1 + t^2/df)^-((df+1)/2)
    half = P.mul(df, 0.5)
    logc = P.sub(P.neg(P.betaln(half, 0.5)), P.mul(0.5, P.log(df)))
    return P.exp(P.sub(logc, P.mul(P.add(half, 0.5), P.log1p(P.div(P.square(t), df)))))


_defvjp(_stdtr_prim, None, lambda ans, df, t: lambda g: _unbroadcast(
    P.mul(g, _stdtr_dt(df, t)), np.shape(_value(t))))
_defjvp(_stdtr_prim, None, lambda g, ans, df, t: P.mul(g, _stdtr_dt(df, t)))


def stdtr(df, t):
    """scipy.special.stdtr(df, t), Student's t distribution function:
    differentiable in t only (a tracked df raises UnsupportedError)."""
    if istracked(df):
        raise UnsupportedError(
            "scipy.special.stdtr(df, t) on tracked values is differentiable in t only: the "
            "derivative with respect to df is not implemented; pass df as a plain number or array")
    if not istracked(t):
        return _stdtr_prim(df, t)
    df = np.asarray(df, dtype=np.float64)
    shape = np.broadcast_shapes(df.shape, np.shape(_value(t)))
    if np.shape(_value(t)) != shape:
        t = t + np.zeros(shape)
    return _stdtr_prim(df, t)


# Regularised incomplete gamma functions, differentiable in x only (a
# tracked shape a is refused: its derivative is not implemented).
from .functions import _gammainc_in_x  # noqa: E402

gammainc = _gammainc_in_x("gammainc")
gammaincc = _gammainc_in_x("gammaincc")


def log_softmax(x, axis=None):
    """(x - max) - logsumexp(x - max), as scipy.special.log_softmax.

    Shifting by the maximum first keeps the largest entries exact: x - lse(x)
    would lose eps * |x| absolutely to the cancellation.  The shift changes
    no derivative (log_softmax is shift-invariant)."""
    m = np.max(x, axis=axis, keepdims=True)
    t = x - m
    return t - _tracked_logsumexp(t, axis=axis, keepdims=True)


def softmax(x, axis=None):
    """exp(log_softmax(x, axis)), as scipy.special.softmax."""
    return np.exp(log_softmax(x, axis=axis))


def multigammaln(a, d):
    """log of the multivariate gamma function of dimension d (scipy's
    multigammaln): d(d-1)/4 log(pi) + sum_j gammaln(a - j/2), j = 0..d-1.

    Like scipy, refuses a <= (d - 1)/2 -- checked on the recorded value only:
    a replay at such an a returns what gammaln gives there instead of raising."""
    d = operator.index(d)
    if d < 1:
        raise ValueError("d should be a positive integer (dimension)")
    if np.any(np.asarray(_value(a)) <= 0.5 * (d - 1)):
        raise ValueError(f"condition a > 0.5 * (d-1) ({0.5 * (d - 1)}) not met")
    out = P.gammaln(a)
    for j in range(1, d):
        out = out + P.gammaln(a - 0.5 * j)
    return out + 0.25 * d * (d - 1) * math.log(math.pi)


def polygamma(n, x):
    """scipy.special.polygamma; on tracked values n = 0 (digamma) and 1 (trigamma)."""
    if istracked(x):
        return _polygamma(n, x)
    if istracked(n):
        raise UnsupportedError("polygamma's order n must be a plain integer")
    sps = lazyscipy.special()
    if sps is not None:
        return sps.polygamma(n, x)
    from ..core import specfun as _specfun
    if np.ndim(n):
        raise UnsupportedError("without scipy, polygamma takes one integer n")
    return _specfun.polygamma(n, x)


# scipy.special's Python functions that route here when an argument is tracked
SCIPY_ROUTED = {"logsumexp": logsumexp, "polygamma": polygamma, "softmax": softmax,
                "log_softmax": log_softmax, "multigammaln": multigammaln}
lazyscipy.when_imported("scipy.special", lambda sps: _scipy_dispatch.route(sps, SCIPY_ROUTED))
lazyscipy.when_imported("scipy.special", _register_ufuncs)
DROP_INS["scipy.special"] = lambda name, dist: (
    f"rt.special.{name}" if callable(globals().get(name)) else None)

__all__ = list(SPECIAL_ROWS) + ["psi", "logsumexp", "polygamma", "softmax", "log_softmax",
                                 "multigammaln", "i0", "i1", "erfcinv", "beta", "betainc", "stdtr"]
