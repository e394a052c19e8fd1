"""The calling idioms of programs written for autograd: rt.grad(f)(x) inline in
a loop, a Python int/float iteration argument, and a first call that asks for
one gradient.  Each is checked for reuse (cache_info), for the right numbers
(analytic gradients, the reference replay) and for never being stale."""

import copy
import os
import pickle
import shutil
import threading

import numpy as np
import pytest

import revtape as rt
from revtape.runtime import native
from revtape.transforms import progcache

X = np.array([[1.0, 2.0], [0.5, -1.0], [3.0, 0.25]])
W = np.array([0.3, -0.7])


def loss(w):
    return np.sum(np.sin(X @ w) ** 2) + 0.5 * np.sum(w ** 2)


def loss_grad(w):
    z = X @ w
    return X.T @ (2 * np.sin(z) * np.cos(z)) + w


def _same(a, b):
    return np.array_equal(np.asarray(a), np.asarray(b))


# ---------------------------------------------------------------- inline rt.grad(f)(x)

def test_inline_grad_of_a_named_function_reuses_one_program():
    for k in range(50):
        w = W + 0.01 * k
        np.testing.assert_allclose(rt.grad(loss)(w), loss_grad(w), rtol=1e-12)
    info = rt.grad(loss).cache_info()
    assert (info.records, info.replays, info.size, info.variants) == (1, 49, 1, 1)


def test_inline_lambda_made_anew_each_iteration_shares_by_code_and_closure():
    scale = 2.0
    for k in range(30):
        w = W + 0.01 * k
        # a new lambda object every pass: the same code, globals and cell contents
        g = rt.grad(lambda v: scale * loss(v))
        np.testing.assert_allclose(g(w), scale * loss_grad(w), rtol=1e-12)
    assert (g.cache_info().records, g.cache_info().replays) == (1, 29)


def test_closure_contents_are_part_of_the_key():
    def make(c):
        return lambda v: np.sum(c * v ** 2)
    got = [rt.grad(make(c))(W) for c in (1.0, 2.0, 1.0, 3.0)]
    for c, gr in zip((1.0, 2.0, 1.0, 3.0), got):
        np.testing.assert_allclose(gr, 2 * c * W, rtol=1e-15)
    # 1.0 came twice (scalars key by value): three programs, one reused
    assert rt.grad(make(1.0)).cache_info().records == 1
    assert rt.grad(make(1.0)).cache_info().replays == 1
    arr = np.array([1.0, 2.0])
    g1, g2 = rt.grad(make(arr)), rt.grad(make(arr.copy()))   # arrays key by identity
    np.testing.assert_allclose(g1(W), 2 * arr * W)
    np.testing.assert_allclose(g2(W), 2 * arr * W)
    assert g1._state is not g2._state


def test_a_rebound_closure_cell_after_the_transform_was_made_is_never_stale():
    def outer():
        c = 1.0

        def make():
            return lambda v: c * np.sum(v ** 2)
        f1 = make()
        g1 = rt.grad(f1)
        g1(W)
        g1(W)
        f2 = make()                            # the same code and cell: the same key
        assert f2 is not f1
        g2 = rt.grad(f2)
        assert g2._state is g1._state
        np.testing.assert_allclose(g2(W), 2 * W)
        c = 5.0                                # rebinds the shared cell
        np.testing.assert_allclose(g2(W), 10 * W)
        np.testing.assert_allclose(g1(W), 10 * W)
        assert c == 5.0
    outer()


def test_a_rebound_global_is_guarded_on_a_shared_hit():
    ns = {"np": np, "k": 1.0}
    exec("def f(v):\n    return k * np.sum(v ** 2)\n", ns)
    np.testing.assert_allclose(rt.grad(ns["f"])(W), 2 * W)
    ns["k"] = 3.0
    np.testing.assert_allclose(rt.grad(ns["f"])(W), 6 * W)
    assert rt.grad(ns["f"]).cache_info().stale == 1


def test_options_are_part_of_the_key():
    assert rt.grad(loss)._state is rt.grad(loss)._state
    assert rt.grad(loss)._state is not rt.value_and_grad(loss)._state
    assert rt.grad(loss)._state is not rt.grad(loss, cache_size=3)._state
    v, gr = rt.value_and_grad(loss)(W)
    assert v == pytest.approx(loss(W), rel=1e-14)


def test_inline_calls_from_threads_agree_with_serial_calls():
    xs = [W + 0.1 * k for k in range(8)]
    rt.grad(loss)(xs[0])
    serial = [rt.grad(loss)(x) for x in xs]
    errors = []

    def worker(t):
        try:
            for rep in range(20):
                j = (rep + t) % len(xs)
                assert _same(rt.grad(loss)(xs[j]), serial[j])
        except BaseException as e:       # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert rt.grad(loss).cache_info().records == 1


def test_copies_and_pickles_of_an_inline_transform():
    g = rt.grad(loss)
    g(W)
    expected = g(W)
    assert _same(pickle.loads(pickle.dumps(g))(W), expected)   # finds the shared program
    assert _same(copy.copy(g)(W), expected)
    dup = copy.deepcopy(g)
    assert dup._state is not g._state                          # a deep copy shares nothing
    np.testing.assert_allclose(dup(W), expected, rtol=1e-12)
    assert _same(dup(W), expected)
    assert g.cache_info().records == 1 and dup.cache_info().records == 1


def test_the_function_level_cache_is_bounded(monkeypatch):
    monkeypatch.setenv("REVTAPE_PROGRAM_CACHE", "3")
    before = progcache.info()["evictions"]
    for c in range(6):
        rt.grad(lambda v, c=float(c): c * np.sum(v))(W)
    info = progcache.info()
    assert info["size"] <= 3 and info["evictions"] - before >= 3 and info["maxsize"] == 3
    monkeypatch.setenv("REVTAPE_PROGRAM_CACHE", "0")           # 0: every object its own
    assert rt.grad(loss)._state is not rt.grad(loss)._state


# ---------------------------------------------------------------- int/float arguments are data

def test_an_int_argument_used_arithmetically_is_data_one_program():
    def objective(w, i):
        return np.sum(w ** 2) * (1.0 + 0.01 * i) + i * np.sum(w)

    g = rt.grad(objective)
    for i in range(200):
        np.testing.assert_allclose(g(W, i), 2 * W * (1.0 + 0.01 * i) + i, rtol=1e-14)
    info = g.cache_info()
    assert (info.records, info.replays, info.size, info.evictions) == (1, 199, 1, 0)


def test_a_float_argument_is_data_and_a_branch_on_it_is_guarded():
    def f(w, t):
        if t > 0.5:                                            # a branch guard on data
            return t * np.sum(w ** 2)
        return np.sum(w) - t

    g = rt.grad(f)
    for t in (0.1, 0.2, 0.9, 1.3, 0.3, 2.0):
        want = 2 * t * W if t > 0.5 else np.ones(2)
        np.testing.assert_allclose(g(W, t), want, rtol=1e-15)
    info = g.cache_info()
    assert info.records == 2 and info.branch_failures >= 2 and info.variants == 2


def test_an_int_argument_used_as_range_bound_index_or_shape_re_records():
    def f(w, n):
        acc = 0.0
        for k in range(n):                                     # a range bound
            acc = acc + np.sum(w * k)
        return acc + np.sum(np.ones(n)) * w[n % 2] ** 2       # a shape and an index

    g = rt.grad(f)
    for n in (1, 2, 3, 2, 1, 3):
        want = np.full(2, n * (n - 1) / 2)
        want[n % 2] += 2 * n * W[n % 2]
        np.testing.assert_allclose(g(W, n), want, rtol=1e-14)
    info = g.cache_info()
    assert info.records == 3 and info.replays == 3 and info.size == 3


def test_float_conversion_of_a_scalar_argument_re_records_when_it_changes():
    import math

    g = rt.grad(lambda w, t: math.exp(t) * np.sum(w ** 2))
    for t in (0.0, 1.0, 0.0):
        np.testing.assert_allclose(g(W, t), 2 * math.exp(t) * W, rtol=1e-15)
    assert g.cache_info().records == 2


def test_adam_style_loop_does_not_evict():
    # autograd's optimizers call grad(params, i); i scales a step here
    def objective(params, i):
        return np.sum((X @ params - 1.0) ** 2) / (1 + 0.01 * i)

    g = rt.grad(objective)
    p = np.zeros(2)
    m = np.zeros(2)
    for i in range(200):
        gr = g(p, i)
        np.testing.assert_allclose(gr, 2 * X.T @ (X @ p - 1.0) / (1 + 0.01 * i),
                                   rtol=1e-12, atol=1e-15)
        m = 0.9 * m + 0.1 * gr
        p = p - 0.01 * m
    info = g.cache_info()
    assert info.records == 1 and info.evictions == 0
    unused = rt.grad(lambda params, i: np.sum(params ** 2))  # rnn's objective ignores i
    for i in range(200):
        unused(p, i)
    assert unused.cache_info().records == 1


# ---------------------------------------------------------------- the first call

def test_the_first_call_answers_from_the_recording_and_compiles_on_the_second():
    g = rt.value_and_grad(loss)
    v1, g1 = g(W)
    (entry,) = g._cache.values()
    (variant,) = entry.variants
    assert variant.ctape is None                      # nothing compiled yet
    assert variant._check is None                     # nor the guards' check
    ref = rt.GradientTape(loss, W)
    rv, rg = ref.value_and_gradient(W)                # the reference replay
    assert v1 == rv and _same(g1, rg)                 # the recording's own numbers
    v2, g2 = g(W)
    assert variant.ctape is not None                  # compiled by the first replay
    assert variant._check is not None
    ct = rt.compile(ref, native=False)
    cv, cg = ct.value_and_gradient(W)
    assert v2 == cv and _same(g2, cg)                 # the VM's bits from then on
    np.testing.assert_allclose(g1, g2, rtol=1e-12)
    np.testing.assert_allclose(g1, loss_grad(W), rtol=1e-12)


def test_the_guards_check_made_on_the_first_replay_still_sees_changes_before_it():
    # the guards are collected while recording: a rebinding between the first
    # call and the second (when the check is generated) is still caught
    scale = [2.0]
    g = rt.grad(lambda w: scale[0] * np.sum(w ** 2))
    np.testing.assert_allclose(g(W), 4.0 * W)
    scale[0] = 3.0
    np.testing.assert_allclose(g(W), 6.0 * W)
    assert g.cache_info().records == 2


def test_the_recording_leaves_no_hook_behind():
    import sys
    before = (sys.gettrace(), sys.getprofile())
    g = rt.grad(lambda w: np.sum(np.sin(w)))
    np.testing.assert_allclose(g(W), np.cos(W))
    assert (sys.gettrace(), sys.getprofile()) == before


@pytest.mark.parametrize("args", [(0.5,), (np.array([0.5, -1.0]),),
                                  ({"a": 0.5, "b": np.array([1.0, 2.0])},)])
def test_the_first_answer_has_the_replays_types_and_shapes(args):
    def f(p):
        if isinstance(p, dict):
            return p["a"] ** 3 + np.sum(p["b"] ** 2)
        return np.sum(p ** 3)

    g = rt.grad(f)
    first, second = g(*args), g(*args)
    assert type(first) is type(second)
    if isinstance(first, dict):
        assert first.keys() == second.keys()
        pairs = [(first[k], second[k]) for k in first]
    else:
        pairs = [(first, second)]
    for a, b in pairs:
        assert type(a) is type(b) and np.shape(a) == np.shape(b)
        np.testing.assert_allclose(a, b, rtol=1e-14)


# ---------------------------------------------------------------- the native tier

def _has_compiler():
    return any(shutil.which(c) for c in ("cc", "gcc", "clang"))


@pytest.fixture
def auto(monkeypatch):
    monkeypatch.setenv("REVTAPE_NATIVE", "1")
    monkeypatch.setenv("REVTAPE_NATIVE_CALLS", "3")
    monkeypatch.delenv("REVTAPE_NATIVE_SECONDS", raising=False)
    monkeypatch.setattr(native, "_warned", set())
    monkeypatch.setattr(native, "_failed", {})
    return monkeypatch


@pytest.mark.skipif(not _has_compiler(), reason="no C compiler for the native tier")
def test_inline_and_int_argument_idioms_on_the_native_tier(auto):
    c = 0.25 + os.getpid() % 997 / 1e6                # a program no other test built

    def objective(w, i):
        return np.sum(np.sin(X @ w) ** 2) * c + i * np.sum(w)

    def want(w, i):
        z = X @ w
        return c * X.T @ (2 * np.sin(z) * np.cos(z)) + i

    for i in range(12):
        w = W + 0.01 * i
        np.testing.assert_allclose(rt.grad(objective)(w, i), want(w, i), rtol=1e-12)
        if i == 6:
            (entry,) = rt.grad(objective)._cache.values()
            (variant,) = entry.variants
            assert variant.ctape.native_state in ("compiling", "native")
            assert variant.ctape.wait_native(600)
    assert variant.ctape.native_state == "native"
    info = rt.grad(objective).cache_info()
    assert (info.records, info.replays) == (1, 11)
