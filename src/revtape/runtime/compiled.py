"""CompiledTape: owns one verified C program and its arenas.

Everything the VM touches is owned here: the instruction words, the int side
table and the two float64 arenas are numpy arrays, and the rt_program struct
that points into them is a cffi-owned allocation freed with this object.  No
C code allocates, so dropping a CompiledTape frees everything.

Copies never share those buffers: ``copy.deepcopy`` deep-copies the tape and
compiles the copy afresh, and a pickle carries the program as plain data,
rebuilt and verified on load.  One CompiledTape serves one thread at a time;
the VM refuses a second concurrent replay of the same program (RT_BUSY) and
this raises ConcurrentUseError instead of racing.

This module builds, inspects, copies and pickles a CompiledTape; what it
does is written by idea in the modules it is made of: checks.py (what a
program passes before the C verifier), arena.py (its memory), plumbing.py
(inputs and results to and from the flat buffers), replay.py (the value and
gradient), sweeps.py (Jacobians, JVPs, VJPs, Hessians), batch.py (batched
replay), bound.py (bind), handoff.py (the native tier) and
compiled_hessian.py (a HessianTape's program, CompiledHessian).
"""

import copy as _copy
import dataclasses
from typing import Any

import numpy as np

from .arena import _Arena, _aligned_zeros, _frozen, program_struct
from .batch import Batches
from .bound import Binding
from .checks import _check_build, _check_program, _refuse
from .compiled_hessian import HessianReplay
from .disasm import disassemble as _disassemble
from .handoff import NativeHandoff
from .plumbing import Plumbing
from .replay import Replay
from .sweeps import Sweeps
from .vm import _checked, ffi, lib, verify
from .vm import array_threads  # noqa: F401  (public here: revtape.runtime.compiled.array_threads)
from ..core import isa
from ..core.apitypes import NativeMode, NDArray
from ..core import primitives as _prim
from ..errors import InputError, OutputError
from ..lower import blas, compiler
from ..trace.hessian import HessianTape
from ..trace.tape import NULL_TAPE, Tape


class CompiledTape(Replay, Sweeps, Plumbing, Batches, Binding, NativeHandoff):
    """A tape lowered to the C VM.  Same replay methods as Tape, run in C.

    ``rt.compile(tape)`` is the usual spelling.  One CompiledTape serves one
    thread at a time (``copy.deepcopy`` gives an independent copy, compiled
    afresh); it pickles (rebuilt and verified on load).

    Parameters
    ----------
    tape : Tape
        A finished tape.
    guards : bool, default True
        Check the recorded branches at every replay (``rt.BranchChanged``).
    n_grad : int, optional
        Differentiate only the first n_grad inputs (the rest are data).
    native : {"auto", True, False}, default "auto"
        The native tier (see ``rt.compile``).

    Raises
    ------
    InputError
        tape is not a finished tape with inputs and an output.
    VerificationError
        The C verifier refused the program (it is never run).
    """

    def __new__(cls, tape: Any = None, *args: Any, **kwargs: Any) -> "CompiledTape":
        # A HessianTape's program is a CompiledHessian (below) however it is
        # built -- rt.compile, a deep copy, an unpickled copy (the pickle names
        # CompiledTape's _rebuild, so pickles of either kind stay one format)
        if cls is CompiledTape and isinstance(tape, HessianTape):
            cls = CompiledHessian
        return super().__new__(cls)

    def __init__(self, tape: Tape, guards: bool = True, n_grad: int | None = None,
                 _program: Any = None, _pickled: bool = False,
                 native: NativeMode = "auto") -> None:
        if native not in (False, True, "auto"):
            raise InputError(f"native must be False, True or 'auto', not {native!r}")
        if _program is None:
            _check_compilable(tape)
        self._tape = tape
        self._guards = guards
        self._n_grad_inputs = n_grad
        self._parts = getattr(tape, "_parts", None)   # a HessianTape of a tuple input
        self._treedef = getattr(tape, "_treedef", None)   # a pytree input (pytree.py)
        self._hess = None
        self._program = _program or compiler.compile_tape(tape, guards, n_grad)
        self._load(_pickled)
        self._start_native(native)

    # ------------------------------------------------ building
    def _load(self, pickled=False):
        prog = self._program
        _check_build(prog)
        _check_program(prog, self._tape, self._n_grad_inputs, pickled)
        self._check_kind(prog)
        # The verifier's word is only as good as the memory it read: the words
        # and the int table live in private bytes objects from here on, so
        # nothing (not even setflags(write=True) on ctape._code) can change
        # what C runs after it was checked.
        self._code = _frozen(prog.code, np.int32).reshape(-1, isa.WORDS)
        self._ints = _frozen(prog.ints, np.int32)
        # A private copy with immutable fields: every buffer handed to C is
        # sized from it, so changing ctape.program afterwards (it returns a
        # copy) cannot make Python pass C a buffer shorter than it writes.
        self._program = prog = dataclasses.replace(
            prog, code=self._code, ints=self._ints, inputs=tuple(prog.inputs),
            guards=tuple(prog.guards), out_shape=tuple(prog.out_shape))
        self._vals = _aligned_zeros(max(prog.n_vals, 1))
        self._vals[prog.n_in:prog.n_fixed] = prog.consts
        self._adj = _aligned_zeros(max(prog.n_vals, 1))
        p, keep = program_struct(prog, self._code, self._ints, self._vals, self._adj)
        # Python callbacks (custom primitives): this object's own table and
        # workspace, so a deep copy or an unpickled copy never calls into
        # another's arenas.  The handle points at the workspace, not at self
        # (no reference cycle).
        self._table = self._ws = self._ws_handle = None
        self._init_batches()
        blas.load_for(self._code, self._ints)     # a pickle's BLAS marks: the routines first
        verify(p, "the C verifier refused this program (it was not run): ")
        if prog.callbacks:           # decoded from the words the verifier accepted
            self._table = _prim.CallbackTable(prog, self._code, self._ints)
            self._ws = _prim.Workspace(self._table, self._vals, self._adj)
            self._ws_handle = ffi.new_handle(self._ws)
            p.callback_ctx = self._ws_handle
        self._p = p
        # the VM's entry points, read off the object on the fast paths
        self._vgf, self._fwf = lib.rt_value_and_grad, lib.rt_forward
        # What the tape reads its last compiled replay from (tape._replayed_by):
        # the program and its buffers, not this object, which holds the tape --
        # so no reference cycle keeps a dropped tape or CompiledTape alive.
        self._arena = _Arena(p, prog, keep)
        self._keep = keep
        self._init_plumbing(prog)
        self._init_fast_path(prog)

    def _check_kind(self, prog):
        """What this kind of program needs beyond _check_program (CompiledHessian)."""

    # ------------------------------------------------ inspection
    @property
    def code(self) -> NDArray[np.int32]:
        """A read-only view of this tape's own instruction words (n_instr x 6, int32)."""
        v = self._code.view()
        v.setflags(write=False)
        return v

    @property
    def tape(self) -> Tape:
        """The tape this program was compiled from."""
        return self._tape

    @property
    def program(self) -> Any:
        """The program as plain data (a copy: changing it changes nothing here)."""
        return _copy.copy(self._program)

    def __len__(self):
        return self._code.shape[0]

    def stats(self) -> dict[str, int]:
        """Counts of this program: tape instructions, instructions kept, program
        instructions, and how many of them call back into Python (primitives)."""
        out = dict(self._program.stats)
        out.setdefault("callback_instructions", len(self._program.callbacks))
        out["arena_values"] = self._program.n_vals
        return out

    def disassemble(self) -> str:
        """The program as text, one instruction a line: @out[n] = OP(@a, @b, @c)."""
        return _disassemble(self._program, self._code, self._ints)

    def __repr__(self):
        return (f"<CompiledTape {len(self)} instructions, {self._program.n_vals} arena values, "
                f"guards {'on' if self._guards else 'off'}>")

    # ------------------------------------------------ the Hessian program
    def _hessian_program(self):
        """The compiled HessianTape of this gradient tape, built on first use
        (sweeps.py: hessian() and hvp() sweep over its gradient)."""
        if self._program.out_shape != () or self._tape is None:
            raise OutputError("hessian() and hvp() need a scalar output: use a GradientTape "
                              "or rt.HessianTape(f, x)")
        if self._hess is None:
            # native=True here builds the Hessian program's native code too
            self._hess = CompiledHessian(HessianTape._from_tape(self._tape), guards=self._guards,
                                         native=self._native)
        return self._hess

    # ------------------------------------------------ copy and pickle
    def __copy__(self):
        return self.__deepcopy__({})

    def __deepcopy__(self, memo):
        # Recompile from a deep copy of the tape: new words, new arenas, nothing
        # pointing at this object's buffers.
        tape = _copy.deepcopy(self._tape, memo)
        new = CompiledTape(tape, guards=self._guards, n_grad=self._n_grad_inputs,
                           native=self._native)
        memo[id(self)] = new
        return new

    def __reduce__(self):
        # A native mode other than the default ("auto") is a fifth argument;
        # the receiving process finds or builds the native code itself.
        return (_rebuild, (self._program.to_state(), self._tape, self._guards,
                           self._n_grad_inputs)
                + ((self._native,) if self._native != "auto" else ()))


if _checked is not None:
    # ctape.value_and_gradient becomes a builtin method bound to ctape
    # (checked.c's Method): the plain call runs no Python frame (~0.1 us of a
    # 0.5 us replay).  Class access still gives the Python function (replay.py).
    CompiledTape.value_and_gradient = _checked.install(
        Replay.__dict__["value_and_gradient"], Replay._value_and_gradient_answer)


class CompiledHessian(HessianReplay, CompiledTape):
    """A HessianTape's program: it computes f's gradient (the reverse pass,
    recorded) as its output, with f's value beside it in the arena.  Its
    value_and_gradient/forward give f's value and gradient; hessian() and hvp()
    run tangent (or reverse) sweeps over the gradient.  rt.compile(htape) and
    CompiledTape(htape) build one; it is a CompiledTape in every other way."""


def _check_compilable(tape):
    """A clear error for everything rt.compile cannot take (instead of an
    AttributeError from deep inside the compiler)."""
    if isinstance(tape, CompiledTape):
        raise InputError("this is already a CompiledTape; use it as it is (copy.deepcopy(ctape) "
                         "gives an independent copy)")
    if tape is NULL_TAPE:
        raise InputError("rt.NULL_TAPE (the tape of untracked values) cannot be compiled; "
                         "record a tape with rt.GradientTape(f, x) or rt.Tape()")
    if not isinstance(tape, Tape):
        what = ("a function" if callable(tape) else f"a {type(tape).__name__}")
        raise InputError(f"rt.compile takes a finished tape, not {what}; record one with "
                         "rt.GradientTape(f, x) (or use rt.grad(f), which records and compiles)")
    if tape.recording:
        raise InputError("this tape is still recording; call tape.finish(output) before "
                         "rt.compile(tape)")
    if tape.output is None:
        raise OutputError("this tape has no output; call tape.finish(output) before rt.compile")
    if not tape.inputs:
        raise InputError("this tape has no inputs: there is nothing to replay at or "
                         "differentiate; register inputs with tape.track(x) before computing")


def _rebuild(state, tape, guards, n_grad, native="auto"):
    # Everything here may come from an untrusted pickle: check types before use.
    if not isinstance(state, dict) or not all(type(k) is str for k in state):
        _refuse("the program state is not a dict of named fields")
    try:
        prog = compiler.Program.from_state(state)
    except TypeError as e:
        _refuse(f"the program state has unknown or missing fields ({e})")
    if tape is not None and not isinstance(tape, Tape):
        _refuse(f"the tape is a {type(tape).__name__}, not a revtape Tape")
    # a HessianTape's program (its output is f's gradient, f's value beside
    # it at value_off) only with its HessianTape, a gradient program only
    # without one: forward() would otherwise answer the gradient for f
    if (type(prog.value_off) is not int
            or (prog.value_off != -1) != isinstance(tape, HessianTape)):
        _refuse("the program and its tape disagree on being a HessianTape's")
    if not isinstance(guards, bool):
        _refuse("guards is not a bool")
    if not (isinstance(native, bool) or native == "auto"):
        _refuse("native is not a bool or 'auto'")
    return CompiledTape(tape, guards=guards, n_grad=n_grad, _program=prog, _pickled=True,
                        native=native)


__all__ = ["CompiledTape", "CompiledHessian"]
