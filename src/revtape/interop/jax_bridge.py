"""to_jax: a revtape log density as a function on JAX arrays.

The value runs on the host through ``jax.pure_callback`` (so it stages into
``jax.jit``), its derivative is a ``jax.custom_vjp`` whose forward pass asks
revtape for value and gradient in one compiled replay, and ``jax.vmap``
hands the callbacks whole batches (``vmap_method="expand_dims"``), which
run revtape's batch replay instead of one call a row.  The host computes in
float64; results come back in the input's dtype (float32 unless JAX's x64
mode is on).

JAX runs host callbacks on threads of its own runtime, taking the GIL per
call: the LogDensity's pooled compiled copies serve them without
recompiling (docs/guide/threads.md).
"""

import numpy as np

from ._deps import require as _require
from ..errors import InputError


def _log_density(ld_or_f, x0):
    from ..models.logdensity import LogDensity
    if isinstance(ld_or_f, LogDensity):
        if x0 is not None:
            raise InputError("to_jax(ld) takes no x0: the LogDensity has its own")
        return ld_or_f
    if all(callable(getattr(ld_or_f, m, None))
           for m in ("logdensity", "logdensity_and_gradient", "batch_logdensity")) \
            and hasattr(ld_or_f, "dimension"):
        return ld_or_f               # a NegativeLogDensity, or another LogDensity-like object
    if not callable(ld_or_f):
        raise InputError(f"to_jax takes an rt.LogDensity or a scalar function of a flat "
                         f"vector, not a {type(ld_or_f).__name__}")
    if x0 is None:
        raise InputError("to_jax(f) needs x0=, the flat float vector f is recorded at "
                         "(or pass rt.LogDensity(f, x0))")
    x0 = np.asarray(x0, dtype=np.float64)
    if x0.ndim != 1:
        raise InputError(f"x0 must be a flat vector (got shape {x0.shape}); for structured "
                         "parameters build rt.LogDensity(f, x0) and pass that")
    return LogDensity(ld_or_f, x0)


def to_jax(ld_or_f, x0=None):
    """fun(x) -> log density, x a JAX array of shape (..., dimension) under
    vmap, (dimension,) otherwise; differentiable (custom_vjp), jittable,
    vmappable (the batch replay)."""
    jax = _require("jax", "jax")
    jnp = jax.numpy
    ld = _log_density(ld_or_f, x0)
    dim = ld.dimension

    def rows(x):
        x = np.asarray(x, dtype=np.float64)
        if x.shape[-1:] != (dim,):
            raise InputError(f"to_jax's function takes vectors of length {dim} "
                             f"(got shape {x.shape})")
        return x.reshape(-1, dim), x.shape[:-1]

    def host_value(x):
        dtype = np.asarray(x).dtype
        X, lead = rows(x)
        v = (np.array([ld.logdensity(X[0])]) if not lead else ld.batch_logdensity(X))
        return v.reshape(lead).astype(dtype)

    def host_value_and_grad(x):
        dtype = np.asarray(x).dtype
        X, lead = rows(x)
        if not lead:
            v, g = ld.logdensity_and_gradient(X[0])
            return np.asarray(v, dtype=dtype), g.astype(dtype)
        v, G = ld.batch_logdensity_and_gradient(X)
        return v.reshape(lead).astype(dtype), G.reshape(lead + (dim,)).astype(dtype)

    def shapes(x):
        out = jax.ShapeDtypeStruct(x.shape[:-1], x.dtype)
        return out, jax.ShapeDtypeStruct(x.shape, x.dtype)

    def check(x):
        x = jnp.asarray(x)
        if not jnp.issubdtype(x.dtype, jnp.floating):
            x = x.astype(jnp.result_type(float))
        if x.ndim != 1 or x.shape[0] != dim:
            raise InputError(f"to_jax's function takes a vector of length {dim} "
                             f"(got shape {x.shape}); use jax.vmap for batches")
        return x

    @jax.custom_vjp
    def fun(x):
        x = check(x)
        return jax.pure_callback(host_value, shapes(x)[0], x, vmap_method="expand_dims")

    def fwd(x):
        x = check(x)
        v, g = jax.pure_callback(host_value_and_grad, shapes(x), x, vmap_method="expand_dims")
        return v, g

    def bwd(g, ct):
        return (ct * g,)

    fun.defvjp(fwd, bwd)
    fun.log_density = ld
    return fun
