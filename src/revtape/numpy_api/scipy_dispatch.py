"""Route scipy's Python functions to revtape's when an argument is tracked.

scipy's ufuncs (gammaln, expit, ...) need nothing: they dispatch through
__array_ufunc__.  Its Python functions (special.logsumexp, linalg.cholesky,
...) convert their arguments with np.asarray first, so __array_function__
never sees them.  SPEC promises that the ones log densities use work on
tracked values, so revtape wraps them at import -- and only them, and only
so that nobody else can tell: a call without a tracked argument goes to
scipy's original with the same arguments and returns (or raises) what it
does.  ``REVTAPE_SCIPY_DISPATCH=0`` in the environment leaves scipy as it
is (``revtape.special`` and ``revtape.numpy_api.linalg`` hold the same functions; a
scipy function that meets a tracked value then raises ConversionError
naming them).
"""

import functools

from .. import config
from ..trace.tracked import istracked


def enabled():
    return config.get("REVTAPE_SCIPY_DISPATCH")


def _any_tracked(args, kwargs):
    def walk(v):
        if istracked(v):
            return True
        if isinstance(v, (tuple, list)):
            return any(walk(e) for e in v)
        return False
    return walk(args) or walk(tuple(kwargs.values()))


def route(module, table):
    """Wrap module.<name> for every name -> revtape function in table.
    Idempotent; a no-op without scipy or with the opt-out."""
    if module is None or not enabled():
        return
    for name, ours in table.items():
        original = getattr(module, name, None)
        if original is None or getattr(original, "_revtape_routes_to", None) is not None:
            continue

        def make(original, ours):
            @functools.wraps(original)
            def dispatch(*args, **kwargs):
                if _any_tracked(args, kwargs):
                    return ours(*args, **kwargs)
                return original(*args, **kwargs)
            dispatch._revtape_routes_to = ours
            return dispatch

        setattr(module, name, make(original, ours))
