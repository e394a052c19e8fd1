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
