"""Whole-function helpers: GradientTape, JacobianTape, HessianTape and the
one-shot gradient/jacobian/hessian/hvp functions.

``x`` is a float, an ndarray, or a tuple of them.  With a tuple, f is called
as ``f(*x)`` when its signature takes that many positional arguments
(ReverseDiff's convention) and as ``f(x)`` otherwise; the gradient is then a
tuple shaped like x.
"""

import contextlib
import gc
import inspect
import sys

from . import ops
from .errors import UnsupportedError
from .tape import Tape, backprop, check_out

_GUARD = ops.OPS["guard"]


def call_with(f, targs):
    """Call f on tracked inputs: f(*x) for a tuple when f takes that many arguments."""
    if not isinstance(targs, tuple):
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
    if isinstance(x, tuple):
        tx = tuple(tape.track(xi) for xi in x)
    else:
        tx = tape.track(x)
    tape._func = f
    with gc_paused():
        out = call_with(f, tx)
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
            check_out(out, [self._vals[t._id] for t in self._inputs])
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
    ``hvp(x, v)`` one reverse sweep of it seeded with v.
    """

    def __init__(self, f, x):
        super().__init__()
        self._build_from(GradientTape(f, x))

    @classmethod
    def _from_tape(cls, tape):
        obj = cls.__new__(cls)
        Tape.__init__(obj)
        obj._build_from(tape)
        return obj

    def _build_from(self, src):
        src._check_finished()
        src._scalar_output()
        if len(src._inputs) != 1:
            raise UnsupportedError("HessianTape supports functions of one input (array or float)")
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
        self._replay(x)
        return self._vals[self._value_id]

    def value_and_gradient(self, x, out=None):
        self._check_finished()
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
        return self.jacobian(x, out)

    def hvp(self, x, v):
        return self.vjp(x, v)


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
    return GradientTape(f, x).value_and_gradient_recorded(out)[1]


def value_and_gradient(f, x, out=None):
    """(f(x), gradient at x) for a function, a tape or a compiled tape."""
    if _tape_like(f):
        return f.value_and_gradient(x, out)
    return GradientTape(f, x).value_and_gradient_recorded(out)


def jacobian(f, x, out=None):
    """Jacobian of f at x, shaped output.shape + input.shape."""
    if _tape_like(f):
        return f.jacobian(x, out)
    return JacobianTape(f, x).jacobian(x, out)


def hessian(f, x, out=None):
    """Hessian of scalar f at x, shaped input.shape + input.shape."""
    if _tape_like(f):
        return f.hessian(x, out)
    return HessianTape(f, x).hessian(x, out)


def hvp(f, x, v):
    """Hessian-vector product H(x) v."""
    if _tape_like(f):
        return f.hvp(x, v)
    return HessianTape(f, x).hvp(x, v)
