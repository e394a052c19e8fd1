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
    with pytest.raises(rt.InputError, match=r"\(k, 3\)"):
        ld.batch_logdensity(np.zeros(3))
    # other layouts and types take the general path to the same values
    for Y in (np.asfortranarray(X), X.tolist(), X[::-1][::-1], X.astype(np.float32)):
        want = values if not isinstance(Y, np.ndarray) or Y.dtype == np.float64 else \
            ld.batch_logdensity(X.astype(np.float32).astype(np.float64))
        np.testing.assert_array_equal(ld.batch_logdensity(Y), want)
    branchy = rt.LogDensity(lambda x: np.sum(x ** 2) if x[0] > 0 else -np.sum(x ** 3), np.ones(2))
    Xb = np.array([[1.0, 2.0], [-1.0, 2.0], [3.0, 0.5]])
    vb, gb = branchy.batch_logdensity_and_gradient(Xb)
    np.testing.assert_allclose(vb, [5.0, -7.0, 9.25])
    np.testing.assert_allclose(gb, [[2.0, 4.0], [-3.0, -12.0], [6.0, 1.0]])
    np.testing.assert_allclose(branchy.batch_logdensity(Xb), vb)


# ---------------------------------------------------------------- bijectors=
# A model with a scale (Gamma(3, rate 2)), a bounded parameter (10 * Beta(2, 4)),
# an ordered pair and a simplex (Dirichlet(2, 3, 5)), all independent, so the
# log density, its mode and its means are known in closed form.
from revtape import bijectors as bj  # noqa: E402

DIRICHLET = np.array([2.0, 3.0, 5.0])


def constrained_logp(p):
    tau, s, w, cut = p["tau"], p["s"], p["w"], p["cut"]
    return (2.0 * np.log(tau) - 2.0 * tau                        # Gamma(3, 2)
            + np.log(s / 10.0) + 3.0 * np.log(1.0 - s / 10.0)   # 10 * Beta(2, 4)
            + np.sum((DIRICHLET - 1.0) * np.log(w))              # Dirichlet(2, 3, 5)
            - 0.5 * np.sum(cut ** 2))                            # N(0, 1) pair, ordered


CX0 = {"tau": 1.0, "s": 5.0, "w": np.ones(3) / 3, "cut": np.array([-1.0, 1.0])}
CBIJ = {"tau": bj.exp, "s": bj.interval(0.0, 10.0), "w": bj.simplex, "cut": bj.ordered}


def _expit(v):
    return 1.0 / (1.0 + np.exp(-v))


def analytic_log_jacobian(y):
    """log|dx/dy| of each map, written out independently of revtape.bijectors.
    y = [cut_1, cut_2, s, tau, w_1, w_2] (sorted keys: cut, s, tau, w)."""
    c, s, t, u = y[0:2], y[2], y[3], y[4:6]
    total = t                                                   # tau = exp(t)
    total += np.log(10.0 * _expit(s) * (1.0 - _expit(s)))       # s = 10 expit(s)
    total += c[1]                                               # cut_2 = cut_1 + exp(c_2)
    # stick-breaking (Stan's): z_k = expit(u_k - log(K - k)) for k = 1..K-1,
    # w_k = z_k * rest_k, and the triangular Jacobian's diagonal is rest_k z_k (1 - z_k)
    rest = 1.0
    for k in (1, 2):
        z = _expit(u[k - 1] - np.log(3 - k))
        total += np.log(rest * z * (1.0 - z))
        rest *= 1.0 - z
    return total


def test_bijected_density_is_f_of_the_constrained_point_plus_the_log_jacobian():
    ld = rt.LogDensity(constrained_logp, CX0, bijectors=CBIJ)
    assert ld.dimension == 6
    assert ld.names == ["cut__ordered[0]", "cut__ordered[1]", "s__interval", "tau__exp",
                        "w__simplex[0]", "w__simplex[1]"]
    np.testing.assert_allclose(ld.x0, [-1.0, np.log(2.0), 0.0, 0.0, 0.0, 0.0], atol=1e-15)
    for y in RNG.normal(size=(5, 6)):
        p = ld.constrain(y)
        assert p["tau"] > 0 and 0 < p["s"] < 10 and p["cut"][0] < p["cut"][1]
        assert p["w"].shape == (3,) and abs(p["w"].sum() - 1) < 1e-15 and np.all(p["w"] > 0)
        v = ld.logdensity(y)
        assert v == pytest.approx(constrained_logp(p) + analytic_log_jacobian(y), rel=1e-13)
        np.testing.assert_allclose(ld.unconstrain(p), y, rtol=1e-12, atol=1e-13)


def test_bijected_gradient_matches_finite_differences():
    ld = rt.LogDensity(constrained_logp, CX0, bijectors=CBIJ)

    def plain(y):                       # the same density evaluated without revtape
        return constrained_logp(ld.constrain(y)) + analytic_log_jacobian(y)

    for y in RNG.normal(size=(4, 6)):
        v, g = ld.logdensity_and_gradient(y)
        fd = np.array([(plain(y + e) - plain(y - e)) / 2e-6 for e in np.eye(6) * 1e-6])
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(ld.hvp(y, np.ones(6)),
                                   ld.hessian(y) @ np.ones(6), rtol=1e-10, atol=1e-12)
    X = RNG.normal(size=(5, 6))
    vals, grads = ld.batch_logdensity_and_gradient(X)
    for x, v, g in zip(X, vals, grads):
        v1, g1 = ld.logdensity_and_gradient(x)
        assert v == v1 and np.array_equal(g, g1)


def test_bijected_mode_carries_the_jacobian():
    """Maximising over y finds the mode of the unconstrained density: for
    tau = exp(t) with tau ~ Gamma(3, 2) that is tau = 3/2 (not the
    constrained mode 1), for s = 10 expit(.) with s/10 ~ Beta(2, 4) it is
    s = 10 * 2/6 (not 10 * 1/4)."""
    scipy_optimize = pytest.importorskip("scipy.optimize")
    ld = rt.LogDensity(lambda p: constrained_logp({**p, "w": DIRICHLET / 10, "cut": np.zeros(2)}),
                       {"tau": 1.0, "s": 5.0}, bijectors={"tau": bj.exp, "s": bj.interval(0, 10)})
    neg = ld.negative()
    res = scipy_optimize.minimize(neg.logdensity_and_gradient, ld.x0, jac=True, method="BFGS",
                                  options={"gtol": 1e-10})
    assert res.success
    p = neg.constrain(res.x)
    assert p["tau"] == pytest.approx(1.5, rel=1e-7) and p["s"] == pytest.approx(10 / 3, rel=1e-7)


def _hmc(ld, n, seed, step=0.25, leaps=12):
    """A minimal HMC with a jittered step size, using only logdensity_and_gradient."""
    rng = np.random.default_rng(seed)
    y = ld.x0.copy()
    v, g = ld.logdensity_and_gradient(y)
    out = np.empty((n, ld.dimension))
    for i in range(n):
        eps = step * rng.uniform(0.6, 1.2)
        p0 = rng.normal(size=y.size)
        y1, p, v1, g1 = y.copy(), p0 + 0.5 * eps * g, v, g
        for j in range(leaps):
            y1 = y1 + eps * p
            v1, g1 = ld.logdensity_and_gradient(y1)
            p = p + (eps if j < leaps - 1 else 0.5 * eps) * g1
        if np.log(rng.uniform()) < v1 - v - 0.5 * (p @ p - p0 @ p0):
            y, v, g = y1, v1, g1
        out[i] = y
    return out


def test_hmc_on_the_unconstrained_space_recovers_the_constrained_means():
    ld = rt.LogDensity(constrained_logp, CX0, bijectors=CBIJ)
    draws = _hmc(ld, 4000, seed=7)[500:]
    post = ld.constrain(draws)                       # leaves with a leading draws axis
    assert post["w"].shape == (3500, 3) and post["cut"].shape == (3500, 2)
    # ordered pair of N(0, 1): E[min] = -1/sqrt(pi), E[max] = +1/sqrt(pi)
    known = {"tau": 1.5, "s": 10 * 2 / 6, "w": DIRICHLET / 10,
             "cut": np.array([-1.0, 1.0]) / np.sqrt(np.pi)}
    for name, mean in known.items():
        d = post[name].reshape(len(draws), -1)
        batch = d[: len(d) // 50 * 50].reshape(-1, 50, d.shape[1]).mean(axis=1)
        se = batch.std(axis=0, ddof=1) / np.sqrt(len(batch))
        assert np.all(np.abs(d.mean(axis=0) - np.ravel(mean)) < 4 * se), (name, d.mean(0), se)
    # a sampler that forgot the Jacobian would find tau's mean at 1.0 instead of 1.5
    assert abs(post["tau"].mean() - 1.0) > 0.25


def test_bijected_logdensity_survives_deepcopy_pickle_and_a_spawned_process():
    ld = rt.LogDensity(constrained_logp, CX0, bijectors=CBIJ)
    y = RNG.normal(size=6)
    v, g = ld.logdensity_and_gradient(y)
    for other in (copy.deepcopy(ld), pickle.loads(pickle.dumps(ld))):
        assert other.names == ld.names and other.dimension == 6
        v2, g2 = other.logdensity_and_gradient(y)
        assert v2 == v and np.array_equal(g2, g)
        np.testing.assert_array_equal(other.constrain(y)["w"], ld.constrain(y)["w"])
        assert other.constrain(y)["tau"] == ld.constrain(y)["tau"]
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        v3, g3 = pool.submit(_remote, ld, y).result(timeout=120)
    assert v3 == v and np.array_equal(g3, g)


def test_bijectors_on_plain_arrays_tuples_and_subtrees():
    ld = rt.LogDensity(lambda s: -np.sum(s), np.ones(3), bijectors=bj.exp)
    y = np.array([0.1, -0.2, 0.3])
    assert ld.names == ["x__exp[0]", "x__exp[1]", "x__exp[2]"]
    assert ld.logdensity(y) == pytest.approx(-np.sum(np.exp(y)) + np.sum(y), rel=1e-14)
    np.testing.assert_allclose(ld.constrain(y), np.exp(y), rtol=1e-15)
    np.testing.assert_allclose(ld.constrain(np.stack([y, 2 * y])), np.exp([y, 2 * y]))
    tup = rt.LogDensity(lambda a, b: a - b ** 2, (2.0, 0.5), bijectors=(bj.exp, None))
    assert tup.dimension == 2
    assert tup.logdensity([0.5, 0.5]) == pytest.approx(np.exp(0.5) + 0.5 - 0.25, rel=1e-14)
    a, b = tup.constrain([0.5, 0.5])
    assert type(a) is float and a == pytest.approx(np.exp(0.5)) and b == 0.5
    # a bijector on a subtree applies to each of its leaves
    sub = rt.LogDensity(lambda p: p["scales"]["a"] * p["scales"]["b"][0] + p["m"],
                        {"m": 0.0, "scales": {"a": 1.0, "b": np.ones(1)}},
                        bijectors={"scales": bj.exp})
    assert sub.names == ["m", "scales.a__exp", "scales.b__exp[0]"]
    assert sub.logdensity([1.0, 0.5, 0.25]) == pytest.approx(
        np.exp(0.75) + 1.0 + 0.75, rel=1e-14)
    chol = rt.LogDensity(lambda L: -0.5 * np.sum(L ** 2), np.eye(2), bijectors=bj.lower_cholesky)
    assert chol.dimension == 3 and chol.constrain(chol.x0).shape == (2, 2)
    np.testing.assert_allclose(chol.constrain(chol.x0), np.eye(2))


def test_bijector_mistakes_are_refused_with_what_to_do():
    with pytest.raises(rt.InputError, match="support"):
        rt.LogDensity(constrained_logp, {**CX0, "tau": -1.0}, bijectors=CBIJ)
    with pytest.raises(rt.InputError, match="support"):       # not on the simplex
        rt.LogDensity(constrained_logp, {**CX0, "w": np.ones(3)}, bijectors=CBIJ)
    with pytest.raises(rt.InputError, match="does not have"):
        rt.LogDensity(constrained_logp, CX0, bijectors={"sigma": bj.exp})
    with pytest.raises(rt.InputError, match="not a bijector"):
        rt.LogDensity(constrained_logp, CX0, bijectors={"tau": np.exp})
    with pytest.raises(rt.InputError, match="structure"):
        rt.LogDensity(constrained_logp, CX0, bijectors=[bj.exp])
    ld = rt.LogDensity(constrained_logp, CX0, bijectors=CBIJ)
    with pytest.raises(rt.InputError, match="length 6"):
        ld.constrain(np.zeros(7))
