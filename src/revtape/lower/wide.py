"""Wide programs: batched replay of scalar code, B rows at a time.

A program of scalar instructions (n == 1: what Python loops over tracked
scalars compile to) replayed at one row per sweep pays one dispatch per
instruction per row.  Its *wide* form gives every arena slot B lanes (slot s
becomes the run s*B .. s*B+B) and every instruction n = B, so one dispatch
does B rows and the kernels' inner loops run over the rows: the same VM, the
same kernels, the same arithmetic per element -- only the layout changes.

Fused scalar superinstructions read one scalar for all elements (AXPY's b)
or are not elementwise (CSUM), so they are split back into the MUL/ADD/SUB
instructions they fused, which round identically (the fusions were made to
be bit-for-bit replacements).  Anything else -- array instructions, guards
(a guard is a per-row decision), Python callbacks -- makes a program
ineligible, and batched replay loops over rows instead.
"""

from ..core import ops
from ..core.isa import FLAGS_SHIFT

_OPC = ops.OPCODE
_ELEMENTWISE = ({_OPC[op.name.upper()] for op in ops.OPS.values()
                 if op.family in (ops.UNARY, ops.UNARY_ND)}
                | {_OPC[op.name.upper() + "_VV"] for op in ops.OPS.values()
                   if op.family in (ops.BINARY, ops.BINARY_ND)}
                | {_OPC["WHERE_VV"], _OPC["SQDIFF"]})
_ADD, _SUB, _MUL = _OPC["ADD_VV"], _OPC["SUB_VV"], _OPC["MUL_VV"]
_AXPY, _CSUM = _OPC["AXPY"], _OPC["CSUM"]
_MASK = (1 << FLAGS_SHIFT) - 1


def scalar_form(code, ints, n_vals):
    """The program as (op word, out, a, b, c) in slot numbers with AXPY and CSUM
    split, and the number of slots (temporaries appended); None if ineligible."""
    out, nxt = [], n_vals
    for word, n, o, a, b, c in code.tolist():
        opc, fl = word & _MASK, word >> FLAGS_SHIFT
        if opc == _CSUM:
            # out = a (+/-) terms, left to right: a chain of ADD/SUB through fresh
            # temporaries.  The terms are single-use slots (the compiler's rule
            # for CSUM), so the order in which they receive adjoints changes no bit.
            prev, prev_fl = a, fl & 1
            for k, e in enumerate(ints[c:c + n].tolist()):
                dst = o if k == n - 1 else nxt
                if k < n - 1:
                    nxt += 1
                op, term = (_ADD, e) if e >= 0 else (_SUB, ~e)
                out.append((op | ((prev_fl | 2) << FLAGS_SHIFT), dst, prev, term, 0))
                prev, prev_fl = dst, 1
            continue
        if n != 1:
            return None
        if opc in _ELEMENTWISE:
            out.append((word, o, a, b, c))
        elif opc == _AXPY:
            # out = a + b*c: MUL then ADD, rounded as AXPY rounds them
            t = nxt
            nxt += 1
            mul_fl = ((fl >> 1) & 1) | (((fl >> 2) & 1) << 1)
            out.append((_MUL | (mul_fl << FLAGS_SHIFT), t, b, c, 0))
            out.append((_ADD | (((fl & 1) | ((mul_fl != 0) << 1)) << FLAGS_SHIFT), o, a, t, 0))
        else:
            return None
    return out, nxt


# Batched replay as array code (csrc/vm/soa.c) runs the wide program with two
# side tables for its reverse sweep; see csrc/vm/soa.h.
_DIFF_UNARY = {_OPC[op.name.upper()] for op in ops.OPS.values() if op.family == ops.UNARY}
_DIFF_VV = {_OPC[op.name.upper() + "_VV"] for op in ops.OPS.values() if op.family == ops.BINARY}
_ND_VV = {_OPC[op.name.upper() + "_VV"] for op in ops.OPS.values() if op.family == ops.BINARY_ND}
_WHERE, _SQDIFF = _OPC["WHERE_VV"], _OPC["SQDIFF"]
_SCALAR_B = {_OPC[op.name.upper() + "_VV"]: _OPC[op.name.upper() + "_VS"]
             for op in ops.OPS.values() if op.family in (ops.BINARY, ops.BINARY_ND)}
_SCALAR_A = {_OPC[op.name.upper() + "_VV"]: _OPC[op.name.upper() + "_SV"]
             for op in ops.OPS.values() if op.family in (ops.BINARY, ops.BINARY_ND)}


def _adjoint_writes(opc, fl, a, b, c):
    """The operand slots whose adjoints an instruction's reverse updates, in
    the order csrc/vm/soa.c updates them, with their bit in `first`."""
    if opc in _DIFF_UNARY:
        return [(a, 1)] if fl & 1 else []
    if opc in _DIFF_VV or opc == _SQDIFF:
        return [(s, bit) for s, bit in ((a, 1), (b, 2)) if fl & bit]
    if opc == _WHERE:
        return [(s, bit) for s, bit in ((b, 2), (c, 4)) if fl & bit]
    return []


def soa_program(form, n_in, n_fixed, n_grad, out_off, B):
    """The wide program for csrc/vm/soa.c: (words, first, zero).

    A binary instruction whose constant operand needs no adjoint reads that
    constant as one scalar (_VS/_SV: same expression per lane).  `first[pc]`
    marks the operands whose adjoint gets its first contribution at pc (the
    reverse sweep assigns instead of adding); `zero` lists the lane offsets of
    the adjoint slots read before anything is added to them (and the
    gradient's slots nothing reaches)."""
    form = list(form)
    words, first = [], [0] * len(form)
    written = {out_off}                     # the seed is assigned before the sweep
    zero = set()
    for pc in range(len(form) - 1, -1, -1):
        word, o, a, b, c = form[pc]
        opc, fl = word & _MASK, word >> FLAGS_SHIFT
        if fl == 0:
            continue
        writes = _adjoint_writes(opc, fl, a, b, c)
        if writes and o not in written:
            zero.add(o)                     # its adjoint is read as g
        for s, bit in writes:
            if s not in written:
                first[pc] |= bit
                written.add(s)
    zero.update(s for s in range(n_grad) if s not in written)
    for word, o, a, b, c in form:
        opc, fl = word & _MASK, word >> FLAGS_SHIFT
        if opc in _DIFF_VV or opc in _ND_VV:
            nd = opc in _ND_VV
            if n_in <= b < n_fixed and (nd or not fl & 2):
                word = _SCALAR_B[opc] | (fl << FLAGS_SHIFT)
            elif n_in <= a < n_fixed and (nd or not fl & 1):
                word = _SCALAR_A[opc] | (fl << FLAGS_SHIFT)
        words.append((word, B, o * B, a * B, b * B, c * B))
    return words, first, sorted(s * B for s in zero)
