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

The passes live by idea in the modules beside this one: optable.py (what
the lowering reads off the op table), analysis.py (the data-flow pass and
the arena layout), fusions.py (the fused-instruction searches), emit.py (the
words of each row) and clower.py (the scalar part in C).
"""

import gc
import math
from dataclasses import dataclass, field

import numpy as np

from . import blocks
from .analysis import Analysis, _shp
from .clower import CLowering
from .emit import Emission, _Words
from .fusions import Fusions
from .optable import _GUARD, _SCALAR_FAMILIES, _UNARY_CODE, _VV_CODE
from ..core import ops
from ..core.isa import FLAGS_SHIFT
from ..errors import UnsupportedError

FORMAT_VERSION = 1


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


class _Lowering(Analysis, Fusions, CLowering, Emission):
    """One tape's lowering: analyse, layout, lower (the C lowering, or the
    Python one alone), program.  c_lowering=False lowers in Python alone,
    c_flow=False runs the data-flow pass in Python too (tests compare the
    programs; either gives the same words)."""

    def __init__(self, tape, guards, n_grad, c_lowering=True, c_flow=True):
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
        self.c_lowering, self.c_flow = c_lowering, c_flow

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


def compile_tape(tape, guards=True, n_grad=None):
    """Lower a finished tape to a Program."""
    return _compile_tape(tape, guards, n_grad)


def _compile_tape(tape, guards=True, n_grad=None, c_lowering=True, c_flow=True):
    """compile_tape, with the C lowering (c_lowering) and the C data-flow
    pass (c_flow) switched off on request (_Lowering)."""
    tape._check_finished()
    # The lowering allocates containers and frees none until it ends, so the
    # cyclic collector would walk the growing structures (and the tape's
    # millions of tuples) again and again; nothing here makes a cycle.
    was = gc.isenabled()
    gc.disable()
    try:
        low = _Lowering(tape, guards, n_grad, c_lowering, c_flow)
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
