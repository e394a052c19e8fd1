"""Forward mode on tracked values: rt.jvp called while another transform
records (rt.grad of a jvp, a jvp of a jvp, a jvp of rt.grad of a jvp, ...).

At plain values rt.jvp runs the VM's tangent sweep (cached.py).  When its
primals or tangents are tracked, the tangent must itself be recorded onto
the tape they belong to (the outer tape), so that the outer transform
differentiates through it.  The op table's rules are reverse rules written
with the primitives; the tangent is built from them by the transpose trick:

* f is recorded on a fresh tape at the primals' plain values, and that
  recording's forward pass is run again on the outer tape's values (as
  HessianTape does for reverse-over-reverse);
* a reverse sweep seeded with a stand-in cotangent w (a copy node of a
  constant zero on the outer tape) records the VJP  w -> J^T w  onto the
  outer tape.  It is linear in w, so its value at w = 0 does not matter;
* a second reverse sweep, over just those instructions and seeded with the
  tangents, gives d(J^T w)^T/dw . t = J t.

Everything lands on the outer tape as ordinary instructions: it replays,
compiles and nests again like any other recording; the compiler's
dead-code pass drops the stand-in VJP, which the output does not read.
The cost is about two reverse sweeps of f, recorded.
"""

import numpy as np

from ..core import ops, pytree
from ..errors import InputError, TapeMixError
from ..trace.recording import gc_paused
from ..trace.replay import backprop
from ..trace.tape import _HANDLES, Tape
from ..trace.values import check_input, shape_of

_GUARD = ops.OPS["guard"]


def _tracked(v):
    """Tracked on a tape (a NULL_TAPE constant counts as plain)."""
    return getattr(v, "_is_tracked", False) and v._id >= 0


def _plain(v):
    return v.value if getattr(v, "_is_tracked", False) else v


def needs_tracing(*trees):
    """True when a leaf of one of the trees is tracked: rt.jvp must record."""
    for tree in trees:
        leaves = pytree.flatten(tree)[0] if pytree.is_container(tree) else [tree]
        if any(getattr(v, "_is_tracked", False) for v in leaves):
            return True
    return False


class _Env:
    """Node id -> the outer tape's tracked handle of that node, so that a
    reverse sweep over instructions of that tape records onto it."""

    def __init__(self, tape):
        self.tape = tape
        self.vals = tape.values
        self.cache = {}

    def __getitem__(self, nid):
        h = self.cache.get(nid)
        if h is None:
            h = self.cache[nid] = _HANDLES.wrap(self.tape, nid, self.vals[nid])
        return h


def _flat_args(primals, tangents):
    """The primal and tangent leaves, and per argument its treedef (None: a leaf)."""
    pl, tl, layout = [], [], []
    for p, t in zip(primals, tangents):
        if pytree.is_container(p):
            leaves, td = pytree.flatten(p)
            pl.extend(leaves)
            tl.extend(pytree.leaves_of(td, t, "tangent"))
            layout.append(td)
        else:
            pl.append(p)
            tl.append(t)
            layout.append(None)
    return pl, tl, layout


def _outer_tape(leaves):
    tapes = {id(v._tape): v._tape for v in leaves if _tracked(v)}
    if len(tapes) > 1:
        raise TapeMixError("rt.jvp was called with tracked values of two tapes")
    return next(iter(tapes.values()))


def _tangent(t, p):
    """A tangent checked against its primal's shape: plain as a float or
    float64 array, tracked as it is."""
    shape = shape_of(_plain(p)) if not isinstance(p, list) else np.shape(p)
    if _tracked(t):
        if shape_of(t.value) != shape:
            raise InputError(f"a tangent must have its primal's shape {shape}; got "
                             f"{shape_of(t.value)}")
        return t
    return check_input(_plain(t), shape, float_input=shape == () and not isinstance(
        _plain(p), np.ndarray))


def _zeros(shape):
    return 0.0 if shape == () else np.zeros(shape)


def _fit(g, shape):
    return g if shape_of(g) == shape else ops.broadcast_to(g, shape)


def _add_seed(seeds, nid, s):
    prev = seeds.get(nid)
    seeds[nid] = s if prev is None else ops.P.add(prev, s)


def traced_jvp(f, primals, tangents):
    """(f(*primals), J tangents), both in f's output structure, recorded onto
    the tape that the tracked primals or tangents belong to."""
    pl, tl, layout = _flat_args(primals, tangents)
    outer = _outer_tape(pl + tl)
    tl = [_tangent(t, p) for t, p in zip(tl, pl)]
    inner = Tape()
    nodes = [inner.track(_plain(p)) for p in pl]
    args, k = [], 0
    for td in layout:
        if td is None:
            args.append(nodes[k])
            k += 1
        else:
            args.append(pytree.unflatten(td, nodes[k:k + td.n_leaves]))
            k += td.n_leaves
    try:
        with gc_paused():
            out = f(*args)
    except TapeMixError as e:
        raise TapeMixError(f"{e}. A function given to rt.jvp inside another transform's "
                           "recording must take the values it differentiates as primals, not "
                           "read the outer function's tracked values from a closure") from None
    inner.finish(0.0)
    # f's forward pass again, on the outer tape's values
    env = list(inner.values)
    for node, p in zip(nodes, pl):
        env[node._id] = p if _tracked(p) else inner.values[node._id]
    for op, o, ids, params in inner.instructions:
        if op is _GUARD:
            a, b = env[ids[0]], env[ids[1]]
            if _tracked(a) or _tracked(b):
                outer.copy_guard(a, b, params)
            continue
        env[o] = ops.apply(op, [env[i] for i in ids], params)
    active = {n._id for n in nodes}
    for op, o, ids, params in inner.instructions:
        if o >= 0 and op.diff and any(i in active for i in ids):
            active.add(o)

    out_leaves, out_td = pytree.flatten(out)
    out_ids = [v._id if _tracked(v) and v._tape is inner and v._id in active else None
               for v in out_leaves]
    # the stand-in cotangents, one per differentiable output leaf
    ws, seeds = {}, {}
    for oid in out_ids:
        if oid is not None and oid not in ws:
            nid = outer._const(_zeros(shape_of(inner.values[oid])))
            zero = _HANDLES.wrap(outer, nid, outer.values[nid])
            ws[oid] = ops.P.copy(zero)
            seeds[oid] = ws[oid]
    start = len(outer.instructions)
    vjp = backprop(inner.instructions, env, None, seeds, active) if seeds else {}
    # the tangent seeds of the second sweep sit on the VJP's results
    seeds2 = {}
    for node, t in zip(nodes, tl):
        g = vjp.get(node._id)
        if g is None or not _tracked(g) or g._tape is not outer:
            continue            # an input the output does not depend on
        g = _fit(g, shape_of(inner.values[node._id]))
        _add_seed(seeds2, g._id, t)
    instrs = outer.instructions
    instrs = [instrs[k] for k in range(start, len(instrs))]
    w_ids = {w._id for w in ws.values()}
    active2 = set(w_ids)
    for op, o, ids, params in instrs:
        if o >= 0 and op.diff and any(i in active2 for i in ids):
            active2.add(o)
    jt = backprop(instrs, _Env(outer), None, seeds2, active2) if seeds2 else {}

    values, dots = [], []
    for v, oid in zip(out_leaves, out_ids):
        if oid is not None:
            shape = shape_of(inner.values[oid])
            values.append(env[oid])
            d = jt.get(ws[oid]._id)
            dots.append(_zeros(shape) if d is None else _fit(d, shape))
            continue
        if _tracked(v) and v._tape is inner:
            values.append(env[v._id])          # computed from constants only
        else:
            values.append(v)
        dots.append(_zeros(np.shape(_plain(values[-1]))))
    return pytree.unflatten(out_td, values), pytree.unflatten(out_td, dots)
