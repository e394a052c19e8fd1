"""ctape.bind(x_buf, g_buf)'s callable as checked.c's Bound (runtime/bound.py: _BoundCall):
a call with no Python frame and no cffi conversion, with the semantics of the
Python-side binds it replaces -- which serve whenever revtape._checked is
missing, so every semantic test runs on both paths (the `path` fixture):
pickling refused with advice, deepcopy giving itself, RT_BUSY waited for or
raised, statuses raising the Python paths' errors, native="auto" switching a
bound call to native code, the buffers and the compiled tape kept alive,
threads sharing one bound call."""

import copy
import gc
import os
import pickle
import subprocess
import sys
import threading
import time
import weakref

import numpy as np
import pytest

import revtape as rt
from revtape.runtime import bound, native
from revtape.bench import workloads


@pytest.fixture(params=["c", "cffi"])
def path(request, monkeypatch):
    """"c": checked.c's Bound serves bind(); "cffi": without it, bind() is
    the cffi partial (_OneCall) or the Python frame around cffi."""
    if request.param == "c" and bound._BoundCall is None:
        pytest.skip("revtape._checked is not built")
    if request.param == "cffi":
        monkeypatch.setattr(bound, "_BoundCall", None)
    return request.param


needs_c = pytest.mark.skipif(bound._BoundCall is None, reason="revtape._checked is not built")


def _bits(a):
    return np.asarray(a, dtype=np.float64).view(np.int64)


def _guarded(x):
    return np.sum(x ** 2) if x[0] > 0 else np.sum(x)


def _plain():
    return rt.compile(rt.GradientTape(lambda x: np.sum(np.sin(x) * x), np.ones(3)))


def _with_guard():
    return rt.compile(rt.GradientTape(_guarded, np.array([1.0, 2.0, 3.0])))


# ---------------------------------------------------------------- the object

@needs_c
def test_bind_gives_the_c_call_for_every_program_it_can_bind():
    for ct in (_plain(), _with_guard()):
        run = ct.bind(np.ones(3), np.empty(3))
        assert type(run) is bound._BoundCall and isinstance(run, bound._checked.Bound)
        assert run.ctape is ct
        with pytest.raises(TypeError, match="takes no arguments"):
            run(np.ones(3))
        with pytest.raises(TypeError, match="takes no arguments"):
            run(x=1)
        assert type(run()) is float
        with pytest.raises(AttributeError):
            run.extra = 1                       # __slots__: no per-call dict


@needs_c
def test_the_c_object_rechecks_what_c_relies_on():
    # ctape.bind() words the users' errors; Bound itself refuses any buffer
    # C could read or write out of bounds, whoever builds it
    ct = _plain()
    B, p = bound._checked.Bound, bound.ffi.buffer(ct._p)

    def make(x, g, program=p, cell=None, mark_id=0):
        return B(program, ct, x, g, cell, mark_id, None, print, True)

    ok = make(np.ones(3), np.empty(3))
    assert ok() == ct.value_and_gradient(np.ones(3))[0]
    a = np.ones(6)
    ro = np.ones(3)
    ro.flags.writeable = False
    buf = bytearray(8 * 3 + 1)
    misaligned = np.frombuffer(buf, offset=1, count=3)
    for x, g in ((np.ones(2), np.empty(3)), (np.ones(3), np.empty(4)), (a[:3], a[2:5]),
                 (a[:3], a[:3]), (np.ones(3), misaligned), (misaligned, np.empty(3))):
        with pytest.raises(ValueError, match="aligned float64 buffers"):
            make(x, g)
    with pytest.raises((BufferError, ValueError)):    # numpy: "buffer source array is read-only"
        make(np.ones(3), ro)
    assert make(ro, np.empty(3))() == ok()              # a read-only x is fine
    with pytest.raises((BufferError, ValueError)):    # numpy: "ndarray is not C-contiguous"
        make(np.ones(6)[::2], np.empty(3))
    with pytest.raises(ValueError, match="rt_program"):
        make(np.ones(3), np.empty(3), program=bytearray(16))
    with pytest.raises(ValueError, match="one int64"):
        make(np.ones(3), np.empty(3), cell=bytearray(16), mark_id=1)
    with pytest.raises(ValueError, match="one int64"):
        make(np.ones(3), np.empty(3), cell=bytearray(8), mark_id=0)
    t = rt.Tape()
    t.finish(np.sin(t.track(np.ones(3))))
    vec = rt.CompiledTape(t, native=False)
    with pytest.raises(ValueError, match="not a scalar"):
        B(bound.ffi.buffer(vec._p), vec, np.ones(3), np.empty(3), None, 0, None, print, True)


# ---------------------------------------------------------------- copies

@pytest.mark.parametrize("make", [_plain, _with_guard], ids=["one-call", "guarded"])
def test_a_bound_call_refuses_to_pickle_and_deep_copies_as_itself(make, path):
    ct = make()
    run = ct.bind(np.ones(3), np.empty(3))
    for obj in (run, [run], {"run": run}):
        with pytest.raises(rt.PicklingError, match="pickle the compiled tape"):
            pickle.dumps(obj)
    assert run.ctape is ct
    if path == "cffi" and make is _with_guard:
        # the Python frame's bound method: deepcopy copies the method around
        # the same function (same buffers, same tape); the C call improves on it
        dup = copy.deepcopy(run)
        assert dup.__func__ is run.__func__ and dup() == run()
        return
    assert copy.deepcopy(run) is run
    assert copy.deepcopy([run])[0] is run


# ---------------------------------------------------------------- lifetimes

@pytest.mark.parametrize("make", [_plain, _with_guard], ids=["one-call", "guarded"])
def test_the_call_keeps_its_buffers_and_compiled_tape_alive_and_lets_them_go(make, path):
    ct = make()
    x, g = np.array([0.5, 1.5, 2.5]), np.empty(3)
    want_v, want_g = ct.value_and_gradient(x)
    run = ct.bind(x, g)
    refs = [weakref.ref(o) for o in (x, g, ct)]
    del x, g, ct
    gc.collect()
    assert all(r() is not None for r in refs)
    assert _bits(run()) == _bits(want_v)
    assert np.array_equal(_bits(refs[1]()), _bits(want_g))
    del run
    gc.collect()
    assert [r() for r in refs] == [None, None, None]


@pytest.mark.parametrize("make", [_plain, _with_guard], ids=["one-call", "guarded"])
def test_bound_buffers_are_held_by_the_call_until_it_is_gone(make, path):
    # numpy refuses to resize an array others reference (its default refcheck):
    # the call's references are what keep the C pointers valid
    ct = make()
    x, g = np.array([0.5, 1.5, 2.5]), np.empty(3)
    before = sys.getrefcount(x), sys.getrefcount(g)
    run = ct.bind(x, g)
    assert sys.getrefcount(x) > before[0] and sys.getrefcount(g) > before[1]
    with pytest.raises(ValueError, match="referenced"):
        g.resize(100)
    assert run() == ct.value_and_gradient(x)[0]
    del run
    gc.collect()
    assert (sys.getrefcount(x), sys.getrefcount(g)) == before
    g.resize(100)


# ---------------------------------------------------------------- statuses

def test_a_failed_guard_raises_branch_changed_as_the_checked_call_does(path):
    ct = _with_guard()
    xb, gb = np.array([1.0, 2.0, 3.0]), np.empty(3)
    run = ct.bind(xb, gb)
    assert run() == 14.0
    xb[0] = -1.0
    with pytest.raises(rt.BranchChanged) as got:
        run()
    with pytest.raises(rt.BranchChanged) as want:
        ct.value_and_gradient(xb)
    assert str(got.value) == str(want.value)
    assert (got.value.guard, got.value.where) == (want.value.guard, want.value.where)
    assert got.value.operands == want.value.operands
    xb[0] = 2.0
    assert run() == 17.0 and list(gb) == [4.0, 4.0, 6.0]    # still usable


def test_a_callbacks_error_and_a_bad_index_raise_through_the_bound_call(path):
    class Boom(Exception):
        pass

    @rt.primitive
    def picky(x):
        if x[0] > 10:
            raise Boom("forward refused")
        return np.sum(x ** 2)

    rt.defvjp(picky, lambda ans, x: lambda g: 2.0 * g * x)
    ct = rt.compile(rt.GradientTape(lambda x: picky(x) + np.sum(x), np.ones(2)))
    xb, gb = np.array([1.0, 2.0]), np.empty(2)
    run = ct.bind(xb, gb)
    assert run() == 8.0
    xb[0] = 11.0
    with pytest.raises(Boom, match="forward refused"):
        run()
    xb[0] = 1.0
    assert run() == 8.0 and list(gb) == [3.0, 5.0]

    from revtape.core.ops import P
    t = rt.Tape()
    xv = t.track(np.arange(6.0) ** 2)
    ix = t.track(np.array([5.0, 0.0, 2.0, 2.0]))
    t.finish(np.sum(P.take_idx(xv, ix) ** 2))
    ct = rt.CompiledTape(t, n_grad=1)
    xs = np.arange(6.0) ** 2
    flat, g = np.concatenate([xs, [1.0, 1, 3, 5]]), np.empty(6)
    run = ct.bind(flat, g)
    assert run() == np.sum(xs[[1, 1, 3, 5]] ** 2)
    flat[7] = 2.5
    with pytest.raises(rt.IndexInputError, match="not a whole number"):
        run()
    flat[7] = 0.0
    assert run() == np.sum(xs[[1, 0, 3, 5]] ** 2)


@pytest.mark.parametrize("make,waits", [(_plain, True), (_with_guard, False)],
                         ids=["one-call-waits", "guarded-raises"])
def test_a_busy_program_is_waited_for_or_raised_as_before(make, waits, path):
    # busy is what another thread's replay holds: a program whose replay
    # cannot run Python is waited for (the bound call has nothing to raise
    # from in the cffi partial, and the C call keeps that), a program with
    # guards or callbacks raises ConcurrentUseError as every other call does
    ct = make()
    xb, gb = np.array([0.5, 1.5, 2.5]), np.empty(3)
    want = ct.value_and_gradient(xb)
    run = ct.bind(xb, gb)
    ct._p.busy = 1
    try:
        if not waits:
            with pytest.raises(rt.ConcurrentUseError, match="deepcopy"):
                run()
            return
        got = []
        t = threading.Thread(target=lambda: got.append(run()))
        t.start()
        time.sleep(0.05)
        assert t.is_alive() and not got             # waiting, GIL released
    finally:
        ct._p.busy = 0
    t.join(10)
    assert not t.is_alive() and _bits(got[0]) == _bits(want[0])
    assert np.array_equal(_bits(gb), _bits(want[1]))


@pytest.mark.parametrize("make", [_plain, _with_guard], ids=["one-call", "guarded"])
def test_threads_calling_one_bound_call_get_right_answers(make, path):
    ct = make()
    xb, gb = np.array([0.5, 1.5, 2.5]), np.empty(3)
    want_v, want_g = ct.value_and_gradient(xb)
    run = ct.bind(xb, gb)
    wrong, errors, busy = [], [], []

    def work():
        try:
            for _ in range(3000):
                try:
                    v = run()
                except rt.ConcurrentUseError:
                    busy.append(1)
                    continue
                if _bits(v) != _bits(want_v):
                    wrong.append(v)
        except Exception as e:                  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(3)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors and not wrong
    if make is _plain:
        assert not busy                         # waited for, never raised
    assert np.array_equal(_bits(gb), _bits(want_g))
    assert rt.value(ct.tape.output) == want_v


# ---------------------------------------------------------------- native="auto"

def test_a_bound_call_makes_its_tape_hot_and_switches_to_native_bit_for_bit(
        path, monkeypatch, tmp_path, rng):
    monkeypatch.setenv("REVTAPE_NATIVE", "1")
    monkeypatch.setenv("REVTAPE_NATIVE_CALLS", "5")
    monkeypatch.setenv("REVTAPE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("REVTAPE_NATIVE_SECONDS", raising=False)
    monkeypatch.setattr(native, "_warned", set())
    monkeypatch.setattr(native, "_failed", {})
    # a program no other test builds (native code is keyed by the program's
    # structure, not its constants), another one per path
    if path == "c":
        f = lambda x: np.sum(np.tanh(x) * x) + 0.5 * x[0] * x[1] - x[2] * x[3]
    else:
        f = lambda x: np.sum(np.tanh(x) * x) + 0.5 * x[0] * x[1] + x[4] * x[5]
    x0 = rng.normal(size=6)
    tape = rt.GradientTape(f, x0)
    vm, ct = rt.compile(tape, native=False), rt.compile(tape)
    xb, gb, gv = x0.copy(), np.empty(6), np.empty(6)
    run, run_vm = ct.bind(xb, gb), vm.bind(xb, gv)
    states = []
    for k in range(10):                         # only bound calls: they make it hot
        xb[:] = x0 + 0.3 * rng.normal(size=6)
        assert _bits(run()) == _bits(run_vm()) and np.array_equal(_bits(gb), _bits(gv))
        states.append(ct.native_state)
        if k == 6:
            assert ct.native_state != "vm"      # the 5th bound call made it hot
            if not ct.wait_native(600) and ct.native_state == "failed":
                pytest.skip("no working C compiler: the VM keeps serving")
    assert states[:4] == ["vm"] * 4 and states[4] == "compiling"
    assert states[-1] == "native" and ct._p.native != bound.ffi.NULL
    assert rt.value(tape.output) == pytest.approx(f(xb), rel=1e-15)


# ---------------------------------------------------------------- without the module

def test_without_the_checked_module_bind_falls_back_to_the_cffi_calls():
    code = (
        "import sys; sys.modules['revtape._checked'] = None\n"
        "import numpy as np, pickle, copy, revtape as rt\n"
        "from revtape.runtime import bound\n"
        "assert bound._checked is None and bound._BoundCall is None\n"
        "ct = rt.compile(rt.GradientTape(lambda x: np.sum(x ** 2), np.ones(2)), native=False)\n"
        "g = np.empty(2); run = ct.bind(np.array([1.0, 2.0]), g)\n"
        "assert type(run) is bound._OneCall and run() == 5.0 and list(g) == [2.0, 4.0]\n"
        "assert copy.deepcopy(run) is run\n"
        "try:\n"
        "    pickle.dumps(run)\n"
        "except rt.PicklingError as e:\n"
        "    assert 'pickle the compiled tape' in str(e)\n"
        "else:\n"
        "    raise AssertionError('pickled')\n"
        "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
