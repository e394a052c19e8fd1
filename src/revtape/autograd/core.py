"""autograd.core's public names: make_vjp (unary, as autograd.core's),
vspace, primitive."""

from ..core.primitives import defjvp, defvjp, primitive  # noqa: F401
from .differential_operators import make_jvp as _nary_make_jvp  # noqa: F401
from .tracer import getval, isbox, make_vjp  # noqa: F401
from .vspace import VSpace, vspace  # noqa: F401


def make_jvp(fun, x):
    return _nary_make_jvp(fun)(x)
