"""Whole-function helpers: GradientTape, JacobianTape, HessianTape and the
one-shot gradient/jacobian/hessian/hvp functions.

``x`` is a float, an ndarray, or a tuple of them.  With a tuple, f is called
as ``f(*x)`` when its signature takes that many positional arguments
(ReverseDiff's convention) and as ``f(x)`` otherwise; the gradient is then a
tuple shaped like x.  ``x`` may also be a pytree (nested dicts, lists, tuples,
namedtuples of floats and arrays, see pytree.py): each leaf is a tape input,
f is called on the tree of tracked leaves, and gradients come back in x's
structure.
"""

import contextlib
import contextvars
import gc
import inspect
import math
import sys

import numpy as np

from . import ops, pytree
from .errors import InputError, UnsupportedError
from .tape import Tape, backprop, check_input, check_out
from .watch import Watcher, warn_tape_draws

_GUARD = ops.OPS["guard"]
# Set while a one-shot rt.gradient/jacobian/hessian/hvp records f: its tape is
# used once, at the recording point, so draws in f are exact there, not frozen.
_ONE_SHOT = contextvars.ContextVar("revtape_one_shot", default=False)


def _once(make, f, x):
    token = _ONE_SHOT.set(True)
    try:
        return make(f, x)
    finally:
        _ONE_SHOT.reset(token)


def call_with(f, targs):
    """Call f on tracked inputs: f(*x) for a tuple when f takes that many arguments."""
    if type(targs) is not tuple:      # a namedtuple is one argument, as a dict is
        return f(targs)
    try:
        inspect.signature(f).bind(*targs)
    except TypeError:
        return f(targs)
    except ValueError:   # no signature (builtins): assume positional
        pass
    return f(*targs)


@contextlib.contextmanager
def gc_paused():
    """Recording allocates a few objects per instruction and frees none, which
    makes CPython's cyclic collector rescan the growing tape again and again
    (half the recording time of a 10^5-instruction tape).  Nothing a tape
    holds needs the collector, so it is paused while f runs."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def record(tape, f, x):
    """Track x on tape, run f, finish with its result."""
    if not callable(f):
        raise InputError(f"expected a function to differentiate (or a tape), got "
                         f"{type(f).__name__} {f!r:.40}")
    leaves, treedef = pytree.input_structure(x)
    if treedef is not None:
        tx = pytree.unflatten(treedef, [tape.track(v) for v in leaves])
        tape._treedef = treedef
    elif isinstance(x, tuple):
        tx = tuple(tape.track(xi) for xi in x)
    else:
        tx = tape.track(x)
    tape._func = f
    watcher = Watcher()
    with gc_paused():
        out = watcher.run_static(f, call_with, f, tx)
    if not _ONE_SHOT.get():
        warn_tape_draws(watcher)
    return tape.finish(out)


class GradientTape(Tape):
    """GradientTape(f, x): f recorded at x; f returns a scalar."""

    def __init__(self, f, x):
        super().__init__()
        record(self, f, x)
        self._scalar_output()

    def value_and_gradient_recorded(self, out=None):
        """Value and gradient at the recording input, without replaying."""
        if out is not None:
            check_out(self._out_leaves(out), [self._vals[t._id] for t in self._inputs])
        value = self._vals[self._output._id]
        return value, self._grads_out(self._reverse(1.0), out)


class JacobianTape(Tape):
    """JacobianTape(f, x): f recorded at x; f returns an array."""

    def __init__(self, f, x):
        super().__init__()
        record(self, f, x)


class HessianTape(Tape):
    """HessianTape(f, x): the gradient of f, recorded as a tape.

    f is recorded at x, then its forward and reverse passes are run again on
    tracked values, which records the gradient computation onto this tape.
    ``gradient(x)`` replays it; ``hessian(x)`` is its Jacobian;
    ``hvp(x, v)`` one reverse sweep of it seeded with v (H is symmetric).
    Compiled, the same two are tangent sweeps of it in C: forward-over-reverse.
    """

    def __init__(self, f, x):
        super().__init__()
        self._parts = None
        leaves, treedef = pytree.input_structure(x)
        if treedef is not None or isinstance(x, tuple):
            # Several inputs: f is recorded on one flat vector laid end to end,
            # so the gradient is one vector and the Hessian one matrix; the
            # methods below take and give tuples (or trees) shaped like x.
            parts = self._parts = Parts(leaves, treedef)
            self._build_from(GradientTape(lambda z: call_with(f, parts.tree(parts.split(z))),
                                          parts.flatten(x)))
        else:
            self._build_from(GradientTape(f, x))

    @classmethod
    def _from_tape(cls, tape):
        obj = cls.__new__(cls)
        Tape.__init__(obj)
        obj._parts = None
        obj._build_from(tape)
        return obj

    def _build_from(self, src):
        src._check_finished()
        src._scalar_output()
        if len(src._inputs) != 1:
            raise UnsupportedError(
                "this tape has several inputs; for Hessians of a function of a tuple or a "
                "pytree record rt.HessianTape(f, x) or use rt.hessian(f) / rt.hvp(f): they lay "
                "the inputs out as one vector")
        xin = src._inputs[0]
        hx = self.track(src._vals[xin._id])
        env = list(src._vals)         # constants stay plain; computed nodes become tracked
        env[xin._id] = hx
        for op, out, args, params in src._instrs:
            if op is _GUARD:
                a, b = env[args[0]], env[args[1]]
                if getattr(a, "_is_tracked", False) or getattr(b, "_is_tracked", False):
                    ids = (self._arg_id(a), self._arg_id(b))
                    self._instrs.append((_GUARD, -1, ids, {**params, "index": self._n_guards}))
                    self._n_guards += 1
                continue
            env[out] = ops.apply(op, [env[a] for a in args], params)
        adj = backprop(src._instrs, env, src._output._id, 1.0, src._active_ids())
        g = adj.get(xin._id)
        if g is None:
            g = 0.0 if type(src._vals[xin._id]) is float else ops.np.zeros(ops.np.shape(
                src._vals[xin._id]))
        elif ops.shape_of(g) != ops.shape_of(src._vals[xin._id]):
            g = ops.broadcast_to(g, ops.shape_of(src._vals[xin._id]))
        self._value_id = self._arg_id(env[src._output._id])
        self._func = getattr(src, "_func", None)
        self.finish(g)

    def forward(self, x):
        """Replay at x; returns the value of f (the tape's output is its gradient)."""
        self._replay(self._flat(x))
        return self._vals[self._value_id]

    def value_and_gradient(self, x, out=None):
        self._check_finished()
        if self._parts is not None:
            g = self._replay(self._parts.flatten(x))
            return self._vals[self._value_id], self._parts.split_result(g, out)
        if out is not None:
            check_out(out, [self._vals[t._id] for t in self._inputs])
        g = self._replay(x)
        value = self._vals[self._value_id]
        if out is not None:
            out[...] = g
            return value, out
        return value, g

    def gradient(self, x, out=None):
        return self.value_and_gradient(x, out)[1]

    def hessian(self, x, out=None):
        if self._parts is not None:
            return self._parts.blocks(self.jacobian(self._flat(x)), out)
        return self.jacobian(x, out)

    def hvp(self, x, v):
        if self._parts is not None:
            return self._parts.split_result(self.vjp(self._flat(x), self._parts.flatten(v)), None)
        return self.vjp(x, v)

    def _flat(self, x):
        return x if self._parts is None else self._parts.flatten(x)


class Parts:
    """A tuple of floats and arrays (or the leaves of a pytree, with its treedef)
    laid end to end in one flat float64 vector."""

    def __init__(self, xs, treedef=None):
        self.shapes = [tuple(np.shape(xi)) for xi in xs]
        self.floats = [np.ndim(xi) == 0 for xi in xs]
        self.bounds = np.cumsum([0] + [math.prod(s) for s in self.shapes]).tolist()
        self.treedef = treedef

    def tree(self, parts):
        """A tuple of parts in the caller's structure (the tuple itself without a treedef)."""
        return parts if self.treedef is None else pytree.unflatten(self.treedef, parts)

    def flatten(self, xs):
        if self.treedef is not None:
            xs = pytree.leaves_of(self.treedef, xs)
        if not isinstance(xs, (tuple, list)) or len(xs) != len(self.shapes):
            raise InputError(f"pass a tuple of {len(self.shapes)} values, shaped like the "
                             "recording input")
        parts = [check_input(xi, s) for xi, s in zip(xs, self.shapes)]
        return np.concatenate([np.ravel(p) for p in parts]) if parts else np.zeros(0)

    def split(self, z):
        """z (tracked or plain) as a tuple shaped like the recording input."""
        out = []
        for (a, b), shape, isf in zip(zip(self.bounds, self.bounds[1:]), self.shapes, self.floats):
            out.append(z[a] if isf else z[a:b].reshape(shape))
        return tuple(out)

    def split_result(self, flat, out):
        parts = tuple(float(p) if isf else np.array(p)
                      for p, isf in zip(self.split(np.asarray(flat)), self.floats))
        if out is None:
            return self.tree(parts)
        user_out = out
        if self.treedef is not None:
            out = tuple(pytree.leaves_of(self.treedef, out, "out="))
        outs = check_out(out, [np.empty(s) for s in self.shapes])
        for o, p in zip(outs, parts):
            o[...] = p
        return user_out

    def blocks(self, H, out):
        """The flat Hessian as a tuple of tuples: block (i, j) has shape x_i.shape + x_j.shape."""
        if out is not None:
            raise UnsupportedError("hessian(out=...) takes one array; with a tuple input the "
                                   "Hessian is a tuple of blocks -- call it without out=")
        b = self.bounds
        return self.tree(tuple(self.tree(tuple(
            np.ascontiguousarray(H[b[i]:b[i + 1], b[j]:b[j + 1]]).reshape(self.shapes[i] + self.shapes[j])
            for j in range(len(self.shapes)))) for i in range(len(self.shapes))))


def _tape_like(obj):
    if isinstance(obj, Tape):
        return True
    # FIX: do not import .compiled here -- it needs the C extension, and
    # rt.gradient(f, x) with a plain function must work without it.  A
    # CompiledTape can only exist once revtape.compiled has been imported.
    compiled = sys.modules.get("revtape.compiled")
    return compiled is not None and isinstance(obj, compiled.CompiledTape)


def gradient(f, x, out=None):
    """Gradient of scalar f at x (f a function, a tape or a compiled tape)."""
    if _tape_like(f):
        return f.gradient(x, out)
    return _once(GradientTape, f, x).value_and_gradient_recorded(out)[1]


def value_and_gradient(f, x, out=None):
    """(f(x), gradient at x) for a function, a tape or a compiled tape."""
    if _tape_like(f):
        return f.value_and_gradient(x, out)
    return _once(GradientTape, f, x).value_and_gradient_recorded(out)


def _transform(f, kind, x):
    """rt.jacobian(f) / hessian(f) / hvp(f) without x: the cached transform."""
    if _tape_like(f) or x is not None:
        raise TypeError(f"rt.{kind}(tape) needs x: rt.{kind}(tape, x, ...)")
    from .cached import CachedTransform
    return CachedTransform(f, kind)


def jacobian(f, x=None, out=None):
    """Jacobian of f at x, shaped output.shape + input.shape.  Without x, the
    cached, compiled, guarded transform: rt.jacobian(f)(x)."""
    if x is None:
        return _transform(f, "jacobian", x)
    if _tape_like(f):
        return f.jacobian(x, out)
    return _once(JacobianTape, f, x).jacobian(x, out)


def hessian(f, x=None, out=None):
    """Hessian of scalar f at x, shaped input.shape + input.shape.  Without x,
    the cached transform: rt.hessian(f)(x)."""
    if x is None:
        return _transform(f, "hessian", x)
    if _tape_like(f):
        return f.hessian(x, out)
    return _once(HessianTape, f, x).hessian(x, out)


def hvp(f, x=None, v=None):
    """Hessian-vector product H(x) v.  Without x, the cached transform:
    rt.hvp(f)(x, v), as fast as ctape.hvp after its first call."""
    if x is None and v is None:
        return _transform(f, "hvp", None)
    if v is None:
        raise TypeError("rt.hvp(f, x, v) needs v (or call rt.hvp(f)(x, v))")
    if _tape_like(f):
        return f.hvp(x, v)
    return _once(HessianTape, f, x).hvp(x, v)
