"""Bridges from a revtape log density to samplers' own frameworks.

    revtape.interop.to_jax(ld_or_f, x0=None)   # a function on JAX arrays (jit, grad, vmap)
    revtape.interop.nutpie_model(ld)           # what nutpie.sample takes
    revtape.interop.pytensor_op(ld)            # a PyTensor Op x -> logp, for pm.Potential

Each bridge imports its library only when called and, when it is missing,
raises MissingPackageError naming what to install (``pip install
"revtape[jax]"``, ``"revtape[pytensor]"``).  The object handed over is an ``rt.LogDensity`` (or a
scalar function of a flat vector with its recording point ``x0``): values
come from its forward-only program, gradients from the compiled
value-and-gradient program, batches (vmap) from its batch replay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ._deps import MissingPackageError

if TYPE_CHECKING:
    from ..core.apitypes import ArrayLike, Function
    from ..models.logdensity import LogDensity


def to_jax(ld_or_f: LogDensity | Function, x0: ArrayLike | None = None) -> Callable[..., Any]:
    """A JAX function of the flat parameter vector giving the log density,
    which ``jax.jit``, ``jax.grad``/``value_and_grad`` and ``jax.vmap``
    accept (see revtape.interop.jax_bridge).

    Parameters
    ----------
    ld_or_f : rt.LogDensity or callable
        The log density; a function of a flat vector needs x0.
    x0 : array_like, optional
        The recording point of a function (an rt.LogDensity has its own).

    Returns
    -------
    callable
        ``logp(x)`` on JAX arrays of shape (dimension,), with a custom JVP
        (the compiled gradient) and a vmap rule (the batch replay).

    Raises
    ------
    MissingPackageError
        jax is not installed (``pip install "revtape[jax]"``).
    """
    from .jax_bridge import to_jax as _to_jax
    return _to_jax(ld_or_f, x0)


def nutpie_model(ld: LogDensity) -> Any:
    """What ``nutpie.sample`` takes for an rt.LogDensity (see
    revtape.interop.nutpie_bridge).

    Parameters
    ----------
    ld : rt.LogDensity
        The log density (its names become the draws' variable names).

    Returns
    -------
    nutpie compiled model
        ``nutpie.sample(model)`` samples it; the gradient is the compiled one.

    Raises
    ------
    MissingPackageError
        nutpie is not installed (``pip install "revtape[nutpie]"``).
    """
    from .nutpie_bridge import nutpie_model as _nutpie_model
    return _nutpie_model(ld)


def pytensor_op(ld: LogDensity) -> Any:
    """A PyTensor Op ``x -> logp`` for an rt.LogDensity, with its gradient Op
    and a value-only ``perform``: ``pm.Potential("lik", pytensor_op(ld)(x))``.

    Parameters
    ----------
    ld : LogDensity
        The log density.  The Op takes the flat unconstrained vector, or PyMC
        variables structured like ``ld``'s x0 (when ld has no bijectors).

    Returns
    -------
    pytensor Op
        Its ``perform`` runs the value-only program; its ``grad`` is a gradient
        Op (whose own ``grad`` gives Hessian-vector products).

    Raises
    ------
    MissingPackageError
        pytensor is not installed (``pip install "revtape[pytensor]"``).
    """
    from .pytensor_bridge import pytensor_op as _pytensor_op
    return _pytensor_op(ld)


__all__ = ["MissingPackageError", "to_jax", "nutpie_model", "pytensor_op"]
