"""The lowering's emission: the words of each kept instruction, appended to
the program in order -- a fused group (fusions.py) as its one instruction,
every other row by its family or by the instruction its row names (_LOWER),
with the gathers broadcasting needs and the int side table's records."""

import array

import numpy as np

from . import blas
from .analysis import _shp, _size
from .optable import OPC, _VIEWS
from ..core import ops
from ..core.isa import FLAGS_SHIFT, WORDS   # the word layout (isa.py, generated into vm.h's ABI)
from ..errors import UnsupportedError


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


class Emission:
    """_Lowering's emission (a mixin of compiler._Lowering)."""

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
        if how is None:  # pragma: no cover - tests/test_lowering.py checks every row has one
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
        self.emit("MATMUL", m * nn, o, self.offset[a], self.offset[b],
                  self._ints([m, k, nn, blas.matmul_word(m, k, nn)]),
                  flags=flag[0] | (flag[1] << 1))

    def _lower_linalg(self, op, o, n, oshape, args, params, flag):
        # the row's Linalg gives the kernel's ints record (N, M, flags, scratch):
        # see csrc/instr/linalg/linalg.h; the scratch lives in the arena
        N, M, bits, scratch = op.linalg.ints([_shp(self.vals[a]) for a in args], params)
        bits |= blas.linalg_bit(op.name.upper(), N)
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


# How each row lowers (Emission._lower_array): by family, and a structure row
# by the instruction its row names (Op.lower); views and gathers of contiguous
# runs become offsets before this.  tests/test_lowering.py checks every row has one.
_LOWER = {
    ops.UNARY: Emission._lower_unary, ops.UNARY_ND: Emission._lower_unary,
    ops.BINARY: Emission._lower_binary, ops.BINARY_ND: Emission._lower_binary,
    ops.WHERE: Emission._lower_where, ops.CLIP: Emission._lower_clip,
    ops.REDUCE: Emission._lower_reduce, ops.MATMUL: Emission._lower_matmul,
    ops.LINALG: Emission._lower_linalg, ops.PYCALL: Emission._lower_pycall,
    "GATHER_IDX": Emission._lower_gather_idx, "SCATTER_ADD": Emission._lower_scatter_add,
    "SCATTER": Emission._lower_scatter,
}
