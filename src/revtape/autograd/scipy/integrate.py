"""scipy.integrate: plain arrays go to scipy; odeint of tracked values (the
adjoint ODE method autograd implements) is not in revtape yet and raises
rt.UnsupportedError."""

import scipy.integrate as _int

from ._guard import passthrough_module

__getattr__ = passthrough_module(_int, "scipy.integrate", set())
