"""Fused, tiled elementwise blocks (csrc/instr/block.h, csrc/vm/blocks.c,
src/revtape/lower/blocks.py).

A run of elementwise instructions over the same n elements runs tile by
tile, forward, reverse and tangent, with the results nobody else reads kept
in a tile-sized scratch.  Every test compares the blocked program with the
same tape compiled without blocks, bit for bit (value, gradient, JVP,
Hessian), and with the reference replay; tiles of 32 elements over n = 150
give several whole tiles and a short last one.  Below them, the sum blocks:
a block closed by its np.sum."""

import numpy as np
import pytest

import revtape as rt
from revtape.lower import blocks
from revtape.core import ops
from revtape.runtime.compiled import CompiledTape
from revtape.lower.compiler import Program
from conftest import bits as _bits

N = 150
RNG = np.random.default_rng(5)
D = RNG.standard_normal(N)
D[::7] = 0.0                                     # zero data: zero adjoints in places
W = RNG.standard_normal(N - 1)


@pytest.fixture(autouse=True)
def small_tiles(monkeypatch):
    monkeypatch.setattr(blocks, "TILE", 32)


def _opcodes(ct):
    return [ops.VM_OPCODES[w & 0xFFFF] for w in ct.code[:, 0]]


def _pair(f, x0, monkeypatch):
    tape = rt.GradientTape(f, x0)
    fused = rt.compile(tape, native=False)
    with monkeypatch.context() as m:
        m.setattr(blocks, "enabled", lambda: False)
        unfused = rt.compile(tape, native=False)
    assert "BLOCK" not in _opcodes(unfused)
    return tape, fused, unfused


def _points(x0):
    zeros = np.zeros_like(x0)
    bad = x0.copy()
    bad[[3, 40, 97]] = [np.inf, np.nan, -np.inf]
    return (x0, 1.3 * x0 - 0.2, zeros, bad)


def _assert_same_bits(tape, fused, unfused, x0):
    for x in _points(x0):
        with np.errstate(all="ignore"):
            v, g = fused.value_and_gradient(x)
            v2, g2 = unfused.value_and_gradient(x)
            np.testing.assert_array_equal(_bits(v), _bits(v2))
            np.testing.assert_array_equal(_bits(g), _bits(g2))
            if np.isfinite(v) and np.all(np.isfinite(g)):
                v_ref, g_ref = tape.value_and_gradient(x)
                # (numpy's libm and the VM's may differ in the last bit)
                np.testing.assert_allclose(v, v_ref, rtol=1e-13)
                np.testing.assert_allclose(g, g_ref, rtol=1e-12, atol=1e-12)
            t = np.random.default_rng(1).standard_normal(x.shape)
            np.testing.assert_array_equal(_bits(fused.jvp(x, t)), _bits(unfused.jvp(x, t)))
            w = np.random.default_rng(2).standard_normal(())
            np.testing.assert_array_equal(_bits(fused.vjp(x, w)), _bits(unfused.vjp(x, w)))


# Every elementwise family a block holds: unary, VV / VS / SV (constant
# scalars), WHERE (VV/VS/SV), CLIP, the fused AXPY and SQDIFF, a reduction
# after the block, shifted views of one input (x[1:] and x[:-1]).
FAMILIES = {
    "unary": lambda x: np.sum(np.exp(np.sin(x)) * np.tanh(x) + np.log1p(x * x) - np.sqrt(np.abs(x))),
    "vv-shifted": lambda x: np.sum(x[1:] * x[:-1] + x[:-1] / (2.0 + x[1:] * x[1:]) - W * x[1:]),
    "vs-sv": lambda x: np.sum(3.0 / (2.0 + x * x) - (x * 2.5 - 1.0) ** 3 + (1.0 - x) / 4.0),
    "where": lambda x: np.sum(np.where(x > 0, x * x, -x) + np.where(x < 0.3, x, 0.5)
                              + np.where(D > 0, 0.25, x * D)),
    "clip": lambda x: np.sum(np.clip(x * D, -0.5, 0.5) * x + np.maximum(x, D) * np.minimum(x, 0.1)),
    "axpy-sqdiff": lambda x: np.sum(D + 2.5 * x) + np.sum((x - D) ** 2 * 0.5 + (D - 3.0 * x) ** 2),
    "rosenbrock": lambda x: np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2),
    "scale-tracked": lambda x: np.sum(x[0] * x[1:] * x[1:] + np.exp(x[1:]) * W),
    "no-sum": lambda x: np.dot(W, np.log1p((x[1:] - x[:-1]) ** 2 / 3.0)),
}


@pytest.mark.parametrize("name", list(FAMILIES))
def test_blocked_program_equals_unfused_bit_for_bit(name, monkeypatch):
    x0 = np.random.default_rng(7).uniform(-1.2, 1.2, N)
    tape, fused, unfused = _pair(FAMILIES[name], x0, monkeypatch)
    stats = fused.stats()
    assert stats["tiled_blocks"] >= 1, fused.disassemble()
    _assert_same_bits(tape, fused, unfused, x0)


@pytest.mark.parametrize("closing_sum", [False, True])
def test_tile_local_results_leave_the_arena(closing_sum, monkeypatch):
    monkeypatch.setattr(blocks, "SUM_BLOCKS", closing_sum)
    x0 = np.linspace(-1, 1, N)
    _, fused, unfused = _pair(FAMILIES["rosenbrock"], x0, monkeypatch)
    s = fused.stats()
    if closing_sum:
        # the sum closes the block (the sum blocks below): the AXPY's
        # result is tile-local too, 5 slots of blocks.sum_tile(32) = 128
        assert s["tile_local_results"] == 5
        base = N + 2 + 1 + 5 * 128
    else:
        assert s["tile_local_results"] == 4          # SQUARE, SQDIFF, SUB_SV, SQUARE
        # inputs, constants, the AXPY's result, the sum, 4 scratch slots of 32,
        # and the padding that starts the AXPY's result and the scratch on lines
        base = N + 2 + (N - 1) + 1 + 4 * 32
    assert base <= s["arena_values"] < base + 2 * blocks.ALIGN
    assert unfused.stats()["arena_values"] == N + 2 + 5 * (N - 1) + 1


def test_block_arrays_start_on_cache_lines(monkeypatch):
    """The arenas start on 64-byte lines and a block's kept results and its
    scratch slots on multiples of 8 values (AVX-512 loops over misaligned
    arrays split every access over two lines); the padding changes no bit."""
    x0 = np.linspace(-1, 1, N)
    tape, fused, unfused = _pair(FAMILIES["vv-shifted"], x0, monkeypatch)
    code = fused.code
    ops_ = _opcodes(fused)
    b = ops_.index("BLOCK")
    m, s0, mask = int(code[b, 2]), int(code[b, 4]), int(code[b, 5])
    assert mask and s0 % blocks.ALIGN == 0
    kept = [int(code[b + 1 + k, 2]) for k in range(m) if not (mask >> k) & 1]
    assert kept and all(o % blocks.ALIGN == 0 for o in kept)
    assert fused._vals.ctypes.data % 64 == 0 and fused._adj.ctypes.data % 64 == 0
    _assert_same_bits(tape, fused, unfused, x0)


def test_hessian_of_a_blocked_program(monkeypatch):
    f = FAMILIES["rosenbrock"]
    x0 = np.random.default_rng(3).uniform(-1, 1, N)
    _, fused, unfused = _pair(f, x0, monkeypatch)
    H = fused.hessian(x0)
    with monkeypatch.context() as m:
        m.setattr(blocks, "enabled", lambda: False)
        H2 = unfused.hessian(x0)
    np.testing.assert_array_equal(_bits(H), _bits(H2))


def test_grad_and_batch_paths(monkeypatch):
    f = FAMILIES["vv-shifted"]
    X = np.random.default_rng(4).uniform(-1, 1, (5, N))
    _, fused, unfused = _pair(f, X[0], monkeypatch)
    v, G = fused.batch_value_and_gradient(X)
    v2, G2 = unfused.batch_value_and_gradient(X)
    np.testing.assert_array_equal(_bits(v), _bits(v2))
    np.testing.assert_array_equal(_bits(G), _bits(G2))
    g = np.empty(N)
    run = fused.bind(X[1].copy(), g)
    np.testing.assert_array_equal(_bits(run()), _bits(v2[1]))
    np.testing.assert_array_equal(_bits(g), _bits(G2[1]))


def test_a_scalar_operand_that_needs_an_adjoint_is_left_out():
    # x[0] * x[1:]: the scalar's adjoint sums over all elements; tiling would
    # round it differently, so that instruction is no member
    ct = rt.compile(rt.GradientTape(FAMILIES["scale-tracked"], np.linspace(-1, 1, N)),
                    native=False)
    code = ct.code
    flags = code[:, 0] >> 16
    inside, names = False, _opcodes(ct)
    for k, name in enumerate(names):
        if name == "BLOCK":
            inside = True
        elif name == "ENDBLOCK":
            inside = False
        elif inside and name.endswith(("_VS", "_SV")):
            assert flags[k] & (2 if name.endswith("_VS") else 1) == 0


def test_reverse_order_check():
    # rows (op, n, out, a, b, c) of two SQUARE members: x[1:] then x[:-1],
    # i.e. a later member reads lower offsets: slots at tile boundaries get
    # their two terms swapped, which is exact only on a slot that starts at 0
    sq = ops.OPCODE["SQUARE"] | (1 << 16)
    rows = [[sq, 100, 1000, 1, 0, 0], [sq, 100, 2000, 0, 0, 0]]
    assert blocks._reverse_exact(rows, [0, 1], 2, 5000, 1, 32)
    # a third member reading x[1:] again: three terms, the swap is not exact
    rows3 = rows + [[sq, 100, 3000, 1, 0, 0]]
    assert not blocks._reverse_exact(rows3, [0, 1, 2], 3, 5000, 1, 32)
    # the same two members when something after the block also adds to x
    later = [[ops.OPCODE["NEG"] | (1 << 16), 100, 4000, 0, 0, 0]]
    assert not blocks._reverse_exact(rows + later, [0, 1], 2, 5000, 1, 32)
    # the other order (lower offsets first) keeps every slot's order
    rows_ok = [rows[1], rows[0], [sq, 100, 3000, 1, 0, 0]]
    assert blocks._reverse_exact(rows_ok, [0, 1, 2], 3, 5000, 1, 32)


def test_a_refused_reverse_order_still_gives_the_same_bits(monkeypatch):
    # x[1:]**2 then x[:-1]**2 then x[1:] again: not tiled as one block
    f = lambda x: np.sum(np.sin(x[1:]) * 2.0 + np.cos(x[:-1]) * 3.0 + np.exp(x[1:]) * W)
    x0 = np.random.default_rng(8).uniform(-1, 1, N)
    tape, fused, unfused = _pair(f, x0, monkeypatch)
    _assert_same_bits(tape, fused, unfused, x0)


# How a tile-local adjoint slot gets its first term in the reverse sweep
# (csrc/vm/blocks.c, rt_block_first_terms): written as 0.0 + term by the first member
# reaching it, or zeroed first when that member names it twice (u * u), when
# its kernel writes it in two passes, or when nothing reaches it (u only
# read by a comparison: its own reverse reads zeros).
def _twice(x):
    u = x * 2.5 - 1.0
    return np.sum(u * u + x)


FIRST_TERMS = {
    "twice": _twice,
    "mixed-vv": lambda x: np.sum((x * 3.0) * x + (x - 0.5) / (x * x + 1.0)),
    "nothing-reaches": lambda x: np.sum(np.where(x * 2.0 > 0.5, x, -x) * D),
    "where-clip": lambda x: np.sum(np.where(D > 0, x * D, x * 0.5 - D)
                                   + np.clip(x * 2.0, -0.5, 0.5) * D),
}


@pytest.mark.parametrize("name", list(FIRST_TERMS))
def test_first_terms_into_tile_local_slots(name, monkeypatch):
    x0 = np.random.default_rng(9).uniform(-1.2, 1.2, N)
    tape, fused, unfused = _pair(FIRST_TERMS[name], x0, monkeypatch)
    assert fused.stats()["tile_local_results"] >= 1, fused.disassemble()
    _assert_same_bits(tape, fused, unfused, x0)


@pytest.mark.parametrize("n", [32 * 4 + 1, 32 * 4 + 2, 33])
def test_one_element_last_tile(n, monkeypatch):
    # a last tile of one element runs the VM's scalar paths: zeroed slots
    # there (a sum block's tiles are subtrees of the pairwise sum, never one
    # element: the sum stays outside here)
    monkeypatch.setattr(blocks, "SUM_BLOCKS", False)
    x0 = np.random.default_rng(n).uniform(-1.2, 1.2, n + 1)
    tape, fused, unfused = _pair(FAMILIES["rosenbrock"], x0, monkeypatch)
    assert fused.stats()["tiled_blocks"] == 1
    for x in (x0, np.zeros_like(x0)):
        v, g = fused.value_and_gradient(x)
        v2, g2 = unfused.value_and_gradient(x)
        np.testing.assert_array_equal(_bits(v), _bits(v2))
        np.testing.assert_array_equal(_bits(g), _bits(g2))
        t = np.random.default_rng(1).standard_normal(x.shape)
        np.testing.assert_array_equal(_bits(fused.jvp(x, t)), _bits(unfused.jvp(x, t)))


def _program_with_block():
    ct = rt.compile(rt.GradientTape(FAMILIES["rosenbrock"], np.linspace(-1, 1, N)),
                    native=False)
    names = _opcodes(ct)
    return ct, names.index("BLOCK"), names.index("ENDBLOCK")


def _reload(ct, edit=None):
    state = ct.program.to_state()
    code = state["code"].copy()
    if edit is not None:
        edit(code)
    state["code"] = code
    return CompiledTape(ct.tape, _program=Program.from_state(state), native=False)


def assert_refused(ct, edit, match):
    with pytest.raises(rt.VerificationError, match=match):
        _reload(ct, edit)


def test_verifier_refuses_malformed_blocks():
    ct, b, e = _program_with_block()
    # the untouched words load and replay the same bits: each refusal below
    # is the edit's doing, not a verifier that refuses every block
    x = np.linspace(-0.5, 0.9, N)
    v, g = _reload(ct).value_and_gradient(x)
    v0, g0 = ct.value_and_gradient(x)
    assert v == v0 and np.array_equal(g, g0)
    m = int(ct.code[b, 2])
    red = ops.OPCODE["REDUCE_SUM"]

    def words(k, col, val):
        def edit(code):
            code[k, col] = val
        return edit

    def both(col, val):
        def edit(code):
            code[b, col] = val
            code[e, col] = val
        return edit

    assert_refused(ct, words(b, 2, m + 5), "ENDBLOCK|past the program")
    assert_refused(ct, words(e, 3, 7), "ENDBLOCK with the same words")
    assert_refused(ct, both(2, 31), "member count")
    assert_refused(ct, both(3, 0), "tile")
    assert_refused(ct, words(b + 2, 1, N - 2), "elements")                     # member n
    assert_refused(ct, words(b + 1, 0, red | (1 << 16)), "elementwise")        # a reduction inside
    assert_refused(ct, words(b + 1, 2, int(ct.code[b + 1, 2]) + 1), "scratch slot")
    assert_refused(ct, both(4, 0), "scratch")                                  # slots over the inputs
    # the SQDIFF reading the SQUARE's slot one element off
    assert_refused(ct, words(b + 2, 4, int(ct.code[b + 1, 2]) + 1), "scratch")
    # the SUB_SV's scalar 1.0 marked as needing an adjoint
    sub = b + 3
    assert_refused(ct, words(sub, 0, int(ct.code[sub, 0]) | (1 << 16)), "one-element operand")
    # a stray ENDBLOCK
    assert_refused(ct, words(e - 1, 0, ops.OPCODE["ENDBLOCK"] | (1 << 16)), "BLOCK")
    # a member carrying a first-term bit (kernels.h RT_KSET_A: write, not
    # add): only the VM's block reverse sets those, from verified words
    assert_refused(ct, words(b + 1, 0, int(ct.code[b + 1, 0]) | (8 << 16)), "beyond bits 0..2")


def test_vm_range_entry_points_refuse_a_range_that_cuts_a_block():
    from revtape._vm import lib
    ct, b, e = _program_with_block()
    ct.forward(np.linspace(-1, 1, N))
    assert lib.rt_vm_forward_range(ct._p, b + 1, e + 1) == lib.RT_BADARG
    assert lib.rt_vm_forward_range(ct._p, 0, e) == lib.RT_BADARG
    assert lib.rt_vm_reverse_range(ct._p, b + 2, len(ct.code)) == lib.RT_BADARG
    assert lib.rt_vm_forward_range(ct._p, b, e + 1) == lib.RT_OK


def test_native_tier_runs_blocks_on_the_vm(monkeypatch, native_objects):
    from revtape.runtime import native
    if native.find_compiler() is None:
        pytest.skip("no C compiler")
    f = FAMILIES["rosenbrock"]
    x0 = np.random.default_rng(9).uniform(-1, 1, N)
    tape = rt.GradientTape(lambda x: f(x) + np.sum(np.take(x, [3, 1, 4]) ** 2), x0)
    vm, nt = rt.compile(tape, native=False), rt.compile(tape, native=True)
    assert nt.native_state == "native" and "BLOCK" in _opcodes(nt)
    for x in _points(x0):
        with np.errstate(all="ignore"):
            v1, g1 = vm.value_and_gradient(x)
            v2, g2 = nt.value_and_gradient(x)
        np.testing.assert_array_equal(_bits(v1), _bits(v2))
        np.testing.assert_array_equal(_bits(g1), _bits(g2))


def test_two_blocks_share_the_scratch(monkeypatch):
    # the tracked scale x[0] splits the run: two blocks, each with a
    # tile-local result, one scratch
    f = lambda x: np.sum(((x * x + 1.0) * x[0]) ** 2 - 2.0 * np.cos(x))
    x0 = np.random.default_rng(11).uniform(-1, 1, N)
    tape, fused, unfused = _pair(f, x0, monkeypatch)
    s = fused.stats()
    assert s["tiled_blocks"] == 2 and s["tile_local_results"] >= 2, fused.disassemble()
    _assert_same_bits(tape, fused, unfused, x0)


def test_pickled_blocked_tape_replays_the_same_bits():
    import pickle
    f = FAMILIES["rosenbrock"]
    x0 = np.random.default_rng(12).uniform(-1, 1, N)
    ct = rt.compile(rt.GradientTape(f, x0), native=False)
    again = pickle.loads(pickle.dumps(ct))
    assert "BLOCK" in _opcodes(again)
    v, g = ct.value_and_gradient(x0)
    v2, g2 = again.value_and_gradient(x0)
    np.testing.assert_array_equal(_bits(v), _bits(v2))
    np.testing.assert_array_equal(_bits(g), _bits(g2))

# ---------------------------------------------------------------- sum blocks
# csrc/instr/block.h rt_block_verify_sum, vm.c rt_block_sum_forward /
# rt_block_backward, blocks._closing_sum: a np.sum right after a tiled block,
# over one member's whole result, runs inside the block.  Its tiles are the
# subtrees of numpy's pairwise summation, so the value keeps np.sum's bits;
# the summed result may then be tile-local and its adjoint is filled with the
# sum's adjoint per tile instead of being zeroed and added to in passes of
# its own.  Every test compares, bit for bit, the sum block with the same
# tape compiled with the sum outside the block (REVTAPE_BLOCK_SUM=0's
# program) and without blocks at all: value, gradient, JVP, VJP,
# Hessian-vector products.

N_SUM = 1000
RNG_SUM = np.random.default_rng(11)
D_SUM = RNG_SUM.standard_normal(N_SUM)
D_SUM[::9] = 0.0


@pytest.fixture
def tiles_of_64(monkeypatch):
    # sum blocks: subtrees of at most 128 elements, 64..128
    monkeypatch.setattr(blocks, "TILE", 64)


sum_tiles = pytest.mark.usefixtures("tiles_of_64")


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


def _sum_points(x0):
    bad = x0.copy()
    n = x0.size
    bad[[3, n // 2, n - 3]] = [np.inf, np.nan, -np.inf]
    return (x0, 1.3 * x0 - 0.2, np.zeros_like(x0), -x0, bad)


def _assert_same(tape, cts, x0, tangents=True):
    for x in _sum_points(x0):
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


SUM_FAMILIES = {
    "rosenbrock": lambda x: np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2),
    "unary": lambda x: np.sum(np.exp(np.sin(x)) * np.tanh(x) + np.log1p(x * x)),
    "where-clip": lambda x: np.sum(np.where(x > 0, x * x, -x) + np.clip(x * D_SUM, -0.5, 0.5) * x),
    # the summed result is also read by members after it: its adjoint slot
    # gets their terms too and is filled with the sum's adjoint every tile
    "refill": lambda x: (lambda a: (lambda b: np.sum(a) * 0.5 + np.sum(b * b))(a * 3.0 + a))(
        x * x - D_SUM),
    # the summed result is read after the block too: it stays in the arena
    # and the sum's reverse adds its adjoint into it per tile
    "kept": lambda x: (lambda a: np.sum(a) + a[7] * a[N_SUM - 3])(np.sin(x) * x + D_SUM),
    "kept2": lambda x: (lambda a: np.sum(a) * 0.5 + np.sum((a * 3.0 + a) ** 2))(x * x - D_SUM),
    # a sum whose value is scaled: its adjoint is not 1
    "scaled": lambda x: 3.0 * np.sum((x - D_SUM) ** 2 * 0.5 + (D_SUM - 3.0 * x) ** 2) + x[0],
    # -0.0 terms: REDUCE_SUM's 0.0 + sum
    "neg-zero": lambda x: np.sum(-(x * 0.0) * x),
}


@sum_tiles
@pytest.mark.parametrize("name", list(SUM_FAMILIES))
def test_sum_block_equals_the_sum_outside_and_unfused(name, monkeypatch):
    x0 = np.random.default_rng(7).uniform(-1.2, 1.2, N_SUM)
    tape, fused, apart, unfused = _three(SUM_FAMILIES[name], x0, monkeypatch)
    assert _sum_blocks(fused), fused.disassemble()
    assert not _sum_blocks(apart) and "BLOCK" in _opcodes(apart)
    assert "BLOCK" not in _opcodes(unfused)
    _assert_same(tape, (fused, apart, unfused), x0)


@sum_tiles
def test_the_summed_result_leaves_the_arena(monkeypatch):
    x0 = np.linspace(-1, 1, N_SUM)
    _, fused, apart, _ = _three(SUM_FAMILIES["rosenbrock"], x0, monkeypatch)
    s, s2 = fused.stats(), apart.stats()
    assert s["tile_local_results"] == s2["tile_local_results"] + 1      # the AXPY's
    assert s["arena_values"] < s2["arena_values"] - (N_SUM - 1) + 5 * 128


@sum_tiles
def test_refill_and_kept_take_their_paths(monkeypatch):
    x0 = np.random.default_rng(3).uniform(-1, 1, N_SUM)
    for name, local in (("refill", True), ("kept", False), ("kept2", False)):
        _, fused, _, _ = _three(SUM_FAMILIES[name], x0, monkeypatch)
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


@sum_tiles
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


@sum_tiles
def test_tiles_are_the_pairwise_subtrees():
    for n in (129, 1000, 9999, 123457):
        for T in (128, 200, 512):
            starts = blocks._sum_tiles(n, T)
            lens = np.diff(starts + [n])
            assert starts[0] == 0 and np.all(lens > 0) and np.all(lens <= T)
            # each tile is a node of the recursion: a larger one would hold
            # a node of more than T elements
            assert len(lens) == 1 or np.all(lens > T // 2 - 8)


@sum_tiles
def test_repeated_calls_leave_nothing_behind(monkeypatch):
    """Adjoint slots that are written (not zeroed) in one call hold nothing
    into the next: one tape replayed at changing points gives what a fresh
    compile gives at each point."""
    x0 = np.random.default_rng(4).uniform(-1, 1, N_SUM)
    for name in ("rosenbrock", "refill", "kept"):
        f = SUM_FAMILIES[name]
        tape = rt.GradientTape(f, x0)
        ct = rt.compile(tape, native=False)
        g = np.empty(N_SUM)
        for k, x in enumerate(_sum_points(x0)[::-1] + _sum_points(x0)):
            with np.errstate(all="ignore"):
                v, _ = ct.value_and_gradient(x, out=g)
                fresh = rt.compile(tape, native=False)
                v2, g2 = fresh.value_and_gradient(x)
                np.testing.assert_array_equal(_bits(v), _bits(v2))
                np.testing.assert_array_equal(_bits(g), _bits(g2))
                if k % 3 == 0:          # a tangent sweep between reverse sweeps
                    t = np.ones(N_SUM)
                    np.testing.assert_array_equal(_bits(ct.jvp(x, t)), _bits(fresh.jvp(x, t)))


@sum_tiles
@pytest.mark.parametrize("name", ["refill", "rosenbrock"])
def test_hessian_of_a_sum_block(name, monkeypatch):
    # the gradient program (compiled at the first hvp) holds sum blocks too
    f = SUM_FAMILIES[name]
    x0 = np.random.default_rng(9).uniform(-1, 1, N_SUM)
    v = np.random.default_rng(10).standard_normal(N_SUM)
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


@sum_tiles
def test_batch_and_bind(monkeypatch):
    x0 = np.random.default_rng(12).uniform(-1, 1, N_SUM)
    tape, fused, apart, _ = _three(SUM_FAMILIES["rosenbrock"], x0, monkeypatch)
    X = np.stack([x0, -x0, 0.5 * x0])
    for threads in (1, 2):
        v1, g1 = fused.batch_value_and_gradient(X, threads=threads)
        v2, g2 = apart.batch_value_and_gradient(X, threads=threads)
        np.testing.assert_array_equal(_bits(v1), _bits(v2))
        np.testing.assert_array_equal(_bits(g1), _bits(g2))
    xb, gb = x0.copy(), np.empty(N_SUM)
    run = fused.bind(xb, gb)
    v = run()
    v2, g2 = apart.value_and_gradient(x0)
    assert _bits(v) == _bits(v2) and np.array_equal(_bits(gb), _bits(g2))


# ---------------------------------------------------------------- verifier

def _rosen():
    x0 = np.linspace(-1, 1, N_SUM)
    ct = rt.compile(rt.GradientTape(SUM_FAMILIES["rosenbrock"], x0), native=False)
    (b, s), = _sum_blocks(ct)
    return ct, b, s


@sum_tiles
def test_verifier_refuses_malformed_sums():
    ct, b, s = _rosen()
    x = np.linspace(-0.5, 0.9, N_SUM)
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
    refused(words((s, 4, N_SUM - 2)), "segments")
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
