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
from typing import TYPE_CHECKING, Any

import numpy as np

from . import scipy_dispatch as _scipy_dispatch
from ..errors import UnsupportedError
from ..core import lazyscipy
from ..core.apitypes import ArrayLike
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

if TYPE_CHECKING:
    # what the loop above binds, as type checkers should see it (tests/test_typing.py
    # checks that every name of __all__ has a type)
    from ..core.apitypes import BinaryFunction, UnaryFunction
    gammaln: UnaryFunction
    digamma: UnaryFunction
    expit: UnaryFunction
    log_expit: UnaryFunction
    erf: UnaryFunction
    erfc: UnaryFunction
    erfcx: UnaryFunction
    ndtr: UnaryFunction
    log_ndtr: UnaryFunction
    ndtri: UnaryFunction
    erfinv: UnaryFunction
    logit: UnaryFunction
    i0e: UnaryFunction
    i1e: UnaryFunction
    gamma: UnaryFunction
    rgamma: UnaryFunction
    j0: UnaryFunction
    j1: UnaryFunction
    y0: UnaryFunction
    y1: UnaryFunction
    gammasgn: UnaryFunction
    xlogy: BinaryFunction
    xlog1py: BinaryFunction
    betaln: BinaryFunction
    gammainc: BinaryFunction
    gammaincc: BinaryFunction
    jn: BinaryFunction
    yn: BinaryFunction
    iv: BinaryFunction
    ive: BinaryFunction

psi = digamma   # noqa: F821 (a row, bound by the loop above)

# What each row computes, for its docstring (the primitives carry none of
# their own): scipy.special's argument names and a line of mathematics.
_ROW_DOCS = {
    "gammaln": ("x", "log |Gamma(x)|, the log of the absolute value of the gamma function"),
    "digamma": ("x", "the digamma function psi(x) = d/dx log Gamma(x) (rt.special.psi is "
                "the same function)"),
    "expit": ("x", "the logistic sigmoid 1 / (1 + exp(-x))"),
    "log_expit": ("x", "log(expit(x)) = -log1p(exp(-x)), accurate for large |x|"),
    "erf": ("x", "the error function 2/sqrt(pi) * integral of exp(-t**2) from 0 to x"),
    "erfc": ("x", "the complementary error function 1 - erf(x), accurate for large x"),
    "erfcx": ("x", "the scaled complementary error function exp(x**2) * erfc(x)"),
    "ndtr": ("x", "the standard normal distribution function Phi(x)"),
    "log_ndtr": ("x", "log(Phi(x)), accurate far into the lower tail"),
    "ndtri": ("y", "the standard normal quantile: the inverse of ndtr"),
    "erfinv": ("y", "the inverse error function"),
    "logit": ("x", "log(x / (1 - x)), the inverse of expit"),
    "i0e": ("x", "the exponentially scaled modified Bessel function exp(-|x|) * I0(x)"),
    "i1e": ("x", "the exponentially scaled modified Bessel function exp(-|x|) * I1(x)"),
    "xlogy": ("x, y", "x * log(y), and 0 where x == 0 (whatever y)"),
    "xlog1py": ("x, y", "x * log1p(y), and 0 where x == 0 (whatever y)"),
    "betaln": ("a, b", "log |B(a, b)|, the log of the absolute value of the beta function"),
    "gamma": ("x", "the gamma function Gamma(x); inf at 0 with the sign of the zero, nan at "
              "the negative integers"),
    "rgamma": ("x", "1 / Gamma(x), entire: 0 at the poles of gamma"),
    "gammasgn": ("x", "the sign of Gamma(x) (no derivative: a step function)"),
    "j0": ("x", "the Bessel function of the first kind of order 0"),
    "j1": ("x", "the Bessel function of the first kind of order 1"),
    "y0": ("x", "the Bessel function of the second kind of order 0"),
    "y1": ("x", "the Bessel function of the second kind of order 1"),
}


def _row_doc(name, args, what):
    params = "\n".join(f"{a} : float or array_like\n    Plain or tracked; broadcast together."
                        if "," in args else
                        f"{a} : float or array_like\n    A plain or tracked value."
                        for a in args.split(", "))
    return (f"scipy.special.{name}({args}): {what}.\n\n"
            f"On tracked values one elementwise instruction (the op-table row\n"
            f"``{SPECIAL_ROWS[name].name}``, docs/ops.md); on plain values scipy's own\n"
            f"function when scipy is installed, else revtape's.\n\n"
            f"Parameters\n----------\n{params}\n\n"
            f"Returns\n-------\nfloat or ndarray\n    Elementwise, in the broadcast shape; "
            f"tracked when an argument is.\n    nan and inf follow scipy.\n")


for _name, (_args, _what) in _ROW_DOCS.items():
    globals()[_name].__doc__ = _row_doc(_name, _args, _what)


def logsumexp(a: ArrayLike, axis: int | tuple[int, ...] | None = None,
              b: ArrayLike | None = None, keepdims: bool = False,
              return_sign: bool = False) -> Any:
    """scipy.special.logsumexp; on tracked values one REDUCE instruction, or,
    with b= or return_sign=, log|sum(b exp(a - m))| + m with the maximum m
    held constant (the value does not depend on it, so neither does any
    derivative) and the sign of the sum returned as scipy does.

    Parameters
    ----------
    a : array_like
        Plain or tracked values.
    axis : int or tuple of ints, optional
        The axes to reduce over; default all.
    b : array_like, optional
        Weights, plain or tracked, broadcast against a.
    keepdims : bool, default False
        Keep the reduced axes with length one.
    return_sign : bool, default False
        Also return the sign of the weighted sum (then the log of its
        absolute value is the first result).

    Returns
    -------
    float or ndarray
        log(sum(exp(a))) over axis, computed without overflow (with
        return_sign, the pair (log|sum|, sign)).
    """
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

    def f(v: ArrayLike, x: ArrayLike) -> Any:
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
                 "raises UnsupportedError)" + (", integer orders." if integer else ".") +
                 "\n\nParameters\n----------\n"
                 "v : float or array_like\n    The order: plain numbers" +
                 (", integers." if integer else ".") +
                 "\nx : float or array_like\n    Plain or tracked; broadcast against v.\n\n"
                 "Returns\n-------\nfloat or ndarray\n    Elementwise, in the broadcast shape; "
                 "tracked when x is.\n\nRaises\n------\nUnsupportedError\n"
                 "    A tracked order" + (", or one that is not an integer." if integer else ".") + "\n")
    return f


jn = _order_in_x("jn", True)
yn = _order_in_x("yn", True)
iv = _order_in_x("iv", False)
ive = _order_in_x("ive", False)


def i0(x: ArrayLike) -> Any:
    """scipy.special.i0: i0e(x) exp(|x|).

    Parameters
    ----------
    x : float or array_like
        Plain or tracked.

    Returns
    -------
    float or ndarray
        Elementwise, in the broadcast shape; tracked when an argument is.
    """
    return P.mul(P.i0e(x), P.exp(P.abs(x)))


def i1(x: ArrayLike) -> Any:
    """scipy.special.i1: i1e(x) exp(|x|).

    Parameters
    ----------
    x : float or array_like
        Plain or tracked.

    Returns
    -------
    float or ndarray
        Elementwise, in the broadcast shape; tracked when an argument is.
    """
    return P.mul(P.i1e(x), P.exp(P.abs(x)))


def erfcinv(y: ArrayLike) -> Any:
    """scipy.special.erfcinv: -ndtri(y/2) / sqrt(2) (erfc(z) = 2 ndtr(-z sqrt 2));
    y/2 is exact, so this is as accurate as ndtri.

    Parameters
    ----------
    y : float or array_like
        Plain or tracked, in [0, 2].

    Returns
    -------
    float or ndarray
        Elementwise, in the broadcast shape; tracked when an argument is.
    """
    return P.mul(P.ndtri(P.mul(y, 0.5)), -math.sqrt(0.5))


def beta(a: ArrayLike, b: ArrayLike) -> Any:
    """scipy.special.beta: the sign of Gamma(a) Gamma(b) / Gamma(a + b) times
    exp(betaln(a, b)); betaln is one row, accurate where the gammas cancel.

    Parameters
    ----------
    a, b : float or array_like
        Plain or tracked; broadcast together.

    Returns
    -------
    float or ndarray
        Elementwise, in the broadcast shape; tracked when an argument is.
    """
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


def betainc(a: ArrayLike, b: ArrayLike, x: ArrayLike) -> Any:
    """scipy.special.betainc(a, b, x): differentiable in x only (a tracked a or
    b raises UnsupportedError); nan outside 0 <= x <= 1, as scipy.

    Parameters
    ----------
    a, b : float or array_like
        The shape parameters: plain numbers or arrays.
    x : float or array_like
        Plain or tracked, in [0, 1].

    Returns
    -------
    float or ndarray
        Elementwise, in the broadcast shape; tracked when an argument is.
    """
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


def stdtr(df: ArrayLike, t: ArrayLike) -> Any:
    """scipy.special.stdtr(df, t), Student's t distribution function:
    differentiable in t only (a tracked df raises UnsupportedError).

    Parameters
    ----------
    df : float or array_like
        Degrees of freedom: plain numbers or arrays.
    t : float or array_like
        Plain or tracked.

    Returns
    -------
    float or ndarray
        Elementwise, in the broadcast shape; tracked when an argument is.
    """
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


def log_softmax(x: ArrayLike, axis: int | tuple[int, ...] | None = None) -> Any:
    """(x - max) - logsumexp(x - max), as scipy.special.log_softmax.

    Parameters
    ----------
    x : array_like
        Plain or tracked values.
    axis : int or tuple of ints, optional
        The axes to normalise over; default all.

    Returns
    -------
    ndarray
        Shaped like x; tracked when x is.

    Shifting by the maximum first keeps the largest entries exact: x - lse(x)
    would lose eps * |x| absolutely to the cancellation.  The shift changes
    no derivative (log_softmax is shift-invariant)."""
    m = np.max(x, axis=axis, keepdims=True)
    t = x - m
    return t - _tracked_logsumexp(t, axis=axis, keepdims=True)


def softmax(x: ArrayLike, axis: int | tuple[int, ...] | None = None) -> Any:
    """exp(log_softmax(x, axis)), as scipy.special.softmax.

    Parameters
    ----------
    x : array_like
        Plain or tracked values.
    axis : int or tuple of ints, optional
        The axes to normalise over; default all.

    Returns
    -------
    ndarray
        Shaped like x, summing to one over axis; tracked when x is.
    """
    return np.exp(log_softmax(x, axis=axis))


def multigammaln(a: ArrayLike, d: int) -> Any:
    """log of the multivariate gamma function of dimension d (scipy's
    multigammaln): d(d-1)/4 log(pi) + sum_j gammaln(a - j/2), j = 0..d-1.

    Parameters
    ----------
    a : float or array_like
        Plain or tracked; a > (d - 1) / 2.
    d : int
        The dimension, a positive integer.

    Returns
    -------
    float or ndarray
        Shaped like a; tracked when a is.

    Raises
    ------
    ValueError
        d < 1, or a <= (d - 1) / 2 at the recorded value.

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


def polygamma(n: ArrayLike, x: ArrayLike) -> Any:
    """scipy.special.polygamma; on tracked values n = 0 (digamma) and 1 (trigamma).

    Parameters
    ----------
    n : int or array_like of int
        The order (a plain integer on tracked x).
    x : float or array_like
        Plain or tracked values.

    Returns
    -------
    float or ndarray
        The n-th derivative of digamma at x; tracked when x is.

    Raises
    ------
    UnsupportedError
        A tracked n, an order other than 0 or 1 on tracked x, or several n
        without scipy.
    """
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
