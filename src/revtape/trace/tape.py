"""Tape and NULL_TAPE: the recording, its nodes and its IR.

A tape is SSA: every node (input, constant or instruction result) has an
integer id and one value (``tape.values``).  An instruction is the tuple
``(op, out, args, params)`` -- op from the op table, out and args node ids,
params a dict of static arguments (axis, index arrays, ...).  Guards are
instructions with ``out == -1``.  ``tape.instructions``, ``tape.values``,
``tape.input_ids`` and ``tape.output_id`` are the IR that the compiler and
the transforms read.

The reference replay and the reverse pass are in replay.py (Tape inherits
its replay methods from replay.Replay), guards in guards.py, value checks in
values.py; their names stay importable from here.
"""

import math
import weakref
from typing import Any, Self

import numpy as np

from ..core import ops
from ..core.apitypes import ArrayLike
from ..errors import InputError, TapeFinishedError, TapeMixError
from .guards import _caller, describe_where
from . import tapestate
from .instrstore import Columns
from .replay import Replay
from .values import as_value, evaluate, shape_of

_GUARD = ops.OPS["guard"]
_NO_PARAMS = {}  # shared, never mutated
# A tape that reaches COMPACT_AT nodes moves its instruction tuples into
# columns (instrstore.py), then again every COMPACT_CHUNK nodes and at finish:
# ~45 bytes an instruction instead of ~190.  Shorter tapes keep their list of
# tuples, which the replays walk fastest (and the recording fast path pays
# one integer comparison).  Tests lower both to run everything on columns.
# Below 2^17 nodes (~15 MB of tuples) the list stays: the compiler's passes
# walk a list faster than columns, and the memory is small.
COMPACT_AT = 1 << 17
COMPACT_CHUNK = 1 << 15


class _Handles:
    """How a tape makes the user-facing handles of its nodes.

    The handle types (TrackedReal/TrackedArray) live in tracked.py, the layer
    above, which imports this module; this module never imports it back.
    tracked.py fills these in once at import with register_handles, so the
    dependence runs one way: tracked -> tape."""

    __slots__ = ("wrap", "constant", "stack")

    def __init__(self):
        self.wrap = self.constant = self.stack = self._missing

    @staticmethod
    def _missing(*args, **kwargs):
        raise RuntimeError("revtape.trace.tape is used without revtape.trace.tracked: "
                           "import revtape (which registers the tracked handle types)")


_HANDLES = _Handles()


def register_handles(**hooks):
    """Install the handle factory: wrap(tape, nid, value) -> handle of node nid,
    constant(value) -> an untracked (NULL_TAPE) handle (both from tracked.py),
    stack(list) -> one tracked array, a list output of finish (numpy_api.py)."""
    for name, fn in hooks.items():
        if name not in _Handles.__slots__:
            raise TypeError(f"register_handles: unknown hook {name!r}")
        setattr(_HANDLES, name, fn)


# Types of drawn integers (_draws.DrawnIndex): an operand of one becomes a
# tape input that rt.grad refills on every replay, not a constant.
DRAWN_TYPES = set()
drawn_getitem = None     # x[k] for a drawn index k (what tracked.getitem defers to)


def register_drawn_type(cls, getitem):
    """_draws.py, above this module, declares its drawn-index type here at import."""
    global drawn_getitem
    DRAWN_TYPES.add(cls)
    drawn_getitem = getitem


class _Nodes:
    """A tape's input (or output) handles, held weakly.

    A tracked value holds its tape; a tape holding its inputs and output
    strongly would make every tape a reference cycle, freed only by the
    cyclic collector (with gc disabled, never).  While a handle lives, the
    tape hands out that very object (`tape.inputs[0] is x`); once it has died
    the tape makes an equivalent one (same tape, same node) on demand."""

    __slots__ = ("_tape", "_ids", "_refs")

    def __init__(self, tape, items=()):
        self._tape = weakref.ref(tape)
        self._ids, self._refs = [], []
        for t in items:
            self.append(t)

    def append(self, t):
        self._ids.append(t._id)
        self._refs.append(weakref.ref(t))

    def __setitem__(self, k, t):
        self._ids[k] = t._id
        self._refs[k] = weakref.ref(t)

    def __len__(self):
        return len(self._ids)

    def _get(self, k):
        t = self._refs[k]()
        if t is None:
            tape = self._tape()
            nid = self._ids[k]
            t = _HANDLES.wrap(tape, nid, tape._vals[nid])
            self._refs[k] = weakref.ref(t)
        return t

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self._get(i) for i in range(len(self._ids))[k]]
        return self._get(range(len(self._ids))[k])

    def __iter__(self):
        for k in range(len(self._ids)):
            yield self._get(k)



# ---------------------------------------------------------------- the tape

class Tape(Replay):
    """A recording of one run of a function: inputs, instructions, output.

    ``Tape()`` starts recording; ``track`` registers inputs; ``finish(output)``
    stops recording.  Replays (``forward``, ``gradient``, ...) re-run the
    recorded instructions at new inputs without calling the function again.
    """

    _treedef = None               # a pytree input's structure (pytree.py); None otherwise
    _head = None                  # (pickles from before the columns have neither)
    _compact_next = COMPACT_AT

    def __init__(self) -> None:
        self._vals = []           # node id -> value (float or float64 ndarray)
        self._instrs = []         # (op, out, args, params)
        self._inputs = _Nodes(self)   # tracked input objects, in track() order (held weakly)
        self._outs = _Nodes(self)     # the output, held weakly: see _output
        self._recording = True
        self._scalar_consts = {}  # dedup of scalar constants while recording
        self._n_guards = 0
        self._active = None       # cache: node ids that depend on an input
        self._htape = None        # cache: the traced gradient tape for hessian()
        self._replayed_by = None  # the CompiledTape whose arena holds the last replay
        # while a long tape records: its older instructions in columns
        # (_instrs holds the newer tuples), compacted when len(_vals) passes
        # _compact_next -- see COMPACT_AT
        self._head = None
        self._compact_next = COMPACT_AT

    def _compact(self):
        """Move the recorded tuples into the columns (the recording paths call
        this when the node count passes _compact_next)."""
        if self._head is None:
            self._head = Columns()
        self._head.extend(self._instrs)
        self._compact_next = len(self._vals) + COMPACT_CHUNK

    def _new_tape(self):
        """An empty tape of this base class (the traced gradient tape of replay.py)."""
        return Tape()

    # ------------------------------------------------ the IR
    # What the compiler, the transforms and the Hessian construction read
    # (read-only by contract; only the tape and its tracked handles write).
    @property
    def instructions(self) -> Any:
        """The recorded instructions, in order: ``(op, out, args, params)`` with
        op a row of the op table, out and args node ids, params its static
        arguments; a guard has out == -1.  A list, or for a long tape an
        instrstore.Columns: a read-only sequence of the same tuples."""
        if self._head is not None:        # a long tape, still recording
            self._compact()
            return self._head
        return self._instrs

    @property
    def values(self) -> list[Any]:
        """Node id -> value (float or read-only float64 ndarray): inputs,
        constants and results as recorded or as the last reference replay left
        them (constants and shapes never change)."""
        return self._vals

    @property
    def input_ids(self) -> tuple[int, ...]:
        """The inputs' node ids, in track() order."""
        return tuple(self._inputs._ids)

    @property
    def output_id(self) -> int | None:
        """The output's node id (None before finish)."""
        outs = self._outs
        return outs._ids[0] if len(outs) else None

    # ------------------------------------------------ recording
    @property
    def recording(self) -> bool:
        """True until finish(): operations on this tape's tracked values are recorded."""
        return self._recording

    @property
    def inputs(self) -> list[Any]:
        """The tracked inputs, in track() order (rt.value of one is the last replay's)."""
        return list(self._inputs)

    @property
    def output(self) -> Any:
        """The tracked output given to finish() (None before); rt.value of it is the
        last replay's value."""
        return self._output

    @property
    def _output(self):
        outs = self._outs
        return outs[0] if len(outs) else None

    @_output.setter
    def _output(self, t):
        self._outs = _Nodes(self, () if t is None else (t,))

    def _check_recording(self):
        if not self._recording:
            raise TapeFinishedError(
                "this tape has finished recording; record a new tape (rt.Tape() or "
                "rt.GradientTape(f, x)) or replay this one with tape.forward/gradient(x)")

    def track(self, value: ArrayLike) -> Any:
        """Register an input: a float becomes a TrackedReal, an array a TrackedArray.

        Parameters
        ----------
        value : float or array_like
            The input's value at this recording; integers become float64.  The
            tape keeps a private copy.

        Returns
        -------
        TrackedReal or TrackedArray
            The tracked input: compute the output from it on this tape.

        Raises
        ------
        TapeFinishedError
            The tape has finished recording.
        InputError
            value is already tracked (pass ``rt.value(v)``).
        """
        self._check_recording()
        if getattr(value, "_is_tracked", False):
            raise InputError("track() takes a plain float or array, not a tracked value; "
                             "pass rt.value(v) to start a new tape from its value")
        v = as_value(value)
        if type(v) is not float:
            v = np.array(v)           # a private copy: later user writes can't reach the tape
            v.setflags(write=False)
        t = self._new_node(v)
        self._inputs.append(t)
        self._active = None
        return t

    def _new_node(self, value):
        nid = len(self._vals)
        self._vals.append(value)
        return _HANDLES.wrap(self, nid, value)

    def _const(self, v):
        """Node id of a constant operand (captured by value at record time)."""
        if getattr(v, "_is_tracked", False):       # a NULL_TAPE constant
            v = v._const
        elif type(v) in DRAWN_TYPES:               # integers rt.grad refills per call
            return v._rt_node(self)
        v = as_value(v)
        if type(v) is float:
            return self._scalar_const(v)
        nid = len(self._vals)
        self._vals.append(v)
        return nid

    def _scalar_const(self, v):
        """Node id of a scalar constant; equal constants share one node."""
        key = v if v != 0.0 else (0.0, math.copysign(1.0, v))   # keep -0.0 apart
        nid = self._scalar_consts.get(key)
        if nid is None:
            nid = len(self._vals)
            self._vals.append(v)
            self._scalar_consts[key] = nid
        return nid

    def _arg_id(self, a):
        if getattr(a, "_is_tracked", False):
            if a._id < 0:
                return self._const(a._const)
            if a._tape is not self:
                if a._tape._recording:
                    raise TapeMixError(
                        "an operation mixes values of two recording tapes; compute with "
                        "values of one tape only (use rt.value(v) to bring in a constant)")
                raise TapeFinishedError(
                    "a value of a finished tape was used in a new operation; record a new "
                    "tape, or use rt.value(v) to treat it as a constant")
            return a._id
        return self._const(a)

    def _record(self, op, args, params):
        self._check_recording()
        ids = tuple(self._arg_id(a) for a in args)
        vals = self._vals
        value = evaluate(op, [vals[i] for i in ids], params)
        nid = len(vals)
        vals.append(value)
        self._instrs.append((op, nid, ids, params or _NO_PARAMS))
        if nid >= self._compact_next:
            self._compact()
        return _HANDLES.wrap(self, nid, value)

    def _guard(self, pred, a, b, result):
        """Record that Python branched on `a <pred> b` being `result`."""
        if not self._recording:
            return
        ids = (self._arg_id(a), self._arg_id(b))
        self._instrs.append((_GUARD, -1, ids, {
            "pred": pred, "expected": bool(result), "where": _caller(),
            "index": self._n_guards}))
        self._n_guards += 1

    def copy_guard(self, a: Any, b: Any, params: dict[str, Any]) -> None:
        """Record a guard that another tape recorded (same predicate, expected
        outcome and source line) on this tape's values a and b: a traced
        replay of that tape keeps refusing the same branch changes."""
        self._check_recording()
        self._instrs.append((_GUARD, -1, (self._arg_id(a), self._arg_id(b)),
                             {**params, "index": self._n_guards}))
        self._n_guards += 1

    def finish(self, output: Any) -> Self:
        """Mark the output, stop recording and return the tape.

        Parameters
        ----------
        output : TrackedReal, TrackedArray, float, array_like, or a list/tuple of them
            The result computed on this tape (a list or tuple is stacked into
            one array output); a plain value is a constant output.

        Returns
        -------
        Tape
            This tape, finished: ready to replay or to ``rt.compile``.
        """
        self._check_recording()
        if isinstance(output, (list, tuple)):
            output = _HANDLES.stack(list(output))
        if getattr(output, "_is_tracked", False) and output._id >= 0:
            self._arg_id(output)       # raises for another tape's value
        else:
            output = self._new_node(self._vals[self._const(output)])
        self._output = output
        self._recording = False
        self._scalar_consts = {}
        if self._head is not None:
            self._compact()
            self._instrs, self._head = self._head, None
        return self

    # ------------------------------------------------ inspection
    def __len__(self):
        return len(self._instrs) + (len(self._head) if self._head is not None else 0)

    def __bool__(self):  # a tape with no instructions is still a tape
        return True

    def listing(self, limit: int | None = None) -> list[str]:
        """The instructions as text lines, ``%out = op(%a, %b, params)`` with the
        result's shape, guards with their source line; at most `limit` of them."""
        lines = []
        for k, (op, out, args, params) in enumerate(self.instructions):
            if limit is not None and k >= limit:
                lines.append(f"  ... {len(self) - limit} more")
                break
            a = ", ".join(f"%{i}" for i in args)
            extra = ""
            if op is _GUARD:
                sym = ops.GUARD_PREDICATES[params["pred"]][0]
                lines.append(f"  guard %{args[0]} {sym} %{args[1]} is {params['expected']}"
                             f"  # {describe_where(params['where'])}")
                continue
            shown = {k2: v for k2, v in params.items() if k2 not in ("idx",)}
            if shown:
                extra = ", " + ", ".join(f"{k2}={v}" for k2, v in shown.items())
            shape = shape_of(self._vals[out])
            lines.append(f"  %{out} = {op.name}({a}{extra})" + (f"  # {shape}" if shape else ""))
        return lines

    def stats(self) -> dict[str, int]:
        """Instruction counts: all, guards, and calls of custom primitives (each
        calls back into Python at every replay)."""
        pycalls = sum(1 for op, *_ in self.instructions if op.family == ops.PYCALL)
        return {"tape_instructions": len(self), "guards": self._n_guards,
                "callback_instructions": pycalls}

    def __repr__(self):
        state = "recording" if self._recording else "finished"
        head = (f"<{type(self).__name__} {state}: {len(self)} instructions, "
                f"inputs {[f'%{t._id}' for t in self._inputs]}"
                + (f", output %{self._output._id}" if self._output is not None else "") + ">")
        return "\n".join([head] + self.listing(limit=50))

    # ------------------------------------------------ copy and pickle
    def __getstate__(self):
        if self._replayed_by is not None:     # the copy reports what the original does
            self._pull_replay()
        state = dict(self.__dict__)
        # Another thread may pull its replay into this tape (replacing items of
        # _vals) while this state is copied, and the values pulled are views of
        # an arena the next replay overwrites: the state holds its own list and
        # copies of those views, so its digest describes its content.
        vals = state["_vals"] = list(self._vals)
        for t in (*self._inputs, *self._outs):
            v = vals[t._id]
            if isinstance(v, np.ndarray) and v.base is not None:
                vals[t._id] = v.copy()
        if self._head is not None:            # recording: one plain list in the state
            state["_instrs"], state["_head"] = list(self.instructions), None
        state["_inputs"] = list(self._inputs)   # strong in the state; weak again on load
        state["_outs"] = list(self._outs)
        state["_active"] = None
        state["_htape"] = None
        state["_replayed_by"] = None
        state.pop("_fast_marks", None)     # C cells of this process's bound calls
        state.pop("_func", None)   # the user's function is not needed to replay
        state["_digest"] = tapestate.digest(state)     # checked on load (tapestate.py)
        return state

    def __setstate__(self, state):
        tapestate.check(state)     # untrusted: VerificationError, never a broken tape
        state = dict(state)
        del state["_digest"]
        # caches and recording state are this process's: never the pickle's
        state.update(_active=None, _htape=None, _replayed_by=None, _head=None,
                     _scalar_consts={}, _compact_next=COMPACT_AT)
        inputs = state.pop("_inputs", ())
        outs = state.pop("_outs", ())
        if "_output" in state:                   # pickled before outputs were held weakly
            out = state.pop("_output")
            outs = () if out is None else (out,)
        self.__dict__.update(state)
        self._inputs = _Nodes(self, inputs)
        self._outs = _Nodes(self, outs)


class _NullTape(Tape):
    """The tape of untracked values.  There is one; copies and pickles keep it."""

    def __init__(self):
        super().__init__()
        self._recording = False

    def track(self, value):
        return _HANDLES.constant(value)

    def __repr__(self):
        return "NULL_TAPE"

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return "NULL_TAPE"


NULL_TAPE = _NullTape()
