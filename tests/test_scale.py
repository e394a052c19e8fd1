"""Million-step tapes: the compiler's C data-flow pass against its
Python twin, programs byte for byte the same either way, and the peak memory
of recording + compiling a long chain."""

import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import revtape as rt
import revtape.trace.tape as tape_mod
from revtape.lower import analysis, compiler
from revtape.bench import workloads as W
from revtape.trace.instrstore import Columns


def _guarded(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] > 0:
            s = s + x[i] * x[i]
        else:
            s = s - np.exp(x[i])
    return s + np.sum(np.where(x > 0, x, 2 * x)) + np.max(x) ** 2


def _masked(x):
    return np.sum(x[x > 0.1] ** 2) + np.sum(np.sin(x))


def _recipes():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, make in W.WORKLOADS.items():
            wl = make()
            yield name, wl.f, np.ascontiguousarray(wl.x0, dtype=np.float64)
    yield "chain300", W.chain(300).f, np.array([0.5])
    yield "guards", _guarded, np.array([0.3, -0.2, 1.5, -2.0])
    yield "masked", _masked, np.array([0.3, -0.2, 1.5, -2.0, 0.05])


RECIPES = list(_recipes())


def _record(f, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rt.GradientTape(f, x)


TAPES = [(name, _record(f, x)) for name, f, x in RECIPES]


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


@pytest.mark.parametrize("name,tape", TAPES, ids=[n for n, _ in TAPES])
@pytest.mark.parametrize("guards_on", [True, False])
def test_c_flow_pass_equals_the_python_pass(name, tape, guards_on):
    for n_grad in (len(tape.input_ids), 0):
        c = _flow(analysis._flow_c, tape, guards_on, n_grad)
        py = _flow(analysis._flow_py, tape, guards_on, n_grad)
        assert c == py
        if n_grad:
            assert any(c[1]) and any(c[3])      # something carries an adjoint, something is kept


def _program_bytes(tape, **kw):
    p = compiler._compile_tape(tape, **kw)
    return (p.code.tobytes(), p.ints.tobytes(), p.consts.tobytes(), p.n_in, p.n_grad,
            p.n_fixed, p.n_vals, p.out_off, p.out_shape, repr(p.inputs),
            [(g[1], g[2]) for g in p.guards], p.value_off, repr(p.extras), p.stats)


@pytest.mark.parametrize("name,tape", TAPES, ids=[n for n, _ in TAPES])
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


_MEMORY = textwrap.dedent("""
    import json, numpy as np, revtape as rt
    from revtape.bench import workloads as W

    def hwm():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024

    rt.compile(rt.GradientTape(W.chain(10).f, np.array([0.5])), native=False)
    with open("/proc/self/clear_refs", "w") as fh:    # reset the high-water mark
        fh.write("5")
    base = hwm()
    tape = rt.GradientTape(W.chain({L}).f, np.array([0.5]))
    ctape = rt.compile(tape, native=False)
    print(json.dumps({{"n": len(tape.instructions), "grown": hwm() - base}}))
""")


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc")
def test_peak_memory_of_recording_and_compiling_a_long_chain():
    """Peak resident memory added by record + compile of a 4e5-instruction
    chain, per tape instruction (the issue's target is 250 at 4e6: measured
    by benchmarks/chain_scale.py and the bench's chain rows; the bound here
    leaves room for allocator slack).  Before the columns and the compact
    compiler passes it was ~560-660 bytes."""
    out = subprocess.run([sys.executable, "-c", _MEMORY.format(L=100_000)],
                         capture_output=True, text=True, env=os.environ, timeout=600)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    per_instr = r["grown"] / r["n"]
    assert per_instr <= 320, f"{per_instr:.0f} bytes per tape instruction"


# ---------------------------------------------------------------- the columns

def _same(instrs_a, instrs_b):
    """Instruction lists equal: ops, ids and params (arrays by value)."""
    assert len(instrs_a) == len(instrs_b)
    for (op, out, args, params), (op_b, out_b, args_b, params_b) in zip(instrs_a, instrs_b):
        assert (op, out, args) == (op_b, out_b, args_b)
        assert type(args) is tuple and type(out) is int
        assert params.keys() == params_b.keys()
        for k, v in params.items():
            if isinstance(v, np.ndarray):
                np.testing.assert_array_equal(v, params_b[k])
            elif k != "where":
                assert v == params_b[k]


@pytest.fixture
def columns(monkeypatch):
    """Every tape recorded from here on goes into columns at once and every
    7 nodes (long tapes do so every 2^15)."""
    monkeypatch.setattr(tape_mod, "COMPACT_AT", 0)
    monkeypatch.setattr(tape_mod, "COMPACT_CHUNK", 7)


@pytest.mark.parametrize("name,f,x", RECIPES, ids=[r[0] for r in RECIPES])
def test_a_tape_in_columns_is_the_same_tape(columns, name, f, x):
    plain = dict(TAPES)[name]
    assert isinstance(plain.instructions, list)
    tape = _record(f, x)
    cols = tape.instructions
    assert isinstance(cols, Columns)
    assert len(cols) == len(tape) == len(plain.instructions)
    _same(list(cols), plain.instructions)
    _same(list(reversed(cols)), plain.instructions[::-1])
    for k in (0, len(cols) // 2, -1):
        _same([cols[k]], [plain.instructions[k]])
    _same(cols[1:4], plain.instructions[1:4])
    assert tape.listing() == plain.listing() and tape.stats() == plain.stats()
    # compiled programs byte for byte, with and without guards
    assert _program_bytes(tape) == _program_bytes(plain)
    assert _program_bytes(tape, guards=False) == _program_bytes(plain, guards=False)
    # the reference replay and the compiled one: the same numbers
    x2 = x * 0.9 + 0.01
    np.testing.assert_array_equal(tape.gradient(x2), plain.gradient(x2))
    c, cp = rt.compile(tape, native=False), rt.compile(plain, native=False)
    v, g = c.value_and_gradient(x2)
    vp, gp = cp.value_and_gradient(x2)
    assert v == vp
    np.testing.assert_array_equal(g, gp)


def test_columns_while_recording(columns):
    """A recording tape answers len() and .instructions over both parts, and
    a mask's guard still gets its message (it edits the last instruction)."""
    tape = rt.Tape()
    x = tape.track(np.array([0.3, -0.2, 1.5]))
    y = x[0]
    for _ in range(20):
        y = y * 1.01 + np.sin(y)
    assert len(tape) == 61 and len(tape.instructions) == 61     # x[0], then 3 a step
    assert tape._head is not None                               # (in both parts)
    z = np.sum(x[x > 0.0])
    guard = [i for i in tape.instructions if i[1] == -1][-1]
    assert "what" in guard[3]
    tape.finish(y + z)
    assert isinstance(tape.instructions, Columns)
    assert tape._head is None and tape._instrs is tape.instructions


def test_pickles_and_copies_of_a_tape_in_columns(columns):
    import copy
    import pickle

    tape = _record(_guarded, np.array([0.3, -0.2, 1.5, -2.0]))
    x = np.array([0.2, -0.1, 1.0, -1.0])
    for other in (pickle.loads(pickle.dumps(tape)), copy.deepcopy(tape)):
        _same(list(other.instructions), list(tape.instructions))
        np.testing.assert_array_equal(other.gradient(x), tape.gradient(x))


def test_hessian_of_a_tape_in_columns(columns):
    f = lambda x: np.sum(np.sin(x) * x[::-1]) + x[0] * x[1] ** 3
    x = np.array([0.3, 0.4, 0.5])
    h = rt.HessianTape(f, x)
    assert isinstance(h.instructions, Columns)
    H = h.hessian(x)
    tape_mod.COMPACT_AT = 1 << 17          # (monkeypatch restores it)
    h0 = rt.HessianTape(f, x)
    assert isinstance(h0.instructions, list)
    np.testing.assert_array_equal(H, h0.hessian(x))


@pytest.mark.parametrize("name,f,x", RECIPES, ids=[r[0] for r in RECIPES])
def test_the_searches_read_the_columns_as_the_tuples(columns, name, f, x):
    """fusions() and sum_chains() read a compact tape's kept instructions
    from its columns (Selected.rows): the same (k, out, args) as the tuples,
    for any subset (operand counts 1, 2, 3 mixed)."""
    low = compiler._Lowering(_record(f, x), True, None)
    low.analyse()
    assert isinstance(low.tape.instructions, Columns)
    tuples = list(low.kept)
    rng = np.random.default_rng(len(tuples))
    for mask in (np.ones(len(tuples), bool), rng.random(len(tuples)) < 0.3,
                 np.zeros(len(tuples), bool)):
        want = [(k, t[1], t[2]) for k, t in enumerate(tuples) if mask[k]]
        got = list(low._kept_rows(mask))
        assert got == want and all(type(a) is tuple for _, _, a in got)
        # chunks of 3, and the first two operands of each (the rest: by index)
        rows = low.kept.rows(mask, chunk=3)
        firsts = [(k, out, (a, b)[:n], n) for ks, outs, a0, a1, na in rows
                  for k, out, a, b, n in zip(ks, outs, a0, a1, na)]
        assert firsts == [(k, out, args[:2], len(args)) for k, out, args in want]
