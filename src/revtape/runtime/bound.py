"""ctape.bind(x_buf, g_buf): the sampler loop's no-argument call, its buffers
checked once, at bind.  Three forms, the fastest the build and the program
allow: checked.c's Bound (_BoundCall: the call is C), one cffi call of
rt_bound_value_and_grad (_OneCall: programs whose replay cannot raise), or a
closure over the VM call.  None of them pickles (they hold C pointers into
this process's buffers); deepcopy gives the callable itself."""

import types
from functools import partial as _partial
from typing import Callable

import numpy as np

from .arena import _FastMarks
from .handoff import _bind_hot
from .vm import _F64, _checked, ffi, lib
from ..core import isa
from ..core.apitypes import FloatArray
from ..errors import InputError, OutputError, PicklingError

_BIND_NEEDS = "bind() needs a gradient tape (scalar output)"


class Binding:
    """CompiledTape.bind (a mixin of compiled.CompiledTape)."""

    def _bind_forward(self, x_buf):
        """bind's value-only twin: a no-argument callable running the forward
        sweep alone (rt_forward: no reverse sweep, the adjoint arena untouched)
        at whatever x_buf holds, returning the scalar output.  x_buf is checked
        here once, as bind checks it, and must stay as it was bound."""
        prog = self._program
        if prog.out_shape != ():
            raise OutputError("_bind_forward needs a scalar output")
        if (type(x_buf) is not np.ndarray or x_buf.dtype != _F64 or x_buf.size != prog.n_in
                or not x_buf.flags.c_contiguous or not x_buf.flags.aligned):
            raise InputError(f"x_buf must be an aligned C-contiguous float64 array of "
                             f"{prog.n_in} values")
        if _BoundCall is not None and _BOUND_FORWARD:
            return self._bind_c(x_buf, np.empty(max(prog.n_grad, 1))[:prog.n_grad],
                                forward=True)
        y = ffi.new("double[1]")
        xp = ffi.from_buffer("double[]", x_buf)
        fw = _partial(self._fwf, self._p, xp, y)
        status, tape, arena = self._status, self._tape, self._arena

        def run(_pin):
            st = fw()
            if st:
                status(st, xp)
            if tape is not None:
                if tape._fast_marks is None:
                    tape._replayed_by = arena
                else:
                    tape._fast_marks.mark(arena)
            return y[0]

        run.ctape = self          # keeps the program and the buffers alive
        return types.MethodType(run, _BoundPin())

    def bind(self, x_buf: FloatArray, g_buf: FloatArray) -> Callable[[], float]:
        """A no-argument callable for sampler loops: replays at whatever x_buf holds,
        writes the gradient into g_buf and returns the value.  Both buffers are
        checked once, here: run() does not look at them again, so they must
        stay as they were bound (shape, strides, writeability)."""
        if self._program.out_shape != ():
            raise OutputError(_BIND_NEEDS)
        # One array input binds buffers of its shape; any input (floats, tuples,
        # pytrees) binds flat vectors in the layout of ctape.flatten(x): the C
        # program reads its inputs from one contiguous run either way.
        prog = self._program
        flat_x, flat_g = (prog.n_in,), (prog.n_grad,)
        shaped = self._single and not self._in_float[0] and self._treedef is None
        for name, buf, flat in (("x_buf", x_buf, flat_x), ("g_buf", g_buf, flat_g)):
            if (type(buf) is not np.ndarray or buf.dtype != _F64
                    or (buf.shape != flat and not (shaped and buf.shape == self._x_shape))
                    or not buf.flags.c_contiguous):
                want = f"{self._x_shape} or {flat}" if shaped and self._x_shape != flat else flat
                raise InputError(f"{name} must be a C-contiguous float64 array of shape {want}"
                                 + ("" if shaped else " (the flat layout of ctape.flatten(x))"))
            if not buf.flags.aligned:
                raise InputError(f"{name} is not aligned for float64 (e.g. np.frombuffer at an "
                                 "offset that is not a multiple of 8): bind a copy, "
                                 "np.array(buf)")
        if not g_buf.flags.writeable:
            raise InputError("g_buf must be writeable")
        if np.shares_memory(x_buf, g_buf):
            raise InputError("x_buf and g_buf must not overlap")
        p, vg, status, tape, arena = self._p, self._vgf, self._status, self._tape, \
            self._arena
        if _BoundCall is not None:
            return self._bind_c(x_buf, g_buf)
        xp, gp = ffi.from_buffer("double[]", x_buf), ffi.from_buffer("double[]", g_buf)
        if self._one_call_ok():
            return self._bind_one_call(xp, gp)
        value = ffi.new("double *")
        # Arguments bound once: one C-level call per replay.
        vg = _partial(vg, p, xp, value, gp)

        def run(_pin):
            st = vg()
            if st:
                status(st, xp)
            if tape is not None:
                if tape._fast_marks is None:
                    tape._replayed_by = arena
                else:
                    tape._fast_marks.mark(arena)
            return value[0]

        run.ctape = self          # keeps the program (and the buffers, via xp/gp) alive
        # A bound method (a C-level call, as cheap as the plain function) whose
        # __self__ refuses to pickle with advice: the callable holds raw pointers
        # into this process's buffers.
        return types.MethodType(run, _BoundPin())

    def _one_call_ok(self):
        """Whether bind() may be one C call (rt_bound_value_and_grad): its
        value_and_grad can end only RT_OK, RT_OK_HOT or RT_BUSY, the statuses
        the C side handles without raising -- no guard (BranchChanged), no
        PYCALL (a callback's error), no checked kernel (IndexInputError)."""
        if self._p.guarded or self._ws is not None:
            return False
        kinds = {isa.instr(int(op) & isa.OPCODE_MASK).kernel
                 for op in np.unique(self._code[:, 0]).tolist()}
        return not kinds & {"checked", "callback"}

    def _fast_marks(self):
        """The tape's _FastMarks cell, made on first use: a bound call written
        in C marks each replay there, for rt.value(tape.output) to pull."""
        tape = self._tape
        marks = tape._fast_marks
        if marks is None:
            marks = tape._fast_marks = _FastMarks()
            if tape._replayed_by is not None:      # a compiled replay not yet pulled
                marks.mark(tape._replayed_by)
            tape._replayed_by = marks
        return marks

    def _bind_one_call(self, xp, gp):
        """bind() as a partial of one cffi call: no Python frame per call.
        The value comes back as the C function's return; a concurrent replay
        is waited for (docs/guide/native.md); rt.value(tape.output) learns of
        each replay through the tape's _FastMarks cell, which C writes."""
        b = ffi.new("rt_bound *")
        b.p, b.x, b.g = self._p, xp, gp
        keep = [self, xp, gp]
        if self._p.hot_max_calls > 0:           # native="auto" is counting: hot() at the crossing
            h = ffi.new_handle(self)
            b.on_hot, b.hot_ctx = lib.rt_py_hot, h
            keep.append(h)
        tape = self._tape
        if tape is not None:
            marks = self._fast_marks()
            b.mark, b.mark_id = marks.cell, marks.id_of(self._arena)
            keep.append(marks)
        call = _OneCall(lib.rt_bound_value_and_grad, b, keep)
        if tape is not None:
            marks.bound(self._arena, call)
        return call

    def _bind_c(self, x_buf, g_buf, forward=False):
        """bind() as checked.c's Bound (a _BoundCall): the call is C -- no Python
        frame, no cffi conversion -- with the semantics of the two Python-side
        binds below: RT_BUSY waited for where _bind_one_call waits (programs
        whose replay cannot run Python) and raised as ConcurrentUseError
        otherwise, RT_OK_HOT starting the native build, every other status
        raising through _status, each replay marked in the tape's _FastMarks."""
        cell, mark_id = None, 0
        tape = self._tape
        if tape is not None:
            marks = self._fast_marks()
            cell, mark_id = ffi.buffer(marks.cell), marks.id_of(self._arena)
        status = self._status

        def fail(st):
            # a guard's report replays at the bound x (the Bound's export holds it)
            status(st, ffi.from_buffer("double[]", x_buf))

        call = _BoundCall(ffi.buffer(self._p), self, x_buf, g_buf, cell, mark_id,
                          _partial(_bind_hot, self), fail, self._one_call_ok(),
                          **({"forward": True} if forward else {}))
        if tape is not None:
            marks.bound(self._arena, call)
        return call


class _OneCall(_partial):
    """ctape.bind(x_buf, g_buf) as one C call (a functools.partial of
    rt_bound_value_and_grad, called without a Python frame) where
    revtape._checked is missing (_BoundCall serves otherwise).  Holds the
    compiled tape, the buffers' pointers and the rt_bound struct alive;
    refuses to pickle, as every bound callable does."""

    def __new__(cls, fn, b, keep):
        self = super().__new__(cls, fn, b)
        self.ctape, self._keep = keep[0], keep
        return self

    def __reduce__(self):
        _BoundPin().__reduce__()

    def __deepcopy__(self, memo):
        return self


if _checked is not None:
    class _BoundCall(_checked.Bound):
        """ctape.bind(x_buf, g_buf) as checked.c's Bound: a call with no Python
        frame.  Refuses to pickle, as every bound callable does; deepcopy gives
        itself (it holds the buffers, which a copy could not share safely)."""

        __slots__ = ()

        def __reduce__(self):
            _BoundPin().__reduce__()

        def __deepcopy__(self, memo):
            return self
else:                                                     # pragma: no cover
    _BoundCall = None
# a build of revtape._checked whose Bound takes forward=True (older ones do not)
_BOUND_FORWARD = _checked is not None and "forward=" in (_checked.Bound.__doc__ or "")


class _BoundPin:
    """The __self__ of a ctape.bind(...) callable: pickling it fails with advice."""

    __slots__ = ()

    def __reduce__(self):
        raise PicklingError("a ctape.bind(x_buf, g_buf) callable holds C pointers into this "
                            "process's buffers and cannot be pickled; pickle the compiled tape "
                            "(ctape) instead and call bind() again on the loaded copy")

    def __deepcopy__(self, memo):
        return self
