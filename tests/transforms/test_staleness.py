"""rt.grad never replays a stale program: what f reaches outside its arguments
(arrays and containers in closures, globals, attributes, class attributes read
through an instance, functools.partial arguments and keywords) is guarded, so
changing it in place between calls gives the new gradient."""

import functools
import warnings

import numpy as np
import pytest

import revtape as rt

W = np.array([1.0, 2.0])
X_GLOBAL = np.ones((3, 2))
BIG_GLOBAL = [1.0] * 100


def _loss_global(w):
    return np.sum((X_GLOBAL @ w) ** 2)


@pytest.fixture(params=["vm", "native"])
def tier(request, monkeypatch):
    """The compiled VM, or native="auto" hot from the first call (the native
    code then serves every replay once its build is done)."""
    if request.param == "native":
        monkeypatch.setenv("REVTAPE_NATIVE", "1")
        monkeypatch.setenv("REVTAPE_NATIVE_CALLS", "1")
    return request.param


def _settle(g, tier):
    """On the native tier, wait for the build so the next calls run native code."""
    if tier != "native":
        return
    for entry in g._cache.values():
        for v in entry.variants:
            assert v.ctape.wait_native(600)
            assert v.ctape.native_state == "native"


def test_global_array_mutated_in_place(tier):
    g = rt.grad(_loss_global)
    np.testing.assert_allclose(g(W), [18.0, 18.0])
    g(W)
    _settle(g, tier)
    X_GLOBAL[...] *= 2
    try:
        np.testing.assert_allclose(g(W), [72.0, 72.0])
        np.testing.assert_allclose(g(W), rt.gradient(_loss_global, W))
    finally:
        X_GLOBAL[...] = 1.0


def test_closure_array_mutated_in_place(tier):
    X = np.ones((3, 2))
    g = rt.grad(lambda w: np.sum((X @ w) ** 2))
    g(W)
    g(W)
    _settle(g, tier)
    X *= 2
    np.testing.assert_allclose(g(W), [72.0, 72.0])
    X[0, 0] = -1.0
    np.testing.assert_allclose(g(W), rt.gradient(lambda w: np.sum((X @ w) ** 2), W))


def test_plain_computation_on_a_reached_array_is_not_frozen():
    # np.sum(X) never meets a tracked value: it is no constant the tape could refill
    X = np.arange(4.0)
    g = rt.grad(lambda w: np.sum(w) * np.sum(X))
    np.testing.assert_allclose(g(W), [6.0, 6.0])
    X[0] = 10.0
    np.testing.assert_allclose(g(W), [16.0, 16.0])


def test_class_attribute_read_through_an_instance(tier):
    class Cfg:
        weights = [1.0, 2.0]

    c = Cfg()
    g = rt.grad(lambda w: np.sum(w) * sum(c.weights))
    np.testing.assert_allclose(g(W), [3.0, 3.0])
    g(W)
    _settle(g, tier)
    c.weights[0] = 5
    np.testing.assert_allclose(g(W), [7.0, 7.0])


def test_class_attribute_array_read_through_an_instance():
    class Model:
        scale = np.array([1.0, 1.0])

        def loss(self, w):
            return np.sum(self.scale * w ** 2)

    m = Model()
    g = rt.grad(m.loss)
    np.testing.assert_allclose(g(W), 2 * W)
    Model.scale[1] = 3.0
    np.testing.assert_allclose(g(W), [2.0, 12.0])


def test_long_list(tier):
    big = [1.0] * 100
    g = rt.grad(lambda w: np.sum(w) * sum(big))
    np.testing.assert_allclose(g(W), [100.0, 100.0])
    g(W)
    _settle(g, tier)
    big[0] = 101
    np.testing.assert_allclose(g(W), [200.0, 200.0])


def test_long_global_list():
    g = rt.grad(lambda w: np.sum(w) * sum(BIG_GLOBAL))
    np.testing.assert_allclose(g(W), [100.0, 100.0])
    BIG_GLOBAL[-1] = 51.0
    try:
        np.testing.assert_allclose(g(W), [150.0, 150.0])
    finally:
        BIG_GLOBAL[-1] = 1.0


def test_long_list_of_arrays():
    arrays = [np.ones(2) for _ in range(80)]
    g = rt.grad(lambda w: sum(np.sum(a * w) for a in arrays))
    np.testing.assert_allclose(g(W), [80.0, 80.0])
    arrays[70][1] = 11.0
    np.testing.assert_allclose(g(W), [80.0, 90.0])


def test_nested_containers():
    cfg = {"layers": [{"scale": [1.0]}]}
    g = rt.grad(lambda w: np.sum(w) * cfg["layers"][0]["scale"][0])
    np.testing.assert_allclose(g(W), [1.0, 1.0])
    cfg["layers"][0]["scale"][0] = 4.0
    np.testing.assert_allclose(g(W), [4.0, 4.0])


def test_partial_keyword(tier):
    p = functools.partial(lambda w, a: a * np.sum(w ** 2), a=1.0)
    g = rt.grad(p)
    np.testing.assert_allclose(g(W), [2.0, 4.0])
    g(W)
    _settle(g, tier)
    p.keywords["a"] = 6
    np.testing.assert_allclose(g(W), [12.0, 24.0])


def test_partial_array_argument_and_keyword():
    A = np.ones(2)

    def f(A, w, scale):
        return np.sum(A * w) * scale[0]

    scale = [1.0]
    p = functools.partial(f, A, scale=scale)
    g = rt.grad(p)
    np.testing.assert_allclose(g(W), [1.0, 1.0])
    A[0] = 3.0
    np.testing.assert_allclose(g(W), [3.0, 1.0])
    scale[0] = 2.0
    np.testing.assert_allclose(g(W), [6.0, 2.0])


def test_default_argument_array():
    D = np.ones(2)

    def f(w, d=D):
        return np.sum(d * w)

    g = rt.grad(f)
    np.testing.assert_allclose(g(W), [1.0, 1.0])
    D[1] = 5.0
    np.testing.assert_allclose(g(W), [1.0, 5.0])


def test_attribute_array_of_self():
    class Model:
        def __init__(self):
            self.X = np.ones((3, 2))

        def loss(self, w):
            return np.sum((self.X @ w) ** 2)

    m = Model()
    g = rt.grad(m.loss)
    np.testing.assert_allclose(g(W), [18.0, 18.0])
    m.X *= 2
    np.testing.assert_allclose(g(W), [72.0, 72.0])


def test_bool_array_in_a_global_like_logistic_regression():
    targets = np.array([True, False, True])
    inputs = np.array([[0.5, 1.0], [1.0, -1.0], [-0.3, 0.2]])

    def loss(w):
        p = 1.0 / (1.0 + np.exp(-(inputs @ w)))
        return -np.sum(np.log(p * targets + (1 - p) * (1 - targets)))

    g = rt.grad(loss)
    g(W)
    targets[1] = True
    np.testing.assert_allclose(g(W), rt.gradient(loss, W), rtol=1e-13)


def test_unchanged_state_still_replays():
    X = np.ones((3, 2))
    big = [1.0] * 100
    p = functools.partial(lambda w, a: a * np.sum((X @ w) ** 2) + sum(big), a=1.0)
    g = rt.grad(p)
    for _ in range(4):
        g(W)
    info = g.cache_info()
    assert info.records == 1 and info.replays == 3 and info.stale == 0


def test_custom_getattr_object_warns_once_at_the_users_line():
    class Bag:
        def __init__(self):
            self._d = {"s": 2.0}

        def __getattr__(self, name):
            try:
                return self.__dict__["_d"][name]
            except KeyError:
                raise AttributeError(name) from None

    bag = Bag()
    g = rt.grad(lambda w: np.sum(w) * bag.s)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g(W)
        g(W)
    stale = [w for w in caught if issubclass(w.category, rt.StaleTapeWarning)]
    assert len(stale) == 1
    assert stale[0].filename == __file__
    assert "__getattr__" in str(stale[0].message)
    assert issubclass(rt.StaleTapeWarning, rt.RevtapeWarning)
