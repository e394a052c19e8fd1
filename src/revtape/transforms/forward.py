"""Forward mode on tracked values: rt.jvp called while another transform
records (rt.grad of a jvp, a jvp of a jvp, a jvp of rt.grad of a jvp, ...),
and rt.vjp likewise (traced_vjp: its reverse sweep recorded the same way).

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
from .functional import _holds_tracked

_GUARD = ops.OPS["guard"]


def _tracked(v):
    """Tracked on a tape (a NULL_TAPE constant counts as plain)."""
    return getattr(v, "_is_tracked", False) and v._id >= 0


def _plain(v):
    return v.value if getattr(v, "_is_tracked", False) else v


def needs_tracing(*trees):
    """True when a leaf of one of the trees is tracked: the transform must
    record.  Called on every cached-transform call with arguments, so the
    trees are scanned by functional's cheap walk (floats, arrays, tuples,
    lists, dicts); a registered pytree node is flattened."""
    for tree in trees:
        if _holds_tracked(tree, 0):
            return True
        if type(tree) not in _BUILTIN and pytree._node(tree) is not None and any(
                getattr(v, "_is_tracked", False) for v in pytree.flatten(tree)[0]):
            return True
    return False


_BUILTIN = frozenset((np.ndarray, float, int, tuple, list, dict, type(None)))


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
        raise TapeMixError("rt.jvp or rt.vjp was called with tracked values of two tapes")
    return next(iter(tapes.values()), None)


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


class _Replayed:
    """f recorded on a fresh tape at the primals' plain values, and its forward
    pass run again on the outer tape's values: env maps the fresh tape's node
    ids to outer values (tracked where they depend on tracked primals)."""

    def __init__(self, f, pl, layout, outer):
        inner = self.inner = Tape()
        nodes = self.nodes = [inner.track(_plain(p)) for p in pl]
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
            raise TapeMixError(f"{e}. A function given to rt.jvp or rt.vjp inside another "
                               "transform's recording must take the values it differentiates "
                               "as primals, not read the outer function's tracked values from "
                               "a closure") from None
        inner.finish(0.0)
        env = self.env = list(inner.values)
        for node, p in zip(nodes, pl):
            env[node._id] = p if _tracked(p) else inner.values[node._id]
        for op, o, ids, params in inner.instructions:
            if op is _GUARD:
                a, b = env[ids[0]], env[ids[1]]
                if _tracked(a) or _tracked(b):
                    outer.copy_guard(a, b, params)
                continue
            env[o] = ops.apply(op, [env[i] for i in ids], params)
        active = self.active = {n._id for n in nodes}
        for op, o, ids, params in inner.instructions:
            if o >= 0 and op.diff and any(i in active for i in ids):
                active.add(o)
        self.out_leaves, self.out_td = pytree.flatten(out)
        # per output leaf: its fresh-tape node id where it depends on a primal
        self.out_ids = [v._id if _tracked(v) and v._tape is inner and v._id in active else None
                        for v in self.out_leaves]

    def value(self):
        """f's value in its output structure, on the outer tape."""
        vals = []
        for v in self.out_leaves:
            vals.append(self.env[v._id] if _tracked(v) and v._tape is self.inner else v)
        return pytree.unflatten(self.out_td, vals)

    def shape(self, nid):
        return shape_of(self.inner.values[nid])

    def vjp(self, seeds):
        """{fresh node id: adjoint} of one reverse sweep from {output id: seed}."""
        return backprop(self.inner.instructions, self.env, None, seeds, self.active) if seeds \
            else {}


def traced_jvp(f, primals, tangents):
    """(f(*primals), J tangents), both in f's output structure, recorded onto
    the tape that the tracked primals or tangents belong to."""
    pl, tl, layout = _flat_args(primals, tangents)
    outer = _outer_tape(pl + tl)
    tl = [_tangent(t, p) for t, p in zip(tl, pl)]
    r = _Replayed(f, pl, layout, outer)
    nodes, out_ids = r.nodes, r.out_ids
    # the stand-in cotangents, one per differentiable output leaf
    ws, seeds = {}, {}
    for oid in out_ids:
        if oid is not None and oid not in ws:
            nid = outer._const(_zeros(r.shape(oid)))
            zero = _HANDLES.wrap(outer, nid, outer.values[nid])
            ws[oid] = ops.P.copy(zero)
            seeds[oid] = ws[oid]
    start = len(outer.instructions)
    vjp = r.vjp(seeds)
    # the tangent seeds of the second sweep sit on the VJP's results
    seeds2 = {}
    for node, t in zip(nodes, tl):
        g = vjp.get(node._id)
        if g is None or not _tracked(g) or g._tape is not outer:
            continue            # an input the output does not depend on
        g = _fit(g, r.shape(node._id))
        _add_seed(seeds2, g._id, t)
    instrs = outer.instructions
    instrs = [instrs[k] for k in range(start, len(instrs))]
    w_ids = {w._id for w in ws.values()}
    active2 = set(w_ids)
    for op, o, ids, params in instrs:
        if o >= 0 and op.diff and any(i in active2 for i in ids):
            active2.add(o)
    jt = backprop(instrs, _Env(outer), None, seeds2, active2) if seeds2 else {}

    dots = []
    for v, oid in zip(r.out_leaves, out_ids):
        if oid is not None:
            d = jt.get(ws[oid]._id)
            dots.append(_zeros(r.shape(oid)) if d is None else _fit(d, r.shape(oid)))
        else:
            dots.append(_zeros(np.shape(_plain(v))))
    return r.value(), pytree.unflatten(r.out_td, dots)


def traced_vjp(f, primals):
    """(f(*primals), vjp_fun) with primals tracked on a recording tape: each
    vjp_fun(w) records its reverse sweep onto that tape (w may be tracked too)."""
    pl, _, layout = _flat_args(primals, primals)
    outer = _outer_tape(pl)
    r = _Replayed(f, pl, layout, outer)

    def vjp_fun(w):
        try:
            w_leaves = pytree.leaves_of(r.out_td, w, "cotangent")
        except InputError:
            raise InputError(f"the cotangent must have the function's output structure, "
                             f"{r.out_td}; got {pytree.flatten(w)[1]}") from None
        seeds = {}
        for oid, wl in zip(r.out_ids, w_leaves):
            if oid is not None:
                _add_seed(seeds, oid, _tangent(wl, r.inner.values[oid]))
        adj = r.vjp(seeds)
        grads = []
        for node in r.nodes:
            g = adj.get(node._id)
            shape = r.shape(node._id)
            grads.append(_zeros(shape) if g is None else _fit(g, shape))
        out, k = [], 0
        for td in layout:
            n = 1 if td is None else td.n_leaves
            out.append(grads[k] if td is None else pytree.unflatten(td, grads[k:k + n]))
            k += n
        return tuple(out)

    return r.value(), vjp_fun


def _stack(items, inner_shape, shape):
    """The items (each inner_shape, tracked or plain) stacked and shaped `shape`."""
    if not items:
        return np.zeros(shape)
    if not any(_tracked(v) for v in items):
        out = np.array([np.asarray(v, dtype=np.float64) for v in items]).reshape(shape)
        return float(out) if shape == () else out
    one = (1,) + inner_shape
    pieces = [ops.P.reshape(v, shape=one) if _tracked(v) else np.reshape(v, one) for v in items]
    flat = pieces[0] if len(pieces) == 1 else ops.P.concat(*pieces, axis=0)
    return ops.P.reshape(flat, shape=shape)


def traced_jacobian(f, x, extra=()):
    """The Jacobian of f(x, *extra) with respect to x, recorded onto the tape x
    (or an extra argument) is tracked on: one recorded reverse sweep per output
    element, in f's output structure of Jacobians shaped leaf.shape + x.shape
    (x's structure of those for a pytree x)."""
    y, vjp_fun = traced_vjp(f, (x, *extra))
    out_leaves, out_td = pytree.flatten(y)
    x_td = pytree.flatten(x)[1] if pytree.is_container(x) else None
    x_shapes = [np.shape(_plain(v)) for v in (pytree.flatten(x)[0] if x_td else [x])]
    out_shapes = [np.shape(_plain(v)) for v in out_leaves]
    blocks = []
    for k, oshape in enumerate(out_shapes):
        rows = []
        for e in range(int(np.prod(oshape, dtype=np.int64))):
            w = [_zeros(s) for s in out_shapes]
            seed = np.zeros(int(np.prod(oshape, dtype=np.int64)))
            seed[e] = 1.0
            w[k] = float(seed[0]) if oshape == () else seed.reshape(oshape)
            gx = vjp_fun(pytree.unflatten(out_td, w))[0]
            rows.append(pytree.flatten(gx)[0] if x_td else [gx])
        per_x = [_stack([r[j] for r in rows], xs, tuple(oshape) + tuple(xs))
                 for j, xs in enumerate(x_shapes)]
        blocks.append(pytree.unflatten(x_td, per_x) if x_td else per_x[0])
    return pytree.unflatten(out_td, blocks)
