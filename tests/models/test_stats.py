"""rt.stats: scipy.stats's log densities, recorded as instructions.

Per distribution: values against scipy.stats at random parameters (inside and
outside the support, invalid parameters included), broadcasting as scipy
does, gradients against finite differences, the compiled replay against the
reference replay and scipy at new parameters, and -inf (with a zero, never
nan, gradient) outside the support."""

import warnings

import zlib

import numpy as np
import pytest

import revtape as rt
from conftest import check_grad

st = pytest.importorskip("scipy.stats")
ss = st

RNG = np.random.default_rng(11)


@pytest.fixture(autouse=True)
def _reseed(request):
    """Each test draws the same numbers however the tests are selected or ordered."""
    global RNG
    RNG = np.random.default_rng([11, zlib.crc32(request.node.name.encode())])
N = 60


def U(lo, hi, n=N):
    return RNG.uniform(lo, hi, n)


def I(lo, hi, n=N):
    return RNG.integers(lo, hi, n).astype(float)


# name -> (method, wide sampler (anything goes: outside the support, boundary
# values, invalid parameters), inside sampler (valid parameters, x inside the
# support, away from its edges), indices of the differentiable arguments)
DISTS = {
    "norm": ("logpdf", lambda: (U(-5, 5), U(-2, 2), U(-0.5, 3)),
             lambda: (U(-3, 3), U(-1, 1), U(0.5, 2)), (0, 1, 2)),
    "halfnorm": ("logpdf", lambda: (np.r_[U(-1, 5, N - 1), 0.0], U(-0.5, 0.5), U(-0.5, 3)),
                 lambda: (U(1, 3), U(-0.5, 0.5), U(0.5, 2)), (0, 1, 2)),
    "truncnorm": ("logpdf", lambda: (U(-3, 3), U(-3, 0.5), U(-1, 3), U(-.5, .5), U(0.5, 2)),
                  lambda: (U(-0.4, 0.4), U(-6, -1), U(1, 6), U(-.1, .1), U(0.5, 2)),
                  (0, 1, 2, 3, 4)),
    "cauchy": ("logpdf", lambda: (U(-50, 50), U(-2, 2), U(-0.5, 3)),
               lambda: (U(-5, 5), U(-1, 1), U(0.5, 2)), (0, 1, 2)),
    "halfcauchy": ("logpdf", lambda: (U(-1, 20), U(-.5, .5), U(-0.5, 3)),
                   lambda: (U(1, 5), U(-.5, .5), U(0.5, 2)), (0, 1, 2)),
    "t": ("logpdf", lambda: (U(-5, 5), U(-1, 50), U(-1, 1), U(0.1, 3)),
          lambda: (U(-3, 3), U(0.5, 30), U(-1, 1), U(0.5, 2)), (0, 1, 2, 3)),
    "laplace": ("logpdf", lambda: (U(-5, 5), U(-1, 1), U(-0.5, 3)),
                lambda: (U(2, 5) * RNG.choice([-1, 1], N), U(-.5, .5), U(0.5, 2)), (0, 1, 2)),
    "logistic": ("logpdf", lambda: (U(-30, 30), U(-1, 1), U(-0.5, 3)),
                 lambda: (U(-5, 5), U(-1, 1), U(0.5, 2)), (0, 1, 2)),
    "expon": ("logpdf", lambda: (np.r_[U(-1, 10, N - 1), 0.0], U(-.5, .5), U(-0.5, 3)),
              lambda: (U(1, 5), U(-.5, .5), U(0.5, 2)), (0, 1, 2)),
    "gamma": ("logpdf", lambda: (np.r_[U(-1, 10, N - 1), 0.0], U(-1, 10), U(-.5, .5), U(0.1, 3)),
              lambda: (U(1, 5), U(0.5, 8), U(-.5, .5), U(0.5, 2)), (0, 1, 2, 3)),
    "invgamma": ("logpdf", lambda: (np.r_[U(-1, 10, N - 1), 0.0], U(-1, 10), U(-.5, .5), U(0.1, 3)),
                 lambda: (U(1, 5), U(0.5, 8), U(-.5, .5), U(0.5, 2)), (0, 1, 2, 3)),
    "beta": ("logpdf", lambda: (np.r_[U(-0.1, 1.1, N - 2), 0.0, 1.0], U(-1, 10), U(0.3, 10)),
             lambda: (U(0.2, 0.8), U(0.5, 8), U(0.5, 8)), (0, 1, 2)),
    "lognorm": ("logpdf", lambda: (np.r_[U(-1, 10, N - 1), 0.0], U(-0.2, 3), U(-.5, .5), U(0.1, 3)),
                lambda: (U(1, 5), U(0.3, 2), U(-.5, .5), U(0.5, 2)), (0, 1, 2, 3)),
    "uniform": ("logpdf", lambda: (U(-1, 4), U(-1, 1), U(-0.5, 3)),
                lambda: (U(0.4, 0.6), U(-.1, .1), U(1, 2)), (0, 1, 2)),
    "weibull_min": ("logpdf", lambda: (np.r_[U(-1, 5, N - 1), 0.0], U(-0.3, 5), U(-.5, .5), U(0.1, 3)),
                    lambda: (U(1, 3), U(0.5, 4), U(-.5, .5), U(0.5, 2)), (0, 1, 2, 3)),
    "vonmises": ("logpdf", lambda: (U(-4, 4), U(-1, 20), U(-1, 1)),
                 lambda: (U(-3, 3), U(0.2, 10), U(-1, 1)), (0, 1, 2)),
    "poisson": ("logpmf", lambda: (np.r_[I(-2, 15, N - 2), 1.5, 0.0], np.r_[U(-1, 10, N - 1), 0.0]),
                lambda: (I(0, 15), U(0.5, 10)), (1,)),
    "binom": ("logpmf", lambda: (np.r_[I(-1, 12, N - 1), 1.5], np.r_[I(-1, 10, N - 1), 2.5],
                                 np.r_[U(-0.2, 1.2, N - 2), 0.0, 1.0]),
              lambda: (I(0, 5), I(5, 10), U(0.05, 0.95)), (2,)),
    "nbinom": ("logpmf", lambda: (np.r_[I(-1, 12, N - 1), 1.5], U(-1, 10), np.r_[U(-0.2, 1.2, N - 1), 1.0]),
               lambda: (I(0, 12), U(0.5, 10), U(0.05, 0.95)), (1, 2)),
    "bernoulli": ("logpmf", lambda: (I(-1, 3), np.r_[U(-0.2, 1.2, N - 2), 0.0, 1.0]),
                  lambda: (I(0, 2), U(0.05, 0.95)), (1,)),
    "geom": ("logpmf", lambda: (np.r_[I(-1, 12, N - 1), 1.5], np.r_[U(-0.2, 1.2, N - 1), 1.0]),
             lambda: (I(1, 12), U(0.05, 0.95)), (1,)),
    "betabinom": ("logpmf", lambda: (np.r_[I(-1, 12, N - 1), 1.5], I(-1, 10), U(-1, 5), U(0.3, 5)),
                  lambda: (I(0, 5), I(5, 10), U(0.5, 5), U(0.5, 5)), (2, 3)),
}


def _scipy(name, method, *args):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return getattr(getattr(st, name), method)(*args)


def _ours(name, method, *args):
    with np.errstate(all="ignore"):
        return getattr(getattr(rt.stats, name), method)(*args)


def assert_like_scipy(ours, ref):
    ours, ref = np.asarray(ours), np.asarray(ref)
    assert ours.shape == ref.shape
    fin = np.isfinite(ref)
    np.testing.assert_array_equal(ours[~fin], ref[~fin])     # -inf, inf and nan alike
    # relative 1e-12, absolute 1e-14 for values that cross zero
    np.testing.assert_allclose(ours[fin], ref[fin], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", sorted(DISTS))
def test_plain_values_match_scipy_everywhere(name):
    method, wide, inside, _ = DISTS[name]
    for sampler in (wide, inside):
        args = sampler()
        assert_like_scipy(_ours(name, method, *args), _scipy(name, method, *args))
    # scalars give numpy scalars, as scipy
    args = [a[0] for a in inside()]
    out = _ours(name, method, *args)
    assert np.ndim(out) == 0 and np.isclose(float(out), _scipy(name, method, *args), rtol=1e-12)


@pytest.mark.parametrize("name", sorted(DISTS))
def test_broadcasting_as_scipy(name):
    method, _, inside, _ = DISTS[name]
    args = inside()
    # x a column, the parameters rows; and a scalar x against arrays
    shaped = [args[0][:3].reshape(3, 1)] + [a[:4] for a in args[1:]]
    assert_like_scipy(_ours(name, method, *shaped), _scipy(name, method, *shaped))
    shaped = [args[0][0]] + [a[:4] for a in args[1:]]
    assert_like_scipy(_ours(name, method, *shaped), _scipy(name, method, *shaped))
    # and tracked: the recorded value has the broadcast shape
    f = lambda *a: getattr(rt.stats, name).__getattribute__(method)(*a)
    t = rt.JacobianTape(lambda p: f(*([args[0][:3].reshape(3, 1)] + [p] + [a[:4] for a in args[2:]])),
                        args[1][:4])
    assert np.shape(rt.value(t.output)) == (3, 4)


@pytest.mark.parametrize("name", sorted(DISTS))
def test_gradients_compiled_replay_and_new_parameters(name):
    method, _, inside, diff = DISTS[name]
    args = [a[:5] for a in inside()]
    w = RNG.uniform(0.5, 1.5, 5)

    def f(*d):
        full = list(args)
        for i, v in zip(diff, d):
            full[i] = v
        return np.sum(w * getattr(getattr(rt.stats, name), method)(*full))

    x0 = tuple(args[i] for i in diff)
    check_grad(f, x0 if len(x0) > 1 else x0[0], rtol=1e-6, atol=1e-7)
    tape = rt.GradientTape(f, x0 if len(x0) > 1 else x0[0])
    ct = rt.compile(tape)
    new = [a[:5] for a in inside()]
    x1 = tuple(new[i] for i in diff)
    x1 = x1 if len(x1) > 1 else x1[0]
    v_ref, g_ref = tape.value_and_gradient(x1)
    v, g = ct.value_and_gradient(x1)
    assert v == pytest.approx(v_ref, rel=1e-12, abs=1e-12)
    for a, b in zip(g if isinstance(g, tuple) else (g,), g_ref if isinstance(g_ref, tuple) else (g_ref,)):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-12)
    # the compiled value is scipy's at the new parameters
    full = list(args)
    for i, vv in zip(diff, x1 if isinstance(x1, tuple) else (x1,)):
        full[i] = vv
    assert v == pytest.approx(np.sum(w * _scipy(name, method, *full)), rel=1e-12)


@pytest.mark.parametrize("name", ["halfnorm", "expon", "gamma", "beta", "uniform", "halfcauchy",
                                  "lognorm", "weibull_min", "invgamma", "truncnorm"])
def test_outside_the_support_is_minus_inf_with_zero_gradient(name):
    method, _, inside, _ = DISTS[name]
    args = [a[:3] for a in inside()]
    x = np.array([-5.0, args[0][1], 7.0]) if name != "uniform" else np.array([-5.0, 0.5, 7.0])
    if name == "truncnorm":
        x = np.array([-20.0, 0.0, 20.0])
    f = lambda x: getattr(rt.stats, name).logpdf(x, *args[1:])
    J = rt.jacobian(f, x)
    v = f(x)
    assert v[0] == -np.inf and np.isfinite(v[1])
    assert J[0, 0] == 0.0 and np.all(np.isfinite(J))
    ct = rt.compile(rt.JacobianTape(f, x))
    assert_like_scipy(ct.forward(x), _scipy(name, "logpdf", x, *args[1:]))


def test_invalid_parameters_give_nan_in_the_compiled_replay_too():
    f = lambda s: np.sum(rt.stats.norm.logpdf(np.array([0.1, 0.2]), 0.0, s))
    ct = rt.compile(rt.GradientTape(f, 1.0))
    assert np.isnan(ct.forward(-1.0))
    assert ct.forward(2.0) == pytest.approx(np.sum(st.norm.logpdf([0.1, 0.2], 0, 2.0)), rel=1e-14)


# ---------------------------------------------------------------- logcdf / logsf
CDFS = {
    "norm": (lambda: (np.r_[U(-40, 40), U(-3, 3)], U(-1, 1, 2 * N), U(0.5, 2, 2 * N)), (0, 1, 2)),
    "logistic": (lambda: (U(-60, 60), U(-1, 1), U(0.5, 2)), (0, 1, 2)),
    "expon": (lambda: (np.r_[U(-1, 30, N - 1), 0.0], U(-.5, .5), U(0.5, 2)), (0, 1, 2)),
    "gamma": (lambda: (np.r_[U(-1, 30, N - 1), 0.0], U(0.3, 10), U(-.5, .5), U(0.5, 2)), (0, 2, 3)),
    "laplace": (lambda: (U(-30, 30), U(-1, 1), U(0.5, 2)), (0, 1, 2)),
    "cauchy": (lambda: (U(-1e3, 1e3), U(-1, 1), U(0.5, 2)), (0, 1, 2)),
    "halfnorm": (lambda: (np.r_[U(-1, 20, N - 1), 0.0], U(-.5, .5), U(0.5, 2)), (0, 1, 2)),
    "halfcauchy": (lambda: (np.r_[U(-1, 1e3, N - 1), 0.0], U(-.5, .5), U(0.5, 2)), (0, 1, 2)),
    "uniform": (lambda: (np.r_[U(-1, 4, N - 2), 0.0, 1.0], U(-.5, .5), U(0.5, 2)), (0, 1, 2)),
    "weibull_min": (lambda: (np.r_[U(-1, 4, N - 1), 0.0], U(0.5, 4), U(-.5, .5), U(0.5, 2)),
                    (0, 1, 2, 3)),
    "lognorm": (lambda: (np.r_[U(-1, 30, N - 1), 0.0], U(0.3, 2), U(-.5, .5), U(0.5, 2)),
                (0, 1, 2, 3)),
}


@pytest.mark.parametrize("method", ["logcdf", "logsf"])
@pytest.mark.parametrize("name", sorted(CDFS))
def test_logcdf_logsf(name, method):
    sample, diff = CDFS[name]
    args = sample()
    assert_like_scipy(_ours(name, method, *args), _scipy(name, method, *args))
    # gradients where the values are finite and not at the edge
    args = [a[:6] for a in sample()]
    if name == "uniform":
        # z = (x - loc) / scale in (0.12, 0.65): away from log's steep end
        args[:3] = RNG.uniform(0.3, 0.6, 6), RNG.uniform(-0.05, 0.05, 6), RNG.uniform(1, 2, 6)
    elif name in ("expon", "gamma", "halfnorm", "halfcauchy", "weibull_min", "lognorm"):
        args[0] = RNG.uniform(1.0, 3.0, 6)
    else:
        args[0] = np.clip(args[0], -6, 6)

    def f(*d):
        full = list(args)
        for i, v in zip(diff, d):
            full[i] = v
        return np.sum(getattr(getattr(rt.stats, name), method)(*full))

    x0 = tuple(args[i] for i in diff)
    check_grad(f, x0, rtol=1e-6, atol=1e-8)
    tape = rt.GradientTape(f, x0)
    x1 = tuple(v * 1.01 for v in x0)
    np.testing.assert_allclose(rt.compile(tape).gradient(x1)[0], tape.gradient(x1)[0],
                               rtol=1e-11, atol=1e-13)


def test_norm_logcdf_is_finite_deep_in_both_tails():
    x = np.array([-1e3, -40.0, 40.0])
    np.testing.assert_allclose(rt.stats.norm.logcdf(x), st.norm.logcdf(x), rtol=1e-14)
    g = rt.gradient(lambda x: np.sum(rt.stats.norm.logcdf(x)), x)
    mills = np.exp(st.norm.logpdf(x) - st.norm.logcdf(x))       # phi / Phi
    # at -1000 that difference of logs cancels: the asymptotic series instead
    mills[0] = 1e3 * (1 + 1e-6 - 2e-12 + 10e-18)
    np.testing.assert_allclose(g, mills, rtol=1e-12)


def test_missing_methods_say_what_there_is():
    with pytest.raises(rt.UnsupportedError, match="rt.stats.vonmises has logpdf; logcdf"):
        rt.stats.vonmises.logcdf(0.5, 2)
    with pytest.raises(AttributeError):
        rt.stats.norm.nonsense


def test_gamma_cdf_refuses_a_tracked_shape():
    with pytest.raises(rt.UnsupportedError, match="shape a"):
        rt.gradient(lambda a: rt.stats.gamma.logcdf(2.0, a), 1.5)
    with pytest.raises(rt.UnsupportedError, match="shape a"):
        rt.gradient(lambda a: rt.stats.gamma.logsf(2.0, a), 1.5)


# ---------------------------------------------------------------- multivariate

def test_dirichlet():
    alpha = RNG.uniform(0.5, 4, 4)
    x = RNG.dirichlet(np.ones(4), size=6).T           # scipy: components on the first axis
    np.testing.assert_allclose(rt.stats.dirichlet.logpdf(x, alpha), st.dirichlet.logpdf(x, alpha),
                               rtol=1e-12)
    np.testing.assert_allclose(rt.stats.dirichlet.logpdf(x[:, 0], alpha),
                               st.dirichlet.logpdf(x[:, 0], alpha), rtol=1e-12)
    np.testing.assert_allclose(rt.stats.dirichlet.logpdf(x[:3, 0], alpha),
                               st.dirichlet.logpdf(x[:3, 0], alpha), rtol=1e-12)
    f = lambda alpha, x: np.sum(rt.stats.dirichlet.logpdf(x, alpha))
    check_grad(lambda alpha: f(alpha, x), alpha)
    np.testing.assert_allclose(rt.gradient(f, (alpha, x))[1], (alpha[:, None] - 1) / x, rtol=1e-12)
    tape = rt.GradientTape(f, (alpha, x))
    a2 = alpha * 1.1
    v, g = rt.compile(tape).value_and_gradient((a2, x))
    assert v == pytest.approx(np.sum(st.dirichlet.logpdf(x, a2)), rel=1e-12)
    np.testing.assert_allclose(g[0], tape.gradient((a2, x))[0], rtol=1e-12)


def test_multinomial():
    p = RNG.dirichlet(np.full(4, 8.0))      # away from 0: finite differences stay accurate
    x = np.array([[1.0, 2.0, 0.0, 3.0], [0.0, 0.0, 6.0, 0.0], [1.0, 1.0, 1.0, 2.0]])
    ours = rt.stats.multinomial.logpmf(x, 6, p)
    ref = st.multinomial.logpmf(x, 6, p)
    np.testing.assert_allclose(ours, ref, rtol=1e-12)       # the last row sums to 5: -inf
    g = check_grad(lambda p: np.sum(rt.stats.multinomial.logpmf(x[:2], 6, p)), p)
    np.testing.assert_allclose(g, np.sum(x[:2], axis=0) / p, rtol=1e-12)
    ct = rt.compile(rt.GradientTape(lambda p: np.sum(rt.stats.multinomial.logpmf(x[:2], 6, p)), p))
    assert ct.forward(p[::-1]) == pytest.approx(np.sum(st.multinomial.logpmf(x[:2], 6, p[::-1])))


# ---------------------------------------------------------------- scipy.stats on tracked values

def test_scipy_stats_on_tracked_values_names_the_drop_in():
    with pytest.raises(rt.ConversionError, match=r"rt\.stats\.norm\.logpdf"):
        rt.gradient(lambda x: np.sum(st.norm.logpdf(x, 0, 1)), np.ones(2))
    with pytest.raises(rt.ConversionError, match=r"rt\.stats\.poisson\.logpmf"):
        rt.gradient(lambda m: np.sum(st.poisson.logpmf(3, m)), np.ones(2))
    with pytest.raises(rt.ConversionError, match=r"rt\.stats\.norm\.logpdf"):
        rt.gradient(lambda x: np.sum(st.norm(0, 1).logpdf(x)), np.ones(2))
    with pytest.raises(rt.ConversionError, match=r"rt\.stats\.dirichlet\.logpdf"):
        rt.gradient(lambda a: np.sum(st.dirichlet.logpdf(np.array([0.3, 0.7]), a)), np.ones(2))


def test_every_distribution_of_the_issue_is_there():
    names = ["norm", "halfnorm", "truncnorm", "cauchy", "halfcauchy", "t", "laplace", "logistic",
             "expon", "gamma", "invgamma", "beta", "lognorm", "uniform", "weibull_min", "vonmises",
             "poisson", "binom", "nbinom", "bernoulli", "geom", "betabinom", "dirichlet",
             "multinomial", "multivariate_normal"]
    for n in names:
        assert hasattr(rt.stats, n), n
    assert set(DISTS) | {"dirichlet", "multinomial", "multivariate_normal"} == set(names)


# ---------------------------------------------------------------- multivariate normal

def _spd(d):
    A = RNG.normal(size=(d, d))
    return A @ A.T + d * np.eye(d)


@pytest.mark.parametrize("xshape", [(4,), (5, 4), (2, 3, 4)], ids=str)
def test_multivariate_normal_values_like_scipy(xshape):
    C, m = _spd(4), RNG.normal(size=4)
    x = RNG.normal(size=xshape)
    for args in [(m, C), (None, C), (m, np.diag(C)), (m, 2.5)]:
        ours = rt.stats.multivariate_normal.logpdf(x, *args)
        ref = st.multivariate_normal.logpdf(x, *args)
        assert np.shape(ours) == np.shape(ref)
        np.testing.assert_allclose(ours, ref, rtol=1e-12)
    # dimension 1: a 1-D x is many points, as in scipy
    x1 = RNG.normal(size=6)
    np.testing.assert_allclose(rt.stats.multivariate_normal.logpdf(x1, [0.3], [[2.0]]),
                               st.multivariate_normal.logpdf(x1, [0.3], [[2.0]]), rtol=1e-12)


def test_multivariate_normal_gradients_and_compiled():
    C, m = _spd(3), RNG.normal(size=3)
    x = RNG.normal(size=(6, 3))
    f = lambda x, m, C: np.sum(rt.stats.multivariate_normal.logpdf(x, m, C))
    Ci = np.linalg.inv(C)
    gx, gm, gC = check_grad(f, (x, m, C))
    # np.linalg.cholesky reads C's lower triangle, and the gradient is that of
    # the function as computed (h5's convention): zero above the diagonal, the
    # symmetric gradient folded onto the lower triangle below it
    r = x - m
    G = -0.5 * (6 * Ci - Ci @ r.T @ r @ Ci)
    np.testing.assert_allclose(gC, np.tril(G + G.T) - np.diag(np.diag(G)), rtol=1e-10, atol=1e-14)
    tape = rt.GradientTape(f, (x, m, C))
    ct = rt.compile(tape)
    new = (x + 0.1, m - 0.2, C + np.eye(3))
    v, g = ct.value_and_gradient(new)
    assert v == pytest.approx(np.sum(st.multivariate_normal.logpdf(*new)), rel=1e-12)
    for a, b in zip(g, tape.gradient(new)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    # a covariance that is not positive definite: nan (rejectable), not an error
    bad = np.diag([1.0, -1.0, 1.0])
    assert np.isnan(ct.forward((x, m, bad)))
    assert np.isnan(f(x, m, bad))


def test_multivariate_normal_refuses_what_it_does_not_do():
    with pytest.raises(rt.UnsupportedError, match="allow_singular"):
        rt.stats.multivariate_normal.logpdf(np.zeros(2), None, np.eye(2), allow_singular=True)
    with pytest.raises(ValueError, match="components"):
        rt.stats.multivariate_normal.logpdf(np.zeros(3), np.zeros(2), np.eye(2))


def test_multinomial_invalid_parameters_are_nan():
    x = np.array([1.0, 2.0, 3.0])
    assert np.isnan(rt.stats.multinomial.logpmf(x, 6, [1.2, -0.1, -0.1]))
    assert np.isnan(st.multinomial.logpmf(x, 6, [1.2, -0.1, -0.1]))
    assert rt.stats.multinomial.logpmf(x, 6, [0.2, 0.3, 0.5]) == pytest.approx(
        st.multinomial.logpmf(x, 6, [0.2, 0.3, 0.5]), rel=1e-13)


@pytest.mark.parametrize("name,f,x0", [
    ("norm", lambda p: np.sum(rt.stats.norm.logpdf(np.linspace(-1, 2, 7), p[0], np.exp(p[1]))),
     np.array([0.3, -0.2])),
    ("gamma", lambda p: np.sum(rt.stats.gamma.logpdf(np.linspace(0.5, 3, 5), np.exp(p[0]),
                                                     scale=np.exp(p[1]))), np.array([0.4, 0.1])),
    ("t", lambda p: np.sum(rt.stats.t.logpdf(np.linspace(-2, 2, 5), np.exp(p[0]), p[1])),
     np.array([1.0, 0.2])),
    ("betabinom", lambda p: np.sum(rt.stats.betabinom.logpmf(np.arange(5.0), 6, np.exp(p[0]),
                                                             np.exp(p[1]))), np.array([0.2, 0.5])),
    ("simplex+dirichlet", lambda y: rt.stats.dirichlet.logpdf(
        rt.bijectors.simplex.forward(y), np.array([1.5, 2.0, 3.0]))
     + rt.bijectors.simplex.forward_log_det_jacobian(y), np.array([0.1, -0.3])),
    ("corr_cholesky", lambda y: rt.bijectors.corr_cholesky.forward_log_det_jacobian(y)
     + np.sum(rt.bijectors.corr_cholesky.forward(y)), np.array([0.2, -0.4, 0.3])),
])
def test_hessians_compiled_equal_reference_and_finite_differences(name, f, x0):
    ht = rt.HessianTape(f, x0)
    H_ref = ht.hessian(x0 + 0.05)
    np.testing.assert_allclose(rt.compile(ht).hessian(x0 + 0.05), H_ref, rtol=1e-10, atol=1e-12)
    h = 1e-5
    fd = np.array([(rt.gradient(f, x0 + 0.05 + h * e) - rt.gradient(f, x0 + 0.05 - h * e)) / (2 * h)
                   for e in np.eye(len(x0))])
    np.testing.assert_allclose(H_ref, fd, rtol=1e-6, atol=1e-7)


def test_lists_ints_and_lists_of_tracked_scalars_like_scipy():
    assert rt.stats.poisson.logpmf(3, 2) == pytest.approx(st.poisson.logpmf(3, 2), rel=1e-14)
    assert_like_scipy(rt.stats.expon.logpdf([1, 2, -1], scale=2), st.expon.logpdf([1, 2, -1], scale=2))
    assert rt.stats.dirichlet.logpdf([0.2, 0.3, 0.5], [1, 2, 3]) == pytest.approx(
        st.dirichlet.logpdf([0.2, 0.3, 0.5], [1, 2, 3]), rel=1e-14)
    assert rt.stats.multivariate_normal.logpdf([1, 2], [0, 0], [[2, 0.5], [0.5, 1]]) == \
        pytest.approx(st.multivariate_normal.logpdf([1, 2], [0, 0], [[2, 0.5], [0.5, 1]]), rel=1e-14)
    g = rt.gradient(lambda m: np.sum(rt.stats.norm.logpdf([m, 2.0], 0, 1)), 1.0)
    assert g == -1.0


# ---------------------------------------------------------------- pdf/cdf/sf, chi2, t, beta, poisson cdfs

def _fd_grad(f, x, h=1e-6):
    return np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(len(x))])


_CDF_CASES = {
    # name -> (rt method, scipy method, x sampler, params (plain), tracked index)
    "chi2": ("chi2", lambda r: r.uniform(0.1, 6, 5), (np.array([1.0, 2.0, 3.0, 5.0, 7.5]),)),
    "t": ("t", lambda r: r.normal(size=5) * 2, (np.array([1.0, 2.5, 3.0, 10.0, 40.0]), 0.3, 1.7)),
    "beta": ("beta", lambda r: r.uniform(0.02, 0.98, 5), (2.5, np.array([0.7, 1.0, 2.0, 3.5, 9.0]))),
    "gamma": ("gamma", lambda r: r.uniform(0.1, 6, 5), (np.array([0.5, 1.0, 2.0, 3.5, 9.0]),)),
    "norm": ("norm", lambda r: r.normal(size=5) * 2, (0.4, 1.3)),
}


@pytest.mark.parametrize("name", sorted(_CDF_CASES))
@pytest.mark.parametrize("method", ["pdf", "logpdf", "cdf", "logcdf", "sf", "logsf"])
def test_cdfs_and_densities_against_scipy(name, method, rng):
    dist, sample, params = _CDF_CASES[name]
    ours, ref = getattr(getattr(rt.stats, dist), method), getattr(getattr(ss, dist), method)
    x = sample(rng)
    np.testing.assert_allclose(ours(x, *params), ref(x, *params), rtol=1e-12)
    # x tracked: gradient against finite differences of scipy's own function,
    # the compiled replay against the reference one
    f = lambda v: np.sum(ours(v, *params))
    g = rt.gradient(f, x)
    np.testing.assert_allclose(g, _fd_grad(lambda v: np.sum(ref(v, *params)), x), rtol=1e-6,
                               atol=1e-8)
    tape = rt.GradientTape(f, x)
    ct = rt.compile(tape)
    np.testing.assert_allclose(ct.gradient(x * 0.97), tape.gradient(x * 0.97), rtol=1e-12,
                               atol=1e-14)
    H = ct.hessian(x)
    np.testing.assert_allclose(H, tape.hessian(x), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.diag(H), _fd_grad(lambda v: ct.gradient(v), x).diagonal(),
                               rtol=1e-5, atol=1e-7)


def test_cdf_analytic_derivatives(rng):
    x = rng.uniform(0.1, 0.9, 4)
    # d/dx beta.cdf = beta.pdf;  d/dx t.cdf = t.pdf;  d/dx chi2.sf = -chi2.pdf
    np.testing.assert_allclose(rt.gradient(lambda v: np.sum(rt.stats.beta.cdf(v, 2.0, 3.0)), x),
                               ss.beta.pdf(x, 2.0, 3.0), rtol=1e-12)
    np.testing.assert_allclose(rt.gradient(lambda v: np.sum(rt.stats.t.cdf(v, 3.5)), x),
                               ss.t.pdf(x, 3.5), rtol=1e-12)
    np.testing.assert_allclose(rt.gradient(lambda v: np.sum(rt.stats.chi2.sf(v, 3.0)), x),
                               -ss.chi2.pdf(x, 3.0), rtol=1e-12)
    # at the centre too (where a chain through betainc would meet 0 * inf)
    assert rt.gradient(lambda v: rt.stats.t.cdf(v, 3.5), 0.0) == pytest.approx(
        ss.t.pdf(0.0, 3.5), rel=1e-13)
    assert rt.gradient(lambda v: rt.stats.t.logsf(v, 3.5), 0.0) == pytest.approx(
        -2 * ss.t.pdf(0.0, 3.5), rel=1e-13)
    # t's location and scale: d/dloc cdf = -pdf
    assert rt.gradient(lambda m: rt.stats.t.cdf(0.3, 4.0, m, 2.0), 0.1) == pytest.approx(
        -ss.t.pdf(0.3, 4.0, 0.1, 2.0), rel=1e-12)


def test_poisson_cdf_and_sf_in_mu(rng):
    k = np.array([-1.0, 0.0, 1.0, 2.5, 7.0])
    mu = rng.uniform(0.5, 6, 5)
    for m in ("pmf", "cdf", "sf", "logcdf", "logsf"):
        np.testing.assert_allclose(getattr(rt.stats.poisson, m)(k, mu),
                                   getattr(ss.poisson, m)(k, mu), rtol=1e-12)
    # d/dmu P(K <= k) = -pmf(k, mu)
    g = rt.gradient(lambda m: np.sum(rt.stats.poisson.cdf(k, m)), mu)
    np.testing.assert_allclose(g, -ss.poisson.pmf(np.floor(k), mu), rtol=1e-11, atol=1e-15)
    tape = rt.GradientTape(lambda m: np.sum(rt.stats.poisson.logsf(k, m)), mu)
    np.testing.assert_allclose(rt.compile(tape).hessian(mu), tape.hessian(mu), rtol=1e-10)


def test_norm_ppf_and_mvn_entropy(rng):
    q = rng.uniform(0.01, 0.99, 5)
    np.testing.assert_allclose(rt.stats.norm.ppf(q, 0.5, 2.0), ss.norm.ppf(q, 0.5, 2.0), rtol=1e-13)
    np.testing.assert_allclose(rt.stats.norm.isf(q, 0.5, 2.0), ss.norm.isf(q, 0.5, 2.0), rtol=1e-13)
    g = rt.gradient(lambda v: np.sum(rt.stats.norm.ppf(v)), q)
    np.testing.assert_allclose(g, 1 / ss.norm.pdf(ss.norm.ppf(q)), rtol=1e-12)
    with np.errstate(all="ignore"):
        assert np.isnan(rt.stats.norm.ppf(0.5, 0.0, -1.0))
    B = rng.normal(size=(3, 3))
    cov = B @ B.T + np.eye(3)
    assert rt.stats.multivariate_normal.entropy(np.zeros(3), cov) == pytest.approx(
        ss.multivariate_normal.entropy(np.zeros(3), cov), rel=1e-13)
    # d entropy / d cov = cov^-1 / 2
    g = rt.gradient(lambda c: rt.stats.multivariate_normal.entropy(None, c), cov)
    np.testing.assert_allclose(np.tril(g) + np.triu(g, 1).T,
                               np.tril(np.linalg.inv(cov) * 0.5) + np.triu(np.linalg.inv(cov) * 0.5, 1).T,
                               rtol=1e-11)
    assert rt.stats.multivariate_normal.entropy(cov=np.array([2.0, 3.0])) == pytest.approx(
        ss.multivariate_normal.entropy(cov=np.diag([2.0, 3.0])), rel=1e-13)


def test_cdf_shape_parameters_are_refused_when_tracked():
    with pytest.raises(rt.UnsupportedError, match="df"):
        rt.gradient(lambda d: rt.stats.t.cdf(0.3, d), 3.0)
    with pytest.raises(rt.UnsupportedError, match="incomplete beta"):
        rt.gradient(lambda a: rt.stats.beta.cdf(0.3, a, 2.0), 3.0)
    with pytest.raises(rt.UnsupportedError, match="shape a"):
        rt.gradient(lambda d: rt.stats.chi2.cdf(0.3, d), 3.0)
