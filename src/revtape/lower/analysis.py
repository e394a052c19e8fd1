"""The lowering's first passes over a tape: which nodes depend on an input,
carry an adjoint, are kept and how often they are read (analyse, a data-flow
pass in C, csrc/compile/tapeflow.c, or in Python), where every value lives in the
arena (layout: inputs, then constants, then intermediates), and the kept
instructions as the fusion searches read them (the _kept_* views)."""

import array
import itertools
import math
from operator import attrgetter, itemgetter

import numpy as np

from .optable import (_ALIASING, _ADD_SUB, _FUSION_OPS, _K_ADD_SUB, _K_FUSION, _K_OWNS,
                      _OP_DIFF, _OP_LIST, _ROW_INDEX)
from ..errors import UnsupportedError
from ..trace.instrstore import Columns

_ARGS = itemgetter(2)
_OUTS = itemgetter(1)
_DIFF = attrgetter("diff")
_OPS = itemgetter(0)
_LIB = []


def _lib():
    """The C extension's lib, or None without a build (then _flow_py runs)."""
    if not _LIB:
        try:
            from .._vm import ffi, lib
            _LIB.append((ffi, lib))
        except ImportError:        # pragma: no cover - the tests run with the extension
            _LIB.append(None)
    return _LIB[0]


def _raw_columns(instrs):
    """out, nargs, args (flat) and the ops (an iterable) of the tape's
    instructions: the compact store's own arrays, or read off a list."""
    if isinstance(instrs, Columns):
        return instrs.columns()
    n = len(instrs)
    out = np.fromiter(map(_OUTS, instrs), np.int64, n)
    nargs = np.fromiter(map(len, map(_ARGS, instrs)), np.int32, n)
    args = np.fromiter(itertools.chain.from_iterable(map(_ARGS, instrs)), np.int64,
                       int(nargs.sum()))
    return out, nargs, args, map(_OPS, instrs)


def _columns(instrs):
    """The tape's instructions as columns: out, nargs, args (flat), diff --
    the compact store's own arrays (instrstore.Columns), or read off a list."""
    n = len(instrs)
    out, nargs, args, op_list = _raw_columns(instrs)
    diff = np.fromiter(map(_DIFF, op_list), np.uint8, n)
    return out, nargs, args, diff


def _columns_idx(instrs):
    """_columns with each instruction's op index (its row's position in
    ops.OPS, uint16) in place of diff: the per-op tables (_OP_*) answer every
    question the lowering asks about an op from it, 2 bytes an instruction
    where a list of the ops costs 8.  None if an op is not a row of the
    table (then the lowering is the Python one)."""
    n = len(instrs)
    out, nargs, args, op_list = _raw_columns(instrs)
    # (by identity: an Op that is not one of the table's rows gets -1)
    opidx = np.fromiter(map(_ROW_INDEX.get, op_list, itertools.repeat(-1)), np.int64, n)
    if n and opidx.min() < 0:
        return None
    return out, nargs, args, opidx.astype(np.uint16)


def _flow_c(instrs, n_nodes, guards_on, dep, adj, live, keep, uses, cols=None):
    ffi, lib = _lib()
    out, nargs, args, diff = _columns(instrs) if cols is None else cols
    # the C pass indexes the flag arrays by node id: ids out of range would
    # write past them, so they are refused here (a tape never records one)
    if (args.size and (args.min() < 0 or args.max() >= n_nodes)) or (
            out.size and out.max() >= n_nodes):
        raise UnsupportedError("the tape refers to a node it does not hold")
    buf = ffi.from_buffer
    lib.rt_tape_flow(len(instrs), buf("int64_t[]", out), buf("int32_t[]", nargs),
                     buf("int64_t[]", args), buf("uint8_t[]", diff), int(bool(guards_on)),
                     buf("uint8_t[]", dep), buf("uint8_t[]", adj), buf("uint8_t[]", live),
                     buf("uint8_t[]", keep), buf("int32_t[]", uses))


def _flow_py(instrs, n_nodes, guards_on, dep, adj, live, keep, uses):
    """csrc/compile/tapeflow.c's pass, in Python (same inputs and outputs)."""
    for op, out, args, params in instrs:
        if out >= 0 and any(dep[a] for a in args):
            dep[out] = 1
            if op.diff and any(adj[a] for a in args):
                adj[out] = 1
    for i in range(len(instrs) - 1, -1, -1):
        op, out, args, params = instrs[i]
        if out < 0:
            k = guards_on and any(dep[a] for a in args)
        else:
            k = live[out] and dep[out]
        if k:
            keep[i] = 1
            for a in args:
                live[a] = 1
                uses[a] += 1


def _size(shape):
    return math.prod(shape)


def _shp(v):
    return () if type(v) is float else v.shape


class _KeptOps:
    """The kept instructions' ops, read off their op-index column (2 bytes an
    instruction; a list of the ops was 8): indexing and iteration give the
    ops, as the list did."""
    __slots__ = ("_idx",)

    def __init__(self, idx):
        self._idx = array.array("H", idx.astype(np.uint16).tobytes())

    def __len__(self):
        return len(self._idx)

    def __getitem__(self, k):
        return _OP_LIST[self._idx[k]]

    def __iter__(self):
        return map(_OP_LIST.__getitem__, self._idx)


class Analysis:
    """_Lowering's analysis and layout (a mixin of compiler._Lowering)."""

    def analyse(self):
        """Which nodes depend on an input (dep), which carry an adjoint (adj),
        which instructions are kept (kept), how often each node is read by
        them (uses).  dep/adj are bytearrays and uses an int32 array, indexed
        by node id: at a million-step tape sets and Counters of node ids were
        ~180 bytes an instruction, these 6.  The pass itself runs in C
        (csrc/compile/tapeflow.c) on the tape's columns; _flow_py is the same pass in
        Python, for a build without the extension."""
        tape = self.tape
        instrs = tape.instructions
        inputs = list(tape.input_ids)
        n_nodes = len(self.vals)
        dep, adj, live = bytearray(n_nodes), bytearray(n_nodes), bytearray(n_nodes)
        for i in inputs:
            dep[i] = 1
        for i in inputs[:self.n_grad]:
            adj[i] = 1
        roots = {tape.output_id}
        if getattr(tape, "_value_id", None) is not None:
            roots.add(tape._value_id)
        # extra outputs (rt.grad's has_aux values): kept, with their own slots,
        # so every replay leaves this replay's values in the arena
        roots.update(getattr(tape, "_extra_ids", ()))
        for r in roots:
            live[r] = 1
        keep = bytearray(len(instrs))
        uses = array.array("i", bytes(4 * n_nodes))
        # the columns with op indices, read once for the data-flow pass and
        # the C lowering (None: the Python lowering, see _c_lowering)
        c_side = _lib() is not None
        self._cols = (_columns_idx(instrs) if self.c_lowering and self.c_flow and c_side
                      else None)
        if self._cols is not None:
            out, nargs, args, opidx = self._cols
            _flow_c(instrs, n_nodes, self.guards_on, dep, adj, live, keep, uses,
                    cols=(out, nargs, args, _OP_DIFF[opidx]))
        else:
            flow = _flow_c if self.c_flow and c_side else _flow_py
            flow(instrs, n_nodes, self.guards_on, dep, adj, live, keep, uses)
        self.roots = roots
        # the kept instructions: a list of the tape's own tuples, or a lazy
        # view of a compact tape's columns (no tuple list of a million)
        self.kept = (instrs.select(keep) if isinstance(instrs, Columns)
                     else list(itertools.compress(instrs, keep)))
        self._keep = keep
        self.dep, self.adj, self.inputs = dep, adj, inputs
        self._use_counts = uses

    # ------------------------------------------------ layout
    def _const_operands(self):
        """The operands of kept instructions that do not depend on an input,
        each once, in order of first use (the constant section's order)."""
        dep = self.dep
        if isinstance(self.kept, list):
            flat = np.fromiter(itertools.chain.from_iterable(map(_ARGS, self.kept)), np.int64)
        else:
            _, nargs, args, _ = self.tape.instructions.columns()
            flat = args[np.repeat(np.frombuffer(self._keep, np.uint8).astype(bool), nargs)]
        if not flat.size:
            return []
        flat = flat[np.frombuffer(dep, np.uint8)[flat] == 0]
        nodes, first = np.unique(flat, return_index=True)
        return nodes[np.argsort(first, kind="stable")].tolist()

    def layout(self):
        # node id -> arena offset, -1 until placed: an int32 array, not a dict
        # (4 bytes a node instead of ~90; past 2^31 OverflowError: too large)
        self.offset = array.array("i", [-1]) * len(self.vals)
        off = 0
        self.input_layout = []
        for nid in self.tape.input_ids:
            v = self.vals[nid]
            self.offset[nid] = off
            self.input_layout.append((off, tuple(_shp(v)), type(v) is float))
            off += _size(_shp(v))
        self.n_in = off
        self.n_grad_vals = sum(_size(s) for _, s, _ in self.input_layout[:self.n_grad])
        # constants: every non-input operand that does not depend on an input
        # (recorded values: constant folding), placed before intermediates.
        self.const_base = off
        offset, dep, vals = self.offset, self.dep, self.vals
        for a in self._const_operands():
            if offset[a] < 0:
                offset[a] = self._const(vals[a])
        for r in (self.tape.output_id, getattr(self.tape, "_value_id", None),
                  *getattr(self.tape, "_extra_ids", ())):
            if r is not None and not dep[r] and offset[r] < 0:
                offset[r] = self._const(vals[r])
        self.n_fixed = self.const_base + len(self.const_vals)
        self.next_free = self.n_fixed

    def _const(self, v):
        if type(v) is float:
            # 0.0 and -0.0 apart; other floats key themselves (no tuple a constant)
            key = v if v != 0.0 else (v, math.copysign(1.0, v) < 0.0)
            if v != v:
                key = None
            if key is not None and key in self.scalar_consts:
                return self.scalar_consts[key]
            off = self.const_base + len(self.const_vals)
            self.const_vals.append(v)
            if key is not None:
                self.scalar_consts[key] = off
            return off
        off = self.const_base + len(self.const_vals)
        self.const_vals.extend(np.asarray(v, dtype=np.float64).ravel().tolist())
        return off

    def _alloc(self, n):
        off = self.next_free
        self.next_free += n
        return off

    # ------------------------------------------------ kept instructions, as the searches read them
    def _kept_ops(self):
        """The kept instructions' ops, from the op-index column (_KeptOps), or
        as a list (8 bytes an instruction)."""
        if getattr(self, "_kops", None) is None and getattr(self, "_cols", None) is not None:
            self._kops = _KeptOps(self._cols[3][np.frombuffer(self._keep, np.uint8).astype(bool)])
        if getattr(self, "_kops", None) is None:
            instrs = self.tape.instructions
            self._kops = (list(itertools.compress(instrs.ops, self._keep))
                          if isinstance(instrs, Columns) else list(map(_OPS, self.kept)))
        return self._kops

    def _kept_kinds(self):
        """Per kept instruction, bits of what its op is to the fusion passes
        (_K_*): one look-up per instruction, the op's bits computed once."""
        if getattr(self, "_kinds", None) is None:
            kops = self._kept_ops()
            bits = {op: (_K_FUSION * (op in _FUSION_OPS) | _K_ADD_SUB * (op in _ADD_SUB)
                         | _K_OWNS * (op.family not in _ALIASING)) for op in set(kops)}
            self._kinds = np.fromiter(map(bits.__getitem__, kops), np.uint8, len(kops))
        return self._kinds

    def _kept_outs(self):
        """The kept instructions' results (node ids), an int64 numpy array."""
        instrs = self.tape.instructions
        if isinstance(instrs, Columns):
            return np.frombuffer(instrs.outs, np.int64)[
                np.frombuffer(self._keep, np.uint8).astype(bool)]
        return np.fromiter(map(_OUTS, self.kept), np.int64, len(self.kept))

    def _kept_rows(self, mask):
        """(k, out, args) of the kept instructions k where `mask` (a bool
        array over them): on a compact tape from its columns, without the
        tuples of the instructions between."""
        kept = self.kept
        if isinstance(kept, list):
            for k, (_, out, args, _) in itertools.compress(enumerate(kept), mask.tolist()):
                yield k, out, args
            return
        for chunk in kept.rows(mask):
            for k, out, a, b, n in zip(*chunk):
                yield k, out, (a, b) if n == 2 else (a,) if n == 1 else kept[k][2]

    def _kept_pairs(self, mask):
        """(k, out, a, b) of the kept two-operand instructions k where `mask`."""
        kept = self.kept
        if isinstance(kept, list):
            for k, (_, out, (a, b), _) in itertools.compress(enumerate(kept), mask.tolist()):
                yield k, out, a, b
            return
        for ks, outs, a0, a1, na in kept.rows(mask):
            if na.count(2) != len(na):  # pragma: no cover - callers pass binary ops
                raise AssertionError("_kept_pairs: an instruction without two operands")
            yield from zip(ks, outs, a0, a1)

    def _uses(self):
        """node -> how many operands of kept instructions (guards included) it is"""
        return self._use_counts
