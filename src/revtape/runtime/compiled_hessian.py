"""What a HessianTape's program is beyond a CompiledTape (compiled.CompiledHessian).

Its program computes f's gradient (the reverse pass, recorded) as its
output, with f's value beside it in the arena: its value_and_gradient and
forward read f's value from there, and hessian() and hvp() run tangent (or
reverse) sweeps over the gradient (sweeps.py).  What a gradient program
offers on top of a scalar output (bind, batches, its own Jacobian and JVP)
it refuses with advice."""

import math

import numpy as np

from .bound import _BIND_NEEDS
from .checks import _refuse
from .vm import ffi, lib
from ..errors import OutputError
from ..trace.values import check_out

_NO_BATCH = ("batched replay of a HessianTape is not supported; batch the compiled "
             "GradientTape of the same function instead")


class HessianReplay:
    """CompiledHessian's own methods (compiled.CompiledHessian: this, then CompiledTape)."""

    _value_and_gradient_is_fast = False
    _tangent_program = True      # hessian()/hvp() are tangent sweeps: native="auto" builds them

    def _check_kind(self, prog):
        if not 0 <= prog.value_off < prog.n_vals:
            _refuse("a HessianTape program without the offset of f's value")
        parts = getattr(self._tape, "_parts", None)
        if parts is not None:
            try:
                total = sum(math.prod(s) for s in parts.shapes)
            except Exception:                                       # noqa: BLE001
                _refuse("its tape's input parts are malformed")
            if total != prog.n_in:
                _refuse("its tape's input parts do not add up to the program's input")

    def forward(self, x):
        """f's value at x."""
        return self._value_and_gradient(x, None)[0]

    __call__ = forward

    def _value_and_gradient(self, x, out):
        parts = self._parts
        if parts is not None:
            value, g = self._flat_value_and_gradient(parts.flatten(x))
            return value, parts.split_result(g, out)
        if out is not None:
            check_out(out, [np.empty(self._grad_shapes[0])])
        value, g = self._flat_value_and_gradient(x)
        if out is not None:
            out[...] = g
            g = out
        return value, g

    def _flat_value_and_gradient(self, x):
        # f's value sits beside the output (the gradient) in the arena: the VM
        # copies both out while this call owns the program, so a concurrent
        # caller gets ConcurrentUseError, never another thread's numbers.
        prog = self._program
        y = np.empty(prog.out_len)
        report = ffi.new("rt_report *")
        xp = self._x_ptr(x)
        st = lib.rt_forward_report(self._p, xp, ffi.from_buffer("double[]", y), prog.value_off,
                                   report)
        if st:
            self._status(st, xp, report)
        self._mark_replayed()
        g = float(y[0]) if prog.out_shape == () else y.reshape(prog.out_shape)
        return float(report.picked), g

    def _hessian_program(self):
        return self

    def batch_value_and_gradient(self, X, out=None, threads=None):
        raise OutputError(_NO_BATCH)

    def batch_forward(self, X, threads=None):
        raise OutputError(_NO_BATCH)

    def bind(self, x_buf, g_buf):
        raise OutputError(_BIND_NEEDS)

    def jacobian(self, x, out=None):
        raise OutputError("use hessian() on a HessianTape")

    def jvp(self, x, v):
        raise OutputError("a HessianTape's tangent is its Hessian: use hvp()")
