"""The verifier's length arithmetic on crafted linear-algebra records: shapes
near 2**31 (whose lengths, such as EIGH's scratch 3*N*N, overflow 64-bit
integers) are refused by a check made before any length is computed, with
VerificationError naming the shape.  (That no signed overflow happens on
the way is what the UBSan fuzz run of tools/fuzz_vm.py shows.)"""

import numpy as np
import pytest

import revtape as rt
from revtape.lower import compiler
from revtape.runtime.compiled import CompiledTape


def _record(ct, opname):
    lines = ct.disassemble().splitlines()[1:]
    row = [i for i, line in enumerate(lines) if opname in line][0]
    return int(ct.program.code[row, 5])


def _with_ints(ct, at, values):
    state = ct.program.to_state()
    ints = state["ints"].copy()
    ints[at:at + len(values)] = values
    state["ints"] = ints
    return CompiledTape(ct.tape, _program=compiler.Program.from_state(state))


A = np.array([[2.0, 0.3, 0.1], [0.3, 1.5, 0.2], [0.1, 0.2, 1.0]])
TAPES = {
    "EIGH": lambda: rt.GradientTape(lambda a: np.sum(np.linalg.eigh(a)[0] ** 2), A),
    "CHOLESKY": lambda: rt.GradientTape(lambda a: np.sum(np.linalg.cholesky(a)), A),
    "INV": lambda: rt.GradientTape(lambda a: np.sum(np.linalg.inv(a)), A),
    "SOLVE": lambda: rt.GradientTape(lambda a: np.sum(np.linalg.solve(a, np.ones((3, 2)))), A),
    "CUMSUM": lambda: rt.GradientTape(lambda a: np.sum(np.cumsum(a, axis=1) ** 2), A),
}


@pytest.mark.parametrize("op", sorted(TAPES))
@pytest.mark.parametrize("N,M", [(2 ** 31 - 1, 2 ** 31 - 1), (1_753_413_056, 1_753_413_056),
                                 (46_341, 46_341)])
def test_shapes_whose_lengths_overflow_are_refused_before_arithmetic(op, N, M):
    ct = rt.compile(TAPES[op]())
    c = _record(ct, op)
    with pytest.raises(rt.VerificationError, match="longer than any arena"):
        _with_ints(ct, c, [N, M])
    # the untouched record still verifies and replays
    v, g = ct.value_and_gradient(A)
    assert np.isfinite(v)
