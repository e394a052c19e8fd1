"""scipy.special functions for tracked values (and plain ones).

The ufuncs (gammaln, digamma, expit, log_expit, erf, xlogy) also work
straight from scipy.special; this module exists so that code can run
without scipy installed, and for logsumexp under any import order.
"""

from .ops import P
from .tracked import logsumexp as _lse

gammaln = P.gammaln
digamma = P.digamma
expit = P.expit
log_expit = P.log_expit
erf = P.erf
xlogy = P.xlogy


def logsumexp(a, axis=None, keepdims=False):
    return _lse(a, axis=axis, keepdims=keepdims)


__all__ = ["gammaln", "digamma", "expit", "log_expit", "erf", "xlogy", "logsumexp"]
