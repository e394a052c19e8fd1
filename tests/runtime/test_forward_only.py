"""Value-only replays run the forward sweep alone: ctape.forward, the bound
value-only call LogDensity uses, batch_forward.  Same bits as the value of
value_and_gradient, the adjoint arena untouched, guards and errors as the
value-and-gradient paths report them."""

import numpy as np
import pytest

import revtape as rt
from revtape.runtime import bound


def logp(x):
    return -0.5 * np.sum(x * x) - np.sum(np.log1p(x * x))


def branchy(x):
    return np.sum(x * x) if x[0] > 0 else -np.sum(np.abs(x))


def test_forward_matches_value_and_leaves_adjoints_alone(rng):
    x0 = rng.normal(size=6)
    ct = rt.compile(rt.GradientTape(logp, x0))
    for x in rng.normal(size=(20, 6)):
        v, _ = ct.value_and_gradient(x)
        ct._adj[:] = 7.0                 # no reverse sweep may write here
        assert ct.forward(x) == v        # bit for bit
        assert np.all(ct._adj == 7.0)
        ref = -0.5 * np.sum(x * x) - np.sum(np.log1p(x * x))
        assert ct.forward(x) == pytest.approx(ref, rel=1e-13)


def test_forward_fast_path_falls_back_for_other_inputs(rng):
    x0 = rng.normal(size=4)
    ct = rt.compile(rt.GradientTape(logp, x0))
    want = ct.forward(x0)
    assert ct.forward(list(x0)) == want                 # converted
    assert ct.forward(x0.astype(np.float32).astype(np.float64)) == pytest.approx(want)
    strided = np.empty(8)
    strided[::2] = x0
    assert ct.forward(strided[::2]) == want              # not contiguous: copied
    with pytest.raises(rt.InputError):
        ct.forward(np.zeros(5))
    bad = x0.copy()
    bad[1] = np.nan
    assert np.isnan(ct.forward(bad))                     # nan flows, as in numpy


def test_forward_reports_a_guard_as_branch_changed():
    x0 = np.array([1.0, 2.0, -3.0])
    ct = rt.compile(rt.GradientTape(branchy, x0))
    assert ct.forward(x0) == 14.0
    with pytest.raises(rt.BranchChanged):
        ct.forward(np.array([-1.0, 2.0, 3.0]))
    ld = rt.LogDensity(branchy, x0)
    assert ld.logdensity(np.array([-1.0, 2.0, 3.0])) == -6.0   # records the other branch
    assert ld.logdensity(x0) == 14.0
    assert ld.logdensity_and_gradient(np.array([-1.0, 2.0, 3.0]))[0] == -6.0


def test_bound_forward_call(rng):
    x0 = rng.normal(size=5)
    ct = rt.compile(rt.GradientTape(logp, x0))
    xb = x0.copy()
    run = ct._bind_forward(xb)
    assert run() == ct.value_and_gradient(x0)[0]
    xb[:] = rng.normal(size=5)
    assert run() == ct.value_and_gradient(xb)[0]
    with pytest.raises(rt.InputError):
        ct._bind_forward(np.zeros(4))
    with pytest.raises(rt.InputError):
        ct._bind_forward(np.zeros(10)[::2])


@pytest.mark.skipif(not bound._BOUND_FORWARD, reason="revtape._checked built without forward")
def test_bound_forward_is_the_c_call(rng):
    ct = rt.compile(rt.GradientTape(logp, rng.normal(size=5)))
    assert isinstance(ct._bind_forward(np.zeros(5)), bound._BoundCall)


def test_batch_logdensity_matches_rows(rng):
    ld = rt.LogDensity(logp, np.zeros(5))
    X = rng.normal(size=(32, 5))
    np.testing.assert_array_equal(ld.batch_logdensity(X), [ld.logdensity(x) for x in X])
    v, _ = ld.batch_logdensity_and_gradient(X)
    np.testing.assert_allclose(ld.batch_logdensity(X), v, rtol=1e-14)
