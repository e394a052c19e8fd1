"""The fused scalar generator's reverse sweep (native._Piece, _scalar_rev):
known adjoints folded, `g != 0.0` tests dropped where a term stays finite,
first additions written as assignments.  Each rests on an argument about
signed zeros, nan and inf; these tests compare the bits with the VM's on
exactly those values."""

import itertools

import numpy as np
import pytest

import revtape as rt
from revtape.lower import compiler
from revtape.runtime import native
from revtape.core import ops
from revtape.bench import workloads
from revtape.runtime.compiled import CompiledTape

SPECIAL = (0.0, -0.0, np.nan, np.inf, -np.inf, 1e308, -5e-324, 2.5)


def _bits(a):
    return np.asarray(a, dtype=np.float64).view(np.int64)


def _same(a, b):
    """Bit for bit, except the sign of a nan: gcc folds `g * -1.0` into a
    negation in both the VM and the generated code, and which of the two
    compiles it as a sign flip of a nan differs by context (the generator
    before this change differed on the same points).  Every other bit,
    signed zeros included, must agree."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    na, nb = np.isnan(a), np.isnan(b)
    return np.array_equal(na, nb) and np.array_equal(_bits(np.where(na, 0.0, a)),
                                                     _bits(np.where(nb, 0.0, b)))


def _fused(ct):
    return "static int rtn_vg" in native.translate(ct._code, ct._ints, native._layout(ct))


def _zeros_and_signs(x):
    """Adjoints that are zero at run time (a product with x[2] = 0), -0.0
    partials (squares and products at -0.0), a negative CSUM term, an
    input reached by several known adjoints (x[0] + x[0] - x[1])."""
    a, b, c, d, e = x[0], x[1], x[2], x[3], x[4]
    t = (a * b) * c + (d - e) ** 2 * a - b * e + np.square(c) * d
    t = t + 100.0 * (e - d ** 2) ** 2 + (1.0 - a) ** 2 + np.exp(c) / (1.0 + d * d)
    return t + a + a - b + np.tanh(e) * 0.0


def _products(x):
    """Products whose adjoint is known (1.0, -1.0): each input's gradient is
    one term, so a -0.0 term must come out as the VM's 0.0 + -0.0 = +0.0."""
    return x[0] * x[1] - x[2] * x[3] + np.square(x[4]) - np.exp(x[3]) * x[4]


def _sum_only(x):
    """The output is a CSUM of inputs: every gradient entry is a known adjoint."""
    return x[0] + x[1] - x[2] + x[0] - x[3] + x[4]


def _points(x0):
    """x0 with each coordinate set to each special value, then pairs of them."""
    pts = [x0.copy()]
    for i, s in itertools.product(range(x0.size), SPECIAL):
        x = x0.copy()
        x[i] = s
        pts.append(x)
    for s, t in itertools.product(SPECIAL[:5], repeat=2):
        x = x0.copy()
        x[0], x[-1] = s, t
        pts.append(x)
    return pts


def _compare(vm, nt, x0):
    for x in _points(x0):
        v1, g1 = vm.value_and_gradient(x)
        v2, g2 = nt.value_and_gradient(x)
        assert _same(v1, v2) and _same(g1, g2), (x, g1, g2)


@pytest.mark.parametrize("f, dim", [(_zeros_and_signs, 5), (_products, 5), (_sum_only, 5),
                                    (workloads.rosenbrock_loop(n=5).f, 5),
                                    (workloads.eight_schools().f, 10)],
                         ids=["zeros-and-signs", "products", "sum-only", "rosenbrock-loop",
                              "eight-schools"])
def test_fused_reverse_equals_vm_on_signed_zeros_nan_inf(f, dim, rng):
    x0 = rng.normal(size=dim)
    tape = rt.GradientTape(f, x0)
    vm, nt = rt.compile(tape, native=False), rt.compile(tape, native=True)
    assert _fused(nt)
    _compare(vm, nt, x0)


def _vg_source(src):
    """The fused value_and_grad code of a generated source: from rtn_vg to the
    tangent sweeps that follow it (they keep the VM's tests)."""
    vg = src[src.index("static int rtn_vg"):]
    return vg[:vg.index("int rtn_tan")] if "int rtn_tan" in vg else vg


def test_a_sum_of_inputs_has_its_gradient_as_literals():
    """Known adjoints: no adjoint local is ever tested, the gradient is stored
    as constants (2.0 for x[0], -1.0 for x[2] ...)."""
    ct = rt.compile(rt.GradientTape(_sum_only, np.ones(5)), native=False)
    src = native.translate(ct._code, ct._ints, native._layout(ct))
    vg = _vg_source(src)
    assert "!= 0.0" not in vg and "d[0] = 2.0;" in vg and "d[2] = (-1.0);" in vg


def test_the_rosenbrock_loop_tests_only_adjoints_it_cannot_know():
    """Before: every reverse statement tested its adjoint (9 tests a term);
    now the CSUM terms, the AXPY addend and the constant-seeded SQDIFF have
    none, leaving two a term."""
    wl = workloads.rosenbrock_loop(n=100)
    ct = rt.compile(rt.GradientTape(wl.f, wl.x0), native=False)
    src = native.translate(ct._code, ct._ints, native._layout(ct))
    vg = _vg_source(src)
    assert vg.count("!= 0.0") == 2 * 99


def _with_variants(ct, variant):
    """The program with every scalar binary _VV instruction rewritten as its
    _VS or _SV form (the same arithmetic when n == 1), so the generator's VS
    and SV paths run; the compiler itself emits _VV for scalars."""
    state = ct.program.to_state()
    code = state["code"].copy()
    changed = 0
    for k in range(code.shape[0]):
        op = int(code[k, 0])
        name = ops.VM_OPCODES[op & 0xFFFF]
        if name.endswith("_VV") and code[k, 1] == 1 and not name.startswith("WHERE"):
            code[k, 0] = (op & ~0xFFFF) | ops.OPCODE[name[:-3] + "_" + variant]
            changed += 1
    assert changed
    state["code"] = code
    return state


@pytest.mark.parametrize("variant", ["VS", "SV"])
@pytest.mark.parametrize("f, dim", [(_zeros_and_signs, 5), (_products, 5),
                                    (workloads.eight_schools().f, 10)],
                         ids=["zeros-and-signs", "products", "eight-schools"])
def test_vs_and_sv_forms_equal_the_vm(f, dim, variant, rng):
    x0 = rng.normal(size=dim)
    tape = rt.GradientTape(f, x0)
    state = _with_variants(rt.compile(tape, native=False), variant)
    vm = CompiledTape(tape, _program=compiler.Program.from_state(state), native=False)
    nt = CompiledTape(tape, _program=compiler.Program.from_state(state), native=True)
    assert _fused(nt)
    _compare(vm, nt, x0)


@pytest.mark.parametrize("f", [_zeros_and_signs, _products, _sum_only],
                         ids=["zeros-and-signs", "products", "sum-only"])
def test_known_adjoints_crossing_pieces_equal_the_vm(f, monkeypatch, rng):
    """Pieces of 3 instructions: known adjoints are written back as literals
    by a later piece and read from the arena (unknown) by an earlier one."""
    monkeypatch.setattr(native, "SCALAR_CHUNK", 3)
    x0 = rng.normal(size=5)
    tape = rt.GradientTape(f, x0)
    vm, nt = rt.compile(tape, native=False), rt.compile(tape, native=True)
    assert "rtn_vgrev_1(" in native.translate(nt._code, nt._ints, native._layout(nt))
    _compare(vm, nt, x0)


# ------------------------------------------------ loops (native._periodic_runs, _roll)
def _array_loop(x):
    y = x
    for k in range(40):
        y = np.sin(y) * 0.5 + x * (0.01 * k) - np.square(y - 0.25) * 0.1
    return np.sum(y)


def _guarded_loop(x):
    y = x[0]
    for k in range(60):
        y = y + 0.01 * np.cos(y) if y > -100.0 else y - 1.0     # a guard each step
        y = y * 0.999 + x[1]
    return y


@pytest.mark.parametrize("f, x0, rolls", [(workloads.chain(L=300).f, np.array([0.5]), True),
                                          (workloads.rosenbrock_loop(n=60).f,
                                           workloads.rosenbrock_loop(n=60).x0, True),
                                          (_array_loop, np.linspace(-1.0, 1.5, 4), True),
                                          (_guarded_loop, np.array([0.3, 0.01]), False)],
                         ids=["chain", "rosenbrock-loop", "array-loop", "guarded-loop"])
def test_rolled_loops_equal_the_vm(f, x0, rolls, monkeypatch):
    """Repeated blocks become C loops (a program of ROLL_MIN instructions or
    more; 50 here): the same statements in the same order, so the VM's bits,
    on every sweep and on signed zeros, nan and inf."""
    monkeypatch.setattr(native, "ROLL_MIN", 50)
    tape = rt.GradientTape(f, x0)
    vm, nt = rt.compile(tape, native=False), rt.compile(tape, native=True)
    src = native.translate(nt._code, nt._ints, native._layout(nt))
    # a guard in every step leaves no block to repeat: straight-line code
    assert ("for (k_ = 0;" in src) == rolls and ("static int rtn_vg" in src) != rolls
    pts = _points(x0) if x0.size > 1 else [np.array([v]) for v in (0.5,) + SPECIAL]
    for x in pts:
        try:
            v1, g1 = vm.value_and_gradient(x)
        except rt.BranchChanged:
            with pytest.raises(rt.BranchChanged):
                nt.value_and_gradient(x)
            continue
        v2, g2 = nt.value_and_gradient(x)
        assert _same(v1, v2) and _same(g1, g2), x
        assert _same(vm.forward(x), nt.forward(x))
        assert _same(vm.vjp(x, -0.5), nt.vjp(x, -0.5))        # the reverse sweep alone


def test_a_long_loop_compiles_to_a_short_library(monkeypatch):
    """chain L=1e4: 30000 instructions; straight-line C was 2.2 MB of machine
    code and minutes of gcc, the loop is one statement per block."""
    wl = workloads.chain(L=10000)
    ct = rt.compile(rt.GradientTape(wl.f, wl.x0), native=False)
    runs = native._periodic_runs(ct._code.tolist())
    assert sum(p * r for _, p, r in runs) >= len(ct) - 10
    src = native.translate(ct._code, ct._ints, native._layout(ct))
    assert src.count("for (k_ =") == 2 and "static int rtn_vg" not in src


def test_code_that_adds_to_an_adjoint_directly_sees_its_known_value():
    """_Piece.a (for generator code that writes `a<slot> += ...` itself):
    an adjoint folded to a known value its local does not hold is assigned
    that value in the lvalue, then treated as unknown."""
    native._FAM = native._FAM or native._families()
    P = native._Piece(set(), started=set(), seed=9)
    assert P.add(3, "g * 1.0", tk=1.0, t_nz=True) == "" and P.known[3] == 1.0
    assert P.a(3) == "*(a3 = 1.0, &a3)" and 3 not in P.known
    assert P.a(3) == "a3"
    assert P.a(4) == "a4" and 4 not in P.known           # still its start, 0.0
    assert P.add(4, "t") == "a4 += t;"


def test_a_final_long_sum_moved_into_the_reverse_sweep_equals_the_vm(rng):
    """_defer_last_sum: the program's closing CSUM is added up between the
    reverse statements; the same additions in the same order."""
    wl = workloads.rosenbrock_loop(n=12)
    tape = rt.GradientTape(wl.f, wl.x0)
    vm, nt = rt.compile(tape, native=False), rt.compile(tape, native=True)
    src = native.translate(nt._code, nt._ints, native._layout(nt))
    vg = src[src.index("static int rtn_vg"):]
    o = int(nt._code[-1, 2])
    assert f"const double c{o}_0 = " in vg and f"v[{o}] = c{o}_10;" in vg
    _compare(vm, nt, wl.x0 + 0.1 * rng.normal(size=12))
    x = wl.x0.copy()
    x[3] = np.nan                                     # the sum goes nan, as the VM's does
    assert _same(vm.value_and_gradient(x)[0], nt.value_and_gradient(x)[0])
    assert _same(vm.forward(x), nt.forward(x))
