"""The special functions (csrc/specfun.c, and src/revtape/core/specfun.py and
cspecial.py: their numpy forwards without scipy): revtape's own C
implementations against scipy over wide ranges (and against mpmath where
scipy itself is the less accurate one), the compiled replay against the
reference, gradients and Hessians, and the scipy-free forwards."""

import math
import zlib

import numpy as np
import pytest

import revtape as rt
from revtape.core import ops
from conftest import check_grad

sps = pytest.importorskip("scipy.special")

RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def _reseed(request):
    """Each test draws the same numbers however the tests are selected or ordered."""
    global RNG
    RNG = np.random.default_rng([7, zlib.crc32(request.node.name.encode())])


def _rel(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    with np.errstate(all="ignore"):
        r = np.abs(a - b) / np.abs(b)
    r[(a == b) | (np.isnan(a) & np.isnan(b))] = 0.0
    return r


def _grid(lo, hi, n=4000):
    return np.concatenate([np.linspace(lo, hi, n), RNG.uniform(lo, hi, n)])


# name -> (scipy/numpy reference, points where the reference is accurate to
# ~1e-15, our tolerance).  Subnormal results are left out (no relative accuracy).
WIDE = {
    "erfc": (sps.erfc, _grid(-6, 26)),
    "erfcx": (sps.erfcx, np.concatenate([_grid(-9, 40), np.geomspace(1e-300, 1e300, 600),
                                         -np.geomspace(1e-300, 9, 300)])),
    "ndtr": (sps.ndtr, _grid(-37, 9)),
    "log_ndtr": (sps.log_ndtr, np.concatenate([_grid(-1e5, 37), _grid(-40, 37), _grid(-2, 2)])),
    "ndtri": (sps.ndtri, np.concatenate([_grid(0, 1), np.geomspace(1e-300, 0.5, 2000),
                                         1 - np.geomspace(1e-16, 0.5, 2000),
                                         0.5 + np.geomspace(1e-17, 1e-3, 500),
                                         0.5 - np.geomspace(1e-17, 1e-3, 500)])),
    "logit": (sps.logit, np.concatenate([_grid(0, 1), np.geomspace(1e-300, 0.5, 1000),
                                         0.5 + np.geomspace(1e-17, 1e-3, 500)])),
    "i0e": (sps.i0e, np.concatenate([_grid(-60, 60), _grid(-1e4, 1e4),
                                     np.geomspace(1e-300, 1e300, 600)])),
    "i1e": (sps.i1e, np.concatenate([_grid(-60, 60), _grid(-1e4, 1e4),
                                     np.geomspace(1e-300, 1e300, 600)])),
    "sinc": (np.sinc, _grid(-20, 20)),
    "arcsin": (np.arcsin, _grid(-1, 1)),
    "arccos": (np.arccos, _grid(-1, 1)),
    "arcsinh": (np.arcsinh, np.concatenate([_grid(-50, 50), np.geomspace(1e-300, 1e300, 600)])),
    "arccosh": (np.arccosh, np.concatenate([_grid(1, 50), 1 + np.geomspace(1e-15, 1e300, 600)])),
    "arctanh": (np.arctanh, _grid(-1, 1)),
}


@pytest.mark.parametrize("name", sorted(WIDE))
def test_c_implementation_matches_the_reference_over_wide_ranges(name):
    ref, x = WIDE[name]
    with np.errstate(all="ignore"):
        expected = ref(x)
    keep = ~(np.abs(expected) < 1e-300) | (expected == 0)
    mine = ops.c_elementwise(name, x)
    assert np.max(_rel(mine[keep], expected[keep])) < 1e-13
    # the compiled program runs the same C function
    ct = rt.compile(rt.JacobianTape(ref, x[:200]))
    np.testing.assert_array_equal(ct.forward(x[:200]), mine[:200])


def test_special_values_follow_scipy():
    cases = {
        "erfcx": [np.inf, -np.inf, np.nan, 0.0, -27.0],
        "ndtr": [np.inf, -np.inf, np.nan, 0.0],
        "log_ndtr": [np.inf, -np.inf, np.nan, 0.0],
        "ndtri": [0.0, 1.0, 0.5, -0.1, 1.1, np.nan],
        "logit": [0.0, 1.0, 0.5, -0.1, 1.1, np.nan],
        "i0e": [np.inf, -np.inf, np.nan, 0.0],
        "i1e": [np.inf, -np.inf, np.nan, 0.0, -0.0],
        "sinc": [0.0, np.inf, np.nan],
    }
    for name, xs in cases.items():
        xs = np.array(xs)
        with np.errstate(all="ignore"):
            ref = WIDE[name][0](xs)
        np.testing.assert_array_equal(ops.c_elementwise(name, xs), ref, err_msg=name)
    np.testing.assert_array_equal(ops.c_elementwise("xlog1py", np.array([0.0, 0.0, 2.0]),
                                                     np.array([-1.0, np.nan, -1.0])),
                                  sps.xlog1py([0.0, 0.0, 2.0], [-1.0, np.nan, -1.0]))


def test_betaln_matches_scipy_where_scipy_is_accurate():
    # relative to max(|betaln|, 1): near the zeros of betaln both scipy and we
    # carry an absolute error of a few ulps of the lgamma terms
    a, b = RNG.uniform(0.01, 30, 5000), RNG.uniform(0.01, 30, 5000)
    ref = sps.betaln(a, b)
    assert np.max(np.abs(ops.c_elementwise("betaln", a, b) - ref) / np.maximum(np.abs(ref), 1)) < 1e-13
    # large arguments: scipy loses up to 5e-10 there; we match mpmath to 1e-15
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    a, b = np.exp(RNG.uniform(0, 28, 40)), np.exp(RNG.uniform(2, 28, 40))
    for ai, bi, got in zip(a, b, ops.c_elementwise("betaln", a, b)):
        exact = mpmath.log(mpmath.beta(ai, bi))
        assert abs(float((got - exact) / exact)) < 1e-15


def test_where_scipy_loses_digits_we_match_mpmath():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    # betaln with a >> b: lgamma(a) - lgamma(a + b) cancels (scipy loses 8 digits)
    for a, b in [(9565.3, 0.1786), (1e6, 3.0), (1e10, 0.5), (30.0, 1e8), (1e5, 1e5 + 3),
                 (0.34660584893451846, 15.662323818205149), (21.423998364651382, 0.3271129948347198)]:
        exact = mpmath.log(mpmath.beta(a, b))
        err = abs(float(ops.c_elementwise("betaln", a, b) - exact))
        assert err < 1e-15 * max(abs(float(exact)), 1.0)
    # erfcx at large negative x: exp(x^2) needs x^2 in two pieces
    for x in [-24.6, -20.1, -10.3, -3.3]:
        exact = mpmath.erfc(x) * mpmath.exp(mpmath.mpf(x) ** 2)
        assert abs(float((ops.c_elementwise("erfcx", x) - exact) / exact)) < 1e-15
    # log_ndtr' = phi / Phi in both tails (its C partial), and ndtri deep in the tail
    for x in [-1e4, -300.0, -40.0, -5.0, 0.0, 5.0, 30.0]:
        exact = mpmath.npdf(x) / mpmath.ncdf(x)
        g = rt.gradient(lambda v: sps.log_ndtr(v), x)
        c = rt.compile(rt.GradientTape(lambda v: sps.log_ndtr(v), x)).gradient(x)
        # compiled: revtape's C partial; reference: the same formula through scipy
        assert abs(c - float(exact)) <= 1e-14 * abs(float(exact)) + 1e-300
        assert abs(g - float(exact)) <= 1e-12 * abs(float(exact)) + 1e-300
    for p in [1e-300, 1e-100, 1e-20, 0.3, 0.5 + 1e-12, 1 - 1e-12]:
        with mpmath.workdps(400):   # 2p - 1 must not round to -1
            exact = mpmath.sqrt(2) * mpmath.erfinv(2 * mpmath.mpf(p) - 1)
        assert abs(float((ops.c_elementwise("ndtri", p) - exact) / exact)) < 1e-14


# ---------------------------------------------------------------- gradients, compiled, Hessians
# name -> (user spelling, sampler)
DIFF = {
    "arcsin": (np.arcsin, lambda n: RNG.uniform(-0.9, 0.9, n)),
    "arccos": (np.arccos, lambda n: RNG.uniform(-0.9, 0.9, n)),
    "arcsinh": (np.arcsinh, lambda n: RNG.uniform(-3, 3, n)),
    "arccosh": (np.arccosh, lambda n: RNG.uniform(1.2, 4, n)),
    "arctanh": (np.arctanh, lambda n: RNG.uniform(-0.9, 0.9, n)),
    "sinc": (np.sinc, lambda n: np.r_[RNG.uniform(-3, 3, n - 2), 1e-3, -0.05]),
    "erfc": (sps.erfc, lambda n: RNG.uniform(-3, 3, n)),
    # (erfcx' = 2x erfcx - 2/sqrt(pi) cancels by ~2x^2: kept to x < 8 where
    # scipy's f (reference) and ours (compiled) give partials within 1e-13)
    "erfcx": (sps.erfcx, lambda n: RNG.uniform(-2, 8, n)),
    "ndtr": (sps.ndtr, lambda n: RNG.uniform(-4, 4, n)),
    "log_ndtr": (sps.log_ndtr, lambda n: RNG.uniform(-30, 8, n)),
    "ndtri": (sps.ndtri, lambda n: RNG.uniform(0.05, 0.95, n)),
    "logit": (sps.logit, lambda n: RNG.uniform(0.05, 0.95, n)),
    "i0e": (sps.i0e, lambda n: RNG.uniform(0.2, 30, n) * RNG.choice([-1, 1], n)),
    "i1e": (sps.i1e, lambda n: RNG.uniform(0.2, 30, n) * RNG.choice([-1, 1], n)),
}


@pytest.mark.parametrize("name", sorted(DIFF))
def test_gradient_compiled_and_hessian(name):
    f, sample = DIFF[name]
    x = sample(6)
    fn = lambda v: np.sum(f(v) * np.linspace(0.5, 1.5, 6))
    g = check_grad(fn, x, rtol=1e-6)
    tape = rt.GradientTape(fn, x)
    assert f"= {name}(" in repr(tape)
    ct = rt.compile(tape)
    x2 = sample(6)
    v_ref, g_ref = tape.value_and_gradient(x2)
    v, gc = ct.value_and_gradient(x2)
    assert v == pytest.approx(v_ref, rel=1e-13)
    np.testing.assert_allclose(gc, g_ref, rtol=1e-13, atol=1e-300)
    # Hessian: C tangent sweep over the gradient program vs reference reverse-over-reverse
    ht = rt.HessianTape(fn, x)
    H_ref = ht.hessian(x2)
    np.testing.assert_allclose(rt.compile(ht).hessian(x2), H_ref, rtol=1e-11, atol=1e-13)
    # and against finite differences of the gradient
    h = 1e-5
    fd = np.array([(rt.gradient(fn, x2 + h * e) - rt.gradient(fn, x2 - h * e)) / (2 * h)
                   for e in np.eye(6)])
    np.testing.assert_allclose(H_ref, fd, rtol=1e-5, atol=1e-7)
    assert g.shape == x.shape


def test_kinks_and_limits_of_the_partials():
    # sinc'(0) = 0, i1e'(0) = 1/2, i0e'(0) = 0 (kink: the average, like abs)
    for f, x, d in [(np.sinc, 0.0, 0.0), (sps.i1e, 0.0, 0.5), (sps.i0e, 0.0, 0.0)]:
        assert rt.gradient(f, x) == d
        assert rt.compile(rt.GradientTape(f, 1.0)).gradient(x) == d
    # sinc' is accurate near 0 (series branch)
    for x in [1e-9, 1e-4, 0.07, 0.1]:
        exact = (math.cos(math.pi * x) * math.pi * x - math.sin(math.pi * x)) / (math.pi * x * x)
        if x < 0.01:
            exact = -math.pi ** 2 * x / 3 + math.pi ** 4 * x ** 3 / 30
        assert rt.gradient(np.sinc, x) == pytest.approx(exact, rel=1e-13)
    # log_ndtr far in the lower tail: value -x^2/2 - log(-x sqrt(2 pi)) ..., gradient ~ -x
    assert rt.gradient(sps.log_ndtr, -1e5) == pytest.approx(1e5, rel=1e-9)
    assert rt.gradient(sps.log_ndtr, 40.0) == 0.0


def test_binary_rows_xlog1py_and_betaln():
    a, b = RNG.uniform(0.5, 5, 4), RNG.uniform(0.5, 5, 4)
    f = lambda a, b: np.sum(sps.betaln(a, b) + sps.xlog1py(a, b - 0.4))
    ga, gb = check_grad(f, (a, b))
    np.testing.assert_allclose(ga, sps.digamma(a) - sps.digamma(a + b) + np.log1p(b - 0.4),
                               rtol=1e-12)
    ct = rt.compile(rt.GradientTape(f, (a, b)))
    np.testing.assert_allclose(ct.gradient((a, b))[1], gb, rtol=1e-13)


# ---------------------------------------------------------------- without scipy

def test_scipy_free_forwards_are_the_c_kernels():
    # what the numpy forward of each row is when scipy is absent
    x = RNG.uniform(0.05, 0.95, 50)
    for name in ("erfc", "erfcx", "ndtr", "log_ndtr", "ndtri", "logit", "i0e", "i1e"):
        np.testing.assert_allclose(ops.c_elementwise(name, x), getattr(sps, name)(x), rtol=1e-14)
    np.testing.assert_allclose(ops.c_elementwise("betaln", x[:, None], x[None, :5]),
                               sps.betaln(x[:, None], x[None, :5]), rtol=1e-13)


def test_scipy_free_fallbacks_match_scipy():
    sps = pytest.importorskip("scipy.special")
    from revtape.core import specfun as _specfun
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(-20, 20, 200), rng.uniform(0, 3, 100),
                        [0.0, -0.0, -1.0, -2.5, np.inf, -np.inf, np.nan, 1e-300, -70.5, 1e5]])
    with np.errstate(all="ignore"):
        for name in ("gammaln", "digamma", "expit", "log_expit", "erf"):
            np.testing.assert_allclose(getattr(_specfun, name)(x), getattr(sps, name)(x),
                                       rtol=1e-12, atol=1e-300, err_msg=name)
        for n in (1, 2):
            pos = x[np.isfinite(x)]
            np.testing.assert_allclose(_specfun.polygamma(n, pos), sps.polygamma(n, pos),
                                       rtol=2e-11, err_msg=f"polygamma {n}")
        np.testing.assert_allclose(_specfun.xlogy(x, np.abs(x[::-1])), sps.xlogy(x, np.abs(x[::-1])),
                                   rtol=1e-15)
        A = rng.normal(size=(3, 4)) * 10
        A[0, 1] = np.inf
        A[2] = -np.inf
        for axis in (None, 0, 1, (0, 1)):
            for kd in (False, True):
                np.testing.assert_allclose(_specfun.logsumexp(A, axis=axis, keepdims=kd),
                                           sps.logsumexp(A, axis=axis, keepdims=kd), rtol=1e-14)


# ---------------------------------------------------------------- incomplete gamma

def test_gammainc_gammaincc_match_scipy():
    a = np.concatenate([RNG.uniform(0.05, 1, 3000), RNG.uniform(0.5, 30, 3000)])
    x = a * np.exp(RNG.normal(0, 0.6, 6000))
    for name in ("gammainc", "gammaincc"):
        ref = getattr(sps, name)(a, x)
        mine = ops.c_elementwise(name, a, x)
        keep = ref > 1e-280
        assert np.max(_rel(mine[keep], ref[keep])) < 2e-13
    edge_a = np.array([0.0, 0.0, 1.0, 1.0, -1.0, 1.0, np.inf, np.nan, 2.0])
    edge_x = np.array([0.0, 1.0, 0.0, np.inf, 1.0, -1.0, 1.0, 1.0, np.nan])
    for name in ("gammainc", "gammaincc"):
        np.testing.assert_array_equal(ops.c_elementwise(name, edge_a, edge_x),
                                      getattr(sps, name)(edge_a, edge_x))


def test_gammainc_far_tails_match_mpmath():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    # scipy loses ~1e-11 here; the Stirling-form prefactor keeps us near 1e-13
    for a, x in [(4595.7, 2582.0), (4908.4, 7068.4), (190.1, 66.98), (0.5, 1.02), (30.0, 25.0)]:
        P = mpmath.gammainc(a, 0, x, regularized=True)
        Q = mpmath.gammainc(a, x, mpmath.inf, regularized=True)
        assert abs(float((ops.c_elementwise("gammainc", a, x) - P) / P)) < 5e-13
        assert abs(float((ops.c_elementwise("gammaincc", a, x) - Q) / Q)) < 5e-13


def test_gammainc_is_differentiable_in_x_only():
    a, x = RNG.uniform(0.5, 5, 4), RNG.uniform(0.5, 6, 4)
    for name, sign in (("gammainc", 1.0), ("gammaincc", -1.0)):
        f = lambda x: np.sum(getattr(sps, name)(a, x))
        g = check_grad(f, x)
        pdf = np.exp((a - 1) * np.log(x) - x - sps.gammaln(a))
        np.testing.assert_allclose(g, sign * pdf, rtol=1e-12)
        ct = rt.compile(rt.GradientTape(f, x))
        np.testing.assert_allclose(ct.gradient(x * 1.1), rt.gradient(f, x * 1.1), rtol=1e-12)
        np.testing.assert_allclose(ct.forward(x * 1.1), np.sum(getattr(sps, name)(a, x * 1.1)),
                                   rtol=1e-13)
        for spelled in (getattr(sps, name), getattr(rt.special, name)):
            with pytest.raises(rt.UnsupportedError, match="shape a"):
                rt.gradient(lambda a: np.sum(spelled(a, x)), a)


def test_erfcx_partial_has_no_cancellation_at_large_x():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    x = np.array([2.5, 8.0, 30.0, 1e3, 1e8])
    g = rt.compile(rt.GradientTape(lambda v: np.sum(sps.erfcx(v)), x)).gradient(x)
    for xi, gi in zip(x, g):
        exact = mpmath.diff(lambda t: mpmath.erfc(t) * mpmath.exp(t * t), xi)
        assert abs(float((gi - exact) / exact)) < 1e-15


def test_rt_elementwise_refuses_opcodes_that_are_not_elementwise():
    from revtape.core import ops
    from revtape._vm import ffi, lib
    x, out = np.ones(3), np.empty(3)
    p = lambda a: ffi.from_buffer("double[]", a)
    for code in (-1, ops.OPCODE["GATHER"], ops.OPCODE["REDUCE_SUM"], len(ops.OPCODE) + 5):
        assert lib.rt_elementwise(code, 3, p(x), ffi.NULL, p(out)) == -1
    assert lib.rt_elementwise(ops.OPCODE["ERFCX"], 3, p(x), ffi.NULL, p(out)) == 0
    np.testing.assert_array_equal(out, ops.c_elementwise("erfcx", x))


def test_second_wave_without_scipy():
    # scipy blocked in a fresh interpreter: the rows' numpy forwards are their C
    # kernels (rt_elementwise), rt.stats and rt.bijectors record and compile
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent("""
        import sys
        sys.modules["scipy"] = None
        import numpy as np
        import revtape as rt
        S = rt.special
        x = np.array([0.3, -1.2, 0.8])
        f = lambda x: (np.sum(S.erfc(x) + S.erfcx(x) + S.ndtr(x) + S.log_ndtr(x) + S.i0e(x)
                              + S.i1e(x) + S.ndtri(S.expit(x)) + S.logit(S.expit(x))
                              + S.xlog1py(x, x ** 2) + S.betaln(1 + x ** 2, 2.0)
                              + S.gammainc(2.0, 1 + x ** 2) + np.arcsinh(x) + np.sinc(x))
                       + np.sum(S.log_softmax(x)) + S.multigammaln(3 + x[0] ** 2, 2)
                       + np.sum(rt.stats.norm.logpdf(x, 0.1, 2.0))
                       + rt.stats.gamma.logcdf(2.0, 1.5, scale=np.exp(x[1]))
                       + rt.bijectors.simplex.forward_log_det_jacobian(x))
        tape = rt.GradientTape(f, x)
        v, g = rt.compile(tape).value_and_gradient(x + 0.1)
        v2, g2 = tape.value_and_gradient(x + 0.1)
        assert abs(v - v2) <= 1e-12 * abs(v), (v, v2)
        assert np.allclose(g, g2, rtol=1e-12, atol=1e-14), (g, g2)
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "ok"
