"""The bridges' per-call overhead: revtape.interop.to_jax under jax.jit against
the bare revtape call and JAX's own host-callback floor (a jitted
pure_callback of a function that does nothing), and vmap over 32 rows
against 32 jitted calls.

    pytest benchmarks/test_interop.py --benchmark-only
"""

import numpy as np
import pytest

import revtape as rt
from revtape import interop

jax = pytest.importorskip("jax", reason="jax is not installed (pip install \"revtape[jax]\")")
jnp = jax.numpy

ICOV = np.linspace(0.5, 2.0, 5)


def logp(x):
    return -0.5 * np.sum(ICOV * x * x) - np.sum(np.log1p(x * x))


X0 = np.linspace(-1.0, 1.0, 5)


@pytest.fixture(scope="module")
def ld():
    return rt.LogDensity(logp, np.zeros(5))


@pytest.mark.benchmark(group="jax-bridge")
@pytest.mark.parametrize("what", ["revtape", "jit(value_and_grad(to_jax))", "jit(to_jax)",
                                  "jit(pure_callback floor)"])
def test_jax_call(benchmark, ld, what):
    x = jnp.asarray(X0, dtype=jnp.float32)
    if what == "revtape":
        fn, arg = ld.logdensity_and_gradient, X0
    elif what == "jit(pure_callback floor)":
        def floor(z):
            return jax.pure_callback(lambda a: np.zeros((), np.float32),
                                     jax.ShapeDtypeStruct((), jnp.float32), z)
        fn, arg = jax.jit(floor), x
    else:
        f = interop.to_jax(ld)
        fn = jax.jit(jax.value_and_grad(f)) if "value_and_grad" in what else jax.jit(f)
        arg = x
        out = fn(arg)
        v = out[0] if isinstance(out, tuple) else out
        assert float(v) == pytest.approx(logp(np.asarray(x, np.float64)), rel=1e-6)

    def call():
        r = fn(arg)
        if what != "revtape":
            jax.block_until_ready(r)
    benchmark(call)


@pytest.mark.benchmark(group="jax-vmap")
@pytest.mark.parametrize("what", ["jit(vmap(grad)) 32 rows", "32 x jit(grad)"])
def test_jax_vmap(benchmark, ld, what):
    f = interop.to_jax(ld)
    X = jnp.asarray(np.random.default_rng(1).normal(size=(32, 5)), dtype=jnp.float32)
    if what.startswith("jit(vmap"):
        g = jax.jit(jax.vmap(jax.grad(f)))
        benchmark(lambda: jax.block_until_ready(g(X)))
    else:
        g = jax.jit(jax.grad(f))
        rows = list(X)
        benchmark(lambda: [jax.block_until_ready(g(r)) for r in rows])
