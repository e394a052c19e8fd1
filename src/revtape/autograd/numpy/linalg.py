"""numpy.linalg under autograd.numpy.linalg's name.

The functions are numpy's: on tracked values numpy hands them to revtape's
rules (cholesky, solve, inv, slogdet, det, eigh, norm ...); one revtape does
not differentiate raises rt.UnsupportedError naming it."""

from typing import Any

import numpy.linalg as _la
from numpy.linalg import *  # noqa: F401,F403
from numpy.linalg import LinAlgError  # noqa: F401


def __getattr__(name: str) -> Any:
    return getattr(_la, name)
