"""CompiledTape's replays of the value and gradient: forward, value_and_gradient
(its fast paths: revtape._checked's one C call, then the pointer caches, then
the general path), gradient, the has_aux extras, and the errors the VM's
statuses stand for."""

import threading
import weakref
from typing import Any, overload

import numpy as np

from .arena import _checked_marks
from ..core.apitypes import FloatArray, NDArray, PyTree
from .handoff import _hot_of
from .vm import (RT_BADARG, RT_BAD_INDEX, RT_BUSY, RT_CALLBACK_FAILED, RT_GUARD_FAILED,
                 RT_OK, RT_OK_HOT, _DOUBLE_P, _DOUBLES, _F64, _ND, _checked, _checked_vg,
                 _empty, _ffi_new, _from_buffer, _new_double, _retry_busy, ffi, lib)
from ..errors import (BranchChanged, ConcurrentUseError, IndexInputError, OutputError,
                      RevtapeError)
from ..trace.guards import branch_changed

# a build of revtape._checked with forward(state, x) (older ones lack it)
_checked_fw = getattr(_checked, "forward", None)


class Replay:
    """CompiledTape's value-and-gradient replays (a mixin of compiled.CompiledTape)."""

    # the value and gradient are the program's output and input adjoints (a
    # HessianTape's program computes a gradient: its value sits elsewhere)
    _value_and_gradient_is_fast = True

    def _init_fast_path(self, prog):
        """value_and_gradient's fast paths for prog: one float64 array in, a
        scalar out, every input differentiated."""
        self._last_x = self._last_out = (None,)
        self._fast_shape = (self._x_shape if self._single and not self._in_float[0]
                            and self._value_and_gradient_is_fast and prog.out_shape == ()
                            and prog.n_grad == prog.n_in and self._treedef is None else None)
        # the strides of a C-contiguous array of that shape: what the pointer
        # caches compare against (strides can be changed in place)
        self._c_strides = (np.empty(self._fast_shape or 0, dtype=np.float64).strides
                           if self._fast_shape is not None else None)
        # value_and_gradient's checks and replay in one C call (revtape._checked)
        self._ck = None
        if _checked is not None and self._fast_shape is not None and len(self._fast_shape) <= 8:
            self._ck = _checked.State(ffi.buffer(self._p), self._arena, self._tape, _ND, _F64,
                                      _empty, tuple(self._fast_shape), _checked_marks,
                                      _hot_of(weakref.ref(self)))

    def _mark_replayed(self):
        tape = self._tape
        if tape is not None:
            if tape._fast_marks is None:
                tape._replayed_by = self._arena
            else:
                tape._fast_marks.mark(self._arena)

    def _status(self, status, xp=None, report=None):
        """Raise the error for a VM status.  Everything reported is read while a
        call owns the program: the arena itself may already hold another
        thread's replay."""
        if status == RT_OK:
            return
        if status == RT_OK_HOT:          # a successful call: start the native build
            from . import native as _native
            _native.hot(self)
            return
        if status == RT_GUARD_FAILED:
            raise self._branch_changed(xp, report)
        if status == RT_BUSY:
            raise ConcurrentUseError(
                "this CompiledTape is being replayed by another thread; give each thread its "
                "own copy (copy.deepcopy(ctape)) -- one CompiledTape serves one thread at a time")
        if status == RT_CALLBACK_FAILED:
            err = self._ws.take_error() if self._ws is not None else None
            raise err or RevtapeError("a Python callback failed")
        if status == RT_BADARG:
            raise OutputError("a gradient needs a scalar output; use jacobian()")
        if status == RT_BAD_INDEX:
            raise IndexInputError(
                "a gather index read from a tape input is not a whole number inside the "
                "indexed array (the replay stopped before reading outside it); write indices "
                "in range, as numpy's own indexing of the array produces them")
        raise RevtapeError(f"the VM refused the call (status {status})")

    def _branch_changed(self, xp, report):
        """The BranchChanged of a refused replay at xp.  Its guard number and
        operands come from rt_forward_report, which writes them into this
        call's own rt_report while it owns the program; a call that used
        another entry point replays the forward sweep at the same x once more
        to get them (it fails at the same guard)."""
        if report is None:
            if xp is None:
                # callers that replayed from the arena (x written there first) may
                # pass no pointer: NULL tells the VM to read the inputs in place
                xp = ffi.NULL
            report = ffi.new("rt_report *")
            st = _retry_busy(lambda: lib.rt_forward_report(self._p, xp, ffi.NULL, -1, report))
            if st != RT_GUARD_FAILED:
                return BranchChanged(
                    "the replay took another branch than the recording (a guard failed), "
                    "and the input changed before the guard could be reported; record a new "
                    "tape at this input or use rt.grad(f), which re-records")
        params = self._program.guards[report.guard][0]
        return branch_changed(params, float(report.operands[0]), float(report.operands[1]))

    def forward(self, x: PyTree) -> Any:
        """Replay the forward pass at x (no reverse sweep: the adjoints are not
        touched); returns the output (a float, or an array for a Jacobian tape)."""
        prog = self._program
        ck = self._ck
        if ck is not None and _checked_fw is not None:
            # checks and replay in one C call (revtape._checked.forward)
            r = _checked_fw(ck, x)
            if type(r) is float:
                return r
            if r is not None:
                self._status(r, _from_buffer(_DOUBLES, x))
        if (type(x) is _ND and x.dtype is _F64 and prog.out_shape == () and self._single
                and self._treedef is None and x.shape == self._x_shape):
            # the plain scalar case: no conversion, the value through a C
            # double of this call's own (cffi reads it as a Python float)
            f = x.flags
            if f.c_contiguous and f.aligned:
                xp, y = _from_buffer(_DOUBLES, x), _new_double()
                st = self._fwf(self._p, xp, y)
                if st:
                    self._status(st, xp)
                self._mark_replayed()
                return y[0]
        y = np.empty(prog.out_len)
        xp = self._x_ptr(x)
        self._status(self._fwf(self._p, xp, ffi.from_buffer("double[]", y)), xp)
        self._mark_replayed()
        return float(y[0]) if prog.out_shape == () else y.reshape(prog.out_shape)

    __call__ = forward

    @overload
    def value_and_gradient(self, x: NDArray[Any],
                           out: FloatArray | None = None) -> tuple[float, FloatArray]: ...
    @overload
    def value_and_gradient(self, x: float, out: None = None) -> tuple[float, float]: ...
    @overload
    def value_and_gradient(self, x: PyTree, out: PyTree = None) -> tuple[float, Any]: ...

    def value_and_gradient(self, x: PyTree, out: PyTree = None) -> tuple[float, Any]:
        """(value, gradient) at x; with out= the gradient is written there (no allocation).

        Parameters
        ----------
        x : float, ndarray, tuple or pytree
            The input, structured, shaped and typed as the recorded one.
        out : ndarray (or the structure of x), optional
            A float64 buffer shaped like x for the gradient; returned.

        Returns
        -------
        (float, gradient)
            The value and the gradient, structured like x.

        Raises
        ------
        InputError
            x or out has the wrong structure, shape or dtype.
        BranchChanged
            x takes another branch of a recorded comparison (guards on).
        ConcurrentUseError
            Another thread is replaying this CompiledTape.
        """
        # The plain case -- x a float64 array of the recorded shape, C order,
        # aligned; out the same (writeable, apart from x) or None -- is checked
        # and replayed in one C call (csrc/pyext/checked.c), which reads both
        # buffers afresh every time.  It answers None for anything else: the
        # Python paths below convert, copy or raise.
        # (With revtape._checked, ctape.value_and_gradient is its builtin
        # method doing this same call without a Python frame: see compiled.py,
        # after CompiledTape.)
        return self._value_and_gradient_answer(x, out, _checked_vg(self._ck, x, out))

    def _value_and_gradient_answer(self, x, out, r):
        """value_and_gradient after revtape._checked answered r: r itself for a
        replay done, the error of a failed replay's status, or the Python path."""
        if r.__class__ is tuple:
            return r
        if r is not None:                    # the VM's status of a failed replay
            self._status(r, self._x_ptr(x))
        return self._value_and_gradient_py(x, out)

    def _value_and_gradient_py(self, x, out):
        # Without revtape._checked (and for an out overlapping x): one float64
        # array in, out= of the same shape.  Every check is an identity or
        # tuple comparison, and the C pointers of the last x and the last out
        # are reused while the caller passes the same arrays (the pointer
        # caches below).
        shape = self._fast_shape
        if shape is not None and type(x) is _ND and x.dtype is _F64 and x.shape == shape:
            # a cached pointer is reused only while its array keeps C strides;
            # a new pointer comes from from_buffer, which refuses anything
            # non-contiguous (then the checked path below copies)
            cs = self._c_strides
            if out is None:
                # a new array is aligned and writeable: no checks, no call
                g = _empty(shape)
                dest = (g, _from_buffer(_DOUBLES, g), _ffi_new(_DOUBLE_P))
            elif (type(out) is _ND and out.dtype is _F64 and out.shape == shape
                    and out.flags.writeable):
                dest = self._last_out
                if dest[0] is not out or out.strides != cs:
                    dest = self._new_out(out)
                    if dest is not None:
                        self._last_out = dest
            else:
                return self._value_and_gradient(x, out)
            last_x = self._last_x
            if last_x[0] is x and x.strides == cs:
                xp = last_x[1]
            else:
                xp = self._pointer_to_x(x)
            if xp is not None and dest is not None:
                st = self._vgf(self._p, xp, dest[2], dest[1])
                if st:
                    self._status(st, xp)
                self._mark_replayed()
                return dest[2][0], dest[0]
        return self._value_and_gradient(x, out)

    # The pointer caches.  A from_buffer cdata holds a buffer export of (and a
    # reference to) its array, so the memory it points to lives as long as the
    # cache entry, and numpy's resize() refuses an array anything else
    # references.  What can change in place is checked on every call above:
    # dtype, shape, strides (assigning x.strides or x.shape keeps the data
    # pointer but changes which elements the array means) and writeability.
    # Alignment cannot change in place and is checked when a pointer is made.
    # The data pointer itself changes in place only through
    # resize(refcheck=False) and ndarray.__setstate__, which leave every view
    # and buffer export of the array dangling (numpy's own views crash too);
    # revtape's cache is such an export.  Each cache is one tuple, replaced
    # whole: a thread never pairs one array with another array's pointer.  The
    # value cell belongs to out: two threads passing the same out already
    # share their results through it, and threads with their own out never do.
    def _pointer_to_x(self, x):
        if not x.flags.aligned:
            return None                          # the checked path copies it
        try:
            xp = _from_buffer(_DOUBLES, x)       # refuses a non-contiguous array
        except (ValueError, TypeError, BufferError):
            return None
        self._last_x = (x, xp)
        return xp

    @staticmethod
    def _new_out(out):
        """(out, its C pointer, a value cell), or None for an out C cannot write directly."""
        if not out.flags.aligned:
            return None
        try:
            return out, _from_buffer(_DOUBLES, out, require_writable=True), _new_double()
        except (ValueError, TypeError, BufferError):
            return None

    def _value_and_gradient(self, x, out):
        """Every other case: tuples, floats, conversions, errors."""
        g, user = self._grad_out(out)
        value = ffi.new("double *")      # per call: another thread's result never lands here
        xp = self._x_ptr(x)
        st = self._vgf(self._p, xp, value, ffi.from_buffer("double[]", g))
        if st:
            self._status(st, xp)
        self._mark_replayed()
        return value[0], self._split_grad(g, user)

    @overload
    def gradient(self, x: NDArray[Any], out: FloatArray | None = None) -> FloatArray: ...
    @overload
    def gradient(self, x: float, out: None = None) -> float: ...
    @overload
    def gradient(self, x: PyTree, out: PyTree = None) -> Any: ...

    def gradient(self, x: PyTree, out: PyTree = None) -> Any:
        """The gradient at x (written into out= when given): value_and_gradient's second half."""
        return self.value_and_gradient(x, out)[1]

    def _value_gradient_extras(self, x):
        """(value, gradient, [extra output values]) of one replay: the values of
        tape._extra_ids (rt.grad's has_aux) read from the arena right after the
        sweep.  Two such calls exclude each other (ConcurrentUseError); a replay
        by another method of this same object from another thread between the
        sweep and the read is not excluded -- one CompiledTape serves one
        thread at a time, and rt.grad and the cached transforms give each
        thread its own."""
        lock = self.__dict__.get("_extras_lock")
        if lock is None:
            lock = self.__dict__.setdefault("_extras_lock", threading.Lock())
        if not lock.acquire(blocking=False):
            self._status(RT_BUSY)
        try:
            value, g = self.value_and_gradient(x)
            extras = self._extras()
        finally:
            lock.release()
        return value, g, extras

    def _extras(self):
        """The extra outputs' values left in the arena by the last replay (copies)."""
        vals = self._vals
        return [float(vals[off]) if shape == () else
                vals[off:off + int(np.prod(shape, dtype=np.int64))].reshape(shape).copy()
                for off, shape in self._program.extras]
