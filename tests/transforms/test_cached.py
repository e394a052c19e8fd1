"""The cached transforms (src/revtape/transforms/cached.py): rt.jacobian(f),
rt.hessian(f), rt.hvp(f) -- cached, compiled and guarded -- and JAX's rt.jvp /
rt.vjp, from the user's side."""

import numpy as np
import pytest

import revtape as rt


# ---------------------------------------------------------------- cached jacobian/hessian/hvp

def rosen(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def rosen_hess(x):
    n = x.size
    H = np.zeros((n, n))
    for i in range(n - 1):
        H[i, i] += 1200 * x[i] ** 2 - 400 * x[i + 1] + 2
        H[i, i + 1] -= 400 * x[i]
        H[i + 1, i] -= 400 * x[i]
        H[i + 1, i + 1] += 200
    return H


def test_hessian_and_hvp_transforms_are_cached_and_match_the_analytic_hessian():
    H, hvp = rt.hessian(rosen), rt.hvp(rosen)
    rng = np.random.default_rng(0)
    for _ in range(4):
        x, v = rng.normal(size=5), rng.normal(size=5)
        np.testing.assert_allclose(H(x), rosen_hess(x), rtol=1e-12)
        np.testing.assert_allclose(hvp(x, v), rosen_hess(x) @ v, rtol=1e-12)
    assert H.cache_info().records == 1 and H.cache_info().replays == 3
    assert hvp.cache_info().records == 1 and hvp.cache_info().replays == 3
    # with x they keep their one-shot meaning
    x = rng.normal(size=5)
    np.testing.assert_allclose(rt.hessian(rosen, x), rosen_hess(x), rtol=1e-12)
    np.testing.assert_allclose(rt.hvp(rosen, x, np.ones(5)), rosen_hess(x) @ np.ones(5), rtol=1e-12)


def test_jacobian_transform_with_static_arguments_and_pytrees():
    f = lambda x, k: np.sin(x) * x[0] ** k
    J = rt.jacobian(f)
    x = np.array([0.3, 0.5, 0.7])
    for k in (1, 2, 1):
        exact = np.diag(np.cos(x) * x[0] ** k)
        exact[:, 0] += np.sin(x) * k * x[0] ** (k - 1)
        np.testing.assert_allclose(J(x, k), exact, rtol=1e-14)
    assert J.cache_info().records == 2            # k is static: one entry per value
    Jt = rt.jacobian(lambda p: p["a"] * p["b"])({"a": np.array([1.0, 2.0]), "b": 3.0})
    np.testing.assert_array_equal(Jt["a"], 3 * np.eye(2))
    np.testing.assert_array_equal(Jt["b"], [1.0, 2.0])
    hv = rt.hvp(lambda p: p["a"] ** 2 * p["b"] ** 3)({"a": 1.5, "b": 2.0}, {"a": 1.0, "b": 0.0})
    assert hv == {"a": pytest.approx(16.0), "b": pytest.approx(36.0)}


def test_cached_transforms_rerecord_on_branches_and_redefinitions():
    state = {"scale": 1.0}

    def f(x):
        if x[0] > 0:
            return np.sum(x ** 4) * state["scale"]
        return np.sum(x ** 2)

    H = rt.hessian(f)
    np.testing.assert_allclose(H(np.array([1.0, 2.0])), np.diag([12.0, 48.0]))
    np.testing.assert_allclose(H(np.array([-1.0, 2.0])), 2 * np.eye(2))     # other branch
    assert H.cache_info().branch_failures == 1
    state["scale"] = 2.0                          # a small dict the function read
    np.testing.assert_allclose(H(np.array([1.0, 2.0])), np.diag([24.0, 96.0]))
    assert H.cache_info().stale >= 1
    strict = rt.hessian(f)
    strict.on_stale = "raise"
    strict(np.array([1.0, 2.0]))
    with pytest.raises(rt.StaleTape):
        strict(np.array([-1.0, 2.0]))


def test_jvp_and_vjp_follow_jax():
    f = lambda a, b: a * np.sin(b)
    b = np.array([0.2, 0.4])
    out, tan = rt.jvp(f, (2.0, b), (1.0, np.array([0.0, 1.0])))
    np.testing.assert_allclose(out, 2.0 * np.sin(b))
    np.testing.assert_allclose(tan, np.sin(b) + 2.0 * np.cos(b) * [0.0, 1.0], rtol=1e-15)
    out, vjp_fun = rt.vjp(f, 2.0, b)
    ga, gb = vjp_fun(np.array([1.0, 0.0]))
    assert ga == pytest.approx(np.sin(0.2))
    np.testing.assert_allclose(gb, [2.0 * np.cos(0.2), 0.0])
    ga, gb = vjp_fun(np.array([0.0, 1.0]))           # reusable: another reverse sweep
    assert ga == pytest.approx(np.sin(0.4))
    (gd,) = rt.vjp(lambda d: d["x"] * 2.0, {"x": np.ones(2)})[1](np.array([1.0, 3.0]))
    np.testing.assert_array_equal(gd["x"], [2.0, 6.0])
    # the cached form, value first
    jv = rt.jvp(lambda x: np.exp(x) * x[0])
    x, v = np.array([0.5, 1.0]), np.array([1.0, 0.0])
    y, t = jv(x, v)
    np.testing.assert_allclose(y, np.exp(x) * 0.5)
    np.testing.assert_allclose(t, np.exp(x) * 0.5 * v + np.exp(x), rtol=1e-15)


def test_cached_transforms_serve_many_threads():
    import threading
    hvp = rt.hvp(rosen)
    rng = np.random.default_rng(1)
    xs, vs = rng.normal(size=(8, 4)), rng.normal(size=(8, 4))
    hvp(xs[0], vs[0])
    errors = []

    def work(k):
        try:
            for _ in range(200):
                np.testing.assert_allclose(hvp(xs[k], vs[k]), rosen_hess(xs[k]) @ vs[k],
                                           rtol=1e-12)
        except Exception as e:                     # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert hvp.cache_info().records == 1


def _branchy(x):
    # a branch on x[0]: each side is its own recorded variant
    return rosen(x) + (np.sum(x ** 3) if x[0] > 0.0 else np.sum(np.sin(x)))


def test_the_hvp_transform_gives_ctape_hvp_bits_for_every_kind_of_argument():
    # the transform's direct path (float64, C-contiguous, aligned, the input's
    # shape) and the general one (everything else) against ctape.hvp itself
    hvp = rt.hvp(_branchy)
    rng = np.random.default_rng(3)
    x, v = rng.normal(size=6) + [2.0, 0, 0, 0, 0, 0], rng.normal(size=6)
    ch = rt.compile(rt.HessianTape(_branchy, x))
    big = np.empty(13)
    big[1::2] = x
    raw = bytearray(6 * 8 + 1)
    misaligned = np.frombuffer(raw, dtype=np.float64, count=6, offset=1)
    misaligned[...] = x
    for xa, va in [(x, v), (x.copy(), v.copy()), (big[1::2], v), (misaligned, v),
                   (x, v.astype(np.float32)), (x, list(v)), (x, np.arange(6)),
                   (x, big[1::2]), (x.reshape(6, 1)[:, 0], v)]:
        got = hvp(xa, va)
        assert type(got) is np.ndarray and got.shape == (6,)
        np.testing.assert_array_equal(got, ch.hvp(np.array(xa, dtype=np.float64),
                                                  np.asarray(va, dtype=np.float64)))
    assert hvp.cache_info().records == 1
    with pytest.raises(rt.InputError):
        hvp(x, np.ones(5))
    # the other branch: the recorded variant refuses it (BranchChanged inside
    # the direct path), the transform records the second variant
    x2 = x.copy()
    x2[0] = -1.5
    np.testing.assert_array_equal(hvp(x2, v), rt.compile(rt.HessianTape(_branchy, x2)).hvp(x2, v))
    assert hvp.cache_info().records == 2 and hvp.cache_info().branch_failures == 1
    np.testing.assert_array_equal(hvp(x, v), ch.hvp(x, v))


def test_static_arguments_of_cached_transforms_are_keyed_by_value():
    J = rt.jacobian(lambda x, w: x * np.asarray(w))
    x = np.ones(2)
    np.testing.assert_array_equal(J(x, [1.0, 2.0]), np.diag([1.0, 2.0]))
    np.testing.assert_array_equal(J(x, [3.0, 4.0]), np.diag([3.0, 4.0]))     # new list, new key
    np.testing.assert_array_equal(J(x, [1.0, 2.0]), np.diag([1.0, 2.0]))
    assert J.cache_info().records == 2

    class Unhashable:
        __hash__ = None

    with pytest.raises(rt.InputError, match="hashable"):
        J(x, Unhashable())


def test_transforms_compose_jacobian_of_grad_is_the_hessian():
    H = rt.jacobian(rt.grad(rosen))
    rng = np.random.default_rng(3)
    for _ in range(3):
        x = rng.normal(size=4)
        np.testing.assert_allclose(H(x), rosen_hess(x), rtol=1e-12, atol=1e-9)
    assert H.cache_info().records == 1
    # has_aux inside an outer recording: the aux is traced too
    f = lambda x: (x ** 3, {"sq": x ** 2})
    g = rt.grad(lambda x: rt.grad(f, has_aux=True)(x)[0] + rt.grad(f, has_aux=True)(x)[1]["sq"])
    assert g(2.0) == pytest.approx(6 * 2.0 + 2 * 2.0)
    assert g(-1.0) == pytest.approx(6 * -1.0 + 2 * -1.0)


def test_cached_transforms_and_tree_hessian_tapes_copy_and_pickle():
    import copy
    import pickle
    hvp = rt.hvp(rosen)
    x, v = np.array([0.5, -0.3, 0.2]), np.array([1.0, 2.0, 3.0])
    want = hvp(x, v)
    for other in (copy.deepcopy(hvp), pickle.loads(pickle.dumps(hvp))):
        np.testing.assert_array_equal(other(x, v), want)
        assert other.cache_info().records == 1
    f = lambda p: p["a"] ** 2 * np.sum(p["b"] ** 3)
    t = {"a": 1.5, "b": np.array([1.0, 2.0])}
    ch = rt.compile(rt.HessianTape(f, t))
    for other in (copy.deepcopy(ch), pickle.loads(pickle.dumps(ch))):
        H = other.hessian(t)
        assert float(H["a"]["a"]) == pytest.approx(2 * 9.0)
        np.testing.assert_allclose(H["b"]["b"], np.diag(6 * 1.5 ** 2 * t["b"]))


def test_cached_transforms_never_freeze_random_draws():
    rng = np.random.default_rng(5)
    noise = lambda x: np.sum(x ** 2 * rng.standard_normal(2))
    H = rt.hessian(noise)
    with pytest.warns(rt.RandomDrawWarning):
        h1 = H(np.ones(2))
    h2 = H(np.ones(2))
    assert not np.array_equal(h1, h2)              # drawn afresh, not replayed as constants
    assert H.cache_info().variants == 0
