"""HessianTape (the tape of a gradient) and Parts (a tuple or pytree input laid
out as one flat vector).

A HessianTape is recorded by running a gradient tape's forward and reverse
passes again on tracked values (tape.record_gradient); compiled, its program
computes the gradient and the VM's tangent sweep differentiates it
(forward-over-reverse, runtime/sweeps.py).
"""

import math
from typing import Any

import numpy as np

from ..core import pytree
from ..core.apitypes import Function, PyTree
from ..errors import InputError, UnsupportedError
from .recording import GradientTape, call_with
from .replay import record_gradient
from .tape import Tape
from .values import check_input, check_out


class HessianTape(Tape):
    """HessianTape(f, x): the gradient of f, recorded as a tape.

    f is recorded at x, then its forward and reverse passes are run again on
    tracked values, which records the gradient computation onto this tape.
    ``gradient(x)`` replays it; ``hessian(x)`` is its Jacobian;
    ``hvp(x, v)`` one reverse sweep of it seeded with v (H is symmetric).
    Compiled, the same two are tangent sweeps of it in C: forward-over-reverse.

    Parameters
    ----------
    f : callable
        The scalar function, of the tracked x (``f(*x)`` for a tuple x when f
        takes that many arguments).
    x : float, ndarray, tuple or pytree
        Where to record; a tuple or pytree is laid out as one flat vector, and
        the methods take and give values structured like x.
    """

    def __init__(self, f: Function, x: PyTree) -> None:
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
        self._value_id = record_gradient(self, src)
        self._func = getattr(src, "_func", None)

    def forward(self, x: PyTree) -> float:
        """Replay at x; returns the value of f (the tape's output is its gradient)."""
        self._replay(self._flat(x))
        return self._vals[self._value_id]

    def value_and_gradient(self, x: PyTree, out: PyTree = None) -> tuple[float, Any]:
        """Replay at x; returns (f's value, its gradient shaped like x)."""
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

    def gradient(self, x: PyTree, out: PyTree = None) -> Any:
        """Replay at x; returns f's gradient, shaped like x."""
        return self.value_and_gradient(x, out)[1]

    def hessian(self, x: PyTree, out: PyTree = None) -> Any:
        """f's Hessian at x: the Jacobian of this tape (a tuple input: blocks)."""
        if self._parts is not None:
            return self._parts.blocks(self.jacobian(self._flat(x)), out)
        return self.jacobian(x, out)

    def hvp(self, x: PyTree, v: PyTree) -> Any:
        """H(x) v: one reverse sweep of this tape seeded with v."""
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
