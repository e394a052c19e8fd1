"""rt.LogDensity from the user's side: optimisers, samplers' call shapes,
threads, copies and pickles, pytree x0, branches."""

import collections
import copy
import multiprocessing
import pickle
import threading
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

import revtape as rt

RNG = np.random.default_rng(42)
X = RNG.normal(size=(60, 3))
Y = (X @ np.array([1.0, -2.0, 0.5]) + RNG.normal(size=60) > 0).astype(float)


def logreg(w):
    z = X @ w
    return np.sum(Y * z - np.logaddexp(0.0, z)) - 0.5 * np.sum(w ** 2)


def logreg_grad(w):
    p = 1.0 / (1.0 + np.exp(-(X @ w)))
    return X.T @ (Y - p) - w


def logreg_hess(w):
    p = 1.0 / (1.0 + np.exp(-(X @ w)))
    return -(X.T * (p * (1 - p))) @ X - np.eye(3)


def test_value_first_gradient_and_dimension():
    ld = rt.LogDensity(logreg, np.zeros(3))
    assert ld.dimension == 3 and ld.names == ["x[0]", "x[1]", "x[2]"]
    for w in RNG.normal(size=(3, 3)):
        v, g = ld.logdensity_and_gradient(w)
        assert v == pytest.approx(logreg(w), rel=1e-14)
        np.testing.assert_allclose(g, logreg_grad(w), rtol=1e-12)
        assert ld.logdensity(w) == pytest.approx(v, rel=1e-15)
        np.testing.assert_array_equal(ld.gradient(w), g)
        g2, v2 = ld.grad_and_value(w)                 # mici's order
        assert v2 == v and np.array_equal(g2, g)
    # the gradient returned is the caller's: the next call does not overwrite it
    v1, g1 = ld.logdensity_and_gradient(np.ones(3))
    keep = g1.copy()
    ld.logdensity_and_gradient(-np.ones(3))
    np.testing.assert_array_equal(g1, keep)
    with pytest.raises(rt.InputError, match="length 3"):
        ld.logdensity(np.zeros(4))


def test_scipy_minimize_with_the_negative_view():
    scipy_optimize = pytest.importorskip("scipy.optimize")
    neg = rt.LogDensity(logreg, np.zeros(3)).negative()
    res = scipy_optimize.minimize(neg.logdensity, np.zeros(3), jac=neg.gradient, method="BFGS")
    assert res.success
    np.testing.assert_allclose(logreg_grad(res.x), 0.0, atol=1e-5)
    res2 = scipy_optimize.minimize(neg.logdensity_and_gradient, np.zeros(3), jac=True,
                                   method="L-BFGS-B")
    np.testing.assert_allclose(res2.x, res.x, atol=1e-4)
    res3 = scipy_optimize.minimize(neg, np.zeros(3), jac=neg.gradient, hessp=neg.hvp,
                                   method="trust-krylov")
    np.testing.assert_allclose(res3.x, res.x, atol=1e-5)
    w = RNG.normal(size=3)
    np.testing.assert_allclose(neg.hessian(w), -logreg_hess(w), rtol=1e-12)
    assert neg.negative().logdensity(w) == pytest.approx(logreg(w))
    kw = neg.negative().mici_kwargs()
    g, v = kw["grad_neg_log_dens"](w)
    assert v == pytest.approx(-logreg(w)) and np.allclose(g, -logreg_grad(w))
    assert kw["neg_log_dens"](w) == pytest.approx(-logreg(w))


P = collections.namedtuple("P", "mu logtau")


def hier(p):
    h = p["hyper"]
    tau = np.exp(h.logtau)
    return (-0.5 * np.sum((p["theta"] - h.mu) ** 2) / tau ** 2 - p["theta"].size * h.logtau
            - 0.5 * h.mu ** 2 - tau)


def test_pytree_x0_is_flattened_in_leaf_order_with_names():
    x0 = {"theta": np.zeros(3), "hyper": P(0.0, 0.0)}
    ld = rt.LogDensity(hier, x0)
    assert ld.dimension == 5
    assert ld.names == ["hyper.mu", "hyper.logtau", "theta[0]", "theta[1]", "theta[2]"]
    x = np.array([0.3, -0.2, 1.0, 2.0, -1.0])
    tree = ld.unflatten(x)
    assert type(tree["hyper"]) is P and tree["hyper"].mu == 0.3
    np.testing.assert_array_equal(tree["theta"], [1.0, 2.0, -1.0])
    np.testing.assert_array_equal(ld.flatten(tree), x)
    v, g = ld.logdensity_and_gradient(x)
    assert v == pytest.approx(hier(tree), rel=1e-14)
    ref = rt.gradient(hier, tree)                 # the structured gradient, flattened alike
    np.testing.assert_allclose(g, ld.flatten(ref), rtol=1e-13)
    named = rt.LogDensity(hier, x0, names=list("abcde"))
    assert named.names == list("abcde")
    with pytest.raises(rt.InputError):
        rt.LogDensity(hier, x0, names=["a"])


def test_a_point_on_another_branch_is_recorded_not_replayed_wrong():
    ld = rt.LogDensity(lambda x: np.sum(x ** 2) if x[0] > 0 else -np.sum(x ** 3), np.ones(2))
    np.testing.assert_allclose(ld.gradient(np.array([2.0, 1.0])), [4.0, 2.0])
    np.testing.assert_allclose(ld.gradient(np.array([-2.0, 1.0])), [-12.0, -3.0])
    np.testing.assert_allclose(ld.gradient(np.array([3.0, 1.0])), [6.0, 2.0])
    assert "2 recorded branch" in repr(ld)


def test_threads_each_replay_their_own_copy():
    ld = rt.LogDensity(logreg, np.zeros(3))
    points = RNG.normal(size=(6, 3))
    errors = []

    def chain(k):
        try:
            for _ in range(300):
                v, g = ld.logdensity_and_gradient(points[k])
                assert v == logreg_at[k]
                np.testing.assert_array_equal(g, grad_at[k])
        except Exception as e:                     # pragma: no cover - reported below
            errors.append(e)

    logreg_at = [ld.logdensity_and_gradient(p)[0] for p in points]
    grad_at = [ld.logdensity_and_gradient(p)[1] for p in points]
    threads = [threading.Thread(target=chain, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def _remote(ld, w):
    return ld.logdensity_and_gradient(w)


def test_deepcopy_and_pickle_round_trip_including_a_spawned_process():
    ld = rt.LogDensity(hier, {"theta": np.zeros(3), "hyper": P(0.0, 0.0)})
    x = np.array([0.3, -0.2, 1.0, 2.0, -1.0])
    v, g = ld.logdensity_and_gradient(x)
    for other in (copy.deepcopy(ld), pickle.loads(pickle.dumps(ld)), copy.copy(ld)):
        assert other is not ld and other.names == ld.names
        v2, g2 = other.logdensity_and_gradient(x)
        assert v2 == v and np.array_equal(g2, g)
        np.testing.assert_array_equal(other.unflatten(x)["theta"], ld.unflatten(x)["theta"])
    neg = pickle.loads(pickle.dumps(ld.negative()))
    assert neg.logdensity(x) == -v
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        v3, g3 = pool.submit(_remote, ld, x).result(timeout=120)
    assert v3 == v and np.array_equal(g3, g)


def test_batches_equal_row_by_row_and_branches_fall_back():
    ld = rt.LogDensity(logreg, np.zeros(3))
    X = RNG.normal(size=(7, 3))
    values, grads = ld.batch_logdensity_and_gradient(X)
    for x, v, g in zip(X, values, grads):
        v1, g1 = ld.logdensity_and_gradient(x)
        assert v == v1 and np.array_equal(g, g1)
    np.testing.assert_array_equal(ld.batch_logdensity(X), values)
    v2, g2 = ld.batch_logdensity_and_gradient(X, threads=2)
    assert np.array_equal(v2, values) and np.array_equal(g2, grads)
    nv, ng = ld.negative().batch_logdensity_and_gradient(X)
    assert np.array_equal(nv, -values) and np.array_equal(ng, -grads)
    with pytest.raises(rt.InputError, match=r"\(k, 3\)"):
        ld.batch_logdensity(np.zeros((2, 4)))
    branchy = rt.LogDensity(lambda x: np.sum(x ** 2) if x[0] > 0 else -np.sum(x ** 3), np.ones(2))
    Xb = np.array([[1.0, 2.0], [-1.0, 2.0], [3.0, 0.5]])
    vb, gb = branchy.batch_logdensity_and_gradient(Xb)
    np.testing.assert_allclose(vb, [5.0, -7.0, 9.25])
    np.testing.assert_allclose(gb, [[2.0, 4.0], [-3.0, -12.0], [6.0, 1.0]])
    np.testing.assert_allclose(branchy.batch_logdensity(Xb), vb)
