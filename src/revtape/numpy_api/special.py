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
psi = digamma   # noqa: F821 (a row, bound by the loop above)


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """scipy.special.logsumexp; on tracked values one REDUCE instruction (b= and
    return_sign= are refused there)."""
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
DROP_INS["scipy.special"] = lambda name, dist: (
    f"rt.special.{name}" if callable(globals().get(name)) else None)

__all__ = list(SPECIAL_ROWS) + ["psi", "logsumexp", "polygamma", "softmax", "log_softmax",
                                 "multigammaln"]
