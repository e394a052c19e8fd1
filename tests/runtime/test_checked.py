"""The C calls of revtape._checked (csrc/pyext/checked.c) and the Python
paths that serve without it.

ctape.bind(x_buf, g_buf)'s callable as checked.c's Bound (bound._BoundCall):
a call with no Python frame and no cffi conversion, with the semantics of the
Python-side binds it replaces -- which serve whenever revtape._checked is
missing, so every semantic test runs on both paths (the `path` fixture):
pickling refused with advice, deepcopy giving itself, RT_BUSY waited for or
raised, statuses raising the Python paths' errors, native="auto" switching a
bound call to native code, the buffers and the compiled tape kept alive,
threads sharing one bound call.  Then bind() as one C call -- Bound, or
without revtape._checked a partial of rt_bound_value_and_grad
(bound._OneCall): the programs it serves, its bits, rt.value after it,
threads, pickling.  Last, ctape.value_and_gradient(x, out=g)'s checks in C:
the C function answers a tuple only for the plain case and None for
anything else (the Python path then converts, copies or raises).  Each of
those tests changes one property the C side must check -- on a new array
and in place on arrays it accepted a call before -- and asserts None:
removing any one check from checked.c fails one of them.  The end-to-end
tests pin the results, errors, marks and lifetimes of the public call."""

import copy
import gc
import os
import pickle
import subprocess
import sys
import threading
import time
import warnings
import weakref

import numpy as np
import pytest

import revtape as rt
from revtape.runtime import arena, bound, native
from revtape.runtime import vm as V
from revtape.bench import workloads
from conftest import bits as _bits


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
needs_checked = pytest.mark.skipif(V._checked is None, reason="revtape._checked is not built")
both_paths = pytest.mark.usefixtures("path")


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
        assert type(run) is bound._BoundCall and isinstance(run, V._checked.Bound)
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
    # compiled.bind() words the users' errors; Bound itself refuses any buffer
    # C could read or write out of bounds, whoever builds it
    ct = _plain()
    B, p = V._checked.Bound, V.ffi.buffer(ct._p)

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
        B(V.ffi.buffer(vec._p), vec, np.ones(3), np.empty(3), None, 0, None, print, True)


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
        path, monkeypatch, native_cache, rng):
    monkeypatch.setenv("REVTAPE_NATIVE", "1")
    monkeypatch.setenv("REVTAPE_NATIVE_CALLS", "5")
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
    assert states[-1] == "native" and ct._p.native != V.ffi.NULL
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

# ---------------------------------------------------------------- bind() as one C call
# Every test of this section runs on both paths.

def _one_call(path):
    return bound._BoundCall if path == "c" else bound._OneCall


@pytest.mark.parametrize("make", [workloads.eight_schools, lambda: workloads.rosenbrock_loop(n=20),
                                  lambda: workloads.logreg(N=50, D=5)],
                         ids=["eight-schools", "rosenbrock-loop", "logreg"])
def test_one_call_bind_gives_the_checked_calls_bits(make, rng, path):
    wl = make()
    ct = rt.compile(rt.GradientTape(wl.f, wl.x0))
    xb, gb = wl.x0.copy(), np.empty_like(wl.x0)
    run = ct.bind(xb, gb)
    assert isinstance(run, _one_call(path))
    for k in range(5):
        xb[:] = wl.x0 + 0.3 * rng.normal(size=xb.size)
        if k == 4:
            xb[0] = np.nan                    # nan flows as a value, not as an error
        v = run()
        assert type(v) is float
        v2, g2 = ct.value_and_gradient(xb)
        assert _bits(v) == _bits(v2) and np.array_equal(_bits(gb), _bits(g2))


def test_programs_that_can_raise_keep_the_python_bound_call(path):
    ct = rt.compile(rt.GradientTape(_guarded, np.array([1.0, 2.0])))
    xb, gb = np.array([1.0, 2.0]), np.empty(2)
    run = ct.bind(xb, gb)
    # the C call raises through CompiledTape._status; the cffi partial cannot
    assert isinstance(run, bound._BoundCall) if path == "c" else \
        not isinstance(run, bound._OneCall)
    assert run() == 5.0
    xb[0] = -1.0
    with pytest.raises(rt.BranchChanged):
        run()


def test_rt_value_follows_the_last_replay_whichever_path_made_it(path):
    f = lambda x: np.sum(np.sin(x) * x)
    x0, x1, x2, x3 = (np.array(v) for v in ([0.1, 0.2], [1.0, -2.0], [0.5, 0.25], [3.0, 1.0]))
    tape = rt.GradientTape(f, x0)
    ct, other = rt.compile(tape), rt.compile(tape)
    ct.gradient(x1)                                   # not yet pulled when bind() starts
    xb, g = x2.copy(), np.empty(2)
    run = ct.bind(xb, g)
    assert isinstance(run, _one_call(path))
    assert rt.value(tape.output) == f(x1)             # the replay before bind()
    run()
    assert rt.value(tape.output) == pytest.approx(f(x2))
    np.testing.assert_array_equal(rt.value(tape.inputs[0]), x2)
    other.gradient(x3)                                # another arena of the same tape
    assert rt.value(tape.output) == pytest.approx(f(x3))
    run()                                             # ... and back
    assert rt.value(tape.output) == pytest.approx(f(x2))
    tape.forward(x0)                                  # the reference replay
    assert rt.value(tape.output) == pytest.approx(f(x0))
    xb[:] = x1
    run()
    assert rt.value(tape.output) == pytest.approx(f(x1))
    ct.value_and_gradient(x3, out=np.empty(2))        # the checked fast path marks too
    assert rt.value(tape.output) == pytest.approx(f(x3))
    ct.batch_value_and_gradient(np.array([x0, x2]))   # a batch leaves its last row
    assert rt.value(tape.output) == pytest.approx(f(x2))
    # copies never carry the C cell: theirs is their own
    t2 = copy.deepcopy(tape)
    assert t2._fast_marks is None and rt.value(t2.output) == pytest.approx(f(x2))
    t3 = pickle.loads(pickle.dumps(tape))
    assert rt.value(t3.output) == pytest.approx(f(x2))


@both_paths
def test_threads_sharing_a_ctape_through_one_call_binds_wait_instead_of_raising(rng):
    wl = workloads.rosenbrock_loop(n=30)
    ct = rt.compile(rt.GradientTape(wl.f, wl.x0))
    xs = [wl.x0 + 0.1 * k for k in range(3)]
    want = [ct.value_and_gradient(x) for x in xs]
    wrong, errors = [], []

    def work(k):
        xb, gb = xs[k].copy(), np.empty_like(xs[k])
        run = ct.bind(xb, gb)
        try:
            for i in range(3000):
                v = run()
                if v != want[k][0] or not np.array_equal(gb, want[k][1]):
                    wrong.append(k)
                if i % 7 == 0:                        # the checked path, concurrently
                    try:
                        ct.value_and_gradient(xs[k])
                    except rt.ConcurrentUseError:
                        pass
        except Exception as e:                        # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors and not wrong


@both_paths
def test_a_one_call_bind_refuses_to_pickle_and_deep_copies_as_itself():
    ct = rt.compile(rt.GradientTape(lambda x: np.sum(x ** 2), np.ones(2)))
    run = ct.bind(np.ones(2), np.empty(2))
    with pytest.raises(rt.PicklingError, match="pickle the compiled tape"):
        pickle.dumps(run)
    assert copy.deepcopy(run) is run and run.ctape is ct


@both_paths
def test_a_temporary_ctapes_bound_replay_stays_readable_and_arenas_do_not_pile_up():
    f = lambda x: np.sum(x ** 3)
    tape = rt.GradientTape(f, np.ones(3))
    for k in range(40):
        x = np.full(3, 1.0 + k)
        rt.compile(tape).bind(x.copy(), np.empty(3))()     # ctape and callable dropped
        np.testing.assert_array_equal(rt.value(tape.inputs[0]), x)
        assert rt.value(tape.output) == f(x)
    held = [a for a in tape._fast_marks.arenas if a is not None]
    assert len(held) <= 2, f"{len(held)} arenas of dropped compiled tapes are still held"

# ---------------------------------------------------------------- value_and_gradient(x, out=g) in C

def _eight_schools(**kw):
    wl = workloads.eight_schools()
    return wl, rt.compile(rt.GradientTape(wl.f, wl.x0), native=False, **kw)


class _Sub(np.ndarray):
    pass


def _misaligned(n):
    buf = bytearray(8 * n + 1)
    a = np.frombuffer(buf, offset=1, count=n)
    assert not a.flags.aligned
    return a


def _deprecated_setter():
    # numpy 2.4 deprecates assigning .strides / .dtype
    return pytest.warns(DeprecationWarning) if np.lib.NumpyVersion(np.__version__) >= "2.4.0" \
        else _nothing()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@needs_checked
def test_the_plain_case_is_one_c_call_with_the_bound_calls_bits():
    wl, ct = _eight_schools()
    x = wl.x0 + 0.1
    g, gb, xb = np.empty(10), np.empty(10), x.copy()
    r = V._checked_vg(ct._ck, x, g)
    assert type(r) is tuple and r[1] is g
    v = ct.bind(xb, gb)()
    assert r[0] == v and np.array_equal(g, gb)
    v2, g2 = V._checked_vg(ct._ck, x, None)          # out=None: a new array
    assert v2 == v and np.array_equal(g2, gb) and g2.flags.c_contiguous
    # the public call returns the C answer itself
    v3, g3 = ct.value_and_gradient(x, out=g)
    assert g3 is g and v3 == v


@needs_checked
def test_every_property_of_new_arrays_is_checked():
    wl, ct = _eight_schools()
    ck, x, g = ct._ck, wl.x0.copy(), np.empty(10)
    base = np.zeros(20)
    refused = {
        "x float32": (x.astype(np.float32), g),
        "out float32": (x, np.empty(10, np.float32)),
        "x int64 (itemsize 8)": (np.arange(10), g),
        "x byte-swapped": (x.astype(">f8"), g),
        "out byte-swapped": (x, np.empty(10, ">f8")),
        "x strided": (np.repeat(x, 2)[::2], g),
        "out strided": (x, base[::2]),
        "x reversed": (x[::-1], g),
        "x misaligned": (_misaligned(10), g),
        "out misaligned": (x, _misaligned(10)),
        "x too short": (x[:9].copy(), g),
        "x too long": (np.append(x, 1.0), g),
        "out too short": (x, np.empty(9)),
        "x 2-d, same size": (x.reshape(2, 5), g),
        "out 2-d, same size": (x, np.empty((2, 5))),
        "x (1, 10)": (x.reshape(1, 10), g),
        "x (10, 1)": (x.reshape(10, 1), g),
        "out (10, 1)": (x, np.empty((10, 1))),
        "out read-only": (x, np.frombuffer(bytes(80))),
        "out is x": (x, x),
        "out overlaps x": (base[:10], base[5:15]),
        "out overlaps x by one value": (base[:10], base[9:19]),
        "x a list": (list(x), g),
        "x a memoryview": (memoryview(x), g),
        "x an ndarray subclass": (x.view(np.matrix)[0], g),
        "out an ndarray subclass": (x, np.empty(10).view(np.recarray)),
        "x a 1-d ndarray subclass": (x.view(_Sub), g),
        "out a 1-d ndarray subclass": (x, np.empty(10).view(_Sub)),
        "out a list": (x, [0.0] * 10),
    }
    for what, (xa, ga) in refused.items():
        assert V._checked_vg(ck, xa, ga) is None, what
    # and each of them, through the public call, is what the Python path makes of it
    v, gref = ct.value_and_gradient(x.copy())
    assert type(V._checked_vg(ck, base[:10], base[10:])) is tuple      # adjacent: no overlap
    out = np.empty(10, np.float32)
    with pytest.raises(rt.InputError):
        ct.value_and_gradient(x, out=out)
    sv, sg = ct.value_and_gradient(x.astype(">f8"), out=base[::2])
    assert sv == v and np.array_equal(sg, gref)
    xm, gm = _misaligned(10), _misaligned(10)
    xm[...] = x
    assert ct.value_and_gradient(xm, out=gm)[0] == v and np.array_equal(gm, gref)
    xx = x.copy()
    vv, gg = ct.value_and_gradient(xx, out=xx)                           # out is x: allowed
    assert vv == v and gg is xx and np.array_equal(xx, gref)
    with pytest.raises(rt.InputError, match="writeable"):
        ct.value_and_gradient(x, out=np.frombuffer(bytes(80)))
    with pytest.raises(rt.InputError):
        ct.value_and_gradient(x[:9].copy(), out=g)
    with pytest.raises(rt.InputError):
        ct.value_and_gradient(x, out=np.empty(9))


@needs_checked
def test_every_in_place_change_between_calls_is_seen():
    # the same x and out arrays, accepted once, then changed in place: the C
    # side caches nothing, so each change is refused on the next call
    wl, ct = _eight_schools()
    ck = ct._ck
    big = np.zeros(20)
    x, g = big[:10], np.empty(10)
    x[...] = wl.x0

    def plain():
        r = V._checked_vg(ck, x, g)
        assert type(r) is tuple
        return r

    plain()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        x.dtype = np.int64                            # the same bytes as integers
    assert V._checked_vg(ck, x, g) is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        x.dtype = np.float64
    plain()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        g.dtype = np.int64
    assert V._checked_vg(ck, x, g) is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        g.dtype = np.float64
    plain()
    x.shape = (2, 5)
    assert V._checked_vg(ck, x, g) is None
    x.shape = (10,)
    g.shape = (5, 2)
    assert V._checked_vg(ck, x, g) is None
    g.shape = (10,)
    plain()
    with _deprecated_setter():
        x.strides = (16,)                             # now every other value of big
    assert V._checked_vg(ck, x, g) is None
    with _deprecated_setter():
        x.strides = (8,)
    plain()
    g.setflags(write=False)
    assert V._checked_vg(ck, x, g) is None
    g.setflags(write=True)
    v, gx = plain()
    ref = ct.value_and_gradient(wl.x0.copy())
    assert v == ref[0] and np.array_equal(g, ref[1])


@needs_checked
def test_a_state_checks_what_it_is_built_from():
    wl, ct = _eight_schools()
    args = (ct._arena, ct._tape, np.ndarray, np.dtype(np.float64), np.empty, (10,),
            arena._checked_marks, lambda: None)
    with pytest.raises(ValueError, match="rt_program"):
        V._checked.State(bytearray(8), *args)           # not an rt_program's memory
    with pytest.raises(ValueError, match="shape"):
        V._checked.State(V.ffi.buffer(ct._p), *args[:5], (11,), *args[6:])
    with pytest.raises(TypeError):
        V._checked.State(V.ffi.buffer(ct._p), *args[:2], 3, *args[3:])  # ndarray not a type
    # a State of another tape's program never mixes: the shape is its own
    two = rt.compile(rt.GradientTape(lambda x: np.sum(x ** 2), np.ones(3)), native=False)
    assert V._checked_vg(two._ck, wl.x0, np.empty(10)) is None
    assert V._checked_vg(object(), wl.x0, np.empty(10)) is None
    with pytest.raises(TypeError):
        V._checked_vg(ct._ck, wl.x0)


@needs_checked
def test_a_state_keeps_its_program_alive_and_no_cycle_keeps_the_tape():
    wl, ct = _eight_schools()
    x, g = wl.x0.copy(), np.empty(10)
    want = ct.value_and_gradient(x, out=np.empty(10))
    ck, ref = ct._ck, weakref.ref(ct)
    gc.disable()
    try:
        del ct
        assert ref() is None                          # freed by reference counting alone
    finally:
        gc.enable()
    gc.collect()
    v, gg = V._checked_vg(ck, x, g)                   # the program lives as long as its State
    assert v == want[0] and np.array_equal(g, want[1])


@needs_checked
def test_the_replay_is_marked_for_rt_value_with_and_without_a_bound_call():
    wl = workloads.eight_schools()
    tape = rt.GradientTape(wl.f, wl.x0)
    ct = rt.compile(tape, native=False)
    x, g = wl.x0 + 0.5, np.empty(10)
    v, _ = ct.value_and_gradient(x, out=g)
    assert rt.value(tape.output) == v
    xb, gb = wl.x0 - 0.5, np.empty(10)
    run = ct.bind(xb, gb)                             # the tape now has _fast_marks
    vb = run()
    assert rt.value(tape.output) == vb
    for k in range(3):                                # the cell, written by checked.c
        v = ct.value_and_gradient(x + k, out=g)[0]
        assert rt.value(tape.output) == v
        vb = run()
        assert rt.value(tape.output) == vb
    # a second compiled tape of the same tape, marking through the same cell
    ct2 = rt.compile(tape, native=False)
    v2 = ct2.value_and_gradient(x - 1.0, out=g)[0]
    assert rt.value(tape.output) == v2
    v = ct.value_and_gradient(x, out=g)[0]
    assert rt.value(tape.output) == v


@needs_checked
def test_a_busy_program_raises_concurrent_use_through_the_c_path():
    wl, ct = _eight_schools()
    x, g = wl.x0.copy(), np.empty(10)
    ct._p.busy = 1                                    # as while another thread replays
    try:
        assert V._checked_vg(ct._ck, x, g) == V.RT_BUSY
        with pytest.raises(rt.ConcurrentUseError):
            ct.value_and_gradient(x, out=g)
    finally:
        ct._p.busy = 0
    assert type(V._checked_vg(ct._ck, x, g)) is tuple


@needs_checked
def test_a_guard_fails_through_the_c_path_with_its_own_operands():
    f = lambda x: np.sum(x ** 2) * (2.0 if x[0] > 0.0 else 3.0)
    ct = rt.compile(rt.GradientTape(f, np.array([1.0, 2.0])), native=False)
    assert ct._ck is not None
    g = np.empty(2)
    assert ct.value_and_gradient(np.array([0.5, 1.0]), out=g)[0] == 2.5
    bad = np.array([-0.25, 1.0])
    assert V._checked_vg(ct._ck, bad, g) == V.RT_GUARD_FAILED
    with pytest.raises(rt.BranchChanged) as e:
        ct.value_and_gradient(bad, out=g)
    assert e.value.operands[0] == -0.25


@needs_checked
def test_the_call_that_gets_hot_starts_the_native_build(monkeypatch):
    from revtape.runtime import native
    wl, ct = _eight_schools()
    seen = []
    monkeypatch.setattr(native, "hot", lambda c: seen.append(c))
    ct._p.hot_calls, ct._p.hot_max_calls = 0, 3
    ct._p.hot_ns, ct._p.hot_max_ns = 0, 2 ** 62
    x, g = wl.x0.copy(), np.empty(10)
    want = ct.value_and_gradient(x)
    for _ in range(3):
        v, gg = ct.value_and_gradient(x, out=g)
        assert v == want[0] and np.array_equal(g, want[1])
    assert seen == [ct]


@needs_checked
def test_threads_sharing_one_compiled_tape_wait_or_raise_never_mix():
    import threading
    wl, ct = _eight_schools()
    xs = [wl.x0 + 0.1 * k for k in range(3)]
    want = [ct.value_and_gradient(x) for x in xs]
    wrong, ran = [], [0]

    def work(k):
        g = np.empty(10)
        for _ in range(3000):
            try:
                v, gg = ct.value_and_gradient(xs[k], out=g)
            except rt.ConcurrentUseError:
                continue
            ran[0] += 1
            if v != want[k][0] or not np.array_equal(g, want[k][1]):
                wrong.append(k)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert ran[0] > 0 and not wrong


@needs_checked
def test_only_plain_single_array_programs_get_a_state():
    assert rt.compile(rt.GradientTape(lambda a, b: a * b, (1.0, 2.0)))._ck is None
    ht = rt.compile(rt.HessianTape(lambda x: np.sum(x ** 3), np.ones(3)))
    assert ht._ck is None
    g = np.empty(3)
    v, gg = ht.value_and_gradient(np.ones(3), out=g)
    assert v == 3.0 and np.array_equal(g, 3.0 * np.ones(3))


@needs_checked
def test_the_method_takes_every_call_form_and_stays_a_method():
    import inspect
    import pickle
    wl, ct = _eight_schools()
    x, g = wl.x0 + 0.2, np.empty(10)
    want = ct.value_and_gradient(x.copy())
    m = ct.value_and_gradient
    assert m.__self__ is ct and str(inspect.signature(m)) == "(x, out=None)"
    for call in (lambda: m(x, out=g), lambda: m(x, g), lambda: m(x=x, out=g),
                 lambda: m(out=g, x=x), lambda: rt.CompiledTape.value_and_gradient(ct, x, out=g),
                 lambda: type(ct).value_and_gradient(ct, x=x, out=g)):
        g[...] = 0.0
        v, gg = call()
        assert v == want[0] and gg is g and np.array_equal(g, want[1])
    for call in (lambda: m(x), lambda: m(x, None), lambda: m(list(x)), lambda: m(x=tuple(x))):
        v, gg = call()
        assert v == want[0] and np.array_equal(gg, want[1])
    with pytest.raises(TypeError, match="foo"):
        m(x, out=g, foo=1)
    with pytest.raises(TypeError):
        m()
    with pytest.raises(TypeError):
        m(x, g, g)
    with pytest.raises(TypeError):
        m(x, x=x)
    assert pickle.loads(pickle.dumps(m))(x)[0] == want[0]
    # the bound method keeps its CompiledTape alive, as a Python bound method does
    ref = weakref.ref(ct)
    del ct
    gc.collect()
    assert ref() is not None and m(x, out=g)[0] == want[0]
    del m
    gc.collect()
    assert ref() is None


@needs_checked
def test_a_subclass_may_override_the_method():
    class Mine(rt.CompiledTape):
        def value_and_gradient(self, x, out=None):
            v, g = super().value_and_gradient(x, out)
            return 2 * v, g

    wl = workloads.eight_schools()
    tape = rt.GradientTape(wl.f, wl.x0)
    ct, mine = rt.compile(tape, native=False), Mine(tape, native=False)
    assert mine.value_and_gradient(wl.x0, out=np.empty(10))[0] == \
        2 * ct.value_and_gradient(wl.x0)[0]
