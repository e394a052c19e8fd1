"""Compact storage of long tapes (src/revtape/trace/instrstore.py): a tape in
columns is the same tape -- the same instructions, listing, programs byte for
byte and numbers -- while it records, pickled, copied and differentiated
twice, and the compiler's searches read the columns as the tuples; and the
peak memory of recording + compiling a long chain."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import revtape as rt
import revtape.trace.tape as tape_mod
from revtape.lower import compiler
from revtape.trace.instrstore import Columns
from conftest import _guarded, program_bytes as _program_bytes, recipe_tapes, recipes
from conftest import record_quietly as _record

PLAIN = dict(recipe_tapes())      # recorded on import, before `columns` (as tuple lists)


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


@pytest.mark.slow     # a soak: a 1e5-step chain in a process of its own
@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc")
def test_peak_memory_of_recording_and_compiling_a_long_chain():
    """Peak resident memory added by record + compile of a 4e5-instruction
    chain, per tape instruction (the target is 250 at 4e6: measured
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


@pytest.mark.parametrize("name,f,x", recipes(), ids=[r[0] for r in recipes()])
def test_a_tape_in_columns_is_the_same_tape(columns, name, f, x):
    plain = PLAIN[name]
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


@pytest.mark.parametrize("name,f,x", recipes(), ids=[r[0] for r in recipes()])
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
