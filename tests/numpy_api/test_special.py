"""rt.special (src/revtape/numpy_api/special.py): scipy.special's names for
tracked and plain values -- the rows' functions and the composites (softmax,
log_softmax, multigammaln) -- against scipy, with gradients and compiled
replays."""

import numpy as np
import pytest

import revtape as rt
from conftest import check_grad

sps = pytest.importorskip("scipy.special")


def test_rt_special_names_work_on_tracked_and_plain_values(rng):
    x = rng.uniform(0.1, 0.9, 5)
    for name in ("erfc", "erfcx", "ndtr", "log_ndtr", "ndtri", "logit", "i0e", "i1e"):
        f = getattr(rt.special, name)
        np.testing.assert_allclose(f(x), getattr(sps, name)(x), rtol=1e-15)
        np.testing.assert_allclose(rt.value(rt.JacobianTape(f, x).output),
                                   getattr(sps, name)(x), rtol=1e-15)
    for name in ("xlog1py", "betaln"):
        np.testing.assert_allclose(getattr(rt.special, name)(x, x + 1),
                                   getattr(sps, name)(x, x + 1), rtol=1e-15)


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 1)])
def test_softmax_and_log_softmax(axis, rng):
    x = rng.normal(size=(3, 4)) * 3
    for name in ("softmax", "log_softmax"):
        ours, ref = getattr(rt.special, name), getattr(sps, name)
        # (log_softmax near 0 has an absolute error of an ulp of 1, in scipy too)
        np.testing.assert_allclose(ours(x, axis=axis), ref(x, axis=axis), rtol=1e-13, atol=1e-15)
        w = rng.normal(size=(3, 4))
        f = lambda v: np.sum(w * ours(v, axis=axis))
        check_grad(f, x)
        tape = rt.GradientTape(f, x)
        np.testing.assert_allclose(rt.compile(tape).gradient(x + 0.1), tape.gradient(x + 0.1),
                                   rtol=1e-12, atol=1e-15)


def test_multigammaln(rng):
    for d in (1, 2, 5):
        a = rng.uniform(0.5 * d, 10, 4)
        np.testing.assert_allclose(rt.special.multigammaln(a, d), sps.multigammaln(a, d),
                                   rtol=1e-13)
        g = check_grad(lambda a: np.sum(rt.special.multigammaln(a, d)), a)
        np.testing.assert_allclose(g, sum(sps.digamma(a - 0.5 * j) for j in range(d)), rtol=1e-12)
        ct = rt.compile(rt.GradientTape(lambda a: np.sum(rt.special.multigammaln(a, d)), a))
        np.testing.assert_allclose(ct.gradient(a + 1), rt.gradient(
            lambda a: np.sum(rt.special.multigammaln(a, d)), a + 1), rtol=1e-13)
    with pytest.raises(ValueError, match="not met"):
        rt.special.multigammaln(1.0, 4)


# ---------------------------------------------------------------- gamma and Bessel functions
# (rows gamma, rgamma, gammasgn, j0, j1, y0, y1, jn, yn, iv, ive; compositions
# i0, i1, erfcinv, beta): values at ordinary points and at scipy's edges,
# gradients against the analytic formulas and finite differences, Hessians,
# the reference replay against the compiled one.

_EDGES = np.array([0.0, -0.0, -1.0, -2.0, -2.5, np.inf, -np.inf, np.nan, 200.0, -200.5,
                   0.7, 3.3, 25.0, -3.5, -0.5, 1e-8])

# name -> (analytic derivative, sampler interval)
_UNARY_NEW = {
    "gamma": (lambda x: sps.gamma(x) * sps.digamma(x), (0.3, 5.0)),
    "rgamma": (lambda x: -sps.rgamma(x) * sps.digamma(x), (0.3, 5.0)),
    "j0": (lambda x: -sps.j1(x), (0.2, 20.0)),
    "j1": (lambda x: 0.5 * (sps.j0(x) - sps.jv(2, x)), (0.2, 20.0)),
    "y0": (lambda x: -sps.y1(x), (0.2, 20.0)),
    "y1": (lambda x: 0.5 * (sps.y0(x) - sps.yn(2, x)), (0.2, 20.0)),
    "i0": (lambda x: sps.i1(x), (-5.0, 5.0)),
    "i1": (lambda x: 0.5 * (sps.i0(x) + sps.iv(2, x)), (-5.0, 5.0)),
    "erfcinv": (lambda y: -np.sqrt(np.pi) / 2 * np.exp(sps.erfcinv(y) ** 2), (0.2, 1.8)),
}


@pytest.mark.parametrize("name", sorted(_UNARY_NEW))
def test_gamma_bessel_unary_values_and_gradients(name, rng):
    d, (lo, hi) = _UNARY_NEW[name]
    ours, ref = getattr(rt.special, name), getattr(sps, name)
    with np.errstate(all="ignore"):
        edges = _EDGES if name != "erfcinv" else np.array([0.0, 2.0, -1.0, 3.0, np.nan, 1.0,
                                                           1e-300, 1.999999])
        np.testing.assert_allclose(ours(edges), ref(edges), rtol=1e-13, equal_nan=True)
    x = rng.uniform(lo, hi, 6)
    np.testing.assert_allclose(ours(x), ref(x), rtol=1e-13, atol=1e-300)
    # scipy's own ufunc on a tracked value records the same
    g = rt.gradient(lambda v: np.sum(ref(v)), x)
    np.testing.assert_allclose(g, d(x), rtol=1e-9, atol=1e-12)
    f = lambda v: np.sum(np.sin(ours(v)))
    check_grad(f, x)
    tape = rt.GradientTape(f, x)
    ct = rt.compile(tape)
    x2 = x + 0.01
    np.testing.assert_allclose(ct.gradient(x2), tape.gradient(x2), rtol=1e-12, atol=1e-14)
    H = ct.hessian(x)
    h = 1e-5
    fd = np.array([(ct.gradient(x + h * e) - ct.gradient(x - h * e)) / (2 * h)
                   for e in np.eye(len(x))])
    np.testing.assert_allclose(H, fd, rtol=1e-5, atol=1e-6 * max(1.0, np.abs(H).max()))
    np.testing.assert_allclose(tape.hessian(x), H, rtol=1e-10, atol=1e-12)


def test_gammasgn_is_scipys_and_has_no_derivative(rng):
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(rt.special.gammasgn(_EDGES), sps.gammasgn(_EDGES))
    x = rng.uniform(-3, 3, 5)
    g = rt.gradient(lambda v: np.sum(sps.gammasgn(v) * v), x)
    np.testing.assert_array_equal(g, sps.gammasgn(x))


# name -> (analytic d/dx at order v, orders tried)
_ORDER_NEW = {
    "jn": (lambda v, x: 0.5 * (sps.jv(v - 1, x) - sps.jv(v + 1, x)), (0, 2, -3, 7)),
    "yn": (lambda v, x: 0.5 * (sps.yn(v - 1, x) - sps.yn(v + 1, x)), (0, 2, -3, 7)),
    "iv": (lambda v, x: 0.5 * (sps.iv(v - 1, x) + sps.iv(v + 1, x)), (0, 2.5, -2.5, 17.3, 45.0)),
    "ive": (lambda v, x: 0.5 * (sps.ive(v - 1, x) + sps.ive(v + 1, x)) - np.sign(x) * sps.ive(v, x),
            (0, 1, 2.5, 17.3, 45.0)),
}


@pytest.mark.parametrize("name", sorted(_ORDER_NEW))
def test_bessel_of_an_order_values_and_gradients_in_x(name, rng):
    d, orders = _ORDER_NEW[name]
    ours, ref = getattr(rt.special, name), getattr(sps, name)
    for v in orders:
        with np.errstate(all="ignore"):
            e = _EDGES[_EDGES != 1e-8]
            np.testing.assert_allclose(ours(v, e), ref(v, e), rtol=1e-12, equal_nan=True)
        x = rng.uniform(0.2, 30.0, 5)
        np.testing.assert_allclose(ours(v, x), ref(v, x), rtol=2e-12)
        g = rt.gradient(lambda u: np.sum(ref(v, u)), x)
        np.testing.assert_allclose(g, d(v, x), rtol=1e-9, atol=1e-13)
    v = np.array([2.0, 3.0, 1.0, 0.0, 4.0])
    f = lambda u: np.sum(np.tanh(ours(v, u)))
    x = rng.uniform(0.5, 6.0, 5)
    check_grad(f, x)
    tape = rt.GradientTape(f, x)
    ct = rt.compile(tape)
    np.testing.assert_allclose(ct.gradient(x + 0.1), tape.gradient(x + 0.1), rtol=1e-12)
    np.testing.assert_allclose(ct.hessian(x), tape.hessian(x), rtol=1e-10, atol=1e-13)
    h = 1e-5
    fd = (ct.gradient(x + h) - ct.gradient(x - h)) / (2 * h)
    np.testing.assert_allclose(ct.hessian(x).sum(axis=1), fd, rtol=1e-5, atol=1e-7)


def test_bessel_orders_are_refused_when_tracked_or_not_integers(rng):
    x = rng.uniform(1, 2, 3)
    for name in ("jn", "yn", "iv", "ive"):
        with pytest.raises(rt.UnsupportedError, match="order"):
            rt.gradient(lambda v: np.sum(getattr(sps, name)(v, x)), x)
    with pytest.raises(rt.UnsupportedError, match="integer orders"):
        rt.gradient(lambda u: np.sum(sps.jn(2.5, u)), x)


def test_beta_values_and_gradients(rng):
    a, b = rng.uniform(0.3, 5, 4), rng.uniform(0.3, 5, 4)
    neg = np.array([-0.5, -2.5, 0.7, -1.3])
    np.testing.assert_allclose(rt.special.beta(a, b), sps.beta(a, b), rtol=1e-13)
    np.testing.assert_allclose(rt.special.beta(neg, b), sps.beta(neg, b), rtol=1e-12)
    ga, gb = rt.grad(lambda a, b: np.sum(sps.beta(a, b)), argnums=(0, 1))(a, b)
    B = sps.beta(a, b)
    np.testing.assert_allclose(ga, B * (sps.digamma(a) - sps.digamma(a + b)), rtol=1e-11)
    np.testing.assert_allclose(gb, B * (sps.digamma(b) - sps.digamma(a + b)), rtol=1e-11)
    x = np.concatenate([a, b])
    f = lambda v: np.sum(rt.special.beta(v[:4], v[4:]))
    check_grad(f, x)
    tape = rt.GradientTape(f, x)
    np.testing.assert_allclose(rt.compile(tape).hessian(x), tape.hessian(x), rtol=1e-10)


def test_new_rows_scipy_free_forwards_are_the_c_kernels(rng):
    """Without scipy the rows' numpy forward is their C value function
    (ops.c_elementwise): it must agree with scipy where scipy is here."""
    from revtape.core import ops, specfun
    with np.errstate(all="ignore"):
        for name in ("gamma", "rgamma", "j0", "j1", "y0", "y1"):
            np.testing.assert_allclose(ops.c_elementwise(name, _EDGES), getattr(sps, name)(_EDGES),
                                       rtol=1e-13, equal_nan=True)
        np.testing.assert_array_equal(specfun.gammasgn(_EDGES), sps.gammasgn(_EDGES))
        x = np.concatenate([rng.uniform(0.01, 40, 20), [0.0, -1.5, np.inf, np.nan, 700.0, 3e4]])
        for name, orders in (("jn", (0, 1, 5, -4)), ("yn", (0, 1, 5, -4)),
                             ("iv", (0, 1, 2.5, -2.5, 30.0)), ("ive", (0, 1, 2.5, -7.5, 30.0))):
            for v in orders:
                got = ops.c_elementwise(name, np.full(x.shape, float(v)), x)
                # (J and Y near their zeros: an absolute error of ulps of 1e-3)
                np.testing.assert_allclose(got, getattr(sps, name)(v, x), rtol=5e-12, atol=1e-14,
                                           equal_nan=True, err_msg=f"{name}({v})")


@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_logsumexp_weights_and_sign(axis, keepdims, rng):
    a = rng.normal(size=(3, 4)) * 2
    b = rng.normal(size=(3, 4))
    for bb, sign in ((b, True), (np.abs(b), False), (b[0], True), (None, True)):
        ref = sps.logsumexp(a, axis=axis, b=bb, keepdims=keepdims, return_sign=sign)
        got = rt.special.logsumexp(a, axis=axis, b=bb, keepdims=keepdims, return_sign=sign)
        f = lambda v: sps.logsumexp(v, axis=axis, b=bb, keepdims=keepdims, return_sign=sign)
        traced = rt.value(rt.JacobianTape(lambda v: f(v)[0] if sign else f(v), a).output)
        if sign:
            np.testing.assert_allclose(got[0], ref[0], rtol=1e-13)
            np.testing.assert_array_equal(got[1], ref[1])
            np.testing.assert_allclose(traced, ref[0], rtol=1e-13)
            w = rng.normal(size=np.shape(ref[0]))
            g = lambda v: np.sum(w * f(v)[0])
        else:
            np.testing.assert_allclose(got, ref, rtol=1e-13)
            np.testing.assert_allclose(traced, ref, rtol=1e-13)
            w = rng.normal(size=np.shape(ref))
            g = lambda v: np.sum(w * f(v))
        check_grad(g, a)
        tape = rt.GradientTape(g, a)
        ct = rt.compile(tape)
        np.testing.assert_allclose(ct.gradient(a + 0.3), tape.gradient(a + 0.3), rtol=1e-12,
                                   atol=1e-14)
        np.testing.assert_allclose(ct.hessian(a), tape.hessian(a), rtol=1e-9, atol=1e-12)
    # gradient in b: d/db log|sum b e^a| = e^a / sum
    gb = rt.gradient(lambda bb: sps.logsumexp(a, b=bb, return_sign=True)[0], b)
    np.testing.assert_allclose(gb, np.exp(a) / np.sum(b * np.exp(a)), rtol=1e-11)
    # a negative sum without return_sign is nan, as scipy's
    with np.errstate(all="ignore"):
        assert np.isnan(rt.value(rt.JacobianTape(
            lambda v: sps.logsumexp(v, b=-np.ones(4)), a[0]).output))


def test_betainc_in_x(rng):
    a, b = rng.uniform(0.3, 8, 5), rng.uniform(0.3, 8, 5)
    x = rng.uniform(0.02, 0.98, 5)
    np.testing.assert_allclose(rt.special.betainc(a, b, x), sps.betainc(a, b, x), rtol=1e-14)
    with np.errstate(all="ignore"):
        e = np.array([0.0, 1.0, -0.1, 1.1, np.nan, 0.5])
        np.testing.assert_allclose(rt.value(rt.JacobianTape(
            lambda v: sps.betainc(2.0, 3.0, v), e).output), sps.betainc(2.0, 3.0, e),
            equal_nan=True)
    # dI/dx = x^(a-1) (1-x)^(b-1) / B(a, b)
    g = rt.gradient(lambda v: np.sum(sps.betainc(a, b, v)), x)
    np.testing.assert_allclose(g, x ** (a - 1) * (1 - x) ** (b - 1) / sps.beta(a, b), rtol=1e-12)
    f = lambda v: np.sum(np.sin(3 * sps.betainc(a[:1], b[0], v)))    # a, b broadcast
    check_grad(f, x)
    tape = rt.GradientTape(f, x)
    ct = rt.compile(tape)
    np.testing.assert_allclose(ct.gradient(x * 0.9), tape.gradient(x * 0.9), rtol=1e-13)
    H = ct.hessian(x)
    np.testing.assert_allclose(H, tape.hessian(x), rtol=1e-12)
    h = 1e-6
    fd = (ct.gradient(x + h) - ct.gradient(x - h)) / (2 * h)
    np.testing.assert_allclose(H.sum(axis=1), fd, rtol=1e-5, atol=1e-7)
    # forward mode
    val, tan = rt.jvp(f, (x,), (np.ones(5),))
    assert tan == pytest.approx(np.sum(ct.gradient(x)), rel=1e-12)
    for tracked in ("a", "b"):
        with pytest.raises(rt.UnsupportedError, match="differentiable in x only"):
            rt.gradient(lambda v: np.sum(sps.betainc(v, b, x) if tracked == "a"
                                         else sps.betainc(a, v, x)), a)


def test_betainc_scipy_free_forward(rng):
    from revtape.core import specfun
    a, b = rng.uniform(0.1, 30, 300), rng.uniform(0.1, 30, 300)
    x = rng.uniform(0, 1, 300)
    np.testing.assert_allclose(specfun.betainc(a, b, x), sps.betainc(a, b, x), rtol=1e-12,
                               atol=1e-300)
    with np.errstate(all="ignore"):
        for args in ((2.0, 3.0, np.array([0.0, 1.0, -0.1, 1.1, np.nan])), (0.0, 3.0, 0.4),
                     (2.0, 0.0, 0.4), (-1.0, 2.0, 0.5)):
            np.testing.assert_allclose(specfun.betainc(*args), sps.betainc(*args), equal_nan=True)
