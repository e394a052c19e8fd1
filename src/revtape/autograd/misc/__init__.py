"""autograd.misc: flatten, const_graph, optimizers, fixed_points."""

from .flatten import flatten  # noqa: F401
from .tracers import const_graph  # noqa: F401

__all__ = ["flatten", "const_graph"]
