"""Fused, tiled elementwise blocks (csrc/instr/block.h, csrc/vm/blocks.c,
src/revtape/lower/blocks.py).

A run of elementwise instructions over the same n elements runs tile by
tile, forward, reverse and tangent, with the results nobody else reads kept
in a tile-sized scratch.  Every test compares the blocked program with the
same tape compiled without blocks, bit for bit (value, gradient, JVP,
Hessian), and with the reference replay; tiles of 32 elements over n = 150
give several whole tiles and a short last one."""

import numpy as np
import pytest

import revtape as rt
from revtape.lower import blocks
from revtape.core import ops
from revtape.runtime.compiled import CompiledTape
from revtape.lower.compiler import Program

N = 150
RNG = np.random.default_rng(5)
D = RNG.standard_normal(N)
D[::7] = 0.0                                     # zero data: zero adjoints in places
W = RNG.standard_normal(N - 1)


@pytest.fixture(autouse=True)
def small_tiles(monkeypatch):
    monkeypatch.setattr(blocks, "TILE", 32)


def _bits(a):
    return np.asarray(a, dtype=np.float64).view(np.int64)


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
        # the sum closes the block (tests/test_block_sum.py): the AXPY's
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


def test_native_tier_runs_blocks_on_the_vm(monkeypatch):
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
