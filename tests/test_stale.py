"""Stale tapes: branch guards in the reference and compiled replays, and the
cached rt.grad transform re-recording on branch and redefinition changes."""

import functools
import importlib
import sys
import textwrap
import warnings

import numpy as np
import pytest

import revtape as rt


def piecewise(x):
    if x[0] > 0:
        return np.sum(x ** 2)
    return -np.sum(x)


def d_piecewise(x):
    return 2 * x if x[0] > 0 else -np.ones_like(x)


POS = np.array([0.5, 2.0, -1.0])
NEG = np.array([-0.5, 2.0, -1.0])


# ---------------------------------------------------------------- branch guards

def test_comparison_on_tracked_scalar_records_a_guard():
    tape = rt.GradientTape(piecewise, POS)
    assert "guard" in repr(tape)
    assert "x[0] > 0" in repr(tape)        # the user's source line


@pytest.mark.parametrize("replay", ["reference", "compiled"])
def test_replay_across_a_branch_raises_branch_changed(replay):
    tape = rt.GradientTape(piecewise, POS)
    t = tape if replay == "reference" else rt.compile(tape)
    np.testing.assert_allclose(t.gradient(POS * 2), d_piecewise(POS * 2))
    with pytest.raises(rt.BranchChanged) as err:
        t.gradient(NEG)
    assert "x[0] > 0" in str(err.value)
    assert isinstance(err.value, rt.RevtapeError)
    # a failed call leaves the tape usable
    np.testing.assert_allclose(t.gradient(POS), d_piecewise(POS))


def test_guards_off_replays_the_recorded_branch():
    ctape = rt.compile(rt.GradientTape(piecewise, POS), guards=False)
    np.testing.assert_allclose(ctape.gradient(NEG), 2 * NEG)


@pytest.mark.parametrize("cond, x_other", [
    (lambda x: (x > 0).all(), [-0.5, 1.0]),
    (lambda x: (x > 0).any(), [-0.5, -1.0]),
    (lambda x: bool(x[0] >= 0.25), [0.1, 1.0]),
    (lambda x: x[0] != 0.5, [0.6, 1.0]),
    (lambda x: np.sum(x) < 10.0, [5.0, 6.0]),
])
def test_array_and_reduced_conditions_are_guarded(cond, x_other):
    def f(x):
        return np.sum(np.exp(x)) if cond(x) else np.sum(x)

    x = np.array([0.5, 1.0])
    x_other = np.array(x_other)
    assert cond(x) != cond(x_other)
    ctape = rt.compile(rt.GradientTape(f, x))
    np.testing.assert_allclose(ctape.gradient(x * 1.0), rt.gradient(f, x))
    with pytest.raises(rt.BranchChanged):
        ctape.gradient(x_other)
    np.testing.assert_allclose(rt.grad(f)(x_other), rt.gradient(f, x_other))


def test_masks_that_feed_where_are_selects_not_guards():
    def f(x):
        return np.sum(np.where(x > 0, np.log1p(x), 0.5 * x)) + np.sum(np.maximum(x, 0.1))

    tape = rt.GradientTape(f, POS)
    assert "guard" not in repr(tape)
    ctape = rt.compile(tape)
    for x in (NEG, POS, -POS):
        np.testing.assert_allclose(ctape.gradient(x), rt.gradient(f, x), rtol=1e-13)


def test_while_loop_with_data_dependent_trip_count():
    def f(x):
        y = x[0]
        while y < 10.0:
            y = y * 2.0
        return y

    ctape = rt.compile(rt.GradientTape(f, np.array([3.0])))      # 3 -> 6 -> 12: two doublings
    assert ctape.gradient(np.array([4.0]))[0] == 4.0
    with pytest.raises(rt.BranchChanged):
        ctape.gradient(np.array([1.0]))                           # needs four doublings
    g = rt.grad(f)
    for x0, expected in ((3.0, 4.0), (1.0, 16.0), (3.0, 4.0), (0.7, 16.0)):
        assert g(np.array([x0]))[0] == expected


# ---------------------------------------------------------------- rt.grad over branches

def test_grad_rerecords_across_a_branch_and_matches_fresh_recording():
    g = rt.grad(piecewise)
    for x in (POS, NEG, POS * 3, NEG * 3, POS):
        np.testing.assert_allclose(g(x), rt.gradient(piecewise, x), rtol=1e-14)
    info = g.cache_info()
    assert info.records == 2 and info.variants == 2
    assert info.branch_failures >= 1 and info.replays == 3


def test_value_and_grad_is_value_first():
    vg = rt.value_and_grad(piecewise)
    v, gr = vg(POS)
    assert v == pytest.approx(np.sum(POS ** 2))
    np.testing.assert_allclose(gr, 2 * POS)


def test_on_stale_raise():
    g = rt.grad(piecewise, on_stale="raise")
    g(POS)
    with pytest.raises(rt.StaleTape):
        g(NEG)


def test_thrashing_function_warns_once_and_stays_correct():
    def f(x):
        k = 0
        y = x[0]
        while y < 100.0:               # a different trip count for every input
            y = y * 1.5
            k += 1
        return y

    g = rt.grad(f)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for i in range(12):
            x = np.array([100.0 / 1.5 ** i - 1e-9])
            np.testing.assert_allclose(g(x), rt.gradient(f, x))
    assert sum(issubclass(x.category, RuntimeWarning) for x in w) == 1
    assert g.cache_info().eager


def test_argnums_and_data_arguments():
    def loss(w, b, X, y):
        return np.sum((X @ w + b - y) ** 2)

    rng = np.random.default_rng(0)
    X, y, w = rng.normal(size=(5, 3)), rng.normal(size=5), rng.normal(size=3)
    g = rt.grad(loss, argnums=(0, 1))
    gw, gb = g(w, 0.5, X, y)
    r = X @ w + 0.5 - y
    np.testing.assert_allclose(gw, 2 * X.T @ r)
    assert gb == pytest.approx(2 * np.sum(r))
    # new data: no re-record, the data are tape inputs
    X2 = rng.normal(size=(5, 3))
    gw2, _ = g(w, 0.5, X2, y)
    np.testing.assert_allclose(gw2, 2 * X2.T @ (X2 @ w + 0.5 - y))
    assert g.cache_info().records == 1
    # a new shape is a new cache key
    g(w, 0.5, X[:4], y[:4])
    assert g.cache_info().records == 2


# ---------------------------------------------------------------- redefinitions

@pytest.fixture
def helper_module(tmp_path, monkeypatch):
    src = textwrap.dedent("""
        import numpy as np
        SCALE = 2.0
        def g(x):
            return SCALE * np.sum(x ** 2)
        def f(x):
            return g(x) + 1.0
    """)
    (tmp_path / "rt_helper_mod.py").write_text(src)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("rt_helper_mod", None)
    mod = importlib.import_module("rt_helper_mod")
    yield mod
    sys.modules.pop("rt_helper_mod", None)


X = np.array([1.0, -2.0, 0.5])


def test_redefining_a_helper_in_its_module_is_detected(helper_module):
    g = rt.grad(helper_module.f)
    np.testing.assert_allclose(g(X), 4 * X)
    helper_module.g = lambda x: np.sum(x ** 3)
    np.testing.assert_allclose(g(X), 3 * X ** 2)
    assert g.cache_info().stale == 1 and g.cache_info().records == 2


def test_rebinding_a_global_constant_is_detected(helper_module):
    g = rt.grad(helper_module.f)
    g(X)
    helper_module.SCALE = 5.0
    np.testing.assert_allclose(g(X), 10 * X)


def test_replacing_code_object_is_detected(helper_module):
    g = rt.grad(helper_module.f)
    g(X)

    def other(x):
        return SCALE * np.sum(x)     # noqa: F821 (runs in the module's globals)

    helper_module.g.__code__ = other.__code__
    np.testing.assert_allclose(g(X), 2 * np.ones(3))


def test_on_stale_raise_for_redefinition(helper_module):
    g = rt.grad(helper_module.f, on_stale="raise")
    g(X)
    helper_module.SCALE = 1.0
    with pytest.raises(rt.StaleTape):
        g(X)


def test_changing_a_closure_cell_is_detected():
    def make():
        k = 2.0

        def f(x):
            return k * np.sum(x ** 2)

        def set_k(v):
            nonlocal k
            k = v
        return f, set_k

    f, set_k = make()
    g = rt.grad(f)
    np.testing.assert_allclose(g(X), 4 * X)
    set_k(3.0)
    np.testing.assert_allclose(g(X), 6 * X)


def test_monkeypatching_a_method_on_a_class_is_detected():
    class Model:
        def term(self, x):
            return np.sum(x ** 2)

        def logp(self, x):
            return self.term(x)

    m = Model()
    g = rt.grad(m.logp)
    np.testing.assert_allclose(g(X), 2 * X)
    Model.term = lambda self, x: np.sum(np.sin(x))
    np.testing.assert_allclose(g(X), np.cos(X))


def test_swapping_a_partials_function_is_detected():
    def a(x, s):
        return s * np.sum(x ** 2)

    def b(x, s):
        return s * np.sum(x)

    holder = {"p": functools.partial(a, s=2.0)}

    def f(x):
        return holder["p"](x)

    g = rt.grad(f)
    np.testing.assert_allclose(g(X), 4 * X)
    holder["p"] = functools.partial(b, s=2.0)
    np.testing.assert_allclose(g(X), 2 * np.ones(3))


def test_dynamically_chosen_callee_is_covered():
    def sq(x):
        return np.sum(x ** 2)

    def cube(x):
        return np.sum(x ** 3)

    fs = [cube, sq]

    def f(x):
        return fs.pop()(x)

    g = rt.grad(f)
    np.testing.assert_allclose(g(X), 2 * X)          # popped sq
    np.testing.assert_allclose(g(X), 3 * X ** 2)     # popped cube: fs changed, re-recorded
    assert g.cache_info().records == 2


def test_data_read_from_a_global_is_a_constant_and_rebinding_is_detected(helper_module):
    helper_module.DATA = np.array([1.0, 2.0, 3.0])
    exec("def h(x):\n    return np.sum(DATA * x)", helper_module.__dict__)
    g = rt.grad(helper_module.h)
    np.testing.assert_allclose(g(X), [1.0, 2.0, 3.0])
    helper_module.DATA = np.array([4.0, 5.0, 6.0])
    np.testing.assert_allclose(g(X), [4.0, 5.0, 6.0])
