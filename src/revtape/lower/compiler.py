"""Tape -> Program: the flat instruction buffer the C VM replays.

The program is plain data (numpy arrays and ints), so it pickles and can be
rebuilt anywhere the same op table is built.  Lowering does the cheap things
a tape needs:

* dead code elimination -- only work that reaches the output (or a guard);
* constant folding -- every node that does not depend on an input is a
  constant with its recorded value, so constant subgraphs cost nothing;
* adjoint flags -- reverse work only for operands that lead back to a
  differentiated input (constant subgraphs get flags 0 and are skipped);
* aliasing -- reshape, scalar indexing and contiguous slices are offsets
  into the same arena, not instructions;
* operand-kind opcodes -- array-array, array-scalar and scalar-array
  variants, and explicit gathers for general broadcasting, so that the VM
  never inspects an operand at run time.

Arena layout: [inputs | constants | intermediates], see csrc/vm.h.
"""

import array
import gc
import itertools
import math
import operator
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter

import numpy as np

from . import blocks
from ..core import ops
from ..errors import UnsupportedError
from ..trace.instrstore import Columns
from ..core.isa import FLAGS_SHIFT, WORDS   # the word layout (isa.py, generated into vm.h's ABI)

FORMAT_VERSION = 1
OPC = ops.OPCODE
_GUARD = ops.OPS["guard"]
_ADD, _MUL, _SUB, _SQUARE = (ops.OPS[n] for n in ("add", "mul", "sub", "square"))
_TAKE = ops.OPS["take"]
_SUM = ops.OPS["sum"]
# the ops fusions() acts on (every other one neither fuses nor produces a fusable result)
_FUSION_OPS = frozenset((_ADD, _MUL, _SUB, _SQUARE, _TAKE, _SUM))
_ADD_SUB = frozenset((_ADD, _SUB))
_K_FUSION, _K_ADD_SUB, _K_OWNS = 1, 2, 4     # _Lowering._kept_kinds


@dataclass
class Program:
    """A compiled tape as plain data."""
    code: np.ndarray            # int32 (n_instr, 6)
    ints: np.ndarray            # int32 side table (index maps, matmul shapes)
    consts: np.ndarray          # float64 values of vals[n_in:n_fixed]
    n_in: int
    n_grad: int
    n_fixed: int
    n_vals: int
    out_off: int
    out_shape: tuple
    inputs: list                # [(offset, shape, is_float)] in tape order
    guards: list                # guard number -> (params, offset a, offset b)
    value_off: int = -1         # HessianTape: where f's value lives
    extras: list = field(default_factory=list)   # [(offset, shape)] of tape._extra_ids
    format_version: int = FORMAT_VERSION
    op_table_hash: str = ops.OP_TABLE_HASH
    stats: dict = field(default_factory=dict)
    # PYCALL slot -> primitives.CallSite (the primitive, by qualified name when
    # pickled, and its static arguments): the callback table of this program
    callbacks: list = field(default_factory=list)

    @property
    def out_len(self):
        return math.prod(self.out_shape)

    def to_state(self):
        return dict(self.__dict__)

    @classmethod
    def from_state(cls, state):
        return cls(**state)


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
# Off: the Python lowering alone (tests compare the two programs)
C_LOWERING = True
# The largest share of kept instructions the C lowering leaves to Python
# (each costs a return from C): above it, Python lowers the tape alone
C_LOWERING_MAX_STOPS = 0.25


class _Words:
    """The instruction words as they are emitted, in one flat int32
    array.array (6 words an instruction, the program's own type): a list of
    6-tuples of Python ints costs ~200 bytes an instruction, this 24 -- at a
    million-step tape that was most of the compiler's peak memory.  append()
    takes the same 6-tuple a list would; a word beyond 32 bits raises
    OverflowError (compile_tape: the tape is too large)."""
    __slots__ = ("_a", "append")

    def __init__(self):
        self._a = array.array("i")
        # append(word) is the array's own extend: no Python frame per instruction
        self.append = self._a.extend

    def __len__(self):
        return len(self._a) // WORDS

    def to_numpy(self):
        return np.frombuffer(self._a, dtype=np.int32).reshape(-1, WORDS) if self._a \
            else np.zeros((0, WORDS), dtype=np.int32)


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


class _WordBuf:
    """_Words for the C lowering: one int32 (capacity, 6) numpy array that
    rt_tape_emit writes runs of words into; the Python lowering's words
    between the runs go through a _Words (so a word past 32 bits raises
    OverflowError as before) and are moved in before the next run."""
    __slots__ = ("buf", "n", "_py", "append")

    def __init__(self, cap):
        self.buf = np.zeros((max(cap, 16), WORDS), np.int32)
        self.n = 0
        self._py = _Words()
        self.append = self._py.append

    def flush(self, more=0):
        """Move the Python lowering's words in; room for `more` after them."""
        m = len(self._py)
        need = self.n + m + more
        if need > len(self.buf):
            buf = np.zeros((max(need, 2 * len(self.buf)), WORDS), np.int32)
            buf[:self.n] = self.buf[:self.n]
            self.buf = buf
        if m:
            self.buf[self.n:self.n + m] = self._py.to_numpy()
            self.n += m
            del self._py._a[:]

    def __len__(self):
        return self.n + len(self._py)

    def to_numpy(self):
        self.flush()
        # (a view: the capacity past n was never written, and np.zeros'
        # untouched pages of a large array are not resident)
        return self.buf[:self.n]


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


_FLOW_C = _flow_c     # (a test that swaps the pass for _flow_py gets the Python lowering too)


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


def _overlap(r1, r2):
    """Do two (storage node, first, length) regions share a slot?"""
    return r1[0] == r2[0] and r1[1] < r2[1] + r2[2] and r2[1] < r1[1] + r1[2]


def _shp(v):
    return () if type(v) is float else v.shape


class _Lowering:
    def __init__(self, tape, guards, n_grad):
        self.tape = tape
        self.vals = tape.values
        self.guards_on = guards
        self.n_grad = len(tape.input_ids) if n_grad is None else n_grad
        self.words = _Words()
        self.ints = []
        self.const_vals = []
        self.scalar_consts = {}
        self.offset = None      # node id -> arena offset (layout)
        self.adj = None         # node id -> 1 if it carries an adjoint (analyse)
        self.guard_list = []
        self.callbacks = []
        self._use_counts = None
        self.gaxpy_take = {}     # GAXPY instruction index -> the gather (take) it absorbs
        self.ssd_sum = {}        # SSD (a sum's index) -> the SQDIFF (square's index) it absorbs

    # ------------------------------------------------ analysis
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
        self._cols = (_columns_idx(instrs) if C_LOWERING and _lib() is not None
                      and _flow_c is _FLOW_C else None)
        if self._cols is not None:
            out, nargs, args, opidx = self._cols
            _flow_c(instrs, n_nodes, self.guards_on, dep, adj, live, keep, uses,
                    cols=(out, nargs, args, _OP_DIFF[opidx]))
        else:
            flow = _flow_c if _lib() is not None else _flow_py
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

    # ------------------------------------------------ emission
    def emit(self, opname, n, out, a=0, b=0, c=0, flags=0):
        self.words.append((OPC[opname] | (flags << FLAGS_SHIFT), n, out, a, b, c))

    def _ints(self, arr):
        start = len(self.ints)
        self.ints.extend(np.asarray(arr, dtype=np.int64).ravel().tolist())
        return start

    def gather(self, src_off, src_size, idx, needs_adj):
        idx = np.asarray(idx).ravel()
        if idx.size and np.array_equal(idx, np.arange(idx[0], idx[0] + idx.size)):
            return src_off + int(idx[0])           # a contiguous run: an alias
        out = self._alloc(idx.size)
        self.emit("GATHER", idx.size, out, src_off, src_size, self._ints(idx),
                  flags=1 if needs_adj else 0)
        return out

    def broadcast(self, node, shape):
        """Offset of node's value materialised at `shape` (a gather if it must be)."""
        s = _shp(self.vals[node])
        if tuple(s) == tuple(shape):
            return self.offset[node]
        src = np.arange(_size(s)).reshape(s)
        idx = np.broadcast_to(src, shape)
        return self.gather(self.offset[node], _size(s), idx, self.adj[node])

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

    def fusions(self, only=None):
        """Scalar pairs to emit as one superinstruction: {inner index: outer
        index} for the instructions absorbed, and {outer index: (kind, inner
        index, inner result)} for where the fused instruction goes.  Fused:
        `a + b*c` (AXPY) and `(a - b)**2` (SQDIFF).  The inner result must be
        used once, and no instruction between the two may read the inner
        operands (nor another view of them: x[0] read twice is two nodes over
        one slot), so the fused reverse accumulates every adjoint in the same
        order as the pair would (bit-for-bit the same gradients).
        `only`: a mask over the kept instructions to visit instead of every
        fusion op (lower_c: the array ones; C finds the scalar pairs)."""
        kept, vals = self.kept, self.vals
        uses, base = self._uses(), {}
        # the ops alone (a list of references) answer most questions without
        # building an instruction tuple from a compact tape's columns
        kops = self._kept_ops()
        n_kept = len(kops)
        for m in itertools.compress(range(n_kept), map(_MAYBE_VIEWS.__contains__, kops)):
            out, args = kept[m][1:3]
            base[out] = base.get(args[0], args[0])     # may be an alias of args[0]
        slots = lambda args: {base.get(a, a) for a in args}

        def reads(m):
            # views (reshape, item) are offsets, never instructions: they accumulate nothing
            if kops[m] in _VIEWS:
                return ()
            return slots(kept[m][2])

        producer, inner_of, outer_of = {}, {}, {}

        def fusable(t, k, want):
            i = producer.get(t)
            if (i is None or kops[i] is not want or uses[t] != 1 or t in self.roots
                    or k - i > 8 or i in inner_of):
                return None
            if k - i > 1:                     # (adjacent: nothing in between to check)
                operands = slots(kept[i][2])
                if any(operands.intersection(reads(m)) for m in range(i + 1, k)):
                    return None
            return i

        # only these ops start or end a fusion: the loop skips the others
        # (a sin, an exp) before their tuple is looked at
        relevant = (self._kept_kinds() & _K_FUSION).astype(bool) if only is None else only
        prune_at = 0
        for k, out, args in self._kept_rows(relevant):
            op = kops[k]
            if k >= prune_at:
                prune_at = k + 4096
                # every fusion looks at most 8 instructions back: older
                # producers are dropped (a million-entry dict otherwise)
                for t in [t for t, i in producer.items() if i < k - 8]:
                    del producer[t]
            if op is _SUM:
                self._sum_of_sqdiff(k, args[0], producer, inner_of, outer_of)
                continue
            if type(vals[out]) is not float:
                self._array_fusion(k, op, out, args, fusable, producer, inner_of, outer_of)
                continue
            if op is _ADD:
                for t in args:
                    if t not in producer:     # (what fusable finds first; no call)
                        continue
                    i = fusable(t, k, _MUL)
                    if i is not None:
                        inner_of[i], outer_of[k] = k, ("AXPY", i, t)
                        break
            elif op is _SQUARE:
                i = fusable(args[0], k, _SUB)
                if i is not None:
                    inner_of[i], outer_of[k] = k, ("SQDIFF", i, args[0])
            if op is _MUL or op is _SUB:
                producer[out] = k
        return inner_of, outer_of

    def _regions(self):
        """{node: (storage node, first element, length)} for the nodes the
        lowering makes offsets into another value's slots (views such as
        reshape and item, a gather of a contiguous run), as lower() decides;
        every other node owns its slots."""
        if getattr(self, "_region_of", None) is None:
            reg, vals = {}, self.vals
            for op, out, args, params in self.kept:
                if op not in _MAYBE_VIEWS:
                    continue
                src = reg.get(args[0], (args[0], 0, _size(_shp(vals[args[0]]))))
                if op.view is not None:
                    first, length = op.view(params)
                    reg[out] = (src[0], src[1] + int(first),
                                src[2] if length is None else int(length))
                else:
                    idx = np.asarray(op.indices(params)).ravel()
                    if idx.size and np.array_equal(idx, np.arange(idx[0], idx[0] + idx.size)):
                        reg[out] = (src[0], src[1] + int(idx[0]), int(idx.size))
            self._region_of = reg
        return self._region_of

    def _region(self, node):
        return self._regions().get(node, (node, 0, _size(_shp(self.vals[node]))))

    def _array_fusion(self, k, op, out, args, fusable, producer, inner_of, outer_of):
        """The array forms of AXPY (`u + s*v`, s one element) and SQDIFF
        (`(u - v)**2`), operands of the result's own shape (no broadcasting):
        the VM's loops over n are the same arithmetic per element as the pair
        of array instructions, with the same conditions as the scalar pairs.
        One more for AXPY: its reverse adds u's and v's adjoint terms element
        by element where the pair adds all of u's first, so regions of u and v
        that carry adjoints must be disjoint or the same slots, and s's slot
        outside both -- then every slot receives its terms in the pair's order.
        (SQDIFF's interleaved order equals SUB's two ordered passes for any
        overlap: csrc/kernels/kernels.c's rt_kr_*_VV.)"""
        vals, adj = self.vals, self.adj
        shape = _shp(vals[out])
        same = lambda a: _shp(vals[a]) == shape
        if op is _ADD:
            for t in args:
                other = args[1] if args[0] == t else args[0]
                i = producer.get(t)
                if i is None or self.kept[i][0] is not _MUL or not same(other) or not same(t):
                    continue
                x, y = self.kept[i][2]
                s_, v_ = (x, y) if _size(_shp(vals[x])) == 1 else (y, x)
                if _size(_shp(vals[s_])) != 1 or not same(v_):
                    continue
                carried = [self._region(a) for a in (other, v_) if adj[a]]
                if len(carried) == 2 and carried[0] != carried[1] and _overlap(*carried):
                    continue
                if adj[s_] and any(_overlap(self._region(s_), r) for r in carried):
                    continue
                i = fusable(t, k, _MUL)
                if i is not None:
                    inner_of[i], outer_of[k] = k, ("AXPY", i, t)
                    self._gather_into_axpy(k, i, other, s_, v_, producer, inner_of, outer_of)
                    break
        elif op is _SQUARE:
            i = producer.get(args[0])
            if i is not None and self.kept[i][0] is _SUB and all(same(a) for a in self.kept[i][2]):
                i = fusable(args[0], k, _SUB)
                if i is not None:
                    inner_of[i], outer_of[k] = k, ("SQDIFF", i, args[0])
                    producer[out] = k                # a sum of it may fuse too (SSD)
        if op is _MUL or op is _SUB:
            producer[out] = k
        elif op is _TAKE and out not in self._regions():
            producer[out] = k                      # a gather, not an alias

    def _sum_of_sqdiff(self, m, sq, producer, inner_of, outer_of):
        """np.sum over every axis of an array SQDIFF used only there, at most 8
        instructions on: one SSD (csrc/kernels/kernels.c) at the sum's place.  The
        difference's operands then receive their adjoints at m instead of at
        the square, so nothing between may read their slots."""
        k = producer.get(sq)
        kept, vals = self.kept, self.vals
        if (k is None or outer_of.get(k, ("",))[0] != "SQDIFF" or k in inner_of
                or self._uses()[sq] != 1 or sq in self.roots or m - k > 8):
            return
        axis = kept[m][3].get("axis")
        nd = len(_shp(vals[sq]))
        if axis is not None and tuple(axis) != tuple(range(nd)):
            return                                     # partial sums, or axes reordered
        if set(kept[m][3]) - {"axis", "keepdims"}:
            return                                     # anything else is not a plain sum
        sub = kept[outer_of[k][1]][2]
        regions = [self._region(a) for a in sub]
        for j in range(k + 1, m):
            op_j, out_j, args_j, _ = kept[j]
            if out_j in self._regions():
                continue                 # an offset (a view), no instruction
            if any(_overlap(r, self._region(a)) for r in regions for a in args_j):
                return
        inner_of[k] = m
        self.ssd_sum[m] = k

    def _gather_into_axpy(self, k, i, u, s, v, producer, inner_of, outer_of):
        """AXPY k whose u is a gather (a take that copies) used only there, at
        most 8 instructions back: fused into one GAXPY (csrc/kernels/gaxpy.h), whose
        reverse scatters into the gathered array at k's place instead of the
        gather's.  So nothing between may read that array's slots (by exact
        regions: radon's slope x[1] is read between, its intercepts x[4:] are
        gathered), and its slots must be apart from s's and v's (their terms
        are added in the same loop)."""
        j = producer.get(u)
        kept, uses = self.kept, self._uses()
        if (j is None or kept[j][0] is not _TAKE or uses[u] != 1 or u in self.roots
                or k - j > 8 or j in inner_of or not _size(_shp(self.vals[u]))):
            return
        src = self._region(kept[j][2][0])
        if any(_overlap(src, self._region(a)) for a in (s, v)):
            return
        for m in range(j + 1, k):
            op_m, out_m, args_m, _ = kept[m]
            if m == i or out_m in self._regions():
                continue                 # the fused product, and offsets (no instruction)
            if any(_overlap(src, self._region(a)) for a in args_m):
                return
        inner_of[j] = k
        outer_of[k] = ("GAXPY",) + outer_of[k][1:]
        self.gaxpy_take[k] = j

    def sum_chains(self, inner, outer):
        """Runs of scalar additions to emit as one CSUM (CppAD's cumulative sum):
        `s = s + t` or `s = s - t` repeated, as every scalar log density and
        loss sums its terms.  Returns ({absorbed link index}, {last link
        index: (start node, [(term node, +1 or -1), ...])}).

        The partial sums must be used once (by the next link) and not be a
        root.  Every term, and the start if it carries an adjoint, must be a
        single-use scalar result with its own arena slot (not an alias such as
        x[i]): then its adjoint receives the chain's adjoint alone, and moving
        that write to the last link's place changes no bit.
        Forward adds in the recorded order with the recorded roundings."""
        kept, vals, adj, roots = self.kept, self.vals, self.adj, self.roots
        uses = self._uses()
        kops = self._kept_ops()
        # node -> 1: a scalar result with its own slot, marked for every kept
        # instruction before the walk (an operand is always an earlier
        # instruction's result (SSA), so marking as the walk went was the same)
        is_float = np.fromiter(map(operator.is_, map(type, vals), itertools.repeat(float)),
                               bool, len(vals))
        outs = self._kept_outs()
        kinds = self._kept_kinds()
        own = is_float[outs] & (kinds & _K_OWNS).astype(bool)
        if inner:
            own[np.fromiter(inner, np.int64, len(inner))] = False
        owned = bytearray(len(vals))
        np.frombuffer(owned, np.uint8)[outs[own]] = 1
        sole = lambda t: owned[t] and uses[t] == 1
        open_chains, absorbed, chains = {}, set(), {}
        # the walk visits the scalar additions and subtractions alone
        cand = is_float[outs] & (kinds & _K_ADD_SUB).astype(bool)
        del outs, own, is_float          # (a million-step tape's peak memory)
        for k, out, a, b in self._kept_pairs(cand):
            op = kops[k]
            if k in inner or k in outer:
                continue
            sign = 1 if op is _ADD else -1
            link = None
            for p, t in ((a, b), (b, a)) if op is _ADD else ((a, b),):
                if p in open_chains and uses[p] == 1 and p not in roots and sole(t) and adj[t]:
                    link = p, t
                    break
            if link is not None:
                j, start, terms = open_chains.pop(link[0])
                absorbed.add(j)
                terms.append((link[1], sign))
                open_chains[out] = (k, start, terms)
                continue
            for start, t in ((a, b), (b, a)) if op is _ADD else ((a, b),):
                if sole(t) and adj[t] and (not adj[start] or sole(start)):
                    open_chains[out] = (k, start, [(t, sign)])
                    break
        for k, start, terms in open_chains.values():
            if len(terms) > 1:
                chains[k] = (start, terms)
        # a one-term "chain" stays a plain instruction, and so does a link
        # whose chain ended up with one term (it was never absorbed)
        return absorbed, chains

    def lower(self):
        """Emit the kept instructions in order: the fused groups fusions() and
        sum_chains() formed, scalar code inline (most of a scalar program, so
        no call per instruction), everything else by its row (_lower_array).
        With the C extension, the scalar part runs in C (lower_c)."""
        if self._c_lowering() and self.lower_c():
            return
        vals, offset, adj, words = self.vals, self.offset, self.adj, self.words
        fused_mul, fused_add = self.fusions()
        links, chains = self.sum_chains(fused_mul, fused_add)
        self._kops = self._kinds = None   # (the searches' columns: not needed any more)
        ssd_sum, lower_pair = self.ssd_sum, self._lower_pair
        for k, instr in enumerate(self.kept):
            op, out, args, params = instr
            if k in fused_mul or k in links:
                continue                      # emitted inside the AXPY or CSUM it ends in
            if k in ssd_sum:
                self._lower_ssd(out, fused_add[ssd_sum[k]][1])
            elif k in chains:
                self._lower_csum(out, *chains[k])
            elif k in fused_add:
                lower_pair(k, out, args, fused_add[k])
            elif type(vals[out]) is float and op.family in _SCALAR_FAMILIES:
                # scalar code: one element, no broadcasting to work out
                o = self.next_free
                self.next_free = o + 1
                offset[out] = o
                diff = op.diff
                if len(args) == 1:
                    a = args[0]
                    words.append((_UNARY_CODE[op] | ((diff and adj[a]) << FLAGS_SHIFT), 1, o,
                                  offset[a], 0, 0))
                else:
                    a, b = args
                    flags = (diff and adj[a]) | ((diff and adj[b]) << 1)
                    words.append((_VV_CODE[op] | (flags << FLAGS_SHIFT), 1, o, offset[a],
                                  offset[b], 0))
            elif op is _GUARD:
                self._lower_guard(args, params)
            else:
                self._lower_array(op, out, args, params)

    def _c_lowering(self):
        """Whether lower_c applies: the extension is there, analyse read the
        op-index columns, the searches are the class's own (tests that turn a
        fusion off patch them), and node ids fit the C side's int32 links."""
        return (getattr(self, "_cols", None) is not None
                and type(self).fusions is _SEARCHES[0] and type(self).sum_chains is _SEARCHES[1]
                and len(self.vals) < 2**31 - 1 and len(self.kept) < 2**31 - 1)

    def lower_c(self):
        """lower() with its scalar part in C (csrc/compile/tapeflow.c): rt_tape_fuse
        finds the scalar AXPY/SQDIFF pairs and sum chains as fusions() and
        sum_chains() do, rt_tape_emit writes the words of scalar instructions,
        fused groups and views in runs, stopping at each instruction this
        lowering emits (arrays, structure, linear algebra, guards, and the
        array fusions, which fusions() still finds, over array results only).
        The words are the ones lower() writes (tests/test_lowering_c.py).
        False (and nothing done) for a tape mostly of what Python emits."""
        ffi, lib = _lib()
        buf = ffi.from_buffer
        out, nargs, args, opidx = self._cols
        vals, keep = self.vals, self._keep
        n_nodes, n_kept = len(vals), len(self.kept)
        keep_b = np.frombuffer(keep, np.uint8).astype(bool)
        kidx = opidx[keep_b]
        # Each instruction the Python lowering emits costs a return from C
        # (a few us): a tape made mostly of those (a short array program) is
        # lowered by Python alone -- the same words either way.  In C: views,
        # and elementwise rows on floats (first by the rows alone).
        kbits = _OP_BITS[kidx]
        in_c = (kbits & (LB_VIEW | LB_SCALAR)).astype(bool)
        if n_kept - int(np.count_nonzero(in_c)) > C_LOWERING_MAX_STOPS * n_kept:
            self._cols = None            # (and the searches read the ops as a list)
            return False
        # per node: a Python float (a scalar), a root
        nflags = np.fromiter(map(operator.is_, map(type, vals), itertools.repeat(float)),
                             np.uint8, n_nodes)
        for r in self.roots:
            nflags[r] |= LN_ROOT
        kout = out[keep_b]
        in_c &= (kbits & LB_VIEW).astype(bool) | (nflags[kout] & LN_FLOAT).astype(bool)
        if n_kept - int(np.count_nonzero(in_c)) > C_LOWERING_MAX_STOPS * n_kept:
            self._cols = None            # (and the searches read the ops as a list)
            return False
        del in_c, kbits
        role = np.zeros(n_kept, np.uint8)
        link = np.zeros(n_kept, np.int32)
        aux = np.zeros(n_kept, np.int32)
        # the array fusions, in Python: fusions() over the fusion ops whose
        # result is an array, and sums (scalar pairs never involve an array:
        # a value is a float or an array of at least one dimension)
        cand = _OP_FUSION[kidx] & (((nflags[kout] & LN_FLOAT) == 0) | _OP_SUM[kidx])
        cand[kout < 0] = False
        del kout
        fused_mul, fused_add = self.fusions(cand) if cand.any() else ({}, {})
        del cand
        if fused_mul:
            role[np.fromiter(fused_mul, np.int64, len(fused_mul))] |= LR_INNER
        for k in itertools.chain(fused_add, self.ssd_sum):
            role[k] |= LR_PY
        # views are offsets: their first element, where rt_tape_emit reads it
        kept = self.kept
        for k in np.flatnonzero(_OP_BITS[kidx] & LB_VIEW).tolist():
            op, _, _, params = kept[k]
            link[k] = op.view(params)[0]
        self._kops = self._kinds = self._cols = None
        del kidx
        adj = np.frombuffer(self.adj, np.uint8)
        uses = np.frombuffer(self._use_counts, np.int32)
        keep_c = buf("uint8_t[]", keep)
        cols = (buf("int64_t[]", out), buf("int32_t[]", nargs), buf("int64_t[]", args))
        opidx_c = buf("uint16_t[]", opidx)
        bits_c = buf("uint8_t[]", _OP_BITS)
        adj_c, nflags_c = buf("uint8_t[]", adj), buf("uint8_t[]", nflags)
        role_c, link_c, aux_c = (buf("uint8_t[]", role), buf("int32_t[]", link),
                                 buf("int32_t[]", aux))
        n_instr = len(out)
        terms = lib.rt_tape_fuse(n_instr, cols[0], cols[1], cols[2], keep_c, opidx_c, bits_c,
                                 n_nodes, adj_c, buf("int32_t[]", uses), nflags_c,
                                 role_c, link_c, aux_c)
        if terms < 0:
            raise MemoryError("compiling the tape: out of memory")
        # emission: C in runs, this lowering at each stop
        self.words = words = _WordBuf(n_kept)
        ints = np.zeros(max(terms, 1), np.int32)
        ints_c = buf("int32_t[]", ints)
        state = np.zeros(7, np.int64)
        state_c = buf("int64_t[]", state)
        offset_c = buf("int32_t[]", self.offset)
        diff_c, code_c = buf("uint8_t[]", _OP_DIFF), buf("int32_t[]", _OP_SCALAR_CODE)
        op_axpy, op_sqdiff, op_csum = OPC["AXPY"], OPC["SQDIFF"], OPC["CSUM"]
        ssd_sum = self.ssd_sum
        head = (state_c, n_instr, cols[0], cols[1], cols[2], keep_c, opidx_c, bits_c, diff_c,
                code_c, adj_c, nflags_c, role_c, link_c, aux_c, offset_c)
        tail = (ints_c, op_axpy, op_sqdiff, op_csum, FLAGS_SHIFT)
        words_c, words_buf = None, None
        while True:
            state[3], state[6] = self.next_free, len(self.ints)
            words.flush(n_kept - int(state[2]))
            if words.buf is not words_buf:
                words_buf, words_c = words.buf, buf("int32_t[]", words.buf)
            status = lib.rt_tape_emit(*head, words_c + WORDS * words.n, *tail)
            i, _, k, self.next_free, nw, ni, _ = state.tolist()
            words.n += nw
            if ni:
                self.ints.extend(ints[:ni].tolist())
            if status < 0:
                raise OverflowError("an arena offset past int32")
            if status == 0:
                break
            op, o, a, params = kept[k]
            if k in ssd_sum:
                self._lower_ssd(o, fused_add[ssd_sum[k]][1])
            elif k in fused_add:
                self._lower_pair(k, o, a, fused_add[k])
            elif op is _GUARD:
                self._lower_guard(a, params)
            else:
                self._lower_array(op, o, a, params)
            state[0], state[1], state[2] = i + 1, state[1] + nargs[i], k + 1
        return True

    # ------------------------------------------------ fused groups
    def _lower_ssd(self, out, sub):
        """np.sum((x - y)**2) of the SUB at kept index `sub` (_sum_of_sqdiff)."""
        vals, offset, adj = self.vals, self.offset, self.adj
        x, y = self.kept[sub][2]
        o = self._alloc(1)
        offset[out] = o
        self.words.append((OPC["SSD"] | ((adj[x] | (adj[y] << 1)) << FLAGS_SHIFT),
                           _size(_shp(vals[x])), o, offset[x], offset[y], 0))

    def _lower_csum(self, out, start, terms):
        """A run of scalar additions (sum_chains) as one CSUM."""
        offset = self.offset
        o = self.next_free
        self.next_free = o + 1
        offset[out] = o
        c = self._ints([offset[t] if sign > 0 else ~offset[t] for t, sign in terms])
        self.emit("CSUM", len(terms), o, offset[start], 0, c, flags=self.adj[start] | 2)

    def _lower_pair(self, k, out, args, fused):
        """Instruction k fused with the one it absorbs (fused: (kind, its kept
        index i, its result t)): AXPY, GAXPY (the gather too) or SQDIFF (fusions,
        _array_fusion)."""
        kind, i, t = fused
        vals, offset, adj, words = self.vals, self.offset, self.adj, self.words
        x, y = self.kept[i][2]
        n = _size(_shp(vals[out]))       # 1, or an array form (_array_fusion)
        o = self._alloc(n)
        offset[out] = o
        if kind == "SQDIFF":
            flags = adj[x] | (adj[y] << 1)
            words.append((OPC["SQDIFF"] | (flags << FLAGS_SHIFT), n, o, offset[x],
                          offset[y], 0))
            return
        other = args[1] if args[0] == t else args[0]
        if n != 1 and _size(_shp(vals[x])) != 1:
            x, y = y, x                   # b is the one-element operand
        if kind == "GAXPY":
            _, _, (src,), tparams = self.kept[self.gaxpy_take[k]]
            idx = np.asarray(tparams["idx"]).ravel()
            rec = self._ints(np.concatenate([[offset[y], _size(_shp(vals[src]))], idx]))
            flags = adj[src] | (adj[x] << 1) | (adj[y] << 2)
            words.append((OPC["GAXPY"] | (flags << FLAGS_SHIFT), n, o, offset[src],
                          offset[x], rec))
            return
        flags = adj[other] | (adj[x] << 1) | (adj[y] << 2)
        words.append((OPC["AXPY"] | (flags << FLAGS_SHIFT), n, o, offset[other],
                      offset[x], offset[y]))

    # ------------------------------------------------ one row at a time
    def _lower_array(self, op, out, args, params):
        """Views become offsets, gathers of a contiguous run too; every other
        row gets its output slots and is emitted by its entry in _LOWER."""
        oshape = _shp(self.vals[out])
        n = _size(oshape)
        flag = [self.adj[a] and op.diff for a in args]
        if op in _VIEWS:
            self.offset[out] = self.offset[args[0]] + op.view(params)[0]
            return
        if op.lower == "GATHER":
            a = args[0]
            self.offset[out] = self.gather(self.offset[a], _size(_shp(self.vals[a])),
                                           op.indices(params), flag[0])
            return
        how = _LOWER.get(op.lower or op.family)
        if how is None:  # pragma: no cover - tests/test_isa.py checks every row has one
            raise UnsupportedError(f"the compiler cannot lower {op.name}")
        o = self._alloc(n)
        self.offset[out] = o
        how(self, op, o, n, oshape, args, params, flag)

    def _lower_unary(self, op, o, n, oshape, args, params, flag):
        self.emit(op.name.upper(), n, o, self.offset[args[0]], flags=flag[0])

    def _lower_binary(self, op, o, n, oshape, args, params, flag):
        a, b = args
        sa, sb = _size(_shp(self.vals[a])), _size(_shp(self.vals[b]))
        if sa == n and sb == n:
            oa, ob = self.broadcast(a, oshape), self.broadcast(b, oshape)
            variant = "VV"
        elif sb == 1 and n != 1:
            oa, ob, variant = self.broadcast(a, oshape), self.offset[b], "VS"
        elif sa == 1 and n != 1:
            oa, ob, variant = self.offset[a], self.broadcast(b, oshape), "SV"
        else:
            oa, ob, variant = self.broadcast(a, oshape), self.broadcast(b, oshape), "VV"
        self.emit(f"{op.name.upper()}_{variant}", n, o, oa, ob, flags=flag[0] | (flag[1] << 1))

    def _lower_where(self, op, o, n, oshape, args, params, flag):
        c, x, y = args
        oc = self.broadcast(c, oshape)
        sx, sy = _size(_shp(self.vals[x])), _size(_shp(self.vals[y]))
        if sy == 1 and sx != 1 and n != 1:
            variant, ox, oy = "VS", self.broadcast(x, oshape), self.offset[y]
        elif sx == 1 and sy != 1 and n != 1:
            variant, ox, oy = "SV", self.offset[x], self.broadcast(y, oshape)
        else:
            variant, ox, oy = "VV", self.broadcast(x, oshape), self.broadcast(y, oshape)
        self.emit(f"WHERE_{variant}", n, o, oc, ox, oy, flags=(flag[1] << 1) | (flag[2] << 2))

    def _lower_clip(self, op, o, n, oshape, args, params, flag):
        self.emit("CLIP", n, o, self.offset[args[0]], self.offset[args[1]],
                  self.offset[args[2]], flags=flag[0])

    def _lower_reduce(self, op, o, n, oshape, args, params, flag):
        a, flag = args[0], flag[0]
        shape = _shp(self.vals[a])
        nd = len(shape)
        axis = tuple(range(nd)) if params["axis"] is None else params["axis"]
        kept = [i for i in range(nd) if i not in axis]
        src = self.offset[a]
        seg = _size([shape[i] for i in axis])
        if list(axis) != list(range(nd - len(axis), nd)):
            # move the reduced axes last so that each segment is contiguous
            idx = np.arange(_size(shape)).reshape(shape).transpose(kept + list(axis))
            src = self.gather(src, _size(shape), idx, flag)
        self.emit(f"REDUCE_{op.name.upper()}", n, o, src, seg, flags=flag)

    def _lower_matmul(self, op, o, n, oshape, args, params, flag):
        a, b = args
        sa, sb = _shp(self.vals[a]), _shp(self.vals[b])
        m = 1 if len(sa) == 1 else sa[0]
        k = sa[-1]
        nn = 1 if len(sb) == 1 else sb[1]
        self.emit("MATMUL", m * nn, o, self.offset[a], self.offset[b], self._ints([m, k, nn]),
                  flags=flag[0] | (flag[1] << 1))

    def _lower_linalg(self, op, o, n, oshape, args, params, flag):
        # the row's Linalg gives the kernel's ints record (N, M, flags, scratch):
        # see csrc/instr/linalg/linalg.h; the scratch lives in the arena
        N, M, bits, scratch = op.linalg.ints([_shp(self.vals[a]) for a in args], params)
        s = 0 if scratch is None else self._alloc(scratch)
        b = self.offset[args[1]] if len(args) > 1 else 0
        self.emit(op.name.upper(), n, o, self.offset[args[0]], b, self._ints([N, M, bits, s]),
                  flags=flag[0] | ((flag[1] if len(args) > 1 else 0) << 1))

    def _lower_gather_idx(self, op, o, n, oshape, args, params, flag):
        a, ix = args
        self.emit("GATHER_IDX", n, o, self.offset[a], _size(_shp(self.vals[a])),
                  self.offset[ix], flags=flag[0])

    def _lower_scatter_add(self, op, o, n, oshape, args, params, flag):
        idx = op.indices(params)
        flat = np.asarray(idx).ravel()
        self.emit("SCATTER_ADD", flat.size, o, self.broadcast(args[0], np.shape(idx)),
                  n, self._ints(flat), flags=flag[0])

    def _lower_scatter(self, op, o, n, oshape, args, params, flag):
        pieces = op.pieces([_shp(self.vals[a]) for a in args], params)
        for a, pos, f in zip(args, pieces, flag):
            self.emit("SCATTER", pos.size, o, self.offset[a], n, self._ints(pos), flags=f)

    def _lower_pycall(self, op, o, n, oshape, args, params, flag):
        # operands are read where they live (aliases included); the callback
        # adds the operands' adjoints in place, as every other kernel does
        entries = []
        for a, f in zip(args, flag):
            entries += [self.offset[a], _size(_shp(self.vals[a])), int(f)]
        slot = len(self.callbacks)
        self.callbacks.append(params["site"])
        self.emit("PYCALL", n, o, slot, len(args), self._ints(entries), flags=int(any(flag)))

    def _lower_guard(self, args, params):
        a, b = args
        number = len(self.guard_list)
        oa, ob = self.offset[a], self.offset[b]
        self.guard_list.append((params, oa, ob))
        self.words.append((OPC["GUARD_" + params["pred"].upper()], int(params["expected"]),
                           number, oa, ob, 0))

    def program(self):
        tape = self.tape
        out_id = tape.output_id
        code = self.words.to_numpy()
        if code.size and (code.max() > np.iinfo(np.int32).max or self.next_free > 2**31 - 1):
            raise UnsupportedError("the tape is too large for 32-bit offsets")
        consts = np.array(self.const_vals, dtype=np.float64)
        vid = getattr(tape, "_value_id", None)
        return Program(
            code=np.ascontiguousarray(code, dtype=np.int32),
            ints=np.array(self.ints, dtype=np.int32),
            consts=consts, n_in=self.n_in, n_grad=self.n_grad_vals, n_fixed=self.n_fixed,
            n_vals=self.next_free, out_off=self.offset[out_id],
            out_shape=tuple(_shp(self.vals[out_id])), inputs=self.input_layout,
            guards=self.guard_list, value_off=self.offset[vid] if vid is not None else -1,
            extras=[(self.offset[i], tuple(_shp(self.vals[i])))
                    for i in getattr(tape, "_extra_ids", ())],
            stats={"tape_instructions": len(tape.instructions), "kept": len(self.kept),
                   "program_instructions": len(self.words),
                   "callback_instructions": len(self.callbacks)},
            callbacks=list(self.callbacks))


_SEARCHES = (_Lowering.fusions, _Lowering.sum_chains)   # (see _c_lowering)


# How each row lowers (_Lowering._lower_array): by family, and a structure row
# by the instruction its row names (Op.lower); views and gathers of contiguous
# runs become offsets before this.  tests/test_isa.py checks every row has one.
_LOWER = {
    ops.UNARY: _Lowering._lower_unary, ops.UNARY_ND: _Lowering._lower_unary,
    ops.BINARY: _Lowering._lower_binary, ops.BINARY_ND: _Lowering._lower_binary,
    ops.WHERE: _Lowering._lower_where, ops.CLIP: _Lowering._lower_clip,
    ops.REDUCE: _Lowering._lower_reduce, ops.MATMUL: _Lowering._lower_matmul,
    ops.LINALG: _Lowering._lower_linalg, ops.PYCALL: _Lowering._lower_pycall,
    "GATHER_IDX": _Lowering._lower_gather_idx, "SCATTER_ADD": _Lowering._lower_scatter_add,
    "SCATTER": _Lowering._lower_scatter,
}


def compile_tape(tape, guards=True, n_grad=None):
    """Lower a finished tape to a Program."""
    tape._check_finished()
    # The lowering allocates containers and frees none until it ends, so the
    # cyclic collector would walk the growing structures (and the tape's
    # millions of tuples) again and again; nothing here makes a cycle.
    was = gc.isenabled()
    gc.disable()
    try:
        low = _Lowering(tape, guards, n_grad)
        low.analyse()
        low.layout()
        low.lower()
        prog = low.program()
    except OverflowError:     # an offset or word past int32 (_Words, the offset array)
        raise UnsupportedError("the tape is too large for 32-bit offsets") from None
    finally:
        if was:
            gc.enable()
    # tiled elementwise runs (src/revtape/lower/blocks.py); REVTAPE_BLOCKS=0: none
    return blocks.apply(prog) if blocks.enabled() else prog
