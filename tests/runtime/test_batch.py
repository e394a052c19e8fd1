"""Batched replay: ctape.batch_value_and_gradient(X, out=None, threads=None) and
ctape.batch_forward(X) give, row for row, bit for bit what single replays give,
with and without threads."""

import copy

import numpy as np
import pytest

import revtape as rt
from revtape.bench import workloads as W

import conftest as H     # module-level primitives: spawned workers import them by name
from conftest import single_replays as _rows


def _bits(a):
    """The bytes of a float array: equal bytes are equal bits (-0.0 != 0.0, nan == nan)."""
    return np.ascontiguousarray(a, dtype=np.float64).tobytes()


@pytest.fixture(scope="module")
def eight():
    wl = W.eight_schools()
    return wl, rt.compile(rt.GradientTape(wl.f, wl.x0))


@pytest.mark.parametrize("threads", [None, 1, 2, 3, 7])
def test_eight_schools_rows_are_bit_identical_to_single_replays(eight, threads):
    wl, ctape = eight
    X = np.random.default_rng(1).normal(size=(101, 10))
    v_rows, g_rows = _rows(ctape, X)
    v, g = ctape.batch_value_and_gradient(X, threads=threads)
    assert v.shape == (101,) and g.shape == (101, 10)
    assert np.array_equal(v, v_rows) and np.array_equal(g, g_rows)
    assert np.array_equal(ctape.batch_forward(X, threads=threads), v_rows)
    for x, vi, gi in zip(X[:5], v, g):                    # and they are right
        ve, ge = wl.numpy_vg(x)
        assert np.isclose(vi, ve, rtol=1e-12) and np.allclose(gi, ge, rtol=1e-12)


def test_out_is_written_and_returned(eight):
    _, ctape = eight
    X = np.random.default_rng(2).normal(size=(9, 10))
    out = np.empty((9, 10))
    v, g = ctape.batch_value_and_gradient(X, out=out, threads=2)
    assert g is out and np.array_equal(out, _rows(ctape, X)[1])
    for bad in (np.empty((9, 11)), np.empty((9, 10), dtype=np.float32), np.empty((10, 9)).T):
        with pytest.raises(rt.InputError, match="out="):
            ctape.batch_value_and_gradient(X, out=bad)


def test_after_a_batch_the_tape_reports_the_last_row(eight):
    _, ctape = eight
    X = np.random.default_rng(3).normal(size=(6, 10))
    v, _ = ctape.batch_value_and_gradient(X, threads=2)
    assert rt.value(ctape.tape.output) == v[-1]
    assert np.array_equal(rt.value(ctape.tape.inputs[0]), X[-1])


def test_tuple_inputs_take_a_tuple_of_stacks():
    f = lambda a, b, c: np.sum(np.sin(a) * b) + c * np.sum(b ** 2)
    x0 = (np.ones(3), np.ones((2, 3)), 0.5)
    ctape = rt.compile(rt.GradientTape(f, x0))
    rng = np.random.default_rng(4)
    A, B, C = rng.normal(size=(7, 3)), rng.normal(size=(7, 2, 3)), rng.normal(size=7)
    for threads in (None, 2):
        v, (ga, gb, gc) = ctape.batch_value_and_gradient((A, B, C), threads=threads)
        assert ga.shape == (7, 3) and gb.shape == (7, 2, 3) and gc.shape == (7,)
        for r in range(7):
            vr, (gar, gbr, gcr) = ctape.value_and_gradient((A[r], B[r], float(C[r])))
            assert vr == v[r] and np.array_equal(gar, ga[r]) and np.array_equal(gbr, gb[r])
            assert gcr == gc[r]
    outs = (np.empty((7, 3)), np.empty((7, 2, 3)), np.empty(7))
    res = ctape.batch_value_and_gradient((A, B, C), out=outs)[1]
    assert res is outs and np.array_equal(outs[1], gb)
    with pytest.raises(rt.InputError, match="tuple of 3 stacked arrays"):
        ctape.batch_value_and_gradient(A)
    with pytest.raises(rt.InputError, match="same number of rows"):
        ctape.batch_value_and_gradient((A, B[:6], C))


def test_float_input_and_array_outputs():
    ctape = rt.compile(rt.GradientTape(lambda t: t ** 3 - np.sin(t), 0.5))
    T = np.linspace(-2, 2, 9)
    v, g = ctape.batch_value_and_gradient(T, threads=2)
    assert g.shape == (9,)
    assert np.array_equal(v, [ctape.value_and_gradient(t)[0] for t in T])
    assert np.array_equal(g, [ctape.value_and_gradient(t)[1] for t in T])
    jt = rt.compile(rt.JacobianTape(lambda x: np.stack([np.sum(x), np.prod(x)]), np.ones(3)))
    X = np.random.default_rng(5).normal(size=(5, 3))
    Y = jt.batch_forward(X, threads=2)
    assert Y.shape == (5, 2) and np.array_equal(Y, np.array([jt.forward(x) for x in X]))
    with pytest.raises(rt.OutputError, match="batch_forward"):
        jt.batch_value_and_gradient(X)


def test_nan_rows_give_nan_results(eight):
    _, ctape = eight
    X = np.random.default_rng(6).normal(size=(8, 10))
    X[3, 4] = np.nan
    X[5, 0] = np.inf
    v, g = ctape.batch_value_and_gradient(X, threads=2)
    assert np.isnan(v[3]) and np.isnan(g[3, 4])
    assert not np.isfinite(v[5])
    finite = [0, 1, 2, 4, 6, 7]
    v_rows, g_rows = _rows(ctape, X[finite])
    assert np.array_equal(v[finite], v_rows) and np.array_equal(g[finite], g_rows)


def test_bad_input_is_refused_clearly(eight):
    _, ctape = eight
    for X, msg in ((np.ones((4, 9)), r"\(k,\) \+ \(10,\)"), (np.ones(10), r"\(k,\) \+ \(10,\)"),
                   (np.array([["a"] * 10]), "real numbers")):
        with pytest.raises(rt.InputError, match=msg):
            ctape.batch_value_and_gradient(X)
    for threads in (0, -1, 1.5, True):
        with pytest.raises(rt.InputError, match="threads="):
            ctape.batch_value_and_gradient(np.ones((2, 10)), threads=threads)
    v, g = ctape.batch_value_and_gradient(np.empty((0, 10)))
    assert v.shape == (0,) and g.shape == (0, 10)
    X = np.arange(20.0).reshape(2, 10).astype(np.int64)      # ints are converted
    assert np.array_equal(ctape.batch_forward(X), ctape.batch_forward(X.astype(float)))


def test_a_branch_change_names_the_row():
    def f(x):
        return np.sum(x ** 2) if x[0] > 0 else -np.sum(x)

    ctape = rt.compile(rt.GradientTape(f, np.ones(2)))
    X = np.ones((6, 2))
    X[4, 0] = -1.0
    with pytest.raises(rt.BranchChanged, match="batch row 4") as info:
        ctape.batch_value_and_gradient(X, threads=2)
    assert info.value.row == 4
    assert np.array_equal(ctape.batch_forward(np.ones((3, 2))), [2.0, 2.0, 2.0])


def test_batches_through_python_callbacks_are_bit_identical(eight):
    ctape = rt.compile(rt.GradientTape(H.model, np.array([0.1, 0.2, 0.3])))
    X = np.random.default_rng(7).normal(size=(40, 3))
    v_rows, g_rows = _rows(ctape, X)
    for threads in (1, 2, 4):
        v, g = ctape.batch_value_and_gradient(X, threads=threads)
        assert np.array_equal(v, v_rows) and np.array_equal(g, g_rows)


def test_copies_have_their_own_batch_arenas(eight):
    _, ctape = eight
    X = np.random.default_rng(8).normal(size=(12, 10))
    expected = ctape.batch_value_and_gradient(X, threads=3)
    dup = copy.deepcopy(ctape)
    got = dup.batch_value_and_gradient(X, threads=3)
    assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])
    assert all(a.p != b.p for a in dup._workspaces for b in ctape._workspaces)


def test_a_callback_error_in_a_worker_thread_propagates_as_itself():
    class Refused(Exception):
        pass

    @rt.primitive
    def careful(x):
        if x[0] > 100:
            raise Refused(f"refused {x[0]}")
        return np.sum(x)

    rt.defvjp(careful, lambda ans, x: lambda g: g * np.ones_like(x))
    ctape = rt.compile(rt.GradientTape(lambda x: careful(x) * 2.0, np.ones(2)))
    X = np.ones((10, 2))
    X[1, 0] = 200.0                      # in the first chunk: a worker thread's
    with pytest.raises(Refused, match="refused 200"):
        ctape.batch_value_and_gradient(X, threads=2)
    X[1, 0] = 1.0
    v, g = ctape.batch_value_and_gradient(X, threads=2)
    assert np.array_equal(v, np.full(10, 4.0)) and np.array_equal(g, np.full((10, 2), 2.0))


def test_hessian_tapes_are_refused_with_advice():
    ch = rt.compile(rt.HessianTape(lambda x: np.sum(x ** 3), np.ones(2)))
    for call in (ch.batch_value_and_gradient, ch.batch_forward):
        with pytest.raises(rt.OutputError, match="GradientTape"):
            call(np.ones((3, 2)))


def test_one_batch_at_a_time_per_compiled_tape():
    import threading
    entered, release = threading.Event(), threading.Event()

    @rt.primitive
    def slow(x):
        entered.set()
        release.wait(10)
        return np.sum(x)

    rt.defvjp(slow, lambda ans, x: lambda g: g * np.ones_like(x))
    release.set()                        # recording calls slow too: let it through
    ctape = rt.compile(rt.GradientTape(lambda x: slow(x) * 2.0, np.ones(2)))
    entered.clear()
    release.clear()
    errors = []
    t = threading.Thread(target=lambda: ctape.batch_value_and_gradient(np.ones((2, 2))))
    t.start()
    try:
        assert entered.wait(10)
        for call in (lambda: ctape.batch_value_and_gradient(np.ones((2, 2))),
                     lambda: ctape.value_and_gradient(np.ones(2))):
            try:
                call()
            except rt.ConcurrentUseError as e:
                errors.append(e)
    finally:
        release.set()
        t.join()
    assert len(errors) == 2
    v, g = ctape.batch_value_and_gradient(np.ones((3, 2)))
    assert np.array_equal(v, [4.0, 4.0, 4.0])


# ------------------------------------------------ batched replay as array code (csrc/vm/soa.c)

def _scalar_mix(x):
    # x * x (one slot, both adjoints), SQDIFF of one slot, a constant divided by
    # a point (DIV_SV), a point times a constant (MUL_VS), an unused input (its
    # gradient slot is zeroed, not assigned), a comparison mask, special functions
    t = x[0] * x[0] + x[1] / x[2] - 3.0 / x[0] + np.tanh(x[1]) * 2.0
    t = t + (x[0] - x[0]) ** 2 + (x[1] - x[2]) ** 2 + np.log1p(np.exp(-x[1] * x[1]))
    return t + np.maximum(x[0], 1.0) * np.sqrt(np.abs(x[2])) + rt.special.expit(x[0] / 7.0)


@pytest.mark.parametrize("f,n", [
    (_scalar_mix, 4),
    (lambda x: x[1], 3),                              # the output is an input
    (lambda x: x[0] * 0.0 + x[1] * x[1], 2),          # exactly-zero adjoints
])
@pytest.mark.parametrize("threads", [1, 2])
def test_array_code_rows_are_the_bits_of_single_replays_at_odd_points(f, n, threads):
    ctape = rt.compile(rt.GradientTape(f, np.linspace(0.5, 1.5, n)))
    rng = np.random.default_rng(11)
    X = rng.normal(size=(203, n))
    specials = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-300, 1e300, -1.0]
    for r, s in enumerate(specials * 3):
        X[5 + 7 * r, r % n] = s                        # in full blocks and the short last one
    v_rows, g_rows = _rows(ctape, X)
    v, g = ctape.batch_value_and_gradient(X, threads=threads)
    assert ctape._wide
    assert _bits(v) == _bits(v_rows) and _bits(g) == _bits(g_rows)
    assert _bits(ctape.batch_forward(X, threads=threads)) == _bits(v_rows)
    out = np.empty_like(X)
    assert ctape.batch_value_and_gradient(X, out=out)[1] is out and _bits(out) == _bits(g_rows)
    # the reverse sweep assigns each adjoint slot's first contribution and zeroes
    # the slots nothing reaches: what the adjoint arena held before is irrelevant
    for arena in ctape._wide_arenas:
        arena.adj[:] = np.nan
    v, g = ctape.batch_value_and_gradient(X, threads=threads)
    assert _bits(v) == _bits(v_rows) and _bits(g) == _bits(g_rows)


def test_array_code_side_tables_are_checked_before_use():
    from revtape._vm import ffi, lib
    wl = W.eight_schools()
    ctape = rt.compile(rt.GradientTape(wl.f, wl.x0))
    X = np.random.default_rng(12).normal(size=(50, 10))
    expected = ctape.batch_value_and_gradient(X)
    arena = ctape._wide_arenas[0]
    L, prog = lib.RT_SOA_LANES, ctape._program
    v, G = np.empty(50), np.empty((50, 10))
    row = ffi.new("int64_t *")
    args = lambda zero, nz: (arena.p, prog.n_in, prog.n_grad, prog.out_off, 1, arena.first_p,
                             zero, nz, 50, ffi.from_buffer("double[]", X),
                             ffi.from_buffer("double[]", v), ffi.from_buffer("double[]", G), row)
    for bad in ([-L], [1], [arena.p.n_vals]):          # outside the arena, not lane-aligned
        zero = ffi.new("int32_t[]", bad)
        assert lib.rt_batch_soa(*args(zero, 1)) == lib.RT_BADARG
    assert lib.rt_batch_soa(*args(ffi.NULL, 1)) == lib.RT_BADARG
    assert lib.rt_batch_soa(*args(arena.zero_p, arena.zero.size)) == lib.RT_OK
    assert _bits(v) == _bits(expected[0]) and _bits(G) == _bits(expected[1])
    # a wide program whose instructions are not L lanes long is refused
    code = np.array(arena.code).reshape(-1, 6)
    code[0, 1] = L - 1
    p = ffi.new("rt_program *", dict(code=ffi.from_buffer("int32_t[]", code), n_instr=len(code),
                                     ints=arena.p.ints, n_ints=0, vals=arena.p.vals,
                                     adj=arena.p.adj, n_vals=arena.p.n_vals, n_in=arena.p.n_in,
                                     n_grad=arena.p.n_grad, n_fixed=arena.p.n_fixed,
                                     out_off=arena.p.out_off, out_len=arena.p.out_len))
    assert lib.rt_verify(p, ffi.NULL, 0) == lib.RT_OK
    assert lib.rt_batch_soa(p, prog.n_in, prog.n_grad, prog.out_off, 1, arena.first_p,
                            arena.zero_p, arena.zero.size, 50, ffi.from_buffer("double[]", X),
                            ffi.from_buffer("double[]", v), ffi.from_buffer("double[]", G),
                            row) == lib.RT_BADARG


# -------------------------------------------------------- the C worker pool (csrc/runtime/pool.c)

@pytest.mark.parametrize("k", [16, 23, 24, 25, 47, 97, 1000, 4801])
@pytest.mark.parametrize("threads", [2, 3, 5])
def test_the_pool_shares_rows_in_lane_blocks_bit_for_bit(eight, k, threads):
    # rows go out in whole lane blocks from a shared counter: any k, any
    # split, each row's bits are its single replay's
    wl, ctape = eight
    X = np.random.default_rng(k).normal(size=(k, 10))
    v1, g1 = ctape.batch_value_and_gradient(X, threads=1)
    v, g = ctape.batch_value_and_gradient(X, threads=threads)
    assert _bits(v) == _bits(v1) and _bits(g) == _bits(g1)
    assert _bits(ctape.batch_forward(X, threads=threads)) == _bits(v1)
    rows = range(0, k, max(1, k // 7))
    v_rows, g_rows = _rows(ctape, X[list(rows)])
    assert _bits(v[list(rows)]) == _bits(v_rows) and _bits(g[list(rows)]) == _bits(g_rows)


def test_many_callers_share_the_pool_and_each_gets_its_own_rows(eight):
    # the pool serves one batch at a time; a batch that finds it taken runs on
    # its calling thread alone: same bits either way
    import threading
    wl, ctape = eight
    copies = [copy.deepcopy(ctape) for _ in range(4)]
    Xs = [np.random.default_rng(10 + j).normal(size=(500 + 31 * j, 10)) for j in range(4)]
    want = [ctape.batch_value_and_gradient(X, threads=1) for X in Xs]
    bad = []

    def work(j):
        for i in range(30):
            v, g = copies[j].batch_value_and_gradient(Xs[j], threads=2 + (i % 2))
            if _bits(v) != _bits(want[j][0]) or _bits(g) != _bits(want[j][1]):
                bad.append(j)

    ths = [threading.Thread(target=work, args=(j,)) for j in range(4)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    assert not bad


def _forked_batch(q):
    wl = W.eight_schools()
    ctape = rt.compile(rt.GradientTape(wl.f, wl.x0))
    X = np.random.default_rng(5).normal(size=(300, 10))
    v2, g2 = ctape.batch_value_and_gradient(X, threads=2)
    v1, g1 = ctape.batch_value_and_gradient(X, threads=1)
    q.put(_bits(v2) == _bits(v1) and _bits(g2) == _bits(g1))


def test_a_forked_child_starts_a_pool_of_its_own(eight):
    # the parent's workers do not exist in a forked child (and may have held
    # their locks at the fork): the child must neither hang nor lose rows
    import multiprocessing as mp
    if "fork" not in mp.get_all_start_methods():
        pytest.skip("no fork on this platform")
    wl, ctape = eight
    X = np.random.default_rng(4).normal(size=(300, 10))
    ctape.batch_value_and_gradient(X, threads=3)          # the parent's pool is running
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_forked_batch, args=(q,))
    p.start()
    try:
        assert q.get(timeout=60) is True
    finally:
        p.join(10)
        if p.is_alive():                                  # pragma: no cover - a hang
            p.kill()
    assert p.exitcode == 0


def _misaligned(shape):
    n = int(np.prod(shape))
    a = np.frombuffer(bytearray(8 * n + 1), dtype=np.float64, count=n, offset=1).reshape(shape)
    assert not a.flags.aligned and a.flags.c_contiguous
    return a


@pytest.mark.parametrize("k", [8, 100])                  # the row loop and the wide form
def test_misaligned_rows_are_copied_and_a_misaligned_out_is_refused(eight, k):
    wl, ctape = eight
    X = np.random.default_rng(6).normal(size=(k, 10))
    want = ctape.batch_value_and_gradient(X, threads=1)
    Xm = _misaligned((k, 10))
    Xm[...] = X
    for threads in (1, 2):
        v, g = ctape.batch_value_and_gradient(Xm, threads=threads)
        assert _bits(v) == _bits(want[0]) and _bits(g) == _bits(want[1])
        assert _bits(ctape.batch_forward(Xm, threads=threads)) == _bits(want[0])
        with pytest.raises(rt.InputError, match="aligned"):
            ctape.batch_value_and_gradient(X, out=_misaligned((k, 10)), threads=threads)


# ------------------------------------------------ one thread, one array of points: the fast path

ICOV = np.linspace(0.5, 2.0, 5)


def _emcee_logp(x):
    # array code (not scalar code: no wide form), emcee's 32 walkers x 5 shape
    return -0.5 * np.sum(ICOV * x * x) - np.sum(np.log1p(x * x))


def _no_general_path(ctape, monkeypatch):
    def refused(*a, **k):
        raise AssertionError("the general path ran")
    monkeypatch.setattr(ctape, "_batch_rows", refused)
    monkeypatch.setattr(ctape, "_batch_run", refused)


@pytest.mark.parametrize("threads", [None, 1])
def test_one_thread_row_loop_is_the_bits_of_single_replays(threads, monkeypatch):
    ctape = rt.compile(rt.GradientTape(_emcee_logp, np.zeros(5)))
    X = np.random.default_rng(12).normal(size=(32, 5))
    X[3, 1], X[7, 0], X[9, 4] = np.nan, np.inf, -0.0
    v_rows, g_rows = _rows(ctape, X)
    _no_general_path(ctape, monkeypatch)
    v = ctape.batch_forward(X, threads=threads)
    assert not ctape._wide
    assert _bits(v) == _bits(v_rows)
    v, g = ctape.batch_value_and_gradient(X, threads=threads)
    assert _bits(v) == _bits(v_rows) and _bits(g) == _bits(g_rows)
    want = -0.5 * np.sum(ICOV * X * X, axis=1) - np.sum(np.log1p(X * X), axis=1)
    np.testing.assert_allclose(v[10:], want[10:], rtol=1e-13)
    # the tape reports the last row, as after the general path
    ctape.batch_forward(X[:3])
    assert rt.value(ctape.tape.output) == v_rows[2]
    assert _bits(rt.value(ctape.tape.inputs[0])) == _bits(X[2])
    ctape.batch_value_and_gradient(X[:2])
    assert rt.value(ctape.tape.output) == v_rows[1]


def test_one_thread_fast_path_of_scalar_code_forward(eight, monkeypatch):
    wl, ctape = eight
    X = np.random.default_rng(13).normal(size=(40, 10))
    v_rows, _ = _rows(ctape, X)
    _no_general_path(ctape, monkeypatch)
    assert _bits(ctape.batch_forward(X)) == _bits(v_rows)     # the wide form
    assert ctape._wide
    assert _bits(ctape.batch_forward(X[:5])) == _bits(v_rows[:5])   # the row loop


def test_one_thread_fast_path_names_the_branch_row():
    def f(x):
        return np.sum(x ** 2) if x[0] > 0 else -np.sum(x)

    ctape = rt.compile(rt.GradientTape(f, np.ones(2)))
    X = np.ones((6, 2))
    X[4, 0] = -1.0
    for call in (ctape.batch_forward, ctape.batch_value_and_gradient):
        with pytest.raises(rt.BranchChanged, match="batch row 4") as info:
            call(X)
        assert info.value.row == 4
    assert np.array_equal(ctape.batch_forward(np.ones((3, 2))), [2.0, 2.0, 2.0])


def test_one_thread_fast_path_raises_a_callback_error_as_itself():
    class Refused(Exception):
        pass

    @rt.primitive
    def careful(x):
        if x[0] > 100:
            raise Refused(f"refused {x[0]}")
        return np.sum(x)

    rt.defvjp(careful, lambda ans, x: lambda g: g * np.ones_like(x))
    ctape = rt.compile(rt.GradientTape(lambda x: careful(x) * 2.0, np.ones(2)))
    X = np.ones((5, 2))
    X[2, 0] = 200.0
    for call in (ctape.batch_forward, ctape.batch_value_and_gradient):
        with pytest.raises(Refused, match="refused 200"):
            call(X)
    X[2, 0] = 1.0
    assert np.array_equal(ctape.batch_forward(X), np.full(5, 4.0))


def test_one_thread_fast_path_refuses_a_concurrent_batch():
    import threading
    entered, release = threading.Event(), threading.Event()

    @rt.primitive
    def slow(x):
        entered.set()
        release.wait(10)
        return np.sum(x)

    rt.defvjp(slow, lambda ans, x: lambda g: g * np.ones_like(x))
    release.set()
    ctape = rt.compile(rt.GradientTape(lambda x: slow(x) * 2.0, np.ones(2)))
    entered.clear()
    release.clear()
    t = threading.Thread(target=lambda: ctape.batch_forward(np.ones((2, 2))))
    t.start()
    try:
        assert entered.wait(10)
        with pytest.raises(rt.ConcurrentUseError):
            ctape.batch_forward(np.ones((2, 2)))
    finally:
        release.set()
        t.join()
    assert np.array_equal(ctape.batch_forward(np.ones((3, 2))), [4.0, 4.0, 4.0])
