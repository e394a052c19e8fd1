"""numpy.fft under autograd.numpy.fft's name.

On plain arrays these are numpy's functions.  The FFT of a tracked value is
not differentiable in revtape yet (its results are complex): it raises
rt.UnsupportedError rather than dropping the gradient."""

import functools

import numpy.fft as _fft

from ...errors import UnsupportedError
from ...trace.tracked import istracked

__all__ = [n for n in dir(_fft) if not n.startswith("_") and callable(getattr(_fft, n))]


def _guarded(name, f):
    @functools.wraps(f)
    def g(*args, **kwargs):
        if any(istracked(a) for a in (*args, *kwargs.values())):
            raise UnsupportedError(f"np.fft.{name} of a tracked value: FFT (and the complex "
                                   "numbers it produces) is not supported by revtape yet")
        return f(*args, **kwargs)
    return g


for _n in __all__:
    globals()[_n] = _guarded(_n, getattr(_fft, _n))
del _n
