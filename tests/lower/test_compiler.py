"""How rows lower (lower/emit.py: _LOWER, and the rows' view/lower/indices/pieces/linalg
fields) and the compiled-Hessian class (compiled.CompiledHessian)."""

import copy
import inspect
import pickle
import re

import numpy as np
import pytest

import revtape as rt
from revtape.runtime import compiled
from revtape.lower import analysis, clower, compiler, emit, fusions, optable
from revtape.core import ops


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
        assert (op.lower or op.family) in emit._LOWER, f"{op.name} has no lowering"
        if op.family == ops.STRUCT:
            assert op.lower, f"structure row {op.name} names no instruction (Op.lower)"
            assert op.lower in ops.OPCODE, op
            if op.lower == "SCATTER_ADD":
                assert callable(op.indices), op
            if op.lower == "SCATTER":
                assert callable(op.pieces), op
        if op.family == ops.LINALG:
            assert isinstance(op.linalg, ops.Linalg), f"linear-algebra row {op.name} has no Linalg"


def test_the_compiler_names_no_op():
    # What an op lowers to is declared on its row: the compiler compares no op
    # names (a new structure or linear-algebra row needs no edit there).
    src = "".join(inspect.getsource(m) for m in (compiler, optable, analysis, fusions, emit,
                                                  clower))
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
    # the ints record (N, M, flags, scratch) the kernel reads; the scratch is
    # arena space of the length the row declares, after the output, and the C
    # verifier (generated from the same row) accepts it
    ct = rt.compile(rt.GradientTape(f, x))
    code, ints = ct.code, ct.program.ints
    rows = [w for w in code if (w[0] & 0xFFFF) == ops.OPCODE[op_name.upper()]]
    assert len(rows) == 1
    _, n, out, a, b, c = rows[0]
    N, M, bits, scratch = ints[c:c + 4]
    bits &= ~8                  # RT_LA_BLAS: the BLAS path's bit (lower/blas.py), not the row's
    op = ops.OPS[op_name]
    shapes = [(int(N), int(N))] + ([(int(N), int(M))] if op_name in ("trisolve", "solve") else [])
    if op_name == "cumprod":
        assert (N, M, bits, scratch) == (2, 3, 0, 0)
        return
    params = {"lower": True, "trans": True, "unit": False} if op_name == "trisolve" else {}
    want = op.linalg.ints(shapes, params)
    assert (N, M, bits) == want[:3]
    assert out + n <= scratch and scratch + want[3] <= ct.program.n_vals
    if op_name == "trisolve":
        assert bits == 3                            # lower | trans


# ---------------------------------------------------------------- compiled Hessians

def _f(x):
    return np.sum(np.exp(x) * x[0]) + x[1] ** 3


X = np.array([0.3, -0.2, 0.5])


def test_a_hessian_program_is_a_compiled_hessian_and_a_compiled_tape():
    ht = rt.HessianTape(_f, X)
    for ct in (rt.compile(ht), rt.CompiledTape(ht), compiled.CompiledTape(ht, native=False)):
        assert type(ct) is compiled.CompiledHessian
        assert isinstance(ct, rt.CompiledTape)
    gt = rt.GradientTape(_f, X)
    assert type(rt.compile(gt)) is rt.CompiledTape
    assert type(rt.compile(gt)._hessian_program()) is compiled.CompiledHessian


@pytest.mark.parametrize("how", ["deepcopy", "copy", "pickle"])
def test_copies_of_a_compiled_hessian_stay_one(how):
    ct = rt.compile(rt.HessianTape(_f, X))
    c2 = {"deepcopy": copy.deepcopy, "copy": copy.copy,
          "pickle": lambda c: pickle.loads(pickle.dumps(c))}[how](ct)
    assert type(c2) is compiled.CompiledHessian
    np.testing.assert_array_equal(c2.code, ct.code)
    np.testing.assert_array_equal(c2.hessian(X + 1), ct.hessian(X + 1))
    v1, g1 = ct.value_and_gradient(X)
    v2, g2 = c2.value_and_gradient(X)
    assert v1 == v2 and np.array_equal(g1, g2)
    assert c2.forward(X) == c2(X) == v1


def test_a_compiled_hessian_pickles_in_the_compiled_tape_format():
    # one pickle format for both kinds: the stream names CompiledTape's
    # rebuild function, never the class, so pickles made before the class
    # existed load as CompiledHessians and these load in such versions
    ct = rt.compile(rt.HessianTape(_f, X))
    data = pickle.dumps(ct)
    assert b"CompiledHessian" not in data and b"_rebuild" in data
    fn, args = ct.__reduce__()
    assert fn is compiled._rebuild
    assert type(fn(*args)) is compiled.CompiledHessian


def test_a_compiled_hessian_refuses_what_a_gradient_program_does():
    ct = rt.compile(rt.HessianTape(_f, X))
    with pytest.raises(rt.OutputError, match="hessian"):
        ct.jacobian(X)
    with pytest.raises(rt.OutputError, match="hvp"):
        ct.jvp(X, X)
    with pytest.raises(rt.OutputError, match="gradient tape"):
        ct.bind(X.copy(), X.copy())
    for call in (lambda: ct.batch_value_and_gradient(np.stack([X, X])),
                 lambda: ct.batch_forward(np.stack([X, X]))):
        with pytest.raises(rt.OutputError, match="batch"):
            call()
    # and a pickle claiming to be a HessianTape program without f's value
    fn, (state, tape, *rest) = ct.__reduce__()
    # (its tape is a HessianTape's, so the state and the tape disagree)
    with pytest.raises(rt.VerificationError, match="f's value|disagree on being a HessianTape"):
        fn(dict(state, value_off=-1), tape, *rest)


def test_the_c_verifier_reads_the_rows_lengths():
    # RT_LINALG_LENGTHS in ops_generated.h is written from each row's Linalg:
    # evaluated at a shape, its expressions give the row's numbers
    from revtape.core import codegen as _codegen
    text = _codegen.render()
    block = text.split("#define RT_LINALG_LENGTHS(X)")[1].split("\n\n")[0]
    rows = re.findall(r"X\((\w+), \((.*?)\), \((.*?)\), \((.*?)\), \((.*?)\), (\d), (\d+)\)", block)
    assert sorted(r[0] for r in rows) == sorted(op.name.upper() for op in ops.OPS.values()
                                                if op.family == ops.LINALG)
    for name, a, b, out, scratch, square, flags in rows:
        L = ops.OPS[name.lower()].linalg
        for N, M in ((3, 3), (4, 2)):
            at = {"N": N, "M": M}
            assert eval(a, at) == eval(L.a, at) and eval(out, at) == eval(L.out, at)
            assert eval(b, at) == (eval(L.b, at) if L.b else -1)
            assert eval(scratch, at) == (eval(L.scratch, at) if L.scratch else 0)
        assert (int(square), int(flags)) == (L.square, L.flags)
