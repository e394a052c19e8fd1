"""The lowering's scalar part in C (csrc/compile/tapeflow.c): rt_tape_fuse finds the
scalar fusions as fusions.py does, rt_tape_emit writes the words of scalar
instructions, fused groups and views in runs and stops at every instruction
the Python emission writes (arrays, structure, linear algebra, guards, the
array fusions).  The words are the ones the Python lowering writes
(tests/test_lowering_c.py)."""

import itertools
import operator

import numpy as np

from .analysis import _lib
from .emit import _Words
from .fusions import Fusions
from .optable import (LB_SCALAR, LB_VIEW, LN_FLOAT, LN_ROOT, LR_INNER, LR_PY, OPC, _GUARD,
                      _OP_BITS, _OP_DIFF, _OP_FUSION, _OP_SCALAR_CODE, _OP_SUM)
from ..core.isa import FLAGS_SHIFT, WORDS

# The largest share of kept instructions the C lowering leaves to Python
# (each costs a return from C): above it, Python lowers the tape alone
C_LOWERING_MAX_STOPS = 0.25


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


# the searches of a lowering whose fusions are its class's own (see _c_lowering)
_SEARCHES = (Fusions.fusions, Fusions.sum_chains)


class CLowering:
    """_Lowering's C lowering (a mixin of compiler._Lowering)."""

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
        out, nargs, args, opidx = self._cols
        plan = self._c_plan(out, opidx)
        if plan is None:
            return False
        nflags, role, link, aux, fused_add = plan
        ffi, lib = _lib()
        buf = ffi.from_buffer
        keep, n_kept = self._keep, len(self.kept)
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
                                 len(self.vals), adj_c, buf("int32_t[]", uses), nflags_c,
                                 role_c, link_c, aux_c)
        if terms < 0:
            raise MemoryError("compiling the tape: out of memory")
        # emission: C in runs, this lowering at each stop
        self.words = _WordBuf(n_kept)
        ints = np.zeros(max(terms, 1), np.int32)
        ints_c = buf("int32_t[]", ints)
        state = np.zeros(7, np.int64)
        state_c = buf("int64_t[]", state)
        offset_c = buf("int32_t[]", self.offset)
        diff_c, code_c = buf("uint8_t[]", _OP_DIFF), buf("int32_t[]", _OP_SCALAR_CODE)
        op_axpy, op_sqdiff, op_csum = OPC["AXPY"], OPC["SQDIFF"], OPC["CSUM"]
        head = (state_c, n_instr, cols[0], cols[1], cols[2], keep_c, opidx_c, bits_c, diff_c,
                code_c, adj_c, nflags_c, role_c, link_c, aux_c, offset_c)
        tail = (ints_c, op_axpy, op_sqdiff, op_csum, FLAGS_SHIFT)
        self._c_emit(lib.rt_tape_emit, buf, head, tail, ints, state, nargs, fused_add)
        return True

    def _c_plan(self, out, opidx):
        """What the C passes read besides the tape's columns: per node its
        flags (a float, a root), per kept instruction its role (absorbed, or a
        stop for this lowering) and link (a view's first element), the array
        fusions found here (aux, and fused_add for the stops); None when
        Python should lower the tape alone (then self._cols is dropped)."""
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
            return None
        # per node: a Python float (a scalar), a root
        nflags = np.fromiter(map(operator.is_, map(type, vals), itertools.repeat(float)),
                             np.uint8, n_nodes)
        for r in self.roots:
            nflags[r] |= LN_ROOT
        kout = out[keep_b]
        in_c &= (kbits & LB_VIEW).astype(bool) | (nflags[kout] & LN_FLOAT).astype(bool)
        if n_kept - int(np.count_nonzero(in_c)) > C_LOWERING_MAX_STOPS * n_kept:
            self._cols = None            # (and the searches read the ops as a list)
            return None
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
        return nflags, role, link, aux, fused_add

    def _c_emit(self, emit, buf, head, tail, ints, state, nargs, fused_add):
        """rt_tape_emit's runs of words into self.words (a _WordBuf), this
        lowering's emission at each instruction it stops at, to the end."""
        words, kept, ssd_sum = self.words, self.kept, self.ssd_sum
        n_kept = len(kept)
        words_c, words_buf = None, None
        while True:
            state[3], state[6] = self.next_free, len(self.ints)
            words.flush(n_kept - int(state[2]))
            if words.buf is not words_buf:
                words_buf, words_c = words.buf, buf("int32_t[]", words.buf)
            status = emit(*head, words_c + WORDS * words.n, *tail)
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
