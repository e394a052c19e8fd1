"""The types revtape's public API is annotated with (the package ships
``py.typed``, PEP 561).

While f is recorded it runs on tracked values, which act as the floats and
arrays they stand for; the annotations therefore speak of what f and its
caller see -- numpy's types (``numpy.typing``) -- not of the tracked classes:
``rt.special.gammaln(x)`` of an ``NDArray`` is an ``NDArray`` to a type
checker whether x is a plain or a tracked array.  Inputs and gradients that
may be pytrees (a float, an array, or nested tuples, lists, dicts and
namedtuples of them; core/pytree.py) are ``PyTree``, which a checker treats
as Any: their structure is the caller's, not revtape's.

Only this module and ``typing`` constructs appear in signatures, so the
public API type-checks under ``mypy --strict`` without revtape's internals.
"""

from __future__ import annotations

from typing import Any, Callable, Literal, Protocol, TypeAlias, TypeVar, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["ArrayLike", "NDArray", "FloatArray", "PyTree", "Function", "FunctionT",
           "NativeMode", "OnStale", "Replayable", "Differentiable", "UnaryFunction", "BinaryFunction"]

FloatArray: TypeAlias = NDArray[np.float64]
"""A float64 array: gradients, Jacobians and Hessians of array inputs."""

PyTree: TypeAlias = Any
"""A float, an array, or a nested tuple/list/dict/namedtuple of them."""

Function: TypeAlias = Callable[..., Any]
"""A function revtape differentiates or calls back (f, a VJP maker, ...)."""

FunctionT = TypeVar("FunctionT", bound=Callable[..., Any])
"""A decorator that hands back its function keeps the function's type."""

class Replayable(Protocol):
    """A tape or a compiled tape: what the one-shot functions replay."""

    def forward(self, x: Any, /) -> Any: ...


Differentiable: TypeAlias = Callable[..., Any] | Replayable
"""What rt.gradient/jacobian/hessian/hvp take: a function, a tape or a compiled tape."""

NativeMode: TypeAlias = bool | Literal["auto"]
"""rt.compile's native=: False (the VM), True (native code now), "auto"."""

OnStale: TypeAlias = Literal["rerecord", "raise"]
"""rt.grad's on_stale=."""


class UnaryFunction(Protocol):
    """An rt.special function of one argument (an op-table row): a float for a
    float, a float64 array for an array, on plain and tracked values alike."""

    @overload
    def __call__(self, x: float, /) -> float: ...
    @overload
    def __call__(self, x: NDArray[Any], /) -> FloatArray: ...
    @overload
    def __call__(self, x: ArrayLike, /) -> Any: ...


class BinaryFunction(Protocol):
    """An rt.special function of two broadcast arguments (xlogy, betaln, ...)."""

    @overload
    def __call__(self, x: float, y: float, /) -> float: ...
    @overload
    def __call__(self, x: NDArray[Any], y: ArrayLike, /) -> FloatArray: ...
    @overload
    def __call__(self, x: ArrayLike, y: NDArray[Any], /) -> FloatArray: ...
    @overload
    def __call__(self, x: ArrayLike, y: ArrayLike, /) -> Any: ...
