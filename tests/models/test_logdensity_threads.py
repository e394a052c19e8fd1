"""LogDensity and the cached transforms called from threads Python did not
create: each call from a C thread that takes the GIL per call has a new
Python thread state, yet finds a compiled copy to replay (the pool), so the
copies are made once, not once per call; short-lived threads leave nothing."""

import threading

import numpy as np
import pytest

import revtape as rt

import foreign_threads as FT

_lib, _why = FT.load()
needs_cc = pytest.mark.skipif(_lib is None, reason=_why or "")


def logp(x):
    return -0.5 * np.sum(x * x) - np.sum(np.log1p(x * x))


def value(x):
    return -0.5 * np.sum(x * x) - np.sum(np.log1p(x * x))


def grad(x):
    return -x - 2 * x / (1 + x * x)


def _points(n, dim=5):
    return np.random.default_rng(7).normal(size=(n, dim))


@needs_cc
def test_logdensity_from_one_c_thread_makes_no_copy_per_call():
    ld = rt.LogDensity(logp, np.zeros(5))
    assert ld.copies_made == 1
    X = _points(300)
    out = [None] * len(X)

    def call(i):
        v, g = ld.logdensity_and_gradient(X[i])
        out[i] = (v, g, ld.logdensity(X[i]))

    FT.call_from_c_threads(call, len(X), 1)
    # 300 calls, each with a fresh Python thread state: still the one copy
    assert ld.copies_made == 1
    for x, (v, g, v2) in zip(X, out):
        assert v == pytest.approx(value(x), rel=1e-12)
        assert v2 == v
        np.testing.assert_allclose(g, grad(x), rtol=1e-12, atol=1e-14)


@needs_cc
def test_logdensity_from_many_c_threads_at_once():
    ld = rt.LogDensity(logp, np.zeros(5))
    X = _points(200)
    errs = []

    def call(i):
        v, g = ld.logdensity_and_gradient(X[i])
        if abs(v - value(X[i])) > 1e-12 * abs(v) or not np.allclose(g, grad(X[i]), rtol=1e-12):
            errs.append(i)
        vb = ld.batch_logdensity(X[i:i + 1])
        if abs(vb[0] - v) > 1e-12 * abs(v):
            errs.append(-i)

    FT.call_from_c_threads(call, len(X), 4)
    assert errs == []
    # at most one copy per call running at once: four threads, four calls
    assert 1 <= ld.copies_made <= 4
    assert len(ld._idle) == ld.copies_made


def test_short_lived_threads_leave_no_copies():
    ld = rt.LogDensity(logp, np.zeros(5))
    x = _points(1)[0]
    for _ in range(100):
        t = threading.Thread(target=ld.logdensity_and_gradient, args=(x,))
        t.start()
        t.join()
    assert ld.copies_made == 1 and len(ld._idle) == 1


def test_reentrant_call_takes_a_second_copy():
    # a call made while another call of the same object is running (a callback
    # inside f, or a second chain on this thread) replays a copy of its own
    ld = rt.LogDensity(logp, np.zeros(5))
    st = ld._take()                 # as if a call were running
    try:
        v, g = ld.logdensity_and_gradient(np.ones(5))
    finally:
        ld._idle.append(st)
    assert v == pytest.approx(value(np.ones(5)), rel=1e-12)
    assert ld.copies_made == 2


@needs_cc
def test_cached_hessian_from_a_c_thread_makes_no_copy_per_call():
    h = rt.hessian(logp)
    x0 = np.full(5, 0.3)
    h(x0)                             # recorded and compiled here
    (var,) = next(iter(h._cache.values()))
    X = _points(100)
    out = [None] * len(X)

    def call(i):
        out[i] = h(X[i])

    FT.call_from_c_threads(call, len(X), 1)
    assert var.copies_made == 1
    for x, H in zip(X, out):
        d = -1 - 2 * (1 - x * x) / (1 + x * x) ** 2
        np.testing.assert_allclose(H, np.diag(d), rtol=1e-10, atol=1e-12)


@needs_cc
def test_errors_raised_in_a_c_thread_give_the_copy_back():
    ld = rt.LogDensity(logp, np.zeros(5))

    def call(i):
        with pytest.raises(rt.InputError):
            ld.logdensity(np.zeros(4))

    FT.call_from_c_threads(call, 20, 1)
    assert ld.copies_made == 1 and len(ld._idle) == 1
