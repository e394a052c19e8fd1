"""A scipy function that revtape cannot differentiate: plain arguments go to
scipy, a tracked one raises rt.UnsupportedError naming the function."""

import functools

from ...errors import UnsupportedError
from ...trace.tracked import istracked


def _holds(v):
    if istracked(v):
        return True
    if isinstance(v, (list, tuple)):
        return any(_holds(e) for e in v)
    return False


def guarded(qualname, f):
    if not callable(f) or isinstance(f, type):
        return f

    @functools.wraps(f)
    def g(*args, **kwargs):
        if _holds(args) or _holds(tuple(kwargs.values())):
            raise UnsupportedError(f"{qualname} is not differentiable in revtape yet; "
                                   "docs/ops.md lists what is")
        return f(*args, **kwargs)
    return g


def passthrough_module(module, qualprefix, supported):
    """__getattr__ for a namespace: names in `supported` (or ufuncs, which
    dispatch on tracked values) as scipy has them, the rest guarded."""
    import numpy as np

    def __getattr__(name):
        try:
            v = getattr(module, name)
        except AttributeError:
            raise AttributeError(f"module {qualprefix!r} has no attribute {name!r}") from None
        if name in supported or isinstance(v, np.ufunc):
            return v
        return guarded(f"{qualprefix}.{name}", v)
    return __getattr__
