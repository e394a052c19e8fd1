"""The instruction-descriptor table (revtape.core.isa): one declaration per opcode of
what its words hold, read by the C verifier (through ops_generated.h), the
compiler, the compiled tape and the disassembler."""

import numpy as np
import pytest

import revtape as rt
from revtape.lower import compiler, emit
from revtape.core import isa, ops
from revtape._vm import lib
from revtape.runtime.compiled import CompiledTape

A = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])

# Tapes whose programs hold every kind of instruction the compiler emits.
PROGRAMS = [
    (lambda x: np.sum(np.sin(x) * x[0] + np.where(x > 0, x, 2.0) + np.clip(x, -1, 1)
                      + np.where(x > 0.1, x, x * x)
                      + np.where(x < 0.5, 1.5, x) + np.where(x < 0, x, x[1])),
     np.linspace(-1, 1, 5)),
    (lambda x: np.prod(x) + np.max(x) + np.min(x) + rt.special.logsumexp(x)
     + np.sum(x[[0, 2, 2]]) + np.sum(np.all(x > 0.6)) * x[0], np.linspace(0.5, 1, 4)),
    (lambda x: (x[0] - x[1]) ** 2 + x[0] + x[1] * 3.0 - x[2] + x[3] - x[0] * x[1],
     np.arange(1.0, 5.0)),
    (lambda x: np.sum(np.linalg.cholesky(x.reshape(3, 3) @ x.reshape(3, 3).T + 3 * np.eye(3)))
     + np.linalg.slogdet(x.reshape(3, 3) + 5 * np.eye(3))[1], A.ravel()),
    (lambda x: np.sum(x.reshape(2, 3) @ np.ones((3, 2))) + np.sum(np.concatenate([x, x * 2]))
     + np.sum(np.cumsum(x)) + np.sum(2.0 - x) + np.sum(x / x[0]), np.arange(1.0, 7.0)),
    (lambda x: x[0] * 2 if x[1] > 0 else x[0], np.array([1.0, 2.0])),
    (lambda x: np.sum(np.linalg.solve(A, x)) + np.sum(np.any(x > 1)) + np.dot(x, x),
     np.arange(3.0)),
    (lambda x: np.sum(np.exp(x[:3][[0, 1, 1, 2, 2, 0]] + x[3] * np.linspace(0, 1, 6)))
     + np.sum((x[:2] - x[2:4]) ** 2), np.arange(1.0, 5.0) * 0.1),
]


def _compiled():
    return [rt.compile(rt.GradientTape(f, x)) for f, x in PROGRAMS]


def _load(ct, code=None, ints=None):
    state = ct.program.to_state()
    if code is not None:
        state["code"] = code
    if ints is not None:
        state["ints"] = ints
    return CompiledTape(ct.tape, _program=compiler.Program.from_state(state))


def test_the_table_lists_every_opcode_in_order():
    assert [i.name for i in isa.BY_OPCODE] == list(ops.VM_OPCODES)
    assert [i.opcode for i in isa.BY_OPCODE] == list(range(len(ops.VM_OPCODES)))
    assert lib.rt_num_ops() == len(isa.BY_OPCODE)


def test_word_layout_and_statuses_come_from_the_table_through_cffi():
    assert (lib.RT_WORDS, lib.RT_FLAGS_SHIFT, lib.RT_OPCODE_MASK) == \
        (isa.WORDS, isa.FLAGS_SHIFT, isa.OPCODE_MASK)
    assert emit.WORDS == isa.WORDS and emit.FLAGS_SHIFT == isa.FLAGS_SHIFT
    from revtape.runtime import vm
    for value, (name, _) in enumerate(isa.STATUSES):
        assert getattr(lib, "RT_" + name) == value == getattr(vm, "RT_" + name)


def test_compiled_programs_keep_to_their_rows():
    """Every word the compiler writes is what its opcode's row declares."""
    seen = set()
    for ct in _compiled():
        for op, n, out, a, b, c in ct.code.tolist():
            ins = isa.instr(op & isa.OPCODE_MASK)
            seen.add(ins.name)
            flags = op >> isa.FLAGS_SHIFT
            assert flags & ~ins.flags == 0, (ins.name, flags)
            assert n >= {"count": 0, "count1": 1}.get(ins.n, 0)
            if ins.n == "expect":
                assert n in (0, 1)
            if ins.b in ("len", "len1"):
                assert b >= (1 if ins.b == "len1" else 0)
    # the battery reaches every kind of instruction (so the check above means something)
    kernels = {isa.INSTRS[name].kernel for name in seen}
    assert kernels == {"generated", "hand", "linalg", "guard"}
    for name in ("WHERE_VV", "WHERE_VS", "WHERE_SV", "CLIP", "REDUCE_PROD", "REDUCE_ALL",
                 "GATHER", "SCATTER", "MATMUL", "AXPY", "SQDIFF", "CSUM", "SUB_SV", "DIV_VS",
                 "GAXPY", "SSD"):
        assert name in seen, name


def test_the_verifier_refuses_flags_outside_the_row():
    refused = 0
    for ct in _compiled():
        for k, (op, *_rest) in enumerate(ct.code.tolist()):
            ins = isa.instr(op & isa.OPCODE_MASK)
            bad = [bit for bit in (1, 2, 4) if not ins.flags & bit]
            if not bad:
                continue
            code = ct.program.code.copy()
            code[k, 0] = ins.opcode | (bad[0] << isa.FLAGS_SHIFT)
            with pytest.raises(rt.VerificationError, match="adjoint flags"):
                _load(ct, code=code)
            refused += 1
    assert refused > 10


def test_the_verifier_checks_parameter_words_by_the_table():
    ct = rt.compile(rt.GradientTape(lambda x: np.max(x) + np.sum(x[[2, 0]]), np.arange(3.0)))
    names = [isa.instr(w & isa.OPCODE_MASK).name for w in ct.code[:, 0]]
    k = names.index("REDUCE_MAX")
    code = ct.program.code.copy()
    code[k, 1], code[k, 4] = 3, 0                     # three segments of nothing
    with pytest.raises(rt.VerificationError, match="segment length 0 must be >= 1"):
        _load(ct, code=code)
    k = names.index("GATHER")
    code = ct.program.code.copy()
    code[k, 4] = -1
    with pytest.raises(rt.VerificationError, match="negative input length -1"):
        _load(ct, code=code)
    code = ct.program.code.copy()
    code[k, 1] = -2
    with pytest.raises(rt.VerificationError, match="n = -2"):
        _load(ct, code=code)


def test_disassembly_follows_the_rows():
    ct = rt.compile(rt.GradientTape(
        lambda x: np.sum(np.where(x > 0, np.sin(x), x * x) + np.clip(x, -1, 1)), np.ones(3)))
    text = ct.disassemble()
    for line in text.splitlines()[1:]:
        name = line.split("= ")[1].split("(")[0]
        ins = isa.INSTRS[name]
        operands = line.split("(", 1)[1].rsplit(")", 1)[0]
        if not ins.fmt:
            assert operands.count("@") == ins.arity, line
    assert isa.INSTRS["WHERE_VV"].arity == 3 and isa.INSTRS["SIN"].arity == 1
    assert isa.INSTRS["SQDIFF"].arity == 2 and isa.INSTRS["PYCALL"].arity == 0
