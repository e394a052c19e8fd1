"""What the lowering reads off the op table (core/ops.py), computed once: the
rows the fusions act on (by identity), the families that lower inline or may
alias another value, each elementwise row's opcode, and the per-op tables the
C lowering (csrc/compile/tapeflow.h) indexes by an op's position in the table."""

import numpy as np

from ..core import ops

OPC = ops.OPCODE
_GUARD = ops.OPS["guard"]
_ADD, _MUL, _SUB, _SQUARE = (ops.OPS[n] for n in ("add", "mul", "sub", "square"))
_TAKE = ops.OPS["take"]
_SUM = ops.OPS["sum"]
# the ops fusions() acts on (every other one neither fuses nor produces a fusable result)
_FUSION_OPS = frozenset((_ADD, _MUL, _SUB, _SQUARE, _TAKE, _SUM))
_ADD_SUB = frozenset((_ADD, _SUB))
_K_FUSION, _K_ADD_SUB, _K_OWNS = 1, 2, 4     # _Lowering._kept_kinds

_SCALAR_FAMILIES = (ops.UNARY, ops.UNARY_ND, ops.BINARY, ops.BINARY_ND)
_ALIASING = (ops.STRUCT, ops.GUARD)     # may lower to an offset into another value
# Rows whose result is always an offset into their operand (no instruction),
# and those that may be one (a gather of a contiguous run): from the rows' view
# and lower fields (ops.Op), so nothing here names an op.
_VIEWS = frozenset(op for op in ops.OPS.values() if op.view is not None)
_MAYBE_VIEWS = _VIEWS | frozenset(op for op in ops.OPS.values() if op.lower == "GATHER")
_UNARY_CODE = {op: OPC[op.name.upper()] for op in ops.OPS.values()
               if op.family in (ops.UNARY, ops.UNARY_ND)}
_VV_CODE = {op: OPC[op.name.upper() + "_VV"] for op in ops.OPS.values()
            if op.family in (ops.BINARY, ops.BINARY_ND)}

# What the C lowering (csrc/compile/tapeflow.h: rt_tape_fuse, rt_tape_emit) knows of
# an op: per-op tables indexed by the op's position in _OP_LIST, built from
# the rows' fields as the Python lowering reads them (so nothing here names
# an op but the fusions' own).  Bits: tapeflow.h's RT_LB_*.
_OP_LIST = list(ops.OPS.values())
_ROW_INDEX = {op: i for i, op in enumerate(_OP_LIST)}
LB_ADD, LB_MUL, LB_SUB, LB_SQUARE, LB_VIEW, LB_MAYBE_VIEW, LB_OWNS, LB_SCALAR = (
    1 << b for b in range(8))
LN_FLOAT, LN_ROOT, LN_OWNED = 1, 2, 4
LR_INNER, LR_PY = 1, 128
_OP_BITS = np.array([LB_ADD * (op is _ADD) | LB_MUL * (op is _MUL) | LB_SUB * (op is _SUB)
                     | LB_SQUARE * (op is _SQUARE) | LB_VIEW * (op in _VIEWS)
                     | LB_MAYBE_VIEW * (op in _MAYBE_VIEWS)
                     | LB_OWNS * (op.family not in _ALIASING)
                     | LB_SCALAR * (op.family in _SCALAR_FAMILIES) for op in _OP_LIST], np.uint8)
_OP_DIFF = np.array([bool(op.diff) for op in _OP_LIST], np.uint8)
_OP_SCALAR_CODE = np.array([_UNARY_CODE.get(op, _VV_CODE.get(op, -1)) for op in _OP_LIST],
                           np.int32)
# the ops the Python search for array fusions (fusions(), _array_fusion,
# _sum_of_sqdiff) looks at when their result is an array -- a sum always
_OP_FUSION = np.array([op in _FUSION_OPS for op in _OP_LIST], bool)
_OP_SUM = np.array([op is _SUM for op in _OP_LIST], bool)
