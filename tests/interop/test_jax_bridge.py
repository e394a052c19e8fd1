"""revtape.interop.to_jax: a LogDensity as a JAX function that jit, grad and
vmap accept; vmap runs the batch replay; a jitted HMC written in JAX samples
a known Gaussian through it."""

import numpy as np
import pytest

import revtape as rt
from revtape import interop

jax = pytest.importorskip("jax", reason="jax is not installed (pip install \"revtape[jax]\")")
jnp = jax.numpy

MU = np.array([1.0, -2.0, 0.5])
SD = np.array([1.0, 0.5, 2.0])


def logp(x):
    return -0.5 * np.sum(((x - MU) / SD) ** 2) + np.sum(np.log1p(0.0 * x))


def value(x):
    return -0.5 * np.sum(((x - MU) / SD) ** 2)


def grad(x):
    return -(x - MU) / SD ** 2


def _f64(a):
    return np.asarray(a, dtype=np.float64)


def test_value_grad_under_jit():
    f = interop.to_jax(logp, x0=np.zeros(3))
    for x in np.random.default_rng(3).normal(size=(5, 3)):
        xj = jnp.asarray(x, dtype=jnp.float32)
        x32 = _f64(xj)
        assert float(f(xj)) == pytest.approx(value(x32), rel=1e-6)
        assert float(jax.jit(f)(xj)) == pytest.approx(value(x32), rel=1e-6)
        v, g = jax.jit(jax.value_and_grad(f))(xj)
        assert g.dtype == xj.dtype
        assert float(v) == pytest.approx(value(x32), rel=1e-6)
        np.testing.assert_allclose(_f64(g), grad(x32), rtol=1e-5, atol=1e-6)
        # a cotangent other than 1 flows through the custom vjp
        np.testing.assert_allclose(_f64(jax.grad(lambda z: 3.0 * f(z))(xj)), 3 * grad(x32),
                                   rtol=1e-5, atol=1e-6)


def test_vmap_runs_the_batch_replay():
    ld = rt.LogDensity(logp, np.zeros(3))
    calls = {"batch": 0, "batch_vg": 0}
    batch, batch_vg = ld.batch_logdensity, ld.batch_logdensity_and_gradient

    def counted(name, fn):
        def g(X, *a, **k):
            calls[name] += 1
            return fn(X, *a, **k)
        return g

    ld.batch_logdensity = counted("batch", batch)
    ld.batch_logdensity_and_gradient = counted("batch_vg", batch_vg)
    f = interop.to_jax(ld)
    X = np.random.default_rng(4).normal(size=(16, 3)).astype(np.float32)
    v = jax.jit(jax.vmap(f))(X)
    assert calls["batch"] == 1
    np.testing.assert_allclose(_f64(v), [value(_f64(x)) for x in X], rtol=1e-6)
    G = jax.vmap(jax.grad(f))(X)
    assert calls["batch_vg"] == 1
    np.testing.assert_allclose(_f64(G), [grad(_f64(x)) for x in X], rtol=1e-5, atol=1e-6)
    V2 = jax.vmap(jax.vmap(f))(X.reshape(4, 4, 3))          # nested: one batch of 16
    np.testing.assert_allclose(_f64(V2).ravel(), _f64(v), rtol=1e-6)


def test_float64_under_x64():
    enable = getattr(jax, "enable_x64", None)
    if not callable(enable):
        pytest.skip("this jax has no enable_x64 context")
    f = interop.to_jax(logp, x0=np.zeros(3))
    with enable(True):
        x = jnp.asarray([0.3, 0.1, -0.7], dtype=jnp.float64)
        v, g = jax.value_and_grad(f)(x)
        assert v.dtype == jnp.float64
        assert float(v) == pytest.approx(value(_f64(x)), rel=1e-14)
        np.testing.assert_allclose(_f64(g), grad(_f64(x)), rtol=1e-14)


def test_bad_input_is_refused():
    f = interop.to_jax(logp, x0=np.zeros(3))
    with pytest.raises(rt.InputError):
        f(jnp.zeros(4))
    with pytest.raises(rt.InputError):
        interop.to_jax(logp)                         # a function needs x0
    with pytest.raises(rt.InputError):
        interop.to_jax(rt.LogDensity(logp, np.zeros(3)), x0=np.zeros(3))
    with pytest.raises(rt.InputError):
        interop.to_jax(42)


def test_jitted_hmc_recovers_known_means():
    f = interop.to_jax(logp, x0=np.zeros(3))
    step, n_leap, n_draws = 0.35, 8, 600
    vg = jax.value_and_grad(f)

    def leapfrog(q, p):
        def body(_, qp):
            q, p = qp
            p = p + 0.5 * step * vg(q)[1]
            q = q + step * p
            p = p + 0.5 * step * vg(q)[1]
            return q, p
        return jax.lax.fori_loop(0, n_leap, body, (q, p))

    @jax.jit
    def draw(q, key):
        k1, k2 = jax.random.split(key)
        p0 = jax.random.normal(k1, q.shape)
        q1, p1 = leapfrog(q, p0)
        h0 = -f(q) + 0.5 * jnp.sum(p0 * p0)
        h1 = -f(q1) + 0.5 * jnp.sum(p1 * p1)
        accept = jnp.log(jax.random.uniform(k2)) < h0 - h1
        return jnp.where(accept, q1, q), accept

    q = jnp.zeros(3)
    keys = jax.random.split(jax.random.PRNGKey(0), n_draws)
    out, acc = [], 0
    for k in keys:
        q, a = draw(q, k)
        out.append(np.asarray(q, dtype=np.float64))
        acc += bool(a)
    draws = np.array(out[100:])
    assert acc / n_draws > 0.5
    # 500 draws: the means within ~4 standard errors (HMC draws are close to independent here)
    err, tol = np.abs(draws.mean(axis=0) - MU), 4 * SD / np.sqrt(len(draws) / 3)
    assert np.all(err < tol), (draws.mean(axis=0), MU, tol)
    np.testing.assert_allclose(draws.std(axis=0), SD, rtol=0.25)
