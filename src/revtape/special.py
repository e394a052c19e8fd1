"""scipy.special functions for tracked values (and plain ones).

The ufuncs (gammaln, digamma, expit, log_expit, erf, xlogy) also work
straight from scipy.special; this module exists so that code can run
without scipy installed, and for logsumexp under any import order.
"""

import math
import operator

import numpy as np

from .ops import P
from .tracked import logsumexp as _lse
from .tracked import value as _value

gammaln = P.gammaln
digamma = P.digamma
expit = P.expit
log_expit = P.log_expit
erf = P.erf
xlogy = P.xlogy


def logsumexp(a, axis=None, keepdims=False):
    return _lse(a, axis=axis, keepdims=keepdims)


# ---------------------------------------------------------------- second wave (issue 13)
# One op-table row each (C value and partials of revtape's own):
erfc = P.erfc
erfcx = P.erfcx
ndtr = P.ndtr
log_ndtr = P.log_ndtr
ndtri = P.ndtri
logit = P.logit
i0e = P.i0e
i1e = P.i1e
xlog1py = P.xlog1py
betaln = P.betaln


# Regularised incomplete gamma functions, differentiable in x only (a
# tracked shape a is refused: its derivative is not implemented).
from .tracked import _gammainc_in_x  # noqa: E402

gammainc = _gammainc_in_x("gammainc")
gammaincc = _gammainc_in_x("gammaincc")


def log_softmax(x, axis=None):
    """(x - max) - logsumexp(x - max), as scipy.special.log_softmax.

    Shifting by the maximum first keeps the largest entries exact: x - lse(x)
    would lose eps * |x| absolutely to the cancellation.  The shift changes
    no derivative (log_softmax is shift-invariant)."""
    m = np.max(x, axis=axis, keepdims=True)
    t = x - m
    return t - _lse(t, axis=axis, keepdims=True)


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


__all__ = ["gammaln", "digamma", "expit", "log_expit", "erf", "xlogy", "logsumexp",
           "erfc", "erfcx", "ndtr", "log_ndtr", "ndtri", "logit", "i0e", "i1e", "xlog1py",
           "betaln", "gammainc", "gammaincc", "softmax", "log_softmax", "multigammaln"]
