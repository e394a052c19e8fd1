"""The one-shot functions rt.gradient, value_and_gradient, jacobian, hessian
and hvp (a function, a tape or a compiled tape; without x, jacobian/hessian/hvp
give the cached transforms of cached.py).  The tapes they record live in
trace/recording.py (GradientTape, JacobianTape) and trace/hessian.py
(HessianTape).
"""

import functools
import sys
from typing import Any, overload

from ..errors import UnsupportedError
from . import outputs

from ..trace.hessian import HessianTape
from ..trace.recording import GradientTape, JacobianTape, _once
from ..trace.tape import Tape
from ..core.apitypes import Differentiable, FloatArray, NDArray, PyTree


def _tape_like(obj):
    if isinstance(obj, Tape):
        return True
    # revtape.runtime.compiled is not imported here: it needs the C extension,
    # and rt.gradient(f, x) with a plain function must work without it.  A
    # CompiledTape can only exist once that module has been imported.
    compiled = sys.modules.get("revtape.runtime.compiled")
    return compiled is not None and isinstance(obj, compiled.CompiledTape)


@overload
def gradient(f: Differentiable, x: NDArray[Any], out: FloatArray | None = None) -> FloatArray: ...
@overload
def gradient(f: Differentiable, x: float, out: None = None) -> float: ...
@overload
def gradient(f: Differentiable, x: PyTree, out: PyTree = None) -> Any: ...


def gradient(f: Differentiable, x: PyTree, out: PyTree = None) -> Any:
    """Gradient of scalar f at x (f a function, a tape or a compiled tape).

    Parameters
    ----------
    f : callable, Tape or CompiledTape
        The function (recorded at x on every call: hoist ``rt.grad(f)`` or
        ``rt.compile`` out of a loop), or a tape or compiled tape to replay.
    x : float, ndarray, tuple or pytree
        Where to evaluate (``f(*x)`` for a tuple when f takes that many
        arguments); the result is structured like x.
    out : ndarray (or the structure of x), optional
        Where to write the gradient (float64, shaped like x); returned.

    Returns
    -------
    gradient : float, ndarray, tuple or pytree
        df/dx, structured like x.

    Raises
    ------
    OutputError
        f's value is not a scalar (use ``rt.jacobian``).
    InputError
        x or out does not match (for a tape: the recorded input).

    Examples
    --------
    >>> import numpy as np, revtape as rt
    >>> rt.gradient(lambda x: np.sum(x ** 3), np.array([1.0, 2.0]))
    array([ 3., 12.])
    """
    if _tape_like(f):
        return f.gradient(x, out)
    return _once(GradientTape, f, x).value_and_gradient_recorded(out)[1]


@overload
def value_and_gradient(f: Differentiable, x: NDArray[Any],
                       out: FloatArray | None = None) -> tuple[float, FloatArray]: ...
@overload
def value_and_gradient(f: Differentiable, x: float, out: None = None) -> tuple[float, float]: ...
@overload
def value_and_gradient(f: Differentiable, x: PyTree, out: PyTree = None) -> tuple[float, Any]: ...


def value_and_gradient(f: Differentiable, x: PyTree, out: PyTree = None) -> tuple[float, Any]:
    """(f(x), gradient at x) for a function, a tape or a compiled tape.

    Parameters
    ----------
    f : callable, Tape or CompiledTape
        The function (recorded at x on every call: hoist ``rt.grad(f)`` or
        ``rt.compile`` out of a loop), or a tape or compiled tape to replay.
    x : float, ndarray, tuple or pytree
        Where to evaluate (``f(*x)`` for a tuple when f takes that many
        arguments); the result is structured like x.
    out : ndarray (or the structure of x), optional
        Where to write the gradient (float64, shaped like x).

    Returns
    -------
    (float, gradient)
        f's scalar value and df/dx, structured like x.

    Raises
    ------
    OutputError
        f's value is not a scalar.
    """
    if _tape_like(f):
        return f.value_and_gradient(x, out)
    return _once(GradientTape, f, x).value_and_gradient_recorded(out)


def _transform(f, kind, x):
    """rt.jacobian(f) / hessian(f) / hvp(f) without x: the cached transform."""
    if _tape_like(f) or x is not None:
        raise TypeError(f"rt.{kind}(tape) needs x: rt.{kind}(tape, x, ...)")
    from .cached import CachedTransform   # above this module (it compiles); no cycle
    return CachedTransform(f, kind)


def jacobian(f: Differentiable, x: PyTree = None, out: PyTree = None) -> Any:
    """Jacobian of f at x, shaped output.shape + input.shape.  Without x, the
    cached, compiled, guarded transform: rt.jacobian(f)(x).

    Parameters
    ----------
    f : callable, Tape or CompiledTape
        The function (recorded at x on every call: hoist ``rt.grad(f)`` or
        ``rt.compile`` out of a loop), or a tape or compiled tape to replay.
    x : float, ndarray, tuple or pytree
        Where to evaluate (``f(*x)`` for a tuple when f takes that many
        arguments); the result is structured like x.
        Without x (f a function): the cached transform, ``rt.jacobian(f)(x)``.
    out : ndarray, optional
        Where to write the Jacobian (float64, output.shape + input.shape).

    Returns
    -------
    ndarray, tuple or pytree, or a cached transform
        The Jacobian (one block per input of a tuple or pytree x; f returning
        a pytree gives the same structure of Jacobians); without x, a
        callable ``J(x)``.
    """
    if x is None:
        return _transform(f, "jacobian", x)
    if _tape_like(f):
        return f.jacobian(x, out)
    if not callable(f):
        return _once(JacobianTape, f, x)          # refuses it, saying what to pass
    specs = []

    @functools.wraps(f)          # the signature too: call_with reads it
    def packed(*args):
        flat, spec = outputs.pack(f(*args))
        specs.append(spec)
        return flat

    tape = _once(JacobianTape, packed, x)
    if specs and specs[0] is not None:
        # f returned a container: its structure of Jacobians (outputs.py)
        if out is not None:
            raise UnsupportedError("jacobian(out=...) takes arrays; for a function returning "
                                   "a container call it without out=")
        return outputs.unpack_jacobian(specs[0], tape.jacobian(x), tape._treedef)
    return tape.jacobian(x, out)


def hessian(f: Differentiable, x: PyTree = None, out: PyTree = None) -> Any:
    """Hessian of scalar f at x, shaped input.shape + input.shape.  Without x,
    the cached transform: rt.hessian(f)(x).

    Parameters
    ----------
    f : callable, Tape or CompiledTape
        The function (recorded at x on every call: hoist ``rt.grad(f)`` or
        ``rt.compile`` out of a loop), or a tape or compiled tape to replay.
    x : float, ndarray, tuple or pytree
        Where to evaluate (``f(*x)`` for a tuple when f takes that many
        arguments); the result is structured like x.
        Without x (f a function): the cached transform, ``rt.hessian(f)(x)``.
    out : ndarray, optional
        Where to write the Hessian (float64, input.shape * 2).

    Returns
    -------
    ndarray (blocks for a tuple x), or a cached transform
        The Hessian; without x, a callable ``H(x)``.
    """
    if x is None:
        return _transform(f, "hessian", x)
    if _tape_like(f):
        return f.hessian(x, out)
    return _once(HessianTape, f, x).hessian(x, out)


def hvp(f: Differentiable, x: PyTree = None, v: PyTree = None) -> Any:
    """Hessian-vector product H(x) v.  Without x, the cached transform:
    rt.hvp(f)(x, v), as fast as ctape.hvp after its first call.

    Parameters
    ----------
    f : callable, Tape or CompiledTape
        The function (recorded at x on every call: hoist ``rt.grad(f)`` or
        ``rt.compile`` out of a loop), or a tape or compiled tape to replay.
    x : float, ndarray, tuple or pytree
        Where to evaluate (``f(*x)`` for a tuple when f takes that many
        arguments); the result is structured like x.
        Without x and v (f a function): the cached transform, ``rt.hvp(f)(x, v)``.
    v : float, ndarray, tuple or pytree
        The direction, structured like x.

    Returns
    -------
    ndarray (structured like x), or a cached transform
        H(x) v; without x and v, a callable ``(x, v) -> H(x) v``.

    Raises
    ------
    TypeError
        x without v.
    """
    if x is None and v is None:
        return _transform(f, "hvp", None)
    if v is None:
        raise TypeError("rt.hvp(f, x, v) needs v (or call rt.hvp(f)(x, v))")
    if _tape_like(f):
        return f.hvp(x, v)
    return _once(HessianTape, f, x).hvp(x, v)
