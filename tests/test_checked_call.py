"""ctape.value_and_gradient(x, out=g)'s checks in C (revtape._checked,
csrc/pyext/checked.c).

The C function answers a tuple only for the plain case and None for anything
else (the Python path then converts, copies or raises).  Each test below
changes one property the C side must check -- on a new array and in place on
arrays it accepted a call before -- and asserts None: removing any one check
from checked.c fails one of them.  The end-to-end tests pin the results,
errors, marks and lifetimes of the public call."""

import gc
import warnings
import weakref

import numpy as np
import pytest

import revtape as rt
from revtape.runtime import vm as C
from revtape.runtime.arena import _checked_marks
from revtape.bench import workloads

pytestmark = pytest.mark.skipif(C._checked is None, reason="revtape._checked is not built")


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


def test_the_plain_case_is_one_c_call_with_the_bound_calls_bits():
    wl, ct = _eight_schools()
    x = wl.x0 + 0.1
    g, gb, xb = np.empty(10), np.empty(10), x.copy()
    r = C._checked_vg(ct._ck, x, g)
    assert type(r) is tuple and r[1] is g
    v = ct.bind(xb, gb)()
    assert r[0] == v and np.array_equal(g, gb)
    v2, g2 = C._checked_vg(ct._ck, x, None)          # out=None: a new array
    assert v2 == v and np.array_equal(g2, gb) and g2.flags.c_contiguous
    # the public call returns the C answer itself
    v3, g3 = ct.value_and_gradient(x, out=g)
    assert g3 is g and v3 == v


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
        assert C._checked_vg(ck, xa, ga) is None, what
    # and each of them, through the public call, is what the Python path makes of it
    v, gref = ct.value_and_gradient(x.copy())
    assert type(C._checked_vg(ck, base[:10], base[10:])) is tuple      # adjacent: no overlap
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


def test_every_in_place_change_between_calls_is_seen():
    # the same x and out arrays, accepted once, then changed in place: the C
    # side caches nothing, so each change is refused on the next call
    wl, ct = _eight_schools()
    ck = ct._ck
    big = np.zeros(20)
    x, g = big[:10], np.empty(10)
    x[...] = wl.x0

    def plain():
        r = C._checked_vg(ck, x, g)
        assert type(r) is tuple
        return r

    plain()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        x.dtype = np.int64                            # the same bytes as integers
    assert C._checked_vg(ck, x, g) is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        x.dtype = np.float64
    plain()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        g.dtype = np.int64
    assert C._checked_vg(ck, x, g) is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        g.dtype = np.float64
    plain()
    x.shape = (2, 5)
    assert C._checked_vg(ck, x, g) is None
    x.shape = (10,)
    g.shape = (5, 2)
    assert C._checked_vg(ck, x, g) is None
    g.shape = (10,)
    plain()
    with _deprecated_setter():
        x.strides = (16,)                             # now every other value of big
    assert C._checked_vg(ck, x, g) is None
    with _deprecated_setter():
        x.strides = (8,)
    plain()
    g.setflags(write=False)
    assert C._checked_vg(ck, x, g) is None
    g.setflags(write=True)
    v, gx = plain()
    ref = ct.value_and_gradient(wl.x0.copy())
    assert v == ref[0] and np.array_equal(g, ref[1])


def test_a_state_checks_what_it_is_built_from():
    wl, ct = _eight_schools()
    args = (ct._arena, ct._tape, np.ndarray, np.dtype(np.float64), np.empty, (10,),
            _checked_marks, lambda: None)
    with pytest.raises(ValueError, match="rt_program"):
        C._checked.State(bytearray(8), *args)           # not an rt_program's memory
    with pytest.raises(ValueError, match="shape"):
        C._checked.State(C.ffi.buffer(ct._p), *args[:5], (11,), *args[6:])
    with pytest.raises(TypeError):
        C._checked.State(C.ffi.buffer(ct._p), *args[:2], 3, *args[3:])  # ndarray not a type
    # a State of another tape's program never mixes: the shape is its own
    two = rt.compile(rt.GradientTape(lambda x: np.sum(x ** 2), np.ones(3)), native=False)
    assert C._checked_vg(two._ck, wl.x0, np.empty(10)) is None
    assert C._checked_vg(object(), wl.x0, np.empty(10)) is None
    with pytest.raises(TypeError):
        C._checked_vg(ct._ck, wl.x0)


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
    v, gg = C._checked_vg(ck, x, g)                   # the program lives as long as its State
    assert v == want[0] and np.array_equal(g, want[1])


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


def test_a_busy_program_raises_concurrent_use_through_the_c_path():
    wl, ct = _eight_schools()
    x, g = wl.x0.copy(), np.empty(10)
    ct._p.busy = 1                                    # as while another thread replays
    try:
        assert C._checked_vg(ct._ck, x, g) == C.RT_BUSY
        with pytest.raises(rt.ConcurrentUseError):
            ct.value_and_gradient(x, out=g)
    finally:
        ct._p.busy = 0
    assert type(C._checked_vg(ct._ck, x, g)) is tuple


def test_a_guard_fails_through_the_c_path_with_its_own_operands():
    f = lambda x: np.sum(x ** 2) * (2.0 if x[0] > 0.0 else 3.0)
    ct = rt.compile(rt.GradientTape(f, np.array([1.0, 2.0])), native=False)
    assert ct._ck is not None
    g = np.empty(2)
    assert ct.value_and_gradient(np.array([0.5, 1.0]), out=g)[0] == 2.5
    bad = np.array([-0.25, 1.0])
    assert C._checked_vg(ct._ck, bad, g) == C.RT_GUARD_FAILED
    with pytest.raises(rt.BranchChanged) as e:
        ct.value_and_gradient(bad, out=g)
    assert e.value.operands[0] == -0.25


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


def test_only_plain_single_array_programs_get_a_state():
    assert rt.compile(rt.GradientTape(lambda a, b: a * b, (1.0, 2.0)))._ck is None
    ht = rt.compile(rt.HessianTape(lambda x: np.sum(x ** 3), np.ones(3)))
    assert ht._ck is None
    g = np.empty(3)
    v, gg = ht.value_and_gradient(np.ones(3), out=g)
    assert v == 3.0 and np.array_equal(g, 3.0 * np.ones(3))


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
