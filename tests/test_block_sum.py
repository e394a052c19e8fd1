"""Sum blocks (csrc/instr/block.h rt_block_verify_sum, csrc/vm/blocks.c
rt_block_sum_forward / rt_block_backward, src/revtape/lower/blocks.py
_closing_sum): a np.sum right after a tiled block, over one member's whole
result, runs inside the block.  Its tiles are the subtrees of numpy's
pairwise summation, so the value keeps np.sum's bits; the summed result may
then be tile-local and its adjoint is filled with the sum's adjoint per
tile instead of being zeroed and added to in passes of its own.

Every test compares, bit for bit, the sum block with the same tape compiled
with the sum outside the block (REVTAPE_BLOCK_SUM=0's program) and without
blocks at all: value, gradient, JVP, VJP, Hessian-vector products."""

import numpy as np
import pytest

import revtape as rt
from revtape.lower import blocks
from revtape.core import ops
from revtape.runtime.compiled import CompiledTape
from revtape.lower.compiler import Program

N = 1000
RNG = np.random.default_rng(11)
D = RNG.standard_normal(N)
D[::9] = 0.0


@pytest.fixture(autouse=True)
def small_tiles(monkeypatch):
    # tiles of 64 (sum blocks: subtrees of at most 128 elements, 64..128)
    monkeypatch.setattr(blocks, "TILE", 64)


def _bits(a):
    return np.asarray(a, dtype=np.float64).view(np.int64)


def _opcodes(ct):
    return [ops.VM_OPCODES[w & 0xFFFF] for w in ct.code[:, 0]]


def _three(f, x0, monkeypatch):
    """(tape, sum block, sum outside the block, no blocks)"""
    tape = rt.GradientTape(f, x0)

    def comp():
        return rt.compile(tape, native=False)
    fused = comp()
    with monkeypatch.context() as m:
        m.setattr(blocks, "SUM_BLOCKS", False)
        apart = comp()
    with monkeypatch.context() as m:
        m.setattr(blocks, "enabled", lambda: False)
        unfused = comp()
    return tape, fused, apart, unfused


def _sum_blocks(ct):
    """[(BLOCK pc, its REDUCE_SUM's pc)] of the blocks a sum closes"""
    names, code = _opcodes(ct), ct.code
    out = []
    for pc, nm in enumerate(names):
        if nm == "BLOCK":
            last = pc + int(code[pc, 2])
            if names[last] == "REDUCE_SUM":
                out.append((pc, last))
    return out


def _points(x0):
    bad = x0.copy()
    n = x0.size
    bad[[3, n // 2, n - 3]] = [np.inf, np.nan, -np.inf]
    return (x0, 1.3 * x0 - 0.2, np.zeros_like(x0), -x0, bad)


def _assert_same(tape, cts, x0, tangents=True):
    for x in _points(x0):
        with np.errstate(all="ignore"):
            got = [ct.value_and_gradient(x) for ct in cts]
            for v, g in got[1:]:
                np.testing.assert_array_equal(_bits(v), _bits(got[0][0]))
                np.testing.assert_array_equal(_bits(g), _bits(got[0][1]))
            if np.isfinite(got[0][0]) and np.all(np.isfinite(got[0][1])):
                v_ref, g_ref = tape.value_and_gradient(x)
                np.testing.assert_allclose(got[0][0], v_ref, rtol=1e-13)
                np.testing.assert_allclose(got[0][1], g_ref, rtol=1e-12, atol=1e-12)
            if tangents:
                t = np.random.default_rng(1).standard_normal(x.shape)
                j = [ct.jvp(x, t) for ct in cts]
                for q in j[1:]:
                    np.testing.assert_array_equal(_bits(q), _bits(j[0]))
                w = np.random.default_rng(2).standard_normal(())
                vj = [ct.vjp(x, w) for ct in cts]
                for q in vj[1:]:
                    np.testing.assert_array_equal(_bits(q), _bits(vj[0]))


FAMILIES = {
    "rosenbrock": lambda x: np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2),
    "unary": lambda x: np.sum(np.exp(np.sin(x)) * np.tanh(x) + np.log1p(x * x)),
    "where-clip": lambda x: np.sum(np.where(x > 0, x * x, -x) + np.clip(x * D, -0.5, 0.5) * x),
    # the summed result is also read by members after it: its adjoint slot
    # gets their terms too and is filled with the sum's adjoint every tile
    "refill": lambda x: (lambda a: (lambda b: np.sum(a) * 0.5 + np.sum(b * b))(a * 3.0 + a))(
        x * x - D),
    # the summed result is read after the block too: it stays in the arena
    # and the sum's reverse adds its adjoint into it per tile
    "kept": lambda x: (lambda a: np.sum(a) + a[7] * a[N - 3])(np.sin(x) * x + D),
    "kept2": lambda x: (lambda a: np.sum(a) * 0.5 + np.sum((a * 3.0 + a) ** 2))(x * x - D),
    # a sum whose value is scaled: its adjoint is not 1
    "scaled": lambda x: 3.0 * np.sum((x - D) ** 2 * 0.5 + (D - 3.0 * x) ** 2) + x[0],
    # -0.0 terms: REDUCE_SUM's 0.0 + sum
    "neg-zero": lambda x: np.sum(-(x * 0.0) * x),
}


@pytest.mark.parametrize("name", list(FAMILIES))
def test_sum_block_equals_the_sum_outside_and_unfused(name, monkeypatch):
    x0 = np.random.default_rng(7).uniform(-1.2, 1.2, N)
    tape, fused, apart, unfused = _three(FAMILIES[name], x0, monkeypatch)
    assert _sum_blocks(fused), fused.disassemble()
    assert not _sum_blocks(apart) and "BLOCK" in _opcodes(apart)
    assert "BLOCK" not in _opcodes(unfused)
    _assert_same(tape, (fused, apart, unfused), x0)


def test_the_summed_result_leaves_the_arena(monkeypatch):
    x0 = np.linspace(-1, 1, N)
    _, fused, apart, _ = _three(FAMILIES["rosenbrock"], x0, monkeypatch)
    s, s2 = fused.stats(), apart.stats()
    assert s["tile_local_results"] == s2["tile_local_results"] + 1      # the AXPY's
    assert s["arena_values"] < s2["arena_values"] - (N - 1) + 5 * 128


def test_refill_and_kept_take_their_paths(monkeypatch):
    x0 = np.random.default_rng(3).uniform(-1, 1, N)
    for name, local in (("refill", True), ("kept", False), ("kept2", False)):
        _, fused, _, _ = _three(FAMILIES[name], x0, monkeypatch)
        code, found = fused.code, False
        for b, s in _sum_blocks(fused):
            src, mask = int(code[s, 3]), int(code[b, 5])
            members = [int(code[b + 1 + k, 2]) for k in range(s - b - 1)]
            k = members.index(src)
            # refill: some other member reads the summed result
            others = any(src in (int(code[b + 1 + i, c]) for c in (3, 4, 5))
                         for i in range(len(members)) if i != k)
            found |= bool((mask >> k) & 1) == local and (others or name.startswith("kept"))
        assert found, fused.disassemble()


@pytest.mark.parametrize("n", [129, 130, 255, 256, 257, 1000, 1031, 4097, 20001])
def test_sum_block_keeps_np_sum_bits_at_every_split(n, monkeypatch):
    # terms of very different magnitudes: any other order of additions
    # rounds differently somewhere (checked: skipping the split's rounding
    # to a multiple of 8 fails here)
    rng = np.random.default_rng(n)
    x0 = rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 6, n)
    for T in (64, 100, 256):
        monkeypatch.setattr(blocks, "TILE", T)
        f = lambda x: np.sum(x * 1.5 - 0.25 * x * x)
        tape, fused, apart, unfused = _three(f, x0, monkeypatch)
        assert bool(_sum_blocks(fused)) == (n > T), fused.disassemble()
        v = fused.value_and_gradient(x0)[0]
        want = np.sum(x0 * 1.5 - 0.25 * x0 * x0)
        assert _bits(v) == _bits(want), (n, T)
        _assert_same(tape, (fused, apart, unfused), x0, tangents=(n < 5000))


def test_tiles_are_the_pairwise_subtrees():
    for n in (129, 1000, 9999, 123457):
        for T in (128, 200, 512):
            starts = blocks._sum_tiles(n, T)
            lens = np.diff(starts + [n])
            assert starts[0] == 0 and np.all(lens > 0) and np.all(lens <= T)
            # each tile is a node of the recursion: a larger one would hold
            # a node of more than T elements
            assert len(lens) == 1 or np.all(lens > T // 2 - 8)


def test_repeated_calls_leave_nothing_behind(monkeypatch):
    """Adjoint slots that are written (not zeroed) in one call hold nothing
    into the next: one tape replayed at changing points gives what a fresh
    compile gives at each point."""
    x0 = np.random.default_rng(4).uniform(-1, 1, N)
    for name in ("rosenbrock", "refill", "kept"):
        f = FAMILIES[name]
        tape = rt.GradientTape(f, x0)
        ct = rt.compile(tape, native=False)
        g = np.empty(N)
        for k, x in enumerate(_points(x0)[::-1] + _points(x0)):
            with np.errstate(all="ignore"):
                v, _ = ct.value_and_gradient(x, out=g)
                fresh = rt.compile(tape, native=False)
                v2, g2 = fresh.value_and_gradient(x)
                np.testing.assert_array_equal(_bits(v), _bits(v2))
                np.testing.assert_array_equal(_bits(g), _bits(g2))
                if k % 3 == 0:          # a tangent sweep between reverse sweeps
                    t = np.ones(N)
                    np.testing.assert_array_equal(_bits(ct.jvp(x, t)), _bits(fresh.jvp(x, t)))


@pytest.mark.parametrize("name", ["refill", "rosenbrock"])
def test_hessian_of_a_sum_block(name, monkeypatch):
    # the gradient program (compiled at the first hvp) holds sum blocks too
    f = FAMILIES[name]
    x0 = np.random.default_rng(9).uniform(-1, 1, N)
    v = np.random.default_rng(10).standard_normal(N)
    tape = rt.GradientTape(f, x0)
    h = [rt.compile(tape, native=False).hvp(x0, v)]
    with monkeypatch.context() as m:
        m.setattr(blocks, "SUM_BLOCKS", False)
        h.append(rt.compile(tape, native=False).hvp(x0, v))
    with monkeypatch.context() as m:
        m.setattr(blocks, "enabled", lambda: False)
        h.append(rt.compile(tape, native=False).hvp(x0, v))
    for q in h[1:]:
        np.testing.assert_array_equal(_bits(q), _bits(h[0]))


def test_batch_and_bind(monkeypatch):
    x0 = np.random.default_rng(12).uniform(-1, 1, N)
    tape, fused, apart, _ = _three(FAMILIES["rosenbrock"], x0, monkeypatch)
    X = np.stack([x0, -x0, 0.5 * x0])
    for threads in (1, 2):
        v1, g1 = fused.batch_value_and_gradient(X, threads=threads)
        v2, g2 = apart.batch_value_and_gradient(X, threads=threads)
        np.testing.assert_array_equal(_bits(v1), _bits(v2))
        np.testing.assert_array_equal(_bits(g1), _bits(g2))
    xb, gb = x0.copy(), np.empty(N)
    run = fused.bind(xb, gb)
    v = run()
    v2, g2 = apart.value_and_gradient(x0)
    assert _bits(v) == _bits(v2) and np.array_equal(_bits(gb), _bits(g2))


# ---------------------------------------------------------------- verifier

def _rosen():
    x0 = np.linspace(-1, 1, N)
    ct = rt.compile(rt.GradientTape(FAMILIES["rosenbrock"], x0), native=False)
    (b, s), = _sum_blocks(ct)
    return ct, b, s


def _reload(ct, edit=None):
    state = ct.program.to_state()
    code = state["code"].copy()
    if edit is not None:
        edit(code)
    state["code"] = code
    return CompiledTape(ct.tape, _program=Program.from_state(state), native=False)


def test_verifier_refuses_malformed_sums():
    ct, b, s = _rosen()
    x = np.linspace(-0.5, 0.9, N)
    v, g = _reload(ct).value_and_gradient(x)
    v0, g0 = ct.value_and_gradient(x)
    assert v == v0 and np.array_equal(g, g0)
    code = ct.code
    e = s + 1
    src, out = int(code[s, 3]), int(code[s, 2])
    first_out = int(code[b + 1, 2])

    def words(*edits):
        def edit(c):
            for k, col, val in edits:
                c[k, col] = val
        return edit

    def refused(edit, match):
        with pytest.raises(rt.VerificationError, match=match):
            _reload(ct, edit)

    refused(words((s, 1, 2)), "segments")
    refused(words((s, 4, N - 2)), "segments")
    refused(words((s, 3, src + 1)), "not a member's whole result")
    refused(words((s, 2, first_out)), "scratch|overlaps member")
    refused(words((s, 2, 0)), "reads the closing sum|output")          # over the inputs
    refused(words((s, 0, int(code[s, 0]) | (2 << 16))), "flags beyond bit 0")
    refused(words((b, 3, 64), (e, 3, 64)), "tiles of >= 128")
    mask = int(code[b, 5]) | (1 << (s - b - 1))
    # (the extra slot may also reach past the arena)
    refused(words((b, 5, mask), (e, 5, mask)), "closing sum's result is marked|scratch")
    # the sum elsewhere than last: a reduction inside a block
    refused(words((b + 1, 0, int(code[s, 0])), (b + 1, 1, 1)), "elementwise|elements")
    # an out of range result
    refused(words((s, 2, ct.program.n_vals + 5)), "output|outside")
    assert out != first_out
