"""autograd's tracing model on revtape's tape: every call records afresh.

autograd differentiates a function by running it on boxed values at the
point asked for and walking the recorded graph backwards.  Here the boxes are
revtape's tracked values and the graph is a revtape Tape, so the rules are
the op table's (the same rules rt.grad compiles).  Because the function runs
at every call, nothing it reads can be stale; the compiled speed is rt.grad's
business (docs/guide/autograd.md).

Nesting (grad of grad, a closure over an outer function's argument, a
gradient inside a jacobian) works by recording the inner function onto the
tape that is already recording: the inner argument becomes a copy node of
that tape, the inner function's instructions follow it, and the inner
gradient is the reverse sweep over just those instructions, itself recorded
onto the same tape as tracked values -- so the outer transform differentiates
through it, closures included.  A thread-local stack holds the tapes that
this module's calls are recording.
"""

import contextlib
import threading

import numpy as np

from ..core import ops
from ..core.primitives import primitive  # noqa: F401  (autograd.tracer.primitive)
from ..errors import TapeMixError, UnsupportedError
from ..trace.replay import backprop
from ..trace.tape import _HANDLES, Tape
from ..trace.values import shape_of
from .vspace import as_float, flatten, leaves_like, like_input, map_leaves, unflatten

_local = threading.local()


def _stack():
    s = getattr(_local, "tapes", None)
    if s is None:
        s = _local.tapes = []
    return s


@contextlib.contextmanager
def isolated():
    """Calls inside start their own recordings even while an outer one records
    (a primitive's rule computing on plain values)."""
    s = _stack()
    s.append(None)
    try:
        yield
    finally:
        s.pop()


def isbox(v):
    """True for a value being traced (autograd's Box): a tracked value of a tape
    that is recording."""
    return bool(getattr(v, "_is_tracked", False)) and v._id >= 0 and v._tape.recording


def getval(v):
    """The plain value of a traced one (autograd's getval); anything else as is."""
    return map_leaves(lambda x: x.value if getattr(x, "_is_tracked", False) else x, v)


def _target_tape(leaves):
    """The recording tape the call nests into: the one its traced arguments
    belong to, else the innermost one this module is recording, else None."""
    tapes = {id(v._tape): v._tape for v in leaves if isbox(v)}
    if len(tapes) > 1:
        raise TapeMixError("a function was differentiated at values of two different recordings")
    if tapes:
        return next(iter(tapes.values()))
    for t in reversed(_stack()):
        if t is None:                 # isolated(): plain calls start afresh
            break
        if t.recording:
            return t
    return None


def _check_real(leaf):
    if not getattr(leaf, "_is_tracked", False) and np.iscomplexobj(leaf):
        raise UnsupportedError("complex numbers are not supported by revtape yet: differentiate "
                               "the real and imaginary parts as separate real arguments")


def _constant_node(tape, v):
    """A handle on a constant node of tape holding v (a plain argument of a
    nested call: its copy is what the inner sweep differentiates)."""
    v = as_float(v)
    nid = tape._const(v)
    return _HANDLES.wrap(tape, nid, tape.values[nid])


class _Env:
    """Node id -> the value a reverse sweep computes with: the tape's tracked
    handle of that node (so the sweep records onto the tape)."""

    def __init__(self, tape):
        self.tape = tape
        self.vals = tape.values
        self.cache = {}

    def __getitem__(self, nid):
        h = self.cache.get(nid)
        if h is None:
            h = self.cache[nid] = _HANDLES.wrap(self.tape, nid, self.vals[nid])
        return h


def make_vjp(fun, x):
    """(vjp, ans): ans = fun(x), and vjp(g) the vector-Jacobian product of g
    (shaped like ans; a container for a container output) with fun's Jacobian
    at x, shaped like x.  Called inside another differentiation, both stay on
    its tape, so they are differentiable again."""
    leaves, tdef = flatten(x)
    for v in leaves:
        _check_real(v)
    outer = _target_tape(leaves)
    tape = outer if outer is not None else Tape()
    start = len(tape.instructions)
    if outer is None:
        nodes = [tape.track(as_float(v)) for v in leaves]
    else:
        # a copy node per leaf: what the inner sweep differentiates with
        # respect to, while the outer tape still sees it depend on the leaf
        nodes = [ops.P.copy(v if isbox(v) else _constant_node(tape, v)) for v in leaves]
    ids = [n._id for n in nodes]
    # the sweep starts after the copies: their outputs' adjoints are what it
    # returns (backprop hands an instruction's adjoint on to its operands)
    start = len(tape.instructions)
    stack = _stack()
    stack.append(tape)
    try:
        ans = fun(unflatten(tdef, nodes))
    except TapeMixError as e:
        raise TapeMixError(f"{e}. (a function differentiated with revtape.autograd read a value "
                           "traced by revtape's own rt.grad from a closure; pass it as an "
                           "argument instead)") from None
    finally:
        stack.pop()
    instrs = tape.instructions
    instrs = [instrs[k] for k in range(start, len(instrs))]
    active = set(ids)
    for op, o, args, params in instrs:
        if o >= 0 and op.diff and any(a in active for a in args):
            active.add(o)
    out_leaves, out_def = flatten(ans)
    out_ids = [v._id if (getattr(v, "_is_tracked", False) and v._tape is tape and v._id in active)
               else None for v in out_leaves]
    if outer is None:
        tape.finish(0.0)
        vals = tape.values
        ans = getval(ans)
    else:
        vals = _Env(tape)
    shapes = [shape_of(tape.values[i]) for i in ids]

    def vjp(g):
        g_leaves = leaves_like(out_def, g, "the cotangent g")
        total = [None] * len(ids)
        for oid, gl in zip(out_ids, g_leaves):
            if oid is None:
                continue
            _check_real(gl)
            gl = as_float(gl) if not getattr(gl, "_is_tracked", False) else gl
            adj = backprop(instrs, vals, oid, gl, active)
            for k, nid in enumerate(ids):
                a = adj.get(nid)
                if a is not None:
                    total[k] = a if total[k] is None else ops.P.add(total[k], a)
        grads = []
        for t, shp in zip(total, shapes):
            if t is None:
                t = 0.0 if shp == () else np.zeros(shp)
            elif shape_of(t) != shp:
                t = ops.broadcast_to(t, shp)
            grads.append(t)
        return unflatten(tdef, [like_input(gr, v) for gr, v in zip(grads, leaves)])

    return vjp, ans
