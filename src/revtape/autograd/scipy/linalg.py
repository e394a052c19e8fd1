"""scipy.linalg: scipy's functions; revtape routes cholesky, cho_factor,
cho_solve, solve, solve_triangular, inv, det to its rules on tracked values.
The rest raise rt.UnsupportedError on a tracked value."""

import scipy.linalg as _sla

from ._guard import passthrough_module

_OURS = {"cholesky", "cho_factor", "cho_solve", "solve", "solve_triangular", "inv", "det"}
__getattr__ = passthrough_module(_sla, "scipy.linalg", _OURS)
