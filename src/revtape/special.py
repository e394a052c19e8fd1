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

import numpy as np

from . import _scipy_dispatch
from .errors import UnsupportedError
from .ops import sps
from .ops import P
from .tracked import _polygamma, istracked
from .tracked import logsumexp as _tracked_logsumexp

# ufuncs: one op-table row each (plain inputs run the row's numpy forward:
# scipy's own function when scipy imports)
gammaln = P.gammaln
digamma = psi = P.digamma
expit = P.expit
log_expit = P.log_expit
erf = P.erf
xlogy = P.xlogy


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """scipy.special.logsumexp; on tracked values one REDUCE instruction (b= and
    return_sign= are refused there)."""
    if istracked(a) or istracked(b):
        return _tracked_logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=return_sign)
    from .ops import sps
    if sps is not None:
        return sps.logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=return_sign)
    if b is not None or return_sign:
        raise UnsupportedError("logsumexp(b=..., return_sign=...) needs scipy installed")
    from . import _specfun
    return _specfun.logsumexp(a, axis=axis, keepdims=keepdims)


def polygamma(n, x):
    """scipy.special.polygamma; on tracked values n = 0 (digamma) and 1 (trigamma)."""
    if istracked(x):
        return _polygamma(n, x)
    if istracked(n):
        raise UnsupportedError("polygamma's order n must be a plain integer")
    from .ops import sps
    if sps is not None:
        return sps.polygamma(n, x)
    from . import _specfun
    if np.ndim(n):
        raise UnsupportedError("without scipy, polygamma takes one integer n")
    return _specfun.polygamma(n, x)


# scipy.special's Python functions that route here when an argument is tracked
SCIPY_ROUTED = {"logsumexp": logsumexp, "polygamma": polygamma}
_scipy_dispatch.route(sps, SCIPY_ROUTED)

__all__ = ["gammaln", "digamma", "psi", "expit", "log_expit", "erf", "xlogy", "logsumexp",
           "polygamma"]
