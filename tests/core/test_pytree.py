"""Pytree inputs (nested dicts, lists, tuples, namedtuples) from the user's side."""

import collections
import copy
import pickle

import numpy as np
import pytest

import revtape as rt
from revtape.core import pytree

P = collections.namedtuple("P", "mu logs")


def model(p):
    w, (b0, b1), n = p["w"], p["b"], p["n"]
    return (-0.5 * np.sum((w - b0) ** 2) + b1 * np.sum(w ** 3)
            + n.mu * np.exp(n.logs) + np.sum(p["m"]["z"] * w))


def analytic(p):
    w, (b0, b1), n = p["w"], p["b"], p["n"]
    z = p["m"]["z"]
    return {"w": -(w - b0) + 3 * b1 * w ** 2 + z,
            "b": [float(np.sum(w - b0)), float(np.sum(w ** 3))],   # a 0-d array's is a float
            "n": P(float(np.exp(n.logs)), float(n.mu * np.exp(n.logs))),
            "m": {"z": w.copy()}}


def point(k=0.0):
    return {"w": np.array([1.0, 2.0, -0.5]) + k, "b": [0.5 + k, np.array(2.0 - k)],
            "n": P(1.5, 0.3 + k), "m": {"z": np.array([0.1, 0.2, 0.3])}}


def assert_tree_close(a, b):
    """Same containers (types and keys) all the way down, leaves equal to 1e-13."""
    assert type(a) is type(b) or (np.ndim(a) == 0 and np.ndim(b) == 0
                                  and not isinstance(a, (list, tuple, dict))), (a, b)
    if isinstance(a, dict):
        assert list(sorted(a)) == list(sorted(b))
        for k in a:
            assert_tree_close(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for u, v in zip(a, b):
            assert_tree_close(u, v)
    else:
        np.testing.assert_allclose(a, b, rtol=1e-13)


def test_flatten_order_follows_jax_sorted_dict_keys_and_none_is_empty():
    leaves, td = pytree.flatten({"b": 1.0, "a": [2.0, None, (3.0,)], "c": P(4.0, 5.0)})
    assert leaves == [2.0, 3.0, 1.0, 4.0, 5.0]
    back = pytree.unflatten(td, leaves)
    assert back == {"a": [2.0, None, (3.0,)], "b": 1.0, "c": P(4.0, 5.0)}
    assert type(back["c"]) is P
    od = collections.OrderedDict([("z", 1.0), ("a", 2.0)])
    leaves, td = pytree.flatten(od)
    assert leaves == [1.0, 2.0]                   # an OrderedDict keeps its order, as in JAX
    assert type(pytree.unflatten(td, leaves)) is collections.OrderedDict
    # structures compare (and hash) by structure: cache keys
    assert pytree.flatten({"a": 1.0, "b": 2.0})[1] == pytree.flatten({"b": 5.0, "a": 6.0})[1]
    assert hash(pytree.flatten([1.0, {"x": 2.0}])[1]) == hash(pytree.flatten([3.0, {"x": 4.0}])[1])
    # a list of plain numbers is one leaf (an array), everywhere
    assert pytree.flatten({"a": [1.0, 2.0]})[0] == [[1.0, 2.0]]


@pytest.mark.parametrize("compiled", [False, True])
def test_gradient_tape_of_a_nested_tree_returns_the_same_structure(compiled):
    tape = rt.GradientTape(model, point())
    t = rt.compile(tape) if compiled else tape
    for k in (0.0, 0.25):
        x = point(k)
        v, g = t.value_and_gradient(x)
        assert v == pytest.approx(model(x), rel=1e-14)
        assert_tree_close(g, analytic(x))
    # out= is a tree of arrays of the same structure
    out = {"w": np.empty(3), "b": [np.empty(()), np.empty(())], "n": P(np.empty(()), np.empty(())),
           "m": {"z": np.empty(3)}}
    assert t.gradient(point(), out=out) is out
    np.testing.assert_allclose(out["w"], analytic(point())["w"], rtol=1e-13)
    assert float(out["n"].logs) == pytest.approx(analytic(point())["n"].logs, rel=1e-14)


def test_one_shot_helpers_take_trees():
    x = point()
    assert_tree_close(rt.gradient(model, x), analytic(x))
    v, g = rt.value_and_gradient(model, x)
    assert v == pytest.approx(model(x))
    J = rt.jacobian(lambda p: p["a"] * p["b"], {"a": np.array([1.0, 2.0]), "b": 3.0})
    np.testing.assert_array_equal(J["a"], 3.0 * np.eye(2))
    np.testing.assert_array_equal(J["b"], [1.0, 2.0])


def test_hessian_and_hvp_of_a_tree_are_trees_of_blocks():
    f = lambda p: p["a"] ** 2 * p["b"] ** 3 + np.sum(p["v"] ** 2) * p["a"]
    x = {"a": 1.5, "b": 2.0, "v": np.array([1.0, -2.0])}
    a, b, v = 1.5, 2.0, np.array([1.0, -2.0])
    for H in (rt.hessian(f, x), rt.compile(rt.HessianTape(f, x)).hessian(x)):
        assert float(H["a"]["a"]) == pytest.approx(2 * b ** 3)
        assert float(H["a"]["b"]) == pytest.approx(6 * a * b ** 2)
        np.testing.assert_allclose(H["a"]["v"], 2 * v)
        np.testing.assert_allclose(H["v"]["v"], 2 * a * np.eye(2))
    t = {"a": 1.0, "b": 0.0, "v": np.array([0.0, 1.0])}
    hv = rt.hvp(f, x, t)
    assert hv["a"] == pytest.approx(2 * b ** 3 + 2 * v[1])
    assert hv["b"] == pytest.approx(6 * a * b ** 2)
    np.testing.assert_allclose(hv["v"], 2 * v * 1.0 + np.array([0.0, 2 * a]))


def test_tuple_convention_is_unchanged_and_namedtuple_is_one_argument():
    # a plain tuple of leaves: f(*x) when f takes that many arguments
    g = rt.gradient(lambda a, b: a * b ** 2, (2.0, 3.0))
    assert g == (9.0, 12.0)
    # a namedtuple is a pytree passed as one argument
    g = rt.gradient(lambda p: p.mu * p.logs ** 2, P(2.0, 3.0))
    assert type(g) is P and g == P(9.0, 12.0)
    # a list of plain numbers is still an array
    np.testing.assert_array_equal(rt.gradient(lambda x: np.sum(x ** 2), [1.0, 2.0]), [2.0, 4.0])
    # a list of arrays is a pytree
    g = rt.gradient(lambda xs: np.sum(xs[0]) * np.sum(xs[1] ** 2), [np.ones(2), np.ones(3)])
    assert type(g) is list and g[0].shape == (2,) and g[1].shape == (3,)


def test_flatten_unflatten_and_bind_on_the_flat_vector():
    ct = rt.compile(rt.GradientTape(model, point()))
    vec = ct.flatten(point(0.1))
    assert vec.shape == (10,) and vec.dtype == np.float64
    assert_tree_close(ct.unflatten(vec), point(0.1))
    g = np.empty_like(vec)
    run = ct.bind(vec, g)
    assert run() == pytest.approx(model(point(0.1)), rel=1e-14)
    np.testing.assert_allclose(g, ct.flatten(analytic(point(0.1))), rtol=1e-13)
    vec[:] = ct.flatten(point(0.3))              # the sampler writes its next point in place
    assert run() == pytest.approx(model(point(0.3)), rel=1e-14)
    assert_tree_close(ct.unflatten(g), analytic(point(0.3)))
    with pytest.raises(rt.InputError, match="flat"):
        ct.bind(np.zeros(3), np.zeros(10))
    # plain inputs have the same methods
    ct1 = rt.compile(rt.GradientTape(lambda a, b: a * np.sum(b ** 2), (2.0, np.ones(2))))
    np.testing.assert_array_equal(ct1.flatten((2.0, np.array([3.0, 4.0]))), [2.0, 3.0, 4.0])
    a, b = ct1.unflatten(np.array([1.0, 2.0, 3.0]))
    assert a == 1.0 and isinstance(a, float)
    np.testing.assert_array_equal(b, [2.0, 3.0])
    x, gx = np.array([2.0, 1.0, 1.0]), np.empty(3)
    assert ct1.bind(x, gx)() == 4.0
    np.testing.assert_array_equal(gx, [2.0, 4.0, 4.0])


def test_wrong_structure_is_a_clear_error_and_leaves_the_tape_usable():
    ct = rt.compile(rt.GradientTape(model, point()))
    with pytest.raises(rt.InputError, match="structure"):
        ct.gradient({"w": np.ones(3)})
    with pytest.raises(rt.InputError, match="shape"):
        bad = point()
        bad["w"] = np.ones(4)
        ct.gradient(bad)
    with pytest.raises(rt.InputError, match="leaves"):
        rt.gradient(lambda p: p["a"], {"a": 1.0, "s": "text"})
    assert_tree_close(ct.gradient(point()), analytic(point()))


def test_tree_tapes_pickle_and_deepcopy():
    ct = rt.compile(rt.GradientTape(model, point()))
    for c in (pickle.loads(pickle.dumps(ct)), copy.deepcopy(ct)):
        assert_tree_close(c.gradient(point(0.2)), analytic(point(0.2)))


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y


rt.register_pytree_node(Point, lambda p: ((p.x, p.y), None), lambda aux, ch: Point(*ch))


def test_registered_container_types_are_pytrees():
    g = rt.gradient(lambda p: p.x ** 2 * np.sum(p.y), Point(3.0, np.ones(2)))
    assert type(g) is Point and g.x == 12.0
    np.testing.assert_array_equal(g.y, [9.0, 9.0])
    g2 = rt.grad(lambda p: p.x * p.y[1])(Point(2.0, np.array([1.0, 5.0])))
    assert type(g2) is Point and g2.x == 5.0


def test_grad_static_arguments_may_be_any_container():
    g = rt.grad(lambda x, cfg: np.sum(x ** 2) * len(cfg))
    # a dict with keys that do not sort is fine as a static argument
    np.testing.assert_array_equal(g(np.ones(2), {1: "a", "b": 2}), [4.0, 4.0])
    np.testing.assert_array_equal(g(np.ones(2), list(range(10000))), [20000.0, 20000.0])
    # and a list of numbers as the differentiated argument is an array
    np.testing.assert_array_equal(rt.grad(lambda x: np.sum(x ** 2))([1.0, 2.0]), [2.0, 4.0])


def test_forward_jvp_and_vjp_take_trees():
    f = lambda p: np.exp(p["a"]) * p["b"]
    x = {"a": np.array([0.1, 0.2]), "b": 3.0}
    t = rt.JacobianTape(f, x)
    c = rt.compile(t)
    np.testing.assert_allclose(c.forward(x), np.exp(x["a"]) * 3.0)
    np.testing.assert_array_equal(t.forward(x), c.forward(x))
    jv = c.jvp(x, {"a": np.array([1.0, 0.0]), "b": 1.0})
    np.testing.assert_allclose(jv, [np.exp(0.1) * 3.0 + np.exp(0.1), np.exp(0.2)], rtol=1e-15)
    for vj in (t.vjp(x, np.array([1.0, 0.0])), c.vjp(x, np.array([1.0, 0.0]))):
        np.testing.assert_allclose(vj["a"], [np.exp(0.1) * 3.0, 0.0], rtol=1e-15)
        assert vj["b"] == pytest.approx(np.exp(0.1), rel=1e-15)


def test_batched_replay_takes_and_returns_trees_of_stacks():
    ct = rt.compile(rt.GradientTape(model, point()))
    pts = [point(0.1 * k) for k in range(4)]
    X = {"w": np.stack([p["w"] for p in pts]),
         "b": [np.array([p["b"][0] for p in pts]), np.array([float(p["b"][1]) for p in pts])],
         "n": P(np.array([p["n"].mu for p in pts]), np.array([p["n"].logs for p in pts])),
         "m": {"z": np.stack([p["m"]["z"] for p in pts])}}
    values, G = ct.batch_value_and_gradient(X)
    np.testing.assert_allclose(ct.batch_forward(X), values, rtol=0)
    for k, p in enumerate(pts):
        v, g = ct.value_and_gradient(p)
        assert values[k] == v
        np.testing.assert_array_equal(G["w"][k], g["w"])
        assert G["n"].logs[k] == g["n"].logs and G["b"][1][k] == g["b"][1]
    with pytest.raises(rt.InputError, match="out="):
        ct.batch_value_and_gradient(X, out=np.empty((4, 10)))
