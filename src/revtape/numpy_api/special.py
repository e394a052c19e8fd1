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
from ..core.ops import P, SPECIAL_ROWS
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
    xlogy: BinaryFunction
    xlog1py: BinaryFunction
    betaln: BinaryFunction
    gammainc: BinaryFunction
    gammaincc: BinaryFunction

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
    """scipy.special.logsumexp; on tracked values one REDUCE instruction (b= and
    return_sign= are refused there).

    Parameters
    ----------
    a : array_like
        Plain or tracked values.
    axis : int or tuple of ints, optional
        The axes to reduce over; default all.
    b : array_like, optional
        Weights (plain values only on a tracked a).
    keepdims : bool, default False
        Keep the reduced axes with length one.
    return_sign : bool, default False
        Also return the sign (plain values only).

    Returns
    -------
    float or ndarray
        log(sum(exp(a))) over axis, computed without overflow.

    Raises
    ------
    UnsupportedError
        b= or return_sign= with a tracked value, or without scipy installed.
    """
    if istracked(a) or istracked(b):
        return _tracked_logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=return_sign)
    sps = lazyscipy.special()
    if sps is not None:
        return sps.logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=return_sign)
    if b is not None or return_sign:
        raise UnsupportedError("logsumexp(b=..., return_sign=...) needs scipy installed")
    from ..core import specfun as _specfun
    return _specfun.logsumexp(a, axis=axis, keepdims=keepdims)


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
DROP_INS["scipy.special"] = lambda name, dist: (
    f"rt.special.{name}" if callable(globals().get(name)) else None)

__all__ = list(SPECIAL_ROWS) + ["psi", "logsumexp", "polygamma", "softmax", "log_softmax",
                                 "multigammaln"]
