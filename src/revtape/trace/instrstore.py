"""Compact storage of a long finished tape's instructions (issue 15).

While recording, a tape's instructions are a list of tuples
``(op, out, args, params)``: appending one is the cheapest thing Python can
do, which keeps recording fast.  But a tuple per instruction, its args tuple
and its out int cost ~190 bytes; a million-step tape spends most of its
memory there.  Once a tape passes COMPACT_AT nodes (tape.py), every COMPACT_CHUNK more
nodes its recent tuples move into columns (this class, ~45 bytes an
instruction): ops and params as lists of references to shared objects, out
ids, operand counts and operands as machine-integer arrays.  The freed tuples'
memory is reused by the next ones, so a long recording never holds more than
a chunk of tuples; at finish the rest moves too.

Columns is a read-only sequence of the same tuples: iteration, reversed(),
len() and indexing give what the list gave, built on the fly, so every reader
of ``tape.instructions`` (replays, transforms, the Hessian tape) works
unchanged.  The compiler reads the columns themselves (``columns()``) and a
lazy ``select(keep)`` of them, never materialising a tuple list.  Pickles and
copies store the plain list (what an unpickled tape had before).
"""

import array
import itertools

import numpy as np


class Columns:
    __slots__ = ("ops", "outs", "nargs", "args", "params", "_starts")

    def __init__(self, instrs=None):
        self.ops, self.params = [], []
        self.outs, self.args = array.array("q"), array.array("q")
        self.nargs = array.array("I")
        self._starts = None
        if instrs:
            self.extend(instrs)

    def extend(self, instrs):
        """Move the (op, out, args, params) tuples of list `instrs` to the end
        of the columns and empty the list (in place: the recording fast path
        holds it).  The tape calls this every COMPACT_CHUNK nodes, so the
        list is short and its tuples die here rather than with the tape."""
        if not instrs:
            return
        ops, outs, argss, params = zip(*instrs)
        instrs.clear()
        self.ops.extend(ops)
        self.outs.extend(outs)
        self.params.extend(params)
        self.nargs.extend(map(len, argss))
        self.args.extend(itertools.chain.from_iterable(argss))
        self._starts = None

    # ------------------------------------------------ the sequence
    def __len__(self):
        return len(self.ops)

    def __iter__(self):
        # zip builds (and, as the loop unpacks it, reuses) the 4-tuple in C;
        # only the operand tuples come from Python: ~35% faster than a
        # generator yielding whole instructions
        return zip(self.ops, self.outs, self._arg_tuples(), self.params)

    def _arg_tuples(self):
        nx = iter(self.args).__next__
        for na in self.nargs:
            if na == 2:
                yield nx(), nx()
            elif na == 1:
                yield nx(),
            else:
                yield tuple([nx() for _ in range(na)])

    def __reversed__(self):
        nx = reversed(self.args).__next__
        for op, out, na, params in zip(reversed(self.ops), reversed(self.outs),
                                       reversed(self.nargs), reversed(self.params)):
            if na == 2:
                b = nx()
                yield op, out, (nx(), b), params
            elif na == 1:
                yield op, out, (nx(),), params
            else:
                a = [nx() for _ in range(na)]
                a.reverse()
                yield op, out, tuple(a), params

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(len(self))[k]]
        if k < 0:
            k += len(self.ops)
        op = self.ops[k]                  # (IndexError out of range)
        st = self._starts
        if st is None:                    # where each instruction's operands begin
            # (int32: a tape of 2^31 operands would not fit a program either)
            st = self._starts = array.array("i", itertools.accumulate(self.nargs, initial=0))
        s = st[k]
        return op, self.outs[k], tuple(self.args[s:st[k + 1]]), self.params[k]

    def __reduce__(self):
        return list, (list(self),)

    # ------------------------------------------------ for the compiler
    def columns(self):
        """(out int64, nargs int32, args int64) numpy views, and the ops list."""
        return (np.frombuffer(self.outs, np.int64),
                np.frombuffer(self.nargs, np.uint32).astype(np.int32),
                np.frombuffer(self.args, np.int64), self.ops)

    def select(self, keep):
        """The instructions where keep (one byte each) is nonzero, lazily."""
        return Selected(self, keep)


class Selected:
    """A read-only sequence of some instructions of a Columns: iteration
    walks the columns once; indexing finds the k-th selected one."""
    __slots__ = ("_cols", "_keep", "_index")

    def __init__(self, cols, keep):
        self._cols, self._keep = cols, keep
        # k-th selected -> its instruction index (the fusion passes look back
        # a few instructions by index)
        self._index = array.array("i", itertools.compress(range(len(keep)), keep))

    def __len__(self):
        return len(self._index)

    def __iter__(self):
        return itertools.compress(iter(self._cols), self._keep)

    def __getitem__(self, k):
        return self._cols[self._index[k]]

    def rows(self, mask, chunk=1 << 13):
        """For the k-th selected instructions where `mask` (a bool numpy array
        over the selected ones): chunks of lists (ks, outs, first operands, second operands,
        operand counts), gathered from the columns with numpy (an operand
        past the count is a neighbour's: the count says which to read).  A
        pass that wants a few kinds of instruction builds no tuple for the
        others, and holds one chunk of ints at most (five lists of 8192 ints,
        ~1.5 MB: at 2^16 they were 30 bytes an instruction of a 4e5 tape)."""
        outs, nargs, args, _ = self._cols.columns()
        # (int32 as the columns' own _starts: 2^31 operands fit no program)
        starts = np.zeros(len(nargs) + 1, np.int32)
        np.cumsum(nargs, out=starts[1:])
        index = np.frombuffer(self._index, np.int32)
        last = max(len(args) - 1, 0)
        padded = args if len(args) else np.zeros(1, np.int64)
        for c in range(0, len(mask), chunk):
            ks = np.flatnonzero(mask[c:c + chunk]) + c
            pos = index[ks]
            st = starts[pos]
            yield (ks.tolist(), outs[pos].tolist(), padded[np.minimum(st, last)].tolist(),
                   padded[np.minimum(st + 1, last)].tolist(), nargs[pos].tolist())
