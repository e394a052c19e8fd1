"""Watching a recording run (src/revtape/trace/watch.py): recording under
profilers and tracers -- cProfile, the pure-Python profiler, profile and
trace hooks, sys.monitoring tools -- which keep running and get their hooks
back, and a first call that does not scan the heap."""

import cProfile
import gc
import itertools
import pstats
import sys
import warnings

import numpy as np
import pytest

import revtape as rt
from conftest import quiet_draws as _quiet

X3 = np.array([0.5, -1.0, 2.0])


# ---------------------------------------------------------------- profilers and tracers

_FRESH = itertools.count()


def _fresh_f():
    # a default of its own: rt.grad shares programs between functions with the
    # same code and bindings, and these tests watch a first recording
    def traced_model(x, _k=next(_FRESH)):
        return np.sum(np.sin(x) ** 2)
    return traced_model


def _expected(x):
    return 2 * np.sin(x) * np.cos(x)


def _after_the_call():
    return None


def test_first_call_under_cprofile_and_the_profiler_keeps_collecting():
    f = _fresh_f()
    g = rt.grad(f)
    p = cProfile.Profile()
    p.enable()
    try:
        got = g(X3)
        _after_the_call()
    finally:
        p.disable()
    np.testing.assert_allclose(got, _expected(X3))
    names = {k[2] for k in pstats.Stats(p).stats}
    assert "traced_model" in names                 # the recording run was profiled too
    assert "_after_the_call" in names              # and the profiler is still on after it
    np.testing.assert_allclose(g(X3), _expected(X3))


def test_draws_are_seen_under_cprofile_too():
    rng, twin = np.random.default_rng(1), np.random.default_rng(1)
    g = rt.grad(lambda x: np.sum(x * rng.standard_normal(3)))
    p = cProfile.Profile()
    p.enable()
    try:
        got = [_quiet(g, X3) for _ in range(2)]
    finally:
        p.disable()
    for gr in got:
        np.testing.assert_allclose(gr, twin.standard_normal(3))


def test_first_call_under_the_pure_python_profiler():
    import profile

    f = _fresh_f()
    p = profile.Profile()
    got = p.runcall(rt.grad(f), X3)
    np.testing.assert_allclose(got, _expected(X3))
    assert "traced_model" in {k[2] for k in pstats.Stats(p).stats}


def test_first_call_under_a_python_profile_hook_chains_it():
    f = _fresh_f()
    seen = []

    def hook(frame, event, arg):
        if event == "call":
            seen.append(frame.f_code.co_name)

    sys.setprofile(hook)
    try:
        got = rt.grad(f)(X3)
        still = sys.getprofile()
    finally:
        sys.setprofile(None)
    np.testing.assert_allclose(got, _expected(X3))
    assert still is hook and "traced_model" in seen


def test_first_call_under_settrace_and_the_tracer_keeps_running():
    f = _fresh_f()
    events = []

    def local(frame, event, arg):
        events.append((frame.f_code.co_name, event))
        return local

    def tracer(frame, event, arg):
        events.append((frame.f_code.co_name, event))
        return local

    sys.settrace(tracer)
    try:
        got = rt.grad(f)(X3)
        still = sys.gettrace()
    finally:
        sys.settrace(None)
    np.testing.assert_allclose(got, _expected(X3))
    assert still is tracer
    assert ("traced_model", "call") in events and ("traced_model", "line") in events


def test_under_cprofile_and_a_tracer_together():
    f = _fresh_f()
    events = []

    def tracer(frame, event, arg):
        events.append(frame.f_code.co_name)
        return None

    p = cProfile.Profile()
    sys.settrace(tracer)
    p.enable()
    try:
        got = rt.grad(f)(X3)
        still = sys.gettrace()
    finally:
        p.disable()
        sys.settrace(None)
    np.testing.assert_allclose(got, _expected(X3))
    assert still is tracer and "traced_model" in events
    assert "traced_model" in {k[2] for k in pstats.Stats(p).stats}


def test_an_exception_in_f_leaves_every_hook_as_it_was():
    def hook(frame, event, arg):
        pass

    def bad(x):
        raise ValueError("inside f")

    sys.setprofile(hook)
    try:
        with pytest.raises(ValueError, match="inside f"):
            rt.grad(bad)(X3)
        with pytest.raises(ValueError, match="inside f"):
            rt.GradientTape(bad, X3)
        assert sys.getprofile() is hook
    finally:
        sys.setprofile(None)
    if sys.version_info >= (3, 12):
        assert all(sys.monitoring.get_tool(i) is None for i in range(6))


def test_recording_inside_a_coverage_like_tracer():
    lines = set()
    target = _fresh_f()

    def cover(frame, event, arg):
        if event == "line" and frame.f_code is target.__code__:
            lines.add(frame.f_lineno)
        return cover

    sys.settrace(cover)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            g = rt.grad(target)
            g(X3)
            tape = rt.GradientTape(target, X3)
    finally:
        sys.settrace(None)
    assert lines == {target.__code__.co_firstlineno + 1}
    np.testing.assert_allclose(tape.gradient(X3), _expected(X3))
    np.testing.assert_allclose(g(2 * X3), _expected(2 * X3))


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_monitoring_tool_ids_are_borrowed_and_returned():
    mon = sys.monitoring
    before = [mon.get_tool(i) for i in range(6)]
    f = _fresh_f()
    np.testing.assert_allclose(rt.grad(f)(X3), _expected(X3))
    assert [mon.get_tool(i) for i in range(6)] == before
    # every tool id held by someone else: recording still works, and a draw is seen
    taken = [i for i in range(6) if mon.get_tool(i) is None]
    for i in taken:
        mon.use_tool_id(i, "someone else")
    try:
        np.testing.assert_allclose(rt.grad(_fresh_f())(X3), _expected(X3))
        rng, twin = np.random.default_rng(8), np.random.default_rng(8)
        g = rt.grad(lambda x: np.sum(x * rng.standard_normal(3)))
        for _ in range(2):
            np.testing.assert_allclose(_quiet(g, X3), twin.standard_normal(3))
    finally:
        for i in taken:
            mon.free_tool_id(i)


def test_rt_grad_inside_a_recording():
    inner = rt.grad(lambda y: np.sum(y ** 3))

    def f(x):
        return np.sum(x * inner(np.array([1.0, 2.0])).sum())

    np.testing.assert_allclose(rt.grad(f)(X3), 15.0 * np.ones(3))
    assert sys.getprofile() is None and sys.gettrace() is None


def test_threads_recording_at_once():
    import threading

    def make(k):
        def f(x):
            y = x
            for _ in range(50):
                y = np.sin(y) + k
            return np.sum(y)
        return f

    def expected(k, x):
        y, d = x, np.ones_like(x)
        for _ in range(50):
            d = d * np.cos(y)
            y = np.sin(y) + k
        return d

    errors = []

    def work(k):
        try:
            for j in range(4):
                np.testing.assert_allclose(rt.grad(make(k))(X3 + j), expected(k, X3 + j),
                                           rtol=1e-12)
        except Exception as e:          # reported below, in the main thread
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert sys.getprofile() is None and sys.gettrace() is None


# ---------------------------------------------------------------- first call: no heap scan

def _helper(x):
    return np.sum(x ** 2)


def _uses_helper(x):
    return _helper(x) + Terms().term(x)


class Terms:
    def term(self, x):
        return np.sum(x)


def test_first_call_does_not_scan_the_heap_and_still_sees_code_swaps(monkeypatch):
    def no_scan(*a):
        raise AssertionError("gc.get_referrers scans the whole heap")

    monkeypatch.setattr(gc, "get_referrers", no_scan)
    g = rt.grad(_uses_helper)
    np.testing.assert_allclose(g(X3), 2 * X3 + 1)
    old_helper, old_term = _helper.__code__, Terms.term.__code__
    try:
        _helper.__code__ = (lambda x: np.sum(x ** 3)).__code__
        np.testing.assert_allclose(g(X3), 3 * X3 ** 2 + 1)
        Terms.term.__code__ = (lambda self, x: np.sum(2 * x)).__code__
        np.testing.assert_allclose(g(X3), 3 * X3 ** 2 + 2)
    finally:
        _helper.__code__, Terms.term.__code__ = old_helper, old_term


def test_the_warning_for_draws_that_cannot_stay_on_the_tape_points_at_the_call():
    # the second recording (plain draws, after float() refused a tracked draw)
    # warns from deeper inside revtape: the warning still names the user's line
    rng = np.random.default_rng(0)

    def f(x):
        return np.sum(x) * float(rng.normal(size=3)[0])

    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        rt.grad(f)(X3)
    (draw,) = [x for x in w if issubclass(x.category, rt.RandomDrawWarning)]
    assert "could not stay on the tape" in str(draw.message)
    assert draw.filename == __file__
