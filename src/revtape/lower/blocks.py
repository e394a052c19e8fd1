"""Fused, tiled elementwise blocks: which runs of a program become BLOCKs.

A run of elementwise instructions over the same n elements (n > TILE) is
wrapped in BLOCK ... ENDBLOCK (csrc/instr/block.h): the VM then runs the
run tile by tile, TILE elements at a time, forward and reverse, so that
what one member writes the next reads from L1 instead of from an arena
pass.  The members stay the plain instructions they were: a sweep that
ignores the pair (the tangent sweep, the native tier) computes the same
thing, and ``strip(code)`` gives the unfused program back.

Bits.  Every member is elementwise, so a member over a tile computes its
elements of the whole instruction with the same expression.  The verifier
checks what keeps the forward exact (a member reads an earlier member's
output only whole, nothing else the block writes; no one-element operand
needs an adjoint).  What this module checks in addition is the reverse:
every adjoint slot must receive its contributions in the unfused order.
Contributions from members to a slot outside the block come, unfused, last
member first and, within one member, in element order; tiled, they come
tile by tile.  The two orders differ exactly when a later member j reaches a
slot through an element in a later tile than an earlier member k, i.e. when
j's operand region starts below k's (x[:-1] read after x[1:]).  Such a
block is kept only if every slot it reaches that way gets a sum that
rounds the same: the two orders may differ only in their first two terms,
on a slot that starts at zero (no contribution from after the block, not
the output), since 0 + a + b == 0 + b + a bit for bit (the Rosenbrock
pattern: d x[i] gets the terms of x[:-1]**2's user, of x[1:] - ..., and of
1 - x[:-1]).  Anything else is left unfused.

A sum right after the block over one member's whole result closes it
(_closing_sum: a sum block, csrc/instr/block.h).  Its tiles are the largest
subtrees of numpy's pairwise summation of at most sum_tile(TILE) elements,
each summed with the same kernel and the tiles' sums added as the
recursion adds its halves, so the value keeps np.sum's bits; the summed
result then goes tile-local and its adjoint is written per tile, not
zeroed and added to in passes over n elements.  An earlier attempt (tiles
of <= TILE, every member recomputed in the reverse, words decoded per
tile) measured 0-20% slower; with the per-tile costs cut since (decoded
plans, only what a reverse reads recomputed, first-term writes, a tile
iterator instead of a descent per tile) and tiles of 256-512 it takes
rosenbrock-vec's bound replay from ~28 to ~24 us.  SUM_BLOCKS = False
leaves the sum outside (the tests compare the two programs).

Measured since (rosenbrock-vec, rdtsc per phase): a member's run over one
tile costs ~18 cycles beyond its loop, of which the VM's dispatch is ~4
(calling the kernels through a decoded table instead would save ~3% of
the call: not done); tiles of 256-512 elements run alike once the arrays
are on 64-byte lines; per-tile zeroing of the scratch adjoints cost
nothing measurable while the slots were misaligned and ~2 us of ~31 once
aligned (now replaced by first-term writes).
"""

import bisect

import numpy as np

from .. import config
from ..core import isa, ops
from ..core.isa import FLAGS_SHIFT, OPCODE_MASK

# Elements per tile: a member's operands and result for one tile are a few
# KB, so a block of a handful of members works inside L1 (48 KB).
TILE = config.get("REVTAPE_BLOCK_TILE")
# False: a sum after a block stays outside it (the tests' second program).
SUM_BLOCKS = True
SUM_MIN_TILE = 128          # csrc/instr/block.h: RT_BLOCK_SUM_MIN_T
MAX_MEMBERS = 30            # csrc/instr/block.h: RT_BLOCK_MAX
ALIGN = 8                   # values a 64-byte cache line holds
_BLOCK, _ENDBLOCK = ops.OPCODE["BLOCK"], ops.OPCODE["ENDBLOCK"]

_WORD = {"a": 3, "b": 4, "c": 5}


def enabled():
    """$REVTAPE_BLOCKS off turns block forming off (the unfused program)."""
    return config.get("REVTAPE_BLOCKS")


def _operands(row):
    """[(word index 0..2, offset, is_array, needs_adjoint)] of a blockable row."""
    ins = isa.BY_OPCODE[row[0] & OPCODE_MASK]
    fl = (row[0] & 0xFFFFFFFF) >> FLAGS_SHIFT
    out = []
    for k, w in enumerate("abc"):
        kind = getattr(ins, w)
        if kind in ("n", "1"):
            out.append((k, row[_WORD[w]], kind == "n", bool((fl >> k) & 1)))
    return out


def _member(row, n_min):
    ins = isa.BY_OPCODE[row[0] & OPCODE_MASK]
    return (ins.blockable and row[1] > n_min
            and not any(need and not arr for _, _, arr, need in _operands(row)))


def _overlap(o1, l1, o2, l2):
    return l1 > 0 and l2 > 0 and o1 < o2 + l2 and o2 < o1 + l1


def _fits(rows, run, j):
    """May row j join the members `run` (the verifier's forward rules)?"""
    n = rows[j][1]
    outs = [rows[i][2] for i in run]
    for _, off, arr, _ in _operands(rows[j]):
        if arr and off in outs:
            continue
        if any(_overlap(o, n, off, n if arr else 1) for o in outs):
            return False
    o = rows[j][2]
    for i in run:
        if _overlap(rows[i][2], n, o, n):
            return False
        if any(_overlap(o, n, off, n if arr else 1) for _, off, arr, _ in _operands(rows[i])):
            return False
    return True


def _later_writes(rows, end, out_off, out_len):
    """Adjoint regions that receive contributions after the block in the
    reverse sweep's order (instructions after it, and the output's seed):
    [(offset, length)], or None when some instruction's regions are not
    plain (side tables, custom shapes): then every slot may."""
    regs = [(out_off, out_len)]
    for row in rows[end:]:
        ins = isa.BY_OPCODE[row[0] & OPCODE_MASK]
        fl = (row[0] & 0xFFFFFFFF) >> FLAGS_SHIFT
        if not fl:
            continue
        for k, w in enumerate("abc"):
            if not (fl >> k) & 1:
                continue
            kind = getattr(ins, w)
            length = {"n": row[1], "1": 1, "n*b": row[1] * row[4], "b": row[4]}.get(kind)
            if length is None:
                return None
            regs.append((row[_WORD[w]], length))
    return regs


def _reverse_exact(rows, run, end, out_off, out_len, T, starts=None):
    """Does tiling keep every outside adjoint slot's order of contributions?
    (starts: the tiles' first elements when they are not every T-th, a sum
    block's subtrees)"""
    n = rows[run[0]][1]
    if starts is None:
        starts, size = list(range(0, n, T)), T
    else:
        size = min(b - a for a, b in zip(starts, starts[1:] + [n]))
    outs = {rows[i][2] for i in run}
    ext = [(pos, k, off) for pos, i in enumerate(run)
           for k, off, arr, need in _operands(rows[i]) if arr and need and off not in outs]
    inverted = [(p1, o1, p2, o2) for p1, _, o1 in ext for p2, _, o2 in ext
                if p1 > p2 and o1 < o2 and _overlap(o1, n, o2, n)]
    if not inverted:
        return True
    spread = max(abs(o1 - o2) for _, o1, _, o2 in inverted)
    if spread >= size:
        return False
    later = _later_writes(rows, end, out_off, out_len)
    if later is None:
        return False
    bounds = starts[1:]
    if len(bounds) > 8:         # away from the ends, every boundary looks alike
        bounds = bounds[:2] + bounds[-2:]
    slots = {off + b + d for b in bounds for _, _, off in ext for d in range(-spread - 1, spread + 2)}
    for s in sorted(slots):
        terms = [(pos, s - off, k) for pos, k, off in ext if 0 <= s - off < n]
        plain = sorted(terms, key=lambda t: (-t[0], t[1], t[2]))
        tiled = sorted(terms, key=lambda t: (bisect.bisect_right(starts, t[1]), -t[0], t[1],
                                             t[2]))
        if plain == tiled:
            continue
        starts_at_zero = not any(_overlap(o, ln, s, 1) for o, ln in later)
        if not (starts_at_zero and plain[2:] == tiled[2:]):
            return False
    return True


def sum_tile(T):
    """A sum block's T (csrc/instr/block.h: >= 128): its tiles are the
    pairwise summation's subtrees of at most T elements, i.e. of T/2 .. T
    elements, so it is twice the other blocks' (tiles of T/2 cost a tile's
    fixed work twice as often: rosenbrock-vec ran ~4% slower)."""
    return max(2 * T, SUM_MIN_TILE)


def _sum_tiles(n, T):
    """The first element of each of a sum block's tiles: the largest
    subtrees of numpy's pairwise summation (kernels.c rt_k_pairwise_sum:
    n > 128 splits at n // 2 rounded down to a multiple of 8) of at most T
    elements, in order."""
    out, todo = [], [(0, n)]
    while todo:
        lo, m = todo.pop()
        if m <= T:
            out.append(lo)
            continue
        m2 = m // 2 - (m // 2) % 8
        todo += [(lo + m2, m - m2), (lo, m2)]
    return out


def _closing_sum(rows, run, out_off, out_len, T):
    """The sum block's T when the instruction after `run` is np.sum of a
    member's whole result that may close the block (the verifier's rules,
    block.h rt_block_verify_sum, and the reverse order over its tiles),
    else None."""
    j = run[-1] + 1
    if not SUM_BLOCKS or j >= len(rows) or len(run) >= MAX_MEMBERS:
        return None
    row, n = rows[j], rows[run[0]][1]
    if isa.BY_OPCODE[row[0] & OPCODE_MASK].name != "REDUCE_SUM":
        return None
    fl = (row[0] & 0xFFFFFFFF) >> FLAGS_SHIFT
    if row[1] != 1 or row[4] != n or fl & ~1 or row[3] not in {rows[i][2] for i in run}:
        return None
    o = row[2]
    for i in run:
        if _overlap(rows[i][2], n, o, 1) or any(_overlap(off, n if arr else 1, o, 1)
                                                for _, off, arr, _ in _operands(rows[i])):
            return None
    Ts = sum_tile(T)
    if not _reverse_exact(rows, run, j + 1, out_off, out_len, Ts, _sum_tiles(n, Ts)):
        return None
    return Ts


def _runs(rows, out_off, out_len, T):
    """Member index lists of the blocks to form, in program order, and
    their tiles (T, or a sum block's)."""
    runs, tiles, i, N = [], [], 0, len(rows)
    while i < N:
        if not _member(rows[i], T):
            i += 1
            continue
        run, j = [i], i + 1
        while (j < N and len(run) < MAX_MEMBERS and _member(rows[j], T)
               and rows[j][1] == rows[i][1] and _fits(rows, run, j)):
            run.append(j)
            j += 1
        while len(run) >= 2 and not _reverse_exact(rows, run, run[-1] + 1, out_off, out_len, T):
            run.pop()
        if len(run) >= 2:
            Ts = _closing_sum(rows, run, out_off, out_len, T)
            if Ts is not None:
                run.append(run[-1] + 1)
            runs.append(run)
            tiles.append(T if Ts is None else Ts)
            i = run[-1] + 1
        else:
            i += 1
    return runs, tiles


# Members whose results may live in a tile's scratch: cheap enough that the
# reverse sweep recomputes them per tile rather than store them (a
# transcendental stays in the arena: recomputing it would cost more than the
# memory pass it saves).
_CHEAP = frozenset(
    ["NEG", "COPY", "SQUARE", "ABS", "SIGN", "RECIPROCAL", "AXPY", "SQDIFF", "CLIP",
     "WHERE_VV", "WHERE_VS", "WHERE_SV"]
    + [f"{op}_{v}" for op in ("ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM")
       for v in ("VV", "VS", "SV")])
# Instructions whose read regions blocks.py can name (the others hold
# arena offsets in the side table or in shapes it does not decode): a
# program with any other leaves every result in the arena.
_REGION = {"n": lambda r: r[1], "1": lambda r: 1, "n*b": lambda r: r[1] * r[4],
           "b": lambda r: r[4]}


def _reads(rows, ints):
    """[(pc, offset, length)] of every region any instruction reads or
    writes, or None when an instruction's regions are not all nameable."""
    out = []
    for pc, row in enumerate(rows):
        ins = isa.BY_OPCODE[row[0] & OPCODE_MASK]
        if ins.name in ("BLOCK", "ENDBLOCK"):
            continue
        for w in ("out", "a", "b", "c"):
            kind = getattr(ins, w)
            word = row[{"out": 2, **_WORD}[w]]
            if kind in _REGION:
                out.append((pc, word, _REGION[kind](row)))
            elif kind == "ints" and ins.name == "CSUM":
                out.extend((pc, e if e >= 0 else ~e, 1) for e in ints[row[5]:row[5] + row[1]])
            elif kind == "custom" and ins.name == "MATMUL":
                M, K, N = (int(v) for v in ints[row[5]:row[5] + 3])
                out.append((pc, word, M * K if w == "a" else K * N))
            elif kind in ("custom", "slot") or (kind == "ints" and ins.name not in
                                                ("GATHER", "SCATTER", "SCATTER_ADD", "MATMUL",
                                                 "CSUM")):
                return None
    return out


def _tile_local(rows, runs, prog, reads):
    """Per run, the members whose results nobody outside the run reads."""
    kept = [(prog.out_off, prog.out_len)]
    if prog.value_off >= 0:
        kept.append((prog.value_off, 1))
    kept += [(off, int(np.prod(shape, dtype=np.int64))) for off, shape in prog.extras]
    result = []
    for run in runs:
        lo, hi = run[0], run[-1] + 1
        n = rows[lo][1]
        outside = [(o, ln) for pc, o, ln in reads if not lo <= pc < hi] + kept
        loc = [k for k in run
               if isa.BY_OPCODE[rows[k][0] & OPCODE_MASK].name in _CHEAP
               and not any(_overlap(rows[k][2], n, o, ln) for o, ln in outside)]
        result.append(loc)
    return result


def apply(prog, tile=None):
    """The Program with its tileable runs wrapped in BLOCK / ENDBLOCK and
    their tile-local results moved out of the arena into one shared
    scratch of (most tile-local members of a block) x TILE elements at the
    arena's end (prog itself when nothing is formed)."""
    import dataclasses
    T = TILE if tile is None else int(tile)
    code = np.asarray(prog.code)
    if code.shape[0] < 2 or int(code[:, 1].max()) <= T:
        return prog
    rows = code.tolist()
    runs, tiles = _runs(rows, prog.out_off, prog.out_len, T)
    if not runs:
        return prog
    reads = _reads(rows, prog.ints.tolist())
    locs = _tile_local(rows, runs, prog, reads) if reads is not None else [[] for _ in runs]
    gone = sorted((rows[k][2], rows[k][1]) for loc in locs for k in loc)
    # Every offset at or past a tile-local region's start moves down by its
    # length; every offset at or past a kept member's result moves up by the
    # padding that starts that result on a 64-byte line (the arenas are
    # 64-byte aligned: runtime/arena.py's _aligned_zeros), as are the scratch slots.
    # An AVX-512 loop over misaligned arrays splits every load and store
    # over two cache lines: rosenbrock-vec's block ran ~1.5x slower.  Only
    # when every region is nameable (reads): the offsets inside other side
    # tables would not follow.
    kept = sorted(rows[k][2] for run, loc in zip(runs, locs) for k in run if k not in loc)
    if reads is None:
        kept = []
    events = sorted([(o, -ln) for o, ln in gone] + [(o, None) for o in kept], key=lambda e: e[0])
    starts = np.array([o for o, _ in events], dtype=np.int64)
    delta, shift = 0, [0]
    for o, d in events:
        delta += d if d is not None else (-(o + delta)) % ALIGN
        shift.append(delta)
    shift = np.array(shift, dtype=np.int64)
    n_vals = prog.n_vals + int(shift[-1])
    s0 = n_vals + (-n_vals) % ALIGN if locs and any(locs) else n_vals
    n_vals = s0
    scratch = max((len(loc) * Tk for loc, Tk in zip(locs, tiles)), default=0)

    def move(x):
        # the offset of a kept region once the tile-local ones are gone and
        # the kept members' results aligned
        return int(x + shift[np.searchsorted(starts, x, side="right")]) if events else int(x)

    kinds = [isa.BY_OPCODE[r[0] & OPCODE_MASK] for r in rows]
    new = []
    for row, ins in zip(rows, kinds):
        r = list(row)
        for w, i in (("out", 2), ("a", 3), ("b", 4), ("c", 5)):
            kind = getattr(ins, w)
            if kind in _REGION or (kind == "custom" and ins.name == "MATMUL" and w != "out"):
                r[i] = move(r[i])
        new.append(r)
    ints = prog.ints
    if events:                              # CSUM's terms are arena offsets (~e: subtracted)
        ints = ints.copy()
        for row, ins in zip(rows, kinds):
            if ins.name == "CSUM":
                c, n = row[5], row[1]
                ints[c:c + n] = [move(e) if e >= 0 else ~move(~e) for e in ints[c:c + n].tolist()]
    out, prev = [], 0
    for run, loc, Tk in zip(runs, locs, tiles):
        lo, hi = run[0], run[-1] + 1
        out.extend(new[prev:lo])
        n, m = rows[lo][1], hi - lo
        slot = {rows[k][2]: s0 + j * Tk for j, k in enumerate(loc)}
        members = []
        for k in range(lo, hi):
            r = list(new[k])
            for w, i in (("out", 2), ("a", 3), ("b", 4), ("c", 5)):
                # (a closing sum's operand, n*b, may be a slot too)
                if getattr(kinds[k], w) in ("n", "n*b") and rows[k][i] in slot:
                    r[i] = slot[rows[k][i]]
            members.append(r)
        mask = sum(1 << (k - lo) for k in loc)
        fl = int(any((r[0] & 0xFFFFFFFF) >> FLAGS_SHIFT for r in rows[lo:hi])) << FLAGS_SHIFT
        words = [n, m, Tk, s0 if mask else 0, mask]
        out.append([_BLOCK | fl] + words)
        out.extend(members)
        out.append([_ENDBLOCK | fl] + words)
        prev = hi
    out.extend(new[prev:])
    code = np.ascontiguousarray(np.array(out, dtype=np.int32).reshape(-1, code.shape[1]))
    stats = dict(prog.stats, program_instructions=len(code), tiled_blocks=len(runs),
                 tile_local_results=sum(map(len, locs)))
    return dataclasses.replace(
        prog, code=code, ints=ints, n_vals=n_vals + scratch, out_off=move(prog.out_off),
        value_off=move(prog.value_off) if prog.value_off >= 0 else prog.value_off,
        extras=[(move(off), shape) for off, shape in prog.extras],
        guards=[(params, move(oa), move(ob)) for params, oa, ob in prog.guards],
        stats=stats)


def strip(code):
    """The unfused program: `code` without its BLOCK / ENDBLOCK words (valid
    only when no block has tile-local results: their words name scratch
    slots of TILE elements)."""
    code = np.asarray(code)
    op = code[:, 0] & OPCODE_MASK
    return np.ascontiguousarray(code[(op != _BLOCK) & (op != _ENDBLOCK)])
