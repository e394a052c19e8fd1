"""The compiler's C half (csrc/compile/tapeflow.c).  The scalar lowering in C
(rt_tape_fuse, rt_tape_emit; lower/clower.py: CLowering.lower_c) builds the programs
the Python lowering builds, word for word: on the workloads, conftest's
recipes, and random tapes mixing scalar code, fusable pairs, sum chains,
views, guards and array instructions -- short tapes (tuple lists) and tapes
in columns, with and without guards, all or none of the inputs
differentiated.  The data-flow pass in C (rt_tape_flow) marks what its
Python twin marks."""

import numpy as np
import pytest

import revtape as rt
import revtape.trace.tape as tape_mod
from revtape.lower import analysis, clower, compiler, optable
from revtape.core import ops
from revtape.bench import workloads as W

from conftest import program_bytes as _program_bytes, recipe_tapes, recipes
from conftest import record_quietly as _record


def random_function(seed, n=6, steps=60):
    """A recorded function drawn from `seed`: each step appends one value to a
    pool computed from earlier ones (indices drawn back from the end, so
    products, differences and partial sums are often used once and close to
    where they are made -- what the fusions look for -- and sometimes not)."""
    rng = np.random.default_rng(seed)
    kinds = ["add", "sub", "mul", "square", "axpy", "sqdiff", "sin", "exp", "const",
             "item", "chain", "chain_sub", "guard", "reuse", "array_axpy", "array_ssd",
             "array_sum", "take_axpy", "neg_const", "where"]
    p = np.array([8, 6, 8, 4, 8, 6, 4, 3, 4, 5, 8, 4, 3, 3, 2, 2, 2, 2, 2, 1], float)
    plan = [(kinds[rng.choice(len(kinds), p=p / p.sum())], int(rng.integers(1, 6)),
             int(rng.integers(1, 6)), int(rng.integers(0, n)), float(rng.normal()))
            for _ in range(steps)]

    def f(x):
        pool = [x[0], x[1] * 1.5]
        s = None
        for kind, i, j, m, c in plan:
            a, b = pool[-min(i, len(pool))], pool[-min(j, len(pool))]
            if kind == "add":
                v = a + b
            elif kind == "sub":
                v = a - b
            elif kind == "mul":
                v = a * b
            elif kind == "square":
                v = a ** 2
            elif kind == "axpy":
                v = a + b * x[m]
            elif kind == "sqdiff":
                v = (a - x[m]) ** 2
            elif kind == "sin":
                v = np.sin(a)
            elif kind == "exp":
                v = np.exp(np.tanh(a))
            elif kind == "const":
                v = c * a + 0.5
            elif kind == "neg_const":
                v = 2.0 - c * a
            elif kind == "item":
                v = x[m]
            elif kind in ("chain", "chain_sub"):
                t = np.sin(a) * c
                s = t if s is None else (s + t if kind == "chain" else s - t)
                v = t if i == 3 else s       # the partial sum read again now and then
            elif kind == "guard":
                v = a * 2.0 if a > 0.1 else np.cos(a)
            elif kind == "reuse":
                v = a * a + a
            elif kind == "array_axpy":
                v = np.sum(x + a * (x * c))
            elif kind == "array_ssd":
                v = np.sum((x - x[::-1]) ** 2)
            elif kind == "array_sum":
                v = np.sum(np.sin(x) * x[m])
            elif kind == "take_axpy":
                v = np.sum((2.0 * x)[[0, 2, 2, 1]] + (b + 0.25) * np.arange(1.0, 5.0))
            else:
                v = np.sum(np.where(x > a, x, 2.0 * x))
            pool.append(v)
        tail = pool[-1] + pool[len(pool) // 2] * pool[-3]
        return tail if s is None else tail + s

    return f, np.linspace(-0.8, 1.1, n) + 0.05 * seed % 0.3


def _both(tape, monkeypatch, **kw):
    """The program from the C lowering and the one from the Python lowering."""
    # (however few instructions are scalar: the C side runs on every tape here)
    monkeypatch.setattr(clower, "C_LOWERING_MAX_STOPS", 1.0)
    low = compiler._Lowering(tape, kw.get("guards", True), kw.get("n_grad"))
    low.analyse()
    low.layout()
    assert low._c_lowering() and low.lower_c()        # the C lowering does run
    with_c = _program_bytes(tape, **kw)
    py = _program_bytes(tape, c_lowering=False, **kw)
    return with_c, py


def assert_lowers_the_same(tape, monkeypatch):
    for kw in ({}, {"guards": False}, {"n_grad": 0}, {"n_grad": 1}):
        if kw.get("n_grad") == 1 and len(tape.input_ids) < 2:
            continue
        with_c, py = _both(tape, monkeypatch, **kw)
        assert with_c == py, kw


@pytest.mark.parametrize("seed", range(60))
def test_random_tapes_lower_the_same_in_c(seed, monkeypatch):
    f, x = random_function(seed)
    assert_lowers_the_same(_record(f, x), monkeypatch)


@pytest.mark.parametrize("seed", range(0, 60, 3))
def test_random_tapes_in_columns_lower_the_same_in_c(seed, monkeypatch):
    f, x = random_function(seed, steps=90)
    monkeypatch.setattr(tape_mod, "COMPACT_AT", 0)
    monkeypatch.setattr(tape_mod, "COMPACT_CHUNK", 7)
    tape = _record(f, x)
    assert type(tape.instructions).__name__ == "Columns"
    assert_lowers_the_same(tape, monkeypatch)


@pytest.mark.parametrize("name,f,x", recipes(), ids=[r[0] for r in recipes()])
def test_recipes_lower_the_same_in_c(name, f, x, monkeypatch):
    assert_lowers_the_same(_record(f, x), monkeypatch)


def test_array_programs_are_lowered_by_python_alone():
    """A tape mostly of what Python emits skips the C side (each would be a
    return from C): lower_c declines, and the program is the same."""
    wl = W.WORKLOADS["rosenbrock-vec"]()
    tape = _record(wl.f, wl.x0)
    low = compiler._Lowering(tape, True, None)
    low.analyse()
    low.layout()
    assert low._c_lowering() and low.lower_c() is False and len(low.words) == 0
    tape = _record(W.chain(50).f, np.array([0.5]))
    low = compiler._Lowering(tape, True, None)
    low.analyse()
    low.layout()
    assert low.lower_c() is True


def test_random_tapes_use_every_fusion():
    """The random tapes above exercise what lower_c does: scalar AXPY, SQDIFF
    and CSUM from C, views, guards and the array fusions from Python."""
    seen = set()
    for seed in range(60):
        f, x = random_function(seed)
        p = compiler.compile_tape(_record(f, x))
        seen.update(ops.VM_OPCODES[w & 0xFFFF] for w in p.code[:, 0])
    for name in ("AXPY", "SQDIFF", "CSUM", "SSD", "GAXPY", "GUARD_GT", "GATHER", "SIN"):
        assert name in seen, name


def test_a_long_chain_lowers_the_same_in_c(monkeypatch):
    tape = _record(W.chain(40_000).f, np.array([0.5]))     # past COMPACT_AT: columns
    assert type(tape.instructions).__name__ == "Columns"
    with_c, py = _both(tape, monkeypatch)
    assert with_c == py


def test_random_programs_run_as_the_reference_replay():
    """The programs are verified and replayed: gradients as the tape's own
    Python replay computes them."""
    for seed in range(0, 60, 7):
        f, x = random_function(seed)
        tape = _record(f, x)
        ct = rt.compile(tape, native=False)
        for xx in (x, x * 0.7 - 0.1):
            try:
                v, g = ct.value_and_gradient(xx)
            except rt.RevtapeError:                 # a guard saw another branch
                continue
            v_ref, g_ref = tape.value_and_gradient(xx)
            np.testing.assert_allclose(v, v_ref, rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(g, g_ref, rtol=1e-10, atol=1e-13)


def test_the_c_lowering_tables_match_the_header():
    """The lowering's LB_/LN_/LR_ bits (optable.py) are tapeflow.h's RT_L*."""
    from revtape._vm import lib
    for name in ("LB_ADD", "LB_MUL", "LB_SUB", "LB_SQUARE", "LB_VIEW", "LB_MAYBE_VIEW",
                 "LB_OWNS", "LB_SCALAR", "LN_FLOAT", "LN_ROOT", "LN_OWNED", "LR_INNER",
                 "LR_PY"):
        assert getattr(optable, name) == getattr(lib, "RT_" + name), name


def test_an_op_outside_the_table_does_not_take_the_c_lowering():
    import dataclasses
    tape = _record(lambda x: np.sin(x[0]) * x[1], np.array([0.3, 0.4]))
    at = [i[0].name for i in tape.instructions].index("sin")
    op, out, args, params = tape.instructions[at]
    twin = object.__new__(type(op))
    object.__setattr__(twin, "__dict__", dict(op.__dict__))   # a copy of the row, not the row
    assert dataclasses.is_dataclass(twin) and twin is not op
    tape.instructions[at] = (twin, out, args, params)
    low = compiler._Lowering(tape, True, None)
    low.analyse()
    assert not low._c_lowering()
    tape.instructions[at] = (op, out, args, params)
    low = compiler._Lowering(tape, True, None)
    low.analyse()
    assert low._c_lowering()


@pytest.mark.parametrize("c_side", [True, False])
def test_offsets_past_int32_are_refused_either_way(c_side, monkeypatch):
    """An arena past 2^31 slots: the C side stops with -1 where the Python
    lowering's int32 offset array raises OverflowError; both refuse the tape."""
    layout = compiler._Lowering.layout

    def near_the_end(self):
        layout(self)
        self.next_free = 2**31 - 3

    monkeypatch.setattr(compiler._Lowering, "layout", near_the_end)
    tape = _record(W.chain(5).f, np.array([0.5]))
    with pytest.raises(rt.RevtapeError, match="too large for 32-bit offsets"):
        compiler._compile_tape(tape, c_lowering=c_side)


# ---------------------------------------------------------------- the data-flow pass in C
# (rt_tape_flow) against its Python twin, and programs byte for byte the same
# either way

def _flow(fn, tape, guards_on, n_grad):
    instrs, n = tape.instructions, len(tape.values)
    dep, adj, live = bytearray(n), bytearray(n), bytearray(n)
    for i in tape.input_ids:
        dep[i] = 1
    for i in tape.input_ids[:n_grad]:
        adj[i] = 1
    live[tape.output_id] = 1
    keep = bytearray(len(instrs))
    uses = np.zeros(n, np.int32)
    fn(instrs, n, guards_on, dep, adj, live, keep, uses)
    return bytes(dep), bytes(adj), bytes(live), bytes(keep), uses.tobytes()


@pytest.mark.parametrize("name,tape", recipe_tapes(), ids=[n for n, _ in recipe_tapes()])
@pytest.mark.parametrize("guards_on", [True, False])
def test_c_flow_pass_equals_the_python_pass(name, tape, guards_on):
    for n_grad in (len(tape.input_ids), 0):
        c = _flow(analysis._flow_c, tape, guards_on, n_grad)
        py = _flow(analysis._flow_py, tape, guards_on, n_grad)
        assert c == py
        if n_grad:
            assert any(c[1]) and any(c[3])      # something carries an adjoint, something is kept


@pytest.mark.parametrize("name,tape", recipe_tapes(), ids=[n for n, _ in recipe_tapes()])
def test_programs_are_the_same_with_either_pass(name, tape):
    with_c = [_program_bytes(tape), _program_bytes(tape, guards=False)]
    assert [_program_bytes(tape, c_flow=False),
            _program_bytes(tape, guards=False, c_flow=False)] == with_c


def test_the_c_pass_refuses_node_ids_out_of_range():
    tape = rt.GradientTape(W.chain(3).f, np.array([0.5]))
    op, out, args, params = tape.instructions[1]
    tape.instructions[1] = (op, out, (args[0], len(tape.values) + 5), params)
    with pytest.raises(rt.RevtapeError, match="node it does not hold"):
        compiler.compile_tape(tape)
