"""scipy.signal: plain arrays go to scipy; convolution of a tracked value
(autograd's scipy.signal.convolve) is not differentiable in revtape yet and
raises rt.UnsupportedError."""

import scipy.signal as _sig

from ._guard import passthrough_module

__getattr__ = passthrough_module(_sig, "scipy.signal", set())
