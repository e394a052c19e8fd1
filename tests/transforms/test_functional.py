"""JAX-shaped transforms from the user's side (src/revtape/transforms/functional.py):
pytree arguments to rt.grad, has_aux, nested rt.grad."""

import collections

import numpy as np
import pytest

import revtape as rt

P = collections.namedtuple("P", "mu logs")
DATA = np.array([1.0, 2.0, 3.5])


def normal_ll(p, data):
    s = np.exp(p.logs)
    r = (data - p.mu) / s
    return -0.5 * np.sum(r ** 2) - data.size * p.logs


def normal_ll_grad(p, data):
    s2 = np.exp(2 * p.logs)
    return P(float(np.sum(data - p.mu) / s2), float(np.sum((data - p.mu) ** 2) / s2 - data.size))


# ---------------------------------------------------------------- pytrees in rt.grad

def test_grad_of_a_namedtuple_and_a_dict_comes_back_in_the_same_structure():
    g = rt.grad(normal_ll)
    for mu, logs in [(0.5, 0.1), (1.5, -0.3), (2.0, 0.7)]:
        got = g(P(mu, logs), DATA)
        assert type(got) is P
        np.testing.assert_allclose(got, normal_ll_grad(P(mu, logs), DATA), rtol=1e-13)
    assert g.cache_info().records == 1 and g.cache_info().replays == 2
    # data changes without re-recording (it is a tape input)
    np.testing.assert_allclose(g(P(0.5, 0.1), DATA + 1), normal_ll_grad(P(0.5, 0.1), DATA + 1),
                               rtol=1e-13)
    assert g.cache_info().records == 1

    f = lambda d: np.sum(d["w"] ** 2) * d["b"][0] + d["b"][1]
    vg = rt.value_and_grad(f)
    v, gd = vg({"w": np.array([1.0, 2.0]), "b": [3.0, 4.0]})
    assert v == 19.0
    assert set(gd) == {"w", "b"}
    np.testing.assert_array_equal(gd["w"], [6.0, 12.0])
    np.testing.assert_array_equal(gd["b"], [5.0, 1.0])   # a list of numbers is an array


def test_a_new_structure_is_a_new_cache_entry_and_argnums_mixes_trees_and_arrays():
    f = lambda a, t: np.sum(a * t["x"]) + t["y"] ** 2
    g = rt.grad(f, argnums=(0, 1))
    ga, gt = g(np.ones(2), {"x": np.array([2.0, 3.0]), "y": 1.5})
    np.testing.assert_array_equal(ga, [2.0, 3.0])
    np.testing.assert_array_equal(gt["x"], [1.0, 1.0])
    assert gt["y"] == 3.0
    g2 = rt.grad(lambda t: sum(v ** 2 for v in t))
    assert g2((1.0, 2.0)) == (2.0, 4.0)          # a tuple argument is one pytree, as in JAX
    assert g2((1.0, 2.0, 3.0)) == (2.0, 4.0, 6.0)
    assert g2.cache_info().records == 2


# ---------------------------------------------------------------- has_aux

def model_with_aux(p, data):
    s = np.exp(p["logs"])
    r = (data - p["mu"]) / s
    return -0.5 * np.sum(r ** 2) - data.size * p["logs"], {"resid": r, "scale": s, "n": data.size}


def test_has_aux_returns_this_calls_aux_values_at_every_replay():
    g = rt.grad(model_with_aux, has_aux=True)
    vg = rt.value_and_grad(model_with_aux, has_aux=True)
    for k in range(4):
        p = {"mu": 0.5 + 0.3 * k, "logs": 0.1 * k - 0.2}
        grads, aux = g(p, DATA)
        s = np.exp(p["logs"])
        np.testing.assert_allclose(aux["resid"], (DATA - p["mu"]) / s, rtol=1e-15)
        assert aux["scale"] == pytest.approx(s, rel=1e-15) and isinstance(aux["scale"], float)
        assert aux["n"] == 3
        ref = normal_ll_grad(P(p["mu"], p["logs"]), DATA)
        assert grads["mu"] == pytest.approx(ref.mu, rel=1e-13)
        assert grads["logs"] == pytest.approx(ref.logs, rel=1e-13)
        (value, aux2), grads2 = vg(p, DATA)
        assert value == pytest.approx(normal_ll(P(p["mu"], p["logs"]), DATA), rel=1e-14)
        np.testing.assert_array_equal(aux2["resid"], aux["resid"])
        assert grads2 == grads
    assert g.cache_info().records == 1 and g.cache_info().replays == 3


def test_aux_values_that_do_not_reach_the_output_are_still_computed_each_call():
    def f(x):
        unused = np.exp(x) * 3.0            # nothing of it reaches the output
        return np.sum(x ** 2), unused

    g = rt.grad(f, has_aux=True)
    for x in (np.array([0.1, 0.2]), np.array([1.0, -1.0])):
        grad, aux = g(x)
        np.testing.assert_allclose(grad, 2 * x)
        np.testing.assert_allclose(aux, np.exp(x) * 3.0, rtol=1e-15)


def test_has_aux_needs_a_pair():
    with pytest.raises(rt.OutputError, match="pair"):
        rt.grad(lambda x: x ** 2, has_aux=True)(1.0)


# ---------------------------------------------------------------- nested grad

def test_nested_grad_is_the_analytic_second_derivative():
    f = lambda x: x ** 3 * np.sin(x)
    d2 = rt.grad(rt.grad(f))
    for x in (0.5, 1.5, -2.0):
        exact = 6 * x * np.sin(x) + 6 * x ** 2 * np.cos(x) - x ** 3 * np.sin(x)
        assert d2(x) == pytest.approx(exact, rel=1e-13)
    assert d2.cache_info().records == 1          # the outer transform is cached and compiled
    d3 = rt.grad(rt.grad(rt.grad(lambda x: np.exp(2 * x) * x)))
    assert d3(0.7) == pytest.approx(np.exp(1.4) * (8 * 0.7 + 12), rel=1e-12)


def test_nested_grad_through_a_branch_and_of_an_array_sum():
    def f(x):
        return x ** 4 if x > 0 else -x ** 3
    d2 = rt.grad(rt.grad(f))
    assert d2(1.5) == pytest.approx(12 * 1.5 ** 2)
    assert d2(-1.5) == pytest.approx(-6 * -1.5)      # other branch: re-recorded, not stale
    # the outer function of an inner gradient of an array
    h = rt.grad(lambda a: np.sum(rt.grad(lambda x: np.sum(x ** 3))(a)))
    np.testing.assert_allclose(h(np.array([1.0, 2.0])), [6.0, 12.0])


def test_aux_values_survive_fusions_aliases_and_gathers():
    def f(x):
        a = x[0] * x[1]                    # would fuse into an AXPY
        s = x[2] + a
        u = s + x[0] + x[1]                # a CSUM chain
        w = u + x[2]
        return w, {"x": x, "x1": x[1], "a": a, "s": s, "u": u, "take": x[[0, 2]], "c": 3.0}

    g = rt.grad(f, has_aux=True)
    for x in (np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 4.0])):
        grad, aux = g(x)
        a = x[0] * x[1]
        s = x[2] + a
        np.testing.assert_array_equal(grad, [x[1] + 1, x[0] + 1, 2.0])
        np.testing.assert_array_equal(aux["x"], x)
        assert aux["x"] is not x                   # a copy, never the caller's array
        assert (aux["x1"], aux["a"], aux["s"], aux["u"]) == (x[1], a, s, s + x[0] + x[1])
        np.testing.assert_array_equal(aux["take"], x[[0, 2]])
        assert aux["c"] == 3.0


def test_nested_grad_returns_gradients_in_argnums_order_and_takes_trees():
    inner = rt.grad(lambda a, b: a ** 2 * b ** 3, argnums=(1, 0))     # (d/db, d/da)
    outer = rt.grad(lambda x, y: inner(x, y)[0])                       # d/dx of 3 x^2 y^2
    assert outer(1.5, 2.0) == pytest.approx(6 * 1.5 * 4.0)
    tree_inner = rt.grad(lambda p: p["a"] ** 2 * p["b"])
    h = rt.grad(lambda x: tree_inner({"a": x, "b": 3.0})["a"])          # d/dx of 6x
    assert h(0.7) == pytest.approx(6.0)


def test_has_aux_and_pytrees_with_generator_draws_replayed_fresh():
    def f(p, rng):
        z = rng.standard_normal(3)
        w = p["mu"] + np.exp(p["ls"]) * z
        return np.sum(w ** 2), {"w": w}

    g = rt.grad(f, has_aux=True)
    rng, twin = np.random.default_rng(1), np.random.default_rng(1)
    p = {"mu": np.array([0.1, 0.2, 0.3]), "ls": 0.5}
    for _ in range(3):
        grads, aux = g(p, rng)
        z = twin.standard_normal(3)
        w = p["mu"] + np.exp(0.5) * z
        np.testing.assert_allclose(aux["w"], w, rtol=1e-14)
        np.testing.assert_allclose(grads["mu"], 2 * w, rtol=1e-14)
        assert grads["ls"] == pytest.approx(np.sum(2 * w * np.exp(0.5) * z), rel=1e-13)
    assert g.cache_info().records == 1
