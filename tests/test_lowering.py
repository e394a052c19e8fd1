"""How rows lower (compiler._LOWER and the rows' view/lower/indices/pieces/record
fields)."""

import inspect
import re

import numpy as np
import pytest

import revtape as rt
from revtape import compiler, ops


# ---------------------------------------------------------------- lowering table

def test_every_row_has_a_lowering():
    for op in ops.OPS.values():
        if op.family == ops.GUARD:
            continue                           # guards lower by their predicate (isa rows)
        if op.view is not None:
            assert op.family == ops.STRUCT and callable(op.view), op
            continue
        if op.lower == "GATHER":
            assert callable(op.indices), op
            continue
        assert (op.lower or op.family) in compiler._LOWER, f"{op.name} has no lowering"
        if op.family == ops.STRUCT:
            assert op.lower, f"structure row {op.name} names no instruction (Op.lower)"
            assert op.lower in ops.OPCODE, op
            if op.lower == "SCATTER_ADD":
                assert callable(op.indices), op
            if op.lower == "SCATTER":
                assert callable(op.pieces), op
        if op.family == ops.LINALG:
            assert callable(op.record), f"linear-algebra row {op.name} has no ints record"


def test_the_compiler_names_no_op():
    # What an op lowers to is declared on its row: the compiler compares no op
    # names (a new structure or linear-algebra row needs no edit there).
    src = inspect.getsource(compiler)
    assert not re.search(r"\.name\s*(==|!=|in\b|not in\b)", src)
    rows = [op.name for op in ops.OPS.values() if op.family in (ops.STRUCT, ops.LINALG)]
    quoted = [n for n in rows if f'"{n}"' in src or f"'{n}'" in src]
    # only the fusions name rows, by identity (ops.OPS["take"]: GAXPY's gather)
    assert quoted == ["take"], quoted


@pytest.mark.parametrize("op_name, f, x", [
    ("cholesky", lambda x: np.sum(np.linalg.cholesky(x.reshape(3, 3) @ x.reshape(3, 3).T
                                                     + 3 * np.eye(3))), np.arange(9.0) / 9),
    ("trisolve", lambda x: np.sum(rt.linalg.solve_triangular(
        np.tril(x.reshape(3, 3)) + 3 * np.eye(3), x[:3], lower=True, trans=1)),
     np.arange(9.0) / 9),
    ("solve", lambda x: np.sum(np.linalg.solve(x.reshape(2, 2) + 3 * np.eye(2),
                                               np.ones((2, 3)))), np.arange(4.0) / 4),
    ("slogdet", lambda x: np.linalg.slogdet(x.reshape(2, 2) + 3 * np.eye(2))[1],
     np.arange(4.0) / 4),
    ("eigh", lambda x: np.sum(np.linalg.eigh(x.reshape(2, 2) + x.reshape(2, 2).T)[0]),
     np.arange(4.0) / 4),
    ("cumprod", lambda x: np.sum(np.cumprod(x.reshape(2, 3), axis=-1)), np.arange(1.0, 7.0)),
])
def test_linalg_records_come_from_the_row(op_name, f, x):
    # the ints record (N, M, bits, scratch) the kernel reads; the scratch is
    # arena space of the length the row declares, after the output
    ct = rt.compile(rt.GradientTape(f, x))
    code, ints = ct.code, ct.program.ints
    rows = [w for w in code if (w[0] & 0xFFFF) == ops.OPCODE[op_name.upper()]]
    assert len(rows) == 1
    _, n, out, a, b, c = rows[0]
    N, M, bits, scratch = ints[c:c + 4]
    op = ops.OPS[op_name]
    shapes = [(int(N), int(N))] + ([(int(N), int(M))] if op_name in ("trisolve", "solve") else [])
    if op_name == "cumprod":
        assert (N, M, bits, scratch) == (2, 3, 0, 0)
        return
    params = {"lower": True, "trans": True, "unit": False} if op_name == "trisolve" else {}
    want = op.record(shapes, params)
    assert (N, M, bits) == want[:3]
    assert out + n <= scratch and scratch + want[3] <= ct.program.n_vals
    if op_name == "trisolve":
        assert bits == 3                            # lower | trans
