"""Million-step tapes (issue 15): the compiler's C data-flow pass against its
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
from revtape import compiler
from revtape.bench import workloads as W


def _guarded(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] > 0:
            s = s + x[i] * x[i]
        else:
            s = s - np.exp(x[i])
    return s + np.sum(np.where(x > 0, x, 2 * x)) + np.max(x) ** 2


def _tapes():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, make in W.WORKLOADS.items():
            wl = make()
            yield name, rt.GradientTape(wl.f, np.ascontiguousarray(wl.x0, dtype=np.float64))
        yield "chain", rt.GradientTape(W.chain(300).f, np.array([0.5]))
        yield "guards", rt.GradientTape(_guarded, np.array([0.3, -0.2, 1.5, -2.0]))


TAPES = list(_tapes())


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
        c = _flow(compiler._flow_c, tape, guards_on, n_grad)
        py = _flow(compiler._flow_py, tape, guards_on, n_grad)
        assert c == py
        if n_grad:
            assert any(c[1]) and any(c[3])      # something carries an adjoint, something is kept


def _program_bytes(tape, **kw):
    p = compiler.compile_tape(tape, **kw)
    return (p.code.tobytes(), p.ints.tobytes(), p.consts.tobytes(), p.n_in, p.n_grad,
            p.n_fixed, p.n_vals, p.out_off, p.out_shape, repr(p.inputs),
            [(g[1], g[2]) for g in p.guards], p.value_off, repr(p.extras), p.stats)


@pytest.mark.parametrize("name,tape", TAPES, ids=[n for n, _ in TAPES])
def test_programs_are_the_same_with_either_pass(monkeypatch, name, tape):
    with_c = [_program_bytes(tape), _program_bytes(tape, guards=False)]
    monkeypatch.setattr(compiler, "_flow_c", compiler._flow_py)
    assert [_program_bytes(tape), _program_bytes(tape, guards=False)] == with_c


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
    """Peak resident memory added by record + compile of a 2e5-instruction
    chain, per tape instruction.  The bound leaves room for allocator slack
    at this size (a million steps measure lower: benchmarks/chain_scale.py);
    before the compact passes it was ~560-660 bytes."""
    out = subprocess.run([sys.executable, "-c", _MEMORY.format(L=50_000)],
                         capture_output=True, text=True, env=os.environ, timeout=600)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    per_instr = r["grown"] / r["n"]
    assert per_instr <= 450, f"{per_instr:.0f} bytes per tape instruction"
