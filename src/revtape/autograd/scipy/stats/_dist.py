"""One distribution's module: revtape's log densities, their exponentials,
scipy's functions for plain arguments when revtape lacks the log form."""

import functools

import numpy as np
import scipy.stats as _ss

from .... import stats as _rtstats
from ....errors import UnsupportedError
from ....trace.tracked import istracked

_LOGS = {"pdf": "logpdf", "pmf": "logpmf", "cdf": "logcdf", "sf": "logsf"}


def _any(args, kwargs):
    return any(istracked(a) for a in (*args, *kwargs.values()))


def _attr(obj, name):
    try:
        return getattr(obj, name, None)
    except Exception:            # rt.stats refuses a function a distribution lacks
        return None


def namespace(name):
    ours = getattr(_rtstats, name, None)
    theirs = getattr(_ss, name)
    ns = {}
    for fn in ("logpdf", "logpmf", "logcdf", "logsf", "pdf", "pmf", "cdf", "sf", "rvs", "entropy"):
        mine = _attr(ours, fn) if ours is not None else None
        if mine is None and fn in _LOGS and ours is not None and _attr(ours, _LOGS[fn]) is not None:
            mine = (lambda lf: lambda *a, **k: np.exp(lf(*a, **k)))(getattr(ours, _LOGS[fn]))
        sc = getattr(theirs, fn, None)
        if mine is None and sc is None:
            continue
        ns[fn] = _dispatch(f"scipy.stats.{name}.{fn}", mine, sc)
    return ns


def _dispatch(qual, mine, sc):
    def f(*args, **kwargs):
        if _any(args, kwargs):
            if mine is None:
                raise UnsupportedError(f"{qual} of tracked values is not supported by revtape")
            return mine(*args, **kwargs)
        return sc(*args, **kwargs) if sc is not None else mine(*args, **kwargs)
    f.__name__ = qual.rsplit(".", 1)[1]
    f.__qualname__ = qual
    return f
