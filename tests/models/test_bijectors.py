"""rt.bijectors: constraints hold, inverse(forward(y)) == y, the log-det-Jacobian
equals slogdet of the finite-difference Jacobian (of the free parameters for
matrix outputs), and each method records, compiles and differentiates."""

import zlib

import numpy as np
import pytest

import revtape as rt
from revtape import bijectors as bj
from conftest import check_grad, fd_jacobian

RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def _reseed(request):
    """Each test draws the same numbers however the tests are selected or ordered."""
    global RNG
    RNG = np.random.default_rng([5, zlib.crc32(request.node.name.encode())])

# name -> (bijector, y sampler, free parameters of x as a flat vector)
CASES = {
    "exp": (bj.exp, lambda: RNG.normal(size=4), lambda x: x),
    "log": (bj.log, lambda: RNG.uniform(0.5, 3, size=4), lambda x: x),
    "interval": (bj.interval(-1.0, 3.0), lambda: RNG.normal(size=4) * 2, lambda x: x),
    "interval_arrays": (bj.interval(np.array([0.0, -2, 1, 5]), np.array([1.0, 2, 1.5, 9])),
                        lambda: RNG.normal(size=4), lambda x: x),
    "simplex": (bj.simplex, lambda: RNG.normal(size=4), lambda x: x[:-1]),
    "ordered": (bj.ordered, lambda: RNG.normal(size=5), lambda x: x),
    "lower_cholesky": (bj.lower_cholesky, lambda: RNG.normal(size=6) * 0.7,
                       lambda x: x[np.tril_indices(3)]),
    "corr_cholesky": (bj.corr_cholesky, lambda: RNG.normal(size=6) * 0.7,
                      lambda x: x[np.tril_indices(4, -1)]),
}


def _constraint(name, x):
    x = np.asarray(x)
    if name in ("exp",):
        assert np.all(x > 0)
    elif name == "interval":
        assert np.all((x > -1) & (x < 3))
    elif name == "interval_arrays":
        assert np.all((x > [0.0, -2, 1, 5]) & (x < [1.0, 2, 1.5, 9]))
    elif name == "simplex":
        assert np.all(x > 0) and abs(np.sum(x) - 1) < 1e-14 and x.shape == (5,)
    elif name == "ordered":
        assert np.all(np.diff(x) > 0)
    elif name == "lower_cholesky":
        assert x.shape == (3, 3) and np.all(np.triu(x, 1) == 0) and np.all(np.diag(x) > 0)
    elif name == "corr_cholesky":
        assert x.shape == (4, 4) and np.all(np.triu(x, 1) == 0) and np.all(np.diag(x) > 0)
        np.testing.assert_allclose(np.sum(x ** 2, axis=1), 1.0, rtol=1e-14)
        C = x @ x.T
        np.testing.assert_allclose(np.diag(C), 1.0, rtol=1e-14)
        assert np.all(np.linalg.eigvalsh(C) > 0)


@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip_and_constraint(name):
    b, sample, _ = CASES[name]
    for _ in range(5):
        y = sample()
        x = b.forward(y)
        _constraint(name, x)
        np.testing.assert_allclose(b.inverse(x), y, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_log_det_jacobian_is_slogdet_of_the_finite_difference_jacobian(name):
    b, sample, free = CASES[name]
    for _ in range(3):
        y = sample()
        J = fd_jacobian(lambda v: free(b.forward(v)), y, h=1e-5)
        sign, logdet = np.linalg.slogdet(J)
        assert sign != 0
        assert b.forward_log_det_jacobian(y) == pytest.approx(logdet, rel=1e-8, abs=1e-8)
        # and the Jacobian revtape records agrees with it
        np.testing.assert_allclose(rt.jacobian(lambda v: free(b.forward(v)), y), J,
                                   rtol=1e-7, atol=1e-9)
        # inverse_log_det_jacobian is its negative at x = forward(y)
        assert b.inverse_log_det_jacobian(b.forward(y)) == pytest.approx(
            -b.forward_log_det_jacobian(y), rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_tracked_compiled_and_gradients(name):
    b, sample, free = CASES[name]
    y = sample()
    w = RNG.normal(size=np.size(free(b.forward(y))))

    def target(v):     # a density-like use: something of forward(y) plus the log-det
        return np.sum(w * free(b.forward(v))) + b.forward_log_det_jacobian(v)

    check_grad(target, y)
    tape = rt.GradientTape(target, y)
    ct = rt.compile(tape)
    y2 = sample()
    v, g = ct.value_and_gradient(y2)
    assert v == pytest.approx(target(y2), rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(g, tape.gradient(y2), rtol=1e-11, atol=1e-12)
    # tracked forward equals the plain one; inverse records too
    jt = rt.JacobianTape(b.forward, y)
    np.testing.assert_allclose(rt.value(jt.output), b.forward(y), rtol=1e-15, atol=1e-300)
    x = b.forward(y)
    np.testing.assert_allclose(rt.compile(rt.JacobianTape(b.inverse, x)).forward(x), y,
                               rtol=1e-11, atol=1e-12)


def test_unconstrained_hmc_target_with_bijectors():
    # a scale through exp, a probability vector through simplex: value and gradient
    data = np.array([3.0, 1.0, 0.0, 4.0, 2.0])
    obs = RNG.normal(1.0, 2.0, size=20)

    def logp(y):
        sigma = bj.exp.forward(y[0])
        p = bj.simplex.forward(y[1:])
        return (np.sum(rt.stats.norm.logpdf(obs, 0.0, sigma)) + rt.stats.halfnorm.logpdf(sigma)
                + rt.stats.multinomial.logpmf(data, 10, p)
                + bj.exp.forward_log_det_jacobian(y[0]) + bj.simplex.forward_log_det_jacobian(y[1:]))

    y = RNG.normal(size=5) * 0.3
    check_grad(logp, y)
    ct = rt.compile(rt.GradientTape(logp, y))
    y2 = y + 0.1
    assert ct.forward(y2) == pytest.approx(logp(y2), rel=1e-12)


def test_bad_sizes_and_intervals_are_refused():
    with pytest.raises(ValueError, match="n\\(n\\+1\\)/2"):
        bj.lower_cholesky.forward(np.zeros(4))
    with pytest.raises(ValueError, match="n\\(n-1\\)/2"):
        bj.corr_cholesky.forward(np.zeros(4))
    with pytest.raises(ValueError, match="a < b"):
        bj.interval(2.0, 1.0)


def test_simplex_and_ordered_work_on_batches():
    y = RNG.normal(size=(3, 4))
    x = bj.simplex.forward(y)
    np.testing.assert_allclose(x.sum(axis=1), 1.0, rtol=1e-14)
    np.testing.assert_allclose(bj.simplex.inverse(x), y, rtol=1e-11)
    for i in range(3):
        np.testing.assert_allclose(x[i], bj.simplex.forward(y[i]), rtol=1e-15)
    o = bj.ordered.forward(y)
    np.testing.assert_allclose(bj.ordered.inverse(o), y, rtol=1e-11, atol=1e-14)
    assert bj.ordered.forward_log_det_jacobian(y) == pytest.approx(
        sum(bj.ordered.forward_log_det_jacobian(r) for r in y))
