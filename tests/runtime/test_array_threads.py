"""Large array instructions split over threads (csrc/runtime/par.h, kernels.c):
the same bits whatever the number of threads, forced to split at a small
threshold or not, against the unfused program and the native tier; the
scalar-operand adjoint sums and MATMUL's A^T G in their documented fixed
chunk order; several threads replaying copies at once, and a forked child."""

import copy
import os
import threading

import numpy as np
import pytest

import revtape as rt
from revtape.lower import blocks
from revtape.runtime import compiled
from revtape.core import ops
from revtape.bench.workloads import student_t
from conftest import same_bits_nan as _same

CHUNK = 8192          # kernels.c RT_KSUM_CHUNK


@pytest.fixture
def threads():
    """Sets (threads, min_elements) for the test and restores the settings after."""
    before = compiled.array_threads()
    yield lambda t, m=None: compiled.array_threads(t, m)
    compiled.array_threads(*before)


SETTINGS = [(2, 64), (3, 64), (2, 1000), (2, None), (8, 64)]


def _runs(ct, x, threads, settings=SETTINGS):
    """(value, gradient) on one thread, then under each setting."""
    threads(1, 32768)
    ref = ct.value_and_gradient(x)
    out = []
    for t, m in settings:
        threads(t, m if m is not None else 32768)
        out.append(((t, m), ct.value_and_gradient(x)))
    return ref, out


def _opcodes(ct):
    return [ops.VM_OPCODES[w & 0xFFFF] for w in ct.code[:, 0]]


N = 5 * CHUNK + 1234          # a quad of whole sum chunks, one more and a short last one
rng0 = np.random.default_rng(7)
W = rng0.standard_normal(N)
UNARY = [np.sin, np.cos, np.exp, np.expm1, np.log, np.log1p, np.sqrt, np.tanh, np.arctan,
         np.abs, np.square, np.negative, np.reciprocal, np.cbrt, np.arcsinh]
BINARY = [np.add, np.subtract, np.multiply, np.divide, np.power, np.maximum, np.minimum,
          np.arctan2, np.hypot]


def _model(op, unary):
    def f(x):
        a, b, s = x[:N], x[N:2 * N], x[2 * N]
        if unary:
            return np.sum(W * op(a)) + np.sum(op(b / s))
        return np.sum(W * op(a, b)) + np.sum(W * op(a, s)) + np.sum(op(s, b))
    return f


def _x(seed):
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.uniform(0.5, 1.5, 2 * N), [1.25]])


@pytest.mark.parametrize("op", UNARY + BINARY, ids=lambda f: f.__name__)
def test_every_kernel_same_bits_on_any_number_of_threads(op, threads, monkeypatch):
    monkeypatch.setenv("REVTAPE_BLOCKS", "0")      # the unfused kernels, each over N elements
    x = _x(1)
    ct = rt.compile(rt.GradientTape(_model(op, op in UNARY), x), native=False)
    assert "BLOCK" not in _opcodes(ct)
    (v0, g0), out = _runs(ct, x, threads)
    for setting, (v, g) in out:
        assert _same(v, v0) and _same(g, g0), setting
    assert np.isfinite(v0) and np.all(np.isfinite(g0))


def test_fused_and_unfused_programs_agree_on_threads(threads, monkeypatch):
    f = lambda x: np.sum(np.log1p((x[:N] - x[N:2 * N]) ** 2 / x[2 * N]) * W)
    x = _x(2)
    monkeypatch.setenv("REVTAPE_BLOCKS", "0")
    unfused = rt.compile(rt.GradientTape(f, x), native=False)
    monkeypatch.setenv("REVTAPE_BLOCKS", "1")
    fused = rt.compile(rt.GradientTape(f, x), native=False)
    assert "BLOCK" in _opcodes(fused) and "BLOCK" not in _opcodes(unfused)
    (v0, g0), out = _runs(unfused, x, threads)
    (v1, g1), out1 = _runs(fused, x, threads)
    assert _same(v0, v1) and _same(g0, g1)
    for (_, (v, g)), (_, (w, h)) in zip(out, out1):
        assert _same(v, v0) and _same(g, g0) and _same(w, v0) and _same(h, g0)


def _chunked_sum(terms):
    """kernels.c's order for a scalar operand's adjoint over n > RT_KSUM_CHUNK
    elements: strict left-to-right sums of chunks, then of the chunks' sums."""
    n = len(terms)
    chunk = max(CHUNK, ((n + 63) // 64 + 7) // 8 * 8)
    parts = [np.cumsum(terms[i:i + chunk])[-1] for i in range(0, n, chunk)]
    return np.cumsum(parts)[-1]


def test_scalar_operand_adjoint_sums_in_fixed_chunks(threads, monkeypatch):
    monkeypatch.setenv("REVTAPE_BLOCKS", "0")
    rng = np.random.default_rng(3)
    a = rng.standard_normal(N) * np.exp(rng.uniform(-20, 20, N))   # rounding matters
    f = lambda x: np.sum(W * (a * x[0]))
    x = np.array([0.75])
    ct = rt.compile(rt.GradientTape(f, x), native=False)
    assert "MUL_VS" in _opcodes(ct) or "MUL_SV" in _opcodes(ct)
    # MUL's adjoint is W exactly (REDUCE_SUM's 1.0 times W), so d x = sum W*a
    want = _chunked_sum(W * a) + 0.0
    plain = np.cumsum(W * a)[-1]
    assert not _same(want, plain)          # the test tells the two orders apart
    (v0, g0), out = _runs(ct, x, threads)
    assert _same(g0[0], want)
    for setting, (v, g) in out:
        assert _same(g, g0), setting


@pytest.mark.parametrize("K", [1, 10, 32, 33])
def test_matvec_reverse_in_fixed_chunks(K, threads):
    rng = np.random.default_rng(K)
    M = 2 * CHUNK + 3001
    A = rng.standard_normal((M, K)) * np.exp(rng.uniform(-20, 20, (M, K)))
    w = rng.standard_normal(M)
    f = lambda b: np.sum(w * (A @ b))
    b0 = rng.standard_normal(K)
    ct = rt.compile(rt.GradientTape(f, b0), native=False)
    assert "MATMUL" in _opcodes(ct)
    P = A * w[:, None]
    if K <= 32:     # chunk 0 from the zeroed adjoint, later chunks from -0.0, then in order
        parts = [np.cumsum(P[i:i + CHUNK], axis=0)[-1] for i in range(0, M, CHUNK)]
        want = np.cumsum(np.array(parts), axis=0)[-1] + 0.0
    else:           # wider: the one sequential pass (never split)
        want = np.cumsum(P, axis=0)[-1] + 0.0
    (v0, g0), out = _runs(ct, b0, threads)
    assert _same(g0, want)
    assert np.allclose(g0, A.T @ w, rtol=1e-9, atol=1e-9 * np.abs(P).max())
    for setting, (v, g) in out:
        assert _same(v, v0) and _same(g, g0), setting


def _small_student_t():
    wl = student_t(N=3 * CHUNK + 17, D=10, seed=4)
    return wl, rt.GradientTape(wl.f, wl.x0)


def test_student_t_on_threads_matches_numpy_and_finite_differences(threads):
    wl, tape = _small_student_t()
    ct = rt.compile(tape, native=False)
    threads(2, 64)
    x = wl.x0 + 0.1
    v, g = ct.value_and_gradient(x)
    vn, gn = wl.numpy_vg(x)
    assert np.isclose(v, vn, rtol=1e-12) and np.allclose(g, gn, rtol=1e-9, atol=1e-9)
    h = 1e-6
    for i in (0, 5, len(x) - 1):
        e = np.zeros_like(x)
        e[i] = h
        fd = (ct.value_and_gradient(x + e)[0] - ct.value_and_gradient(x - e)[0]) / (2 * h)
        assert np.isclose(fd, g[i], rtol=1e-5, atol=1e-4)
    rv, rg = tape.value_and_gradient(x)           # the Python reference replay
    assert np.isclose(v, rv, rtol=1e-12) and np.allclose(g, rg, rtol=1e-9, atol=1e-9)


def test_native_tier_same_bits_as_threaded_vm(threads, native_cache):
    wl, tape = _small_student_t()
    vm, nt = rt.compile(tape, native=False), rt.compile(tape, native=True)
    assert nt.native_state == "native"
    x = wl.x0 - 0.05
    vn, gn = nt.value_and_gradient(x)
    (v0, g0), out = _runs(vm, x, threads)
    assert _same(vn, v0) and _same(gn, g0)
    for setting, (v, g) in out:
        assert _same(v, vn) and _same(g, gn), setting


def test_threads_replaying_copies_while_the_pool_splits(threads):
    wl, tape = _small_student_t()
    ct = rt.compile(tape, native=False)
    xs = [wl.x0 + 0.01 * k for k in range(4)]
    threads(1, 32768)
    want = [ct.value_and_gradient(x) for x in xs]
    threads(2, 64)
    errors = []

    def chain(k):
        mine = copy.deepcopy(ct)
        try:
            for _ in range(15):
                v, g = mine.value_and_gradient(xs[k])
                if not (_same(v, want[k][0]) and _same(g, want[k][1])):
                    errors.append(k)
        except Exception as e:          # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=chain, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not any(t.is_alive() for t in ts)
    assert errors == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_splits_with_a_pool_of_its_own(threads):
    import time
    wl, tape = _small_student_t()
    ct = rt.compile(tape, native=False)
    threads(2, 64)
    v0, g0 = ct.value_and_gradient(wl.x0)          # the parent's pool is running
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                    # pragma: no cover - the child
        try:
            v, g = ct.value_and_gradient(wl.x0)
            os.write(w, np.concatenate([[v], g]).tobytes())
        finally:
            os._exit(0)
    os.close(w)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung")
    got = np.frombuffer(os.read(r, 8 * (len(g0) + 1)), dtype=np.float64)
    os.close(r)
    assert _same(got[0], v0) and _same(got[1:], g0)


def test_array_threads_setting(threads):
    t, m = threads(3, 500)
    assert (t, m) == (3, 500)
    assert compiled.array_threads() == (3, 500)
    for bad in (0, -1, 1.5, True, "2", 65):
        with pytest.raises(rt.RevtapeError):
            compiled.array_threads(bad)
    with pytest.raises(rt.RevtapeError):
        compiled.array_threads(2, 0)
    assert compiled.array_threads() == (3, 500)


# ---------------------------------------------------------------- tiled blocks over threads

NB = 5 * 1000 + 3          # not a multiple of any tile

BLOCK_MODELS = {
    # tile-local members, kept outputs read after the block, scalar operands
    "chain": lambda x: np.sum(np.log1p((x[:NB] * x[NB:2 * NB] - 0.5) ** 2 / 3.0) * 1.5)
    + np.sum(np.exp(-x[:NB]) * np.sin(x[NB:2 * NB])),
    "kept": lambda x: np.sum(np.tanh(x[:NB] * 2.0 + x[NB:2 * NB]) ** 2)
    + np.sum(np.sqrt(x[:NB] * x[:NB] + 1.0)),
    # overlapping operands (x[1:] - x[:-1]): the reverse stays on one thread
    "overlap": lambda x: np.sum(100.0 * (x[1:NB] - x[:NB - 1] ** 2) ** 2 + (1.0 - x[:NB - 1]) ** 2),
}


@pytest.mark.parametrize("sum_block", [False, True])
@pytest.mark.parametrize("name", sorted(BLOCK_MODELS))
def test_blocks_over_threads_same_bits_as_unfused(name, sum_block, threads, monkeypatch):
    # without sum blocks np.sum stays out of the block: the blocks that split
    # over threads (a block closed by its sum runs on one thread)
    monkeypatch.setattr(blocks, "SUM_BLOCKS", sum_block)
    f = BLOCK_MODELS[name]
    rng = np.random.default_rng(5)
    x = rng.uniform(0.5, 1.5, 2 * NB)
    v = rng.standard_normal(2 * NB)
    monkeypatch.setenv("REVTAPE_BLOCKS", "0")
    unfused = rt.compile(rt.GradientTape(f, x), native=False)
    monkeypatch.setenv("REVTAPE_BLOCKS", "1")
    tape = rt.GradientTape(f, x)
    fused = rt.compile(tape, native=False)
    assert "BLOCK" in _opcodes(fused)
    threads(1, 32768)
    v0, g0 = unfused.value_and_gradient(x)
    t0 = unfused.jvp(x, v)
    for t, m in [(1, 32768), (2, 64), (3, 64), (8, 64), (2, 1000), (4, 4096)]:
        threads(t, m)
        v1, g1 = fused.value_and_gradient(x)
        assert _same(v1, v0) and _same(g1, g0), (t, m)
        t1 = fused.jvp(x, v)
        assert _same(np.asarray(t1), np.asarray(t0)), (t, m)
    rv, rg = tape.value_and_gradient(x)            # the reference replay
    assert np.isclose(v0, rv, rtol=1e-12) and np.allclose(g0, rg, rtol=1e-10, atol=1e-10)
