"""The lowering's searches for fused instructions (superinstructions).

Scalar and array pairs -- `a + b*c` (AXPY, GAXPY when a is a gather) and
`(a - b)**2` (SQDIFF, SSD when only summed) -- and runs of scalar additions
(CSUM).  Every fusion keeps each adjoint's terms in the order the unfused
instructions add them, so fused programs give the same bits.  The C
lowering runs the scalar searches in C (csrc/compile/tapeflow.c: rt_tape_fuse) and
these for the array fusions."""

import itertools
import operator

import numpy as np

from .analysis import _shp, _size
from .optable import (_ADD, _K_ADD_SUB, _K_FUSION, _K_OWNS, _MAYBE_VIEWS, _MUL, _SQUARE, _SUB,
                      _SUM, _TAKE, _VIEWS)


def _overlap(r1, r2):
    """Do two (storage node, first, length) regions share a slot?"""
    return r1[0] == r2[0] and r1[1] < r2[1] + r2[2] and r2[1] < r1[1] + r1[2]


class Fusions:
    """_Lowering's fusion searches (a mixin of compiler._Lowering)."""

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
        vals, adj, roots = self.vals, self.adj, self.roots
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
