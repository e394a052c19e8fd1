"""The compiler's fusions (src/revtape/lower/compiler.py: fusions, sum_chains
and the array fusions).  Fused array pairs (radon's speed): the
compiler forms AXPY (`u + s*v`, s one element) and SQDIFF (`(u - v)**2`) over
whole arrays, as it does for scalars.  A fused program must give the unfused
program's bits -- value, gradient, JVP, Hessian -- at every point,
nan/inf/zero adjoints included, and must not fuse where overlapping adjoint
regions would receive their terms in another order.  Below them the scalar
pairs (AXPY, SQDIFF) and sum chains (CSUM)."""

import numpy as np
import pytest

import revtape as rt
from revtape.lower import compiler
from revtape.core import ops
from revtape.bench import workloads
from revtape.runtime.compiled import CompiledTape
from conftest import bits as _bits


def _opcodes(ct):
    return [ops.VM_OPCODES[w & 0xFFFF] for w in ct.code[:, 0]]


def _pair(f, x0, monkeypatch):
    tape = rt.GradientTape(f, x0)
    fused = rt.compile(tape)
    with monkeypatch.context() as m:
        m.setattr(compiler._Lowering, "fusions", lambda self: ({}, {}))
        unfused = rt.compile(tape)
    return tape, fused, unfused


def _assert_same_bits(tape, fused, unfused, xs, tangents=True):
    for x in xs:
        v, g = fused.value_and_gradient(x)
        v2, g2 = unfused.value_and_gradient(x)
        np.testing.assert_array_equal(_bits(v), _bits(v2))
        np.testing.assert_array_equal(_bits(g), _bits(g2))
        if np.all(np.isfinite(g)):
            v_ref, g_ref = tape.value_and_gradient(x)
            np.testing.assert_allclose(v, v_ref, rtol=1e-13)
            np.testing.assert_allclose(g, g_ref, rtol=1e-12, atol=1e-12)
        if tangents:
            t = np.random.default_rng(3).standard_normal(np.shape(x))
            np.testing.assert_array_equal(_bits(fused.jvp(x, t)), _bits(unfused.jvp(x, t)))


RNG = np.random.default_rng(0)
DATA = RNG.standard_normal(7)
IDX = np.array([2, 0, 0, 4, 1, 2, 3])
W = np.array([1.0, 0.0, 2.0, -1.0, 0.0, 0.5, 3.0])        # zero weights: zero adjoints


@pytest.mark.parametrize("f, n_axpy, n_sqdiff", [
    # (AXPY counts GAXPY, the AXPY whose u is a gather: x[IDX])
    (lambda x: np.sum(W * (DATA + x[0] * x[1:8])), 1, 0),           # c tracked
    (lambda x: np.sum(W * (x[1:8] * x[0] + DATA)), 1, 0),           # product first, v*s
    (lambda x: np.sum(W * (x[1:8] + x[0] * DATA)), 1, 0),           # u tracked, c data
    (lambda x: np.sum(W * (x[1:8] + x[0] * x[1:8])), 1, 0),         # u and v the same slots
    (lambda x: np.sum(W * (x[IDX] + 2.5 * x[1:8])), 1, 0),          # a constant scale
    (lambda x: np.sum(W * (x[IDX] + x[8] * DATA) ** 2), 1, 0),      # radon's shape
    (lambda x: np.sum(W * (x[1:8] - DATA) ** 2), 0, 1),
    (lambda x: np.sum(W * (DATA - x[IDX]) ** 2), 0, 1),
    (lambda x: np.sum(W * (x[1:8] - x[1:8]) ** 2), 0, 1),           # a == b
    (lambda x: np.sum(W * (x[2:9] - x[1:8]) ** 2), 0, 1),           # shifted overlap
    (lambda x: np.sum(W * (x[1:8] - x[2:9]) ** 2), 0, 1),           # shifted the other way
    (lambda x: np.sum((DATA - (x[IDX] + x[0] * DATA)) ** 2), 1, 1),
    (lambda x: np.sum(((x[1:8] - DATA) ** 2).reshape(7, 1) * W[:, None]), 0, 1),
])
def test_array_pairs_fuse_and_give_the_pairs_bits(f, n_axpy, n_sqdiff, monkeypatch):
    x0 = np.linspace(-1.3, 1.1, 9)
    tape, fused, unfused = _pair(f, x0, monkeypatch)
    names = _opcodes(fused)
    n_gaxpy, n_ssd = names.count("GAXPY"), names.count("SSD")
    assert names.count("AXPY") + n_gaxpy == n_axpy
    assert names.count("SQDIFF") + n_ssd == n_sqdiff
    assert len(fused) == len(unfused) - n_axpy - n_gaxpy - n_sqdiff - n_ssd
    assert all(w[1] > 1 for w in fused.code
               if ops.VM_OPCODES[w[0] & 0xFFFF] in ("AXPY", "GAXPY", "SQDIFF", "SSD"))
    bad = x0.copy()
    bad[[1, 3]] = [np.inf, np.nan]                 # inf/nan meet the zero weights' adjoints
    zeros = np.zeros(9)
    _assert_same_bits(tape, fused, unfused, (x0, 1.7 * x0 - 0.3, zeros, -zeros, bad))
    H = fused.hessian(x0)
    with monkeypatch.context() as m:           # the Hessian program unfused too
        m.setattr(compiler._Lowering, "fusions", lambda self: ({}, {}))
        H2 = unfused.hessian(x0)
    np.testing.assert_array_equal(_bits(H), _bits(H2))
    np.testing.assert_allclose(H, tape.hessian(x0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("f", [
    lambda x: np.sum(W * (x[2:9] + x[0] * x[1:8])),     # u and v overlap shifted: v's terms first
    lambda x: np.sum(W * (x[1:8] + x[3] * DATA)),       # s inside u's slots
    lambda x: np.sum(W * (DATA + x[3] * x[1:8])),       # s inside v's slots
])
def test_array_axpy_is_not_formed_where_adjoint_regions_overlap(f, monkeypatch):
    x0 = np.linspace(-1.3, 1.1, 9)
    tape, fused, unfused = _pair(f, x0, monkeypatch)
    assert "AXPY" not in _opcodes(fused) and len(fused) == len(unfused)
    _assert_same_bits(tape, fused, unfused, (x0,))


@pytest.mark.parametrize("f, fused_as", [
    (lambda x: np.sum(W * (x[1:][IDX] + x[0] * DATA)), "GAXPY"),
    (lambda x: np.sum(W * (x[IDX] + x[0] * DATA)), "AXPY"),          # s among the gathered
    (lambda x: np.sum(W * (x[IDX + 1] + x[0] * x[1:8])), "AXPY"),    # gathered slots meet v's
    (lambda x: np.sum(W * (x[1:][IDX] + np.sin(x[1]) * DATA)), "AXPY"),  # sin reads x[1] between
    (lambda x: np.sum(W * (x[4:][IDX] + np.sin(x[1]) * DATA)), "GAXPY"),  # ... not gathered
    (lambda x: np.sum(W * ((2.0 * x[1:])[IDX] + x[0] * DATA)), "GAXPY"),  # an intermediate
    (lambda x: np.sum(W * ((2.0 * x[1:])[IDX] + x[0] * x[1:8])), "GAXPY"),  # v tracked
    (lambda x: np.sum(W * ((t := x[1:][IDX]) + x[0] * DATA)) + np.sum(t ** 2), "AXPY"),  # used twice
])
def test_gather_fuses_into_axpy_only_where_its_scatter_keeps_its_order(f, fused_as, monkeypatch):
    x0 = np.linspace(-1.3, 1.1, 9)
    tape, fused, unfused = _pair(f, x0, monkeypatch)
    names = _opcodes(fused)
    assert fused_as in names and names.count("AXPY") + names.count("GAXPY") == 1
    zeros = np.zeros(9)
    bad = x0.copy()
    bad[[0, 4]] = [np.inf, np.nan]
    _assert_same_bits(tape, fused, unfused, (x0, 1.7 * x0 - 0.3, zeros, bad))
    H = fused.hessian(x0)
    with monkeypatch.context() as m:
        m.setattr(compiler._Lowering, "fusions", lambda self: ({}, {}))
        H2 = unfused.hessian(x0)
    np.testing.assert_array_equal(_bits(H), _bits(H2))


def test_verifier_refuses_a_bad_gaxpy_record():
    from revtape.runtime.compiled import CompiledTape
    ct = rt.compile(rt.GradientTape(lambda x: np.sum((x[1:][IDX] + x[0] * DATA) ** 2),
                                    np.linspace(-1, 1, 9)))
    k = _opcodes(ct).index("GAXPY")
    c = int(ct.code[k, 5])
    n_vals = ct.program.n_vals
    for pos, bad, msg in ((c, n_vals - 3, "operand z"), (c, -1, "operand z"),
                          (c + 1, 10**6, "operand a"), (c + 1, -2, "negative input length"),
                          (c + 2, 9, "index"), (c + 8, -1, "index"),
                          (c, int(ct.code[k, 2]), "operand z")):   # z over the output
        state = ct.program.to_state()
        ints = state["ints"].copy()
        ints[pos] = bad
        state["ints"] = ints
        with pytest.raises(rt.VerificationError, match=msg):
            CompiledTape(ct.tape, _program=compiler.Program.from_state(state))
    state = ct.program.to_state()
    code = state["code"].copy()
    code[k, 5] = len(state["ints"]) - 3             # the record runs off the int table
    state["code"] = code
    with pytest.raises(rt.VerificationError):
        CompiledTape(ct.tape, _program=compiler.Program.from_state(state))


LONG = RNG.standard_normal(300)


@pytest.mark.parametrize("f, n_ssd", [
    (lambda x: np.sum((x[1:8] - DATA) ** 2), 1),
    (lambda x: np.sum((x[:5] - x[1:6]) ** 2), 1),                   # n < 8, overlapping
    (lambda x: np.sum((x - 0.5 * x[::-1]) ** 2), 1),                # 8 <= n <= 128
    (lambda x: np.sum((x[np.arange(300) % 9] - LONG) ** 2), 1),      # n > 128: pairwise halves
    (lambda x: np.sum((x[np.arange(300) % 9] - LONG) ** 2, keepdims=True)[0], 1),
    (lambda x: np.sum((x.reshape(3, 3) - DATA[:3]) ** 2), 0),       # broadcast operand: apart
    (lambda x: np.sum((x.reshape(3, 3) - x.reshape(3, 3).T) ** 2, axis=(0, 1)), 1),
    (lambda x: np.sum(np.sum((x.reshape(3, 3) - 1.0) ** 2, axis=1)), 0),   # a partial sum
    (lambda x: np.sum((x[1:8] - DATA) ** 2) * np.sum(x[1:8]), 1),   # x read after: fine
    (lambda x: (q := (x[1:8] - DATA) ** 2, r := np.sin(x[2]), np.sum(q) * r)[2], 0),  # between
    (lambda x: (q := (x[1:8] - DATA) ** 2, r := np.sin(x[0]), np.sum(q) * r)[2], 1),  # not x[1:8]
    (lambda x: np.sum((t := (x[1:8] - DATA) ** 2)) + t[0], 0),      # the squares read again
    (lambda x: np.sum((x[1:8] - DATA) ** 2) + np.sum((x[:3] - DATA[:3]) ** 2), 2),
])
def test_sum_of_squared_differences_fuses_into_ssd(f, n_ssd, monkeypatch):
    x0 = np.linspace(-1.3, 1.1, 9)
    tape, fused, unfused = _pair(f, x0, monkeypatch)
    names = _opcodes(fused)
    assert names.count("SSD") == n_ssd
    bad = x0.copy()
    bad[[2, 5]] = [np.inf, np.nan]
    zeros = np.zeros(9)
    _assert_same_bits(tape, fused, unfused, (x0, 1e3 * x0 - 0.3, zeros, -zeros, bad))
    H = fused.hessian(x0)
    with monkeypatch.context() as m:
        m.setattr(compiler._Lowering, "fusions", lambda self: ({}, {}))
        H2 = unfused.hessian(x0)
    np.testing.assert_array_equal(_bits(H), _bits(H2))
    np.testing.assert_allclose(H, tape.hessian(x0), rtol=1e-12, atol=1e-12)


def test_ssd_value_is_numpys_pairwise_sum():
    # bit for bit np.sum of the stored squares, at every length's code path
    for n in (1, 5, 8, 9, 128, 129, 300, 1000):
        d = RNG.standard_normal(n) * 10.0 ** RNG.integers(-5, 5, n)
        ct = rt.compile(rt.GradientTape(lambda x: np.sum((x - d[::-1]) ** 2), d))
        assert "SSD" in _opcodes(ct) or n == 1
        want = np.sum((d - d[::-1]) ** 2)
        assert _bits(ct.forward(d)) == _bits(want)


def test_broadcast_operands_stay_apart():
    # u or v broadcast (a gather first) or a scale of more than one element:
    # not the fused shapes
    x0 = np.linspace(-1.3, 1.1, 9)
    for f in (lambda x: np.sum(x[0:1] + x[1] * x[1:8]),
              lambda x: np.sum(x[1:8] + x[0:7] * x[1:8]),
              lambda x: np.sum((x[1:8].reshape(7, 1) - x[2:5]) ** 2)):
        ct = rt.compile(rt.GradientTape(f, x0))
        names = _opcodes(ct)
        assert "AXPY" not in names and "SQDIFF" not in names
        np.testing.assert_allclose(ct.gradient(x0), rt.gradient(f, x0), rtol=1e-13)


def test_radon_fuses_its_residual_and_keeps_the_unfused_bits(monkeypatch):
    wl = workloads.radon()
    tape, fused, unfused = _pair(wl.f, wl.x0, monkeypatch)
    names = _opcodes(fused)
    assert names.count("GAXPY") == 1 and names.count("SSD") == 1
    assert "MUL_SV" not in names and "GATHER" not in names and "SQDIFF" not in names
    assert fused.program.n_vals < unfused.program.n_vals
    assert "GAXPY(@4[ints" in fused.disassemble() and "[1] = SSD(@1008, @" in fused.disassemble()
    xs = [wl.x0, wl.x0 + 0.1 * RNG.standard_normal(wl.x0.size)]
    _assert_same_bits(tape, fused, unfused, xs)
    v, g = fused.value_and_gradient(xs[1])
    v_np, g_np = wl.numpy_vg(xs[1])
    assert v == pytest.approx(v_np, rel=1e-13)
    np.testing.assert_allclose(g, g_np, rtol=1e-11, atol=1e-11)
    # bound calls and batches run the same kernels
    x, gb = xs[1].copy(), np.empty_like(xs[1])
    assert fused.bind(x, gb)() == v
    np.testing.assert_array_equal(gb, g)
    X = np.stack(xs)
    vals, G = fused.batch_value_and_gradient(X)
    np.testing.assert_array_equal(G[1], g)


def test_radon_hessian_programs_agree(monkeypatch):
    wl = workloads.radon(N=60, J=7)
    tape, fused, unfused = _pair(wl.f, wl.x0, monkeypatch)
    v = RNG.standard_normal(wl.x0.size)
    np.testing.assert_allclose(fused.hvp(wl.x0, v), tape.hvp(wl.x0, v), rtol=1e-11, atol=1e-11)
    np.testing.assert_array_equal(_bits(fused.jvp(wl.x0, v)), _bits(unfused.jvp(wl.x0, v)))


def test_native_tier_runs_the_array_pairs_bit_for_bit(native_objects):
    from revtape.runtime import native
    try:
        native.find_compiler()
    except rt.RevtapeError as e:
        pytest.skip(str(e))
    wl = workloads.radon(N=60, J=7)
    tape = rt.GradientTape(wl.f, wl.x0)
    vm, nt = rt.compile(tape), rt.compile(tape, native=True)
    assert {"GAXPY", "SSD"} <= set(_opcodes(vm))
    x = wl.x0 + 0.05
    v, g = vm.value_and_gradient(x)
    v2, g2 = nt.value_and_gradient(x)
    assert _bits(v) == _bits(v2)
    np.testing.assert_array_equal(_bits(g), _bits(g2))


@pytest.mark.parametrize("f", [
    lambda x: x[0] + 0.001 * np.sin(x[1]),
    lambda x: 0.5 * x[0] * x[1] + x[2],
    lambda x: x[0] * x[0] + x[0] * 3.0,
    lambda x: x[2] + x[1] * np.exp(x[0]) + (x[0] - x[2]) ** 2,
])
def test_scalar_pairs_tangents_have_the_pairs_bits(f, monkeypatch):
    # the fused AXPY's tangent is MUL's then ADD's, rounded as the pair
    x0 = np.array([0.37, -1.21, 2.9])
    tape, fused, unfused = _pair(f, x0, monkeypatch)
    assert len(fused) < len(unfused)
    _assert_same_bits(tape, fused, unfused, (x0, 3.1 * x0, np.array([0.0, np.inf, 1.0])))
    for t in np.random.default_rng(5).standard_normal((5, 3)):
        assert _bits(fused.jvp(x0, t)) == _bits(unfused.jvp(x0, t))
    H = fused.hessian(x0)
    with monkeypatch.context() as m:           # the Hessian program unfused too
        m.setattr(compiler._Lowering, "fusions", lambda self: ({}, {}))
        H2 = unfused.hessian(x0)
    np.testing.assert_array_equal(_bits(H), _bits(H2))


def test_verifier_refuses_ssd_operands_outside_the_arena():
    from revtape.runtime.compiled import CompiledTape
    ct = rt.compile(rt.GradientTape(lambda x: np.sum((x[1:8] - DATA) ** 2), np.ones(9)))
    k = _opcodes(ct).index("SSD")
    n_vals = ct.program.n_vals
    for col, val in ((1, n_vals), (1, -1), (3, n_vals - 3), (4, -5), (2, 0)):
        state = ct.program.to_state()
        code = state["code"].copy()
        code[k, col] = val
        state["code"] = code
        with pytest.raises(rt.VerificationError):
            CompiledTape(ct.tape, _program=compiler.Program.from_state(state))
    # the output is one slot, not n: an output right after operand b is fine
    assert ct.code[k, 1] == 7


# ---------------------------------------------------------------- scalar pairs and sum chains

def _assert_same_as_unfused(fused, unfused, tape, xs):
    """A fused scalar program gives the unfused one's numbers, and the reference's values."""
    for x in xs:
        v, g = fused.value_and_gradient(x)
        v2, g2 = unfused.value_and_gradient(x)
        assert v == v2
        np.testing.assert_array_equal(g, g2)
        v_ref, g_ref = tape.value_and_gradient(x)
        assert v == pytest.approx(v_ref, rel=1e-15)
        np.testing.assert_allclose(g, g_ref, rtol=1e-14)


@pytest.mark.parametrize("f", [
    lambda x: x[0] + 0.001 * np.sin(x[1]),                 # a + c*b: fused
    lambda x: 0.5 * x[0] * x[1] + x[0],                     # product on the left
    lambda x: x[0] * x[0] + x[0] * 3.0,                     # b == c, two candidates
    lambda x: x[1] + x[0] * x[1] + x[0] * x[1] * 2.0,       # a product used twice stays apart
    lambda x: (x[0] * 2.0 + x[1]) * (x[0] * 2.0) + x[0],
    lambda x: (x[0] - x[1]) ** 2 + (1.0 - x[0]) ** 2,        # square of a difference: fused
    lambda x: (x[0] - x[0]) ** 2 + 100.0 * (x[1] - x[0] ** 2) ** 2,
    lambda x: (x[0] - x[1]) ** 2 * (x[0] - x[1]),            # difference used twice stays apart
])
def test_fused_pairs_give_the_same_bits_as_the_pair(f, monkeypatch):
    x0 = np.array([0.37, -1.21])
    tape = rt.GradientTape(f, x0)
    fused = rt.compile(tape)
    monkeypatch.setattr(compiler._Lowering, "fusions", lambda self: ({}, {}))
    pair = rt.compile(tape)
    assert len(fused) < len(pair)
    _assert_same_as_unfused(fused, pair, tape, (x0, x0 * 1.7, -x0))


def test_a_product_whose_operand_is_read_again_before_the_add_stays_apart():
    # x[0] is read by the product and, through another x[0], by sin in between:
    # fused, the product's adjoint would reach x[0] before sin's does.
    def f(x):
        p = x[0] * x[1]
        q = np.sin(x[0])
        return q + p
    ct = rt.compile(rt.GradientTape(f, np.array([0.3, 0.7])))
    names = _opcodes(ct)
    assert "AXPY" not in names and names.count("MUL_VV") == 1
    np.testing.assert_allclose(ct.gradient(np.array([0.3, 0.7])), [np.cos(0.3) + 0.7, 0.3], rtol=1e-15)


def _sum_of_four(x):
    s = np.sin(x[0]) + np.cos(x[1])
    t = s + np.exp(x[2])
    return t * s + np.tanh(x[3])                              # a partial sum read twice


@pytest.mark.parametrize("f, n_csum", [
    (lambda x: np.exp(x[0]) + np.sin(x[1]) - np.cos(x[2]) + np.tanh(x[3]), 1),
    (lambda x: sum(np.sin(x[i]) ** 2 for i in range(4)), 1),  # starts at the constant 0
    (lambda x: np.sin(x[0]) - (np.cos(x[1]) + np.exp(x[2]) - np.tanh(x[3])), 1),
    (lambda x: x[0] + x[1] - x[2] + x[3], 0),                 # terms are aliases of x
    (_sum_of_four, 0),
    (lambda x: np.exp(x[1]) + (t := np.sin(x[0])) + np.cos(x[1]) + t, 0),  # a term read twice
    (lambda x: np.abs(x[0]) + np.sqrt(x[1] ** 2) - np.maximum(x[2], 0.0) + np.log(x[3] ** 2), 1),
])
def test_sum_chains_give_the_same_bits_as_the_adds(f, n_csum, monkeypatch):
    x0 = np.array([0.37, -1.21, 0.0, 2.5])
    tape = rt.GradientTape(f, x0)
    fused = rt.compile(tape)
    monkeypatch.setattr(compiler._Lowering, "sum_chains", lambda self, inner, outer: (set(), {}))
    adds = rt.compile(tape)
    names = _opcodes(fused)
    assert names.count("CSUM") == n_csum and (len(fused) < len(adds)) == (n_csum > 0)
    _assert_same_as_unfused(fused, adds, tape, (x0, x0 * 1.7, -x0 + 0.1))


def test_rosenbrock_terms_add_up_in_one_csum():
    wl = workloads.rosenbrock_loop(n=100)
    ct = rt.compile(rt.GradientTape(wl.f, wl.x0))
    names = _opcodes(ct)
    assert names.count("CSUM") == 1 and len(names) == 4 * 99 + 1
    assert "CSUM(@" in ct.disassemble()
    x = wl.x0 + 0.2
    v, g = ct.value_and_gradient(x)
    v_ref, g_ref = wl.numpy_vg(x)
    assert v == pytest.approx(v_ref, rel=1e-13)
    np.testing.assert_allclose(g, g_ref, rtol=1e-12)


def test_verifier_refuses_csum_terms_outside_the_arena():
    ct = rt.compile(rt.GradientTape(lambda x: np.exp(x[0]) + np.sin(x[1]) - np.cos(x[0]), np.ones(2)))
    k = _opcodes(ct).index("CSUM")
    for bad_term in (ct.program.n_vals, ~ct.program.n_vals, 2**31 - 1, -2**31):
        state = ct.program.to_state()
        ints = state["ints"].copy()
        ints[ct.code[k, 5]] = bad_term
        state["ints"] = ints
        with pytest.raises(rt.VerificationError, match="term 0"):
            CompiledTape(ct.tape, _program=compiler.Program.from_state(state))
    for col, val in ((1, 0), (1, 10**6), (5, 10**6)):  # no terms; more terms than ints
        state = ct.program.to_state()
        code = state["code"].copy()
        code[k, col] = val
        state["code"] = code
        with pytest.raises(rt.VerificationError):
            CompiledTape(ct.tape, _program=compiler.Program.from_state(state))


def test_chain_steps_fuse_into_axpy():
    wl = workloads.chain(50)
    ct = rt.compile(rt.GradientTape(wl.f, wl.x0))
    names = _opcodes(ct)
    assert names.count("AXPY") == 50 and len(names) == 150
    np.testing.assert_allclose(ct.gradient(wl.x0), wl.numpy_vg(wl.x0)[1], rtol=1e-13)
