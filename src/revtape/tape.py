"""Tape, NULL_TAPE, instruction records and the reference replay (Python/numpy).

A tape is SSA: every node (input, constant or instruction result) has an
integer id and one value in ``tape._vals``.  An instruction is the tuple
``(op, out, args, params)`` -- op from the op table, out and args node ids,
params a dict of static arguments (axis, index arrays, ...).  Guards are
instructions with ``out == -1``.

The reference replay re-runs those tuples with numpy.  It is the executable
specification that the compiled C replay is tested against, and (run with
tracked values instead of arrays) it records a tape's reverse pass onto a new
tape, which is how HessianTape gets second derivatives.
"""

import linecache
import math
import sys
import weakref

import numpy as np

from . import ops, pytree
from .errors import (BranchChanged, InputError, OutputError, RevtapeError,
                     TapeFinishedError, TapeMixError, UnsupportedError)

_GUARD = ops.OPS["guard"]
_NO_PARAMS = {}  # shared, never mutated


# tracked.py installs its constructor here at import (it imports this module,
# so this module cannot import it at the top).
_WRAP = None


# ---------------------------------------------------------------- value helpers

# Types of drawn integers (_draws.DrawnIndex): an operand of one becomes a
# tape input that rt.grad refills on every replay, not a constant.
DRAWN_TYPES = set()


def as_value(v):
    """A plain operand as a tape value: Python float for scalars, float64 ndarray else."""
    if type(v) is float:
        return v
    if isinstance(v, (int, float, np.floating, np.integer, bool, np.bool_)):
        return float(v)
    arr = np.array(v, dtype=None)
    if arr.dtype == object:
        raise UnsupportedError(
            "an object array (e.g. np.array of tracked values) cannot be recorded; "
            "build arrays of tracked values with np.stack or np.concatenate")
    if arr.dtype.kind not in "biuf":
        raise InputError(f"revtape records float64 math; got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if arr.ndim == 0:
        return float(arr)
    arr.setflags(write=False)
    return arr


def _norm(value):
    """An op's result as a tape value (np.float64 and 0-d arrays become floats)."""
    if type(value) is np.ndarray:
        if value.ndim == 0:
            return float(value)
        if value.dtype != np.float64:
            return value.astype(np.float64)
        return value
    return float(value)


def evaluate(op, vals, params):
    """Forward of one instruction on plain values."""
    sf = op.sfwd
    if sf is not None and not params and all(type(v) is float for v in vals):
        try:
            return sf(*vals)
        except (ArithmeticError, ValueError):
            pass
    return _norm(op.fwd(*vals, **params))


def shape_of(v):
    return () if type(v) is float else np.shape(v)


class _Where(tuple):
    """(filename, lineno) of a guard recorded in this process.  Only these name
    a source file revtape reads (to quote the line in BranchChanged): a
    location from a pickle arrives as a plain tuple, and a path named by a
    pickle is never opened.  Copies in this process stay trusted."""

    __slots__ = ()

    def __reduce__(self):
        return (tuple, (tuple(self),))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


def _caller():
    """(filename, lineno) of the first frame outside revtape: the user's source line."""
    f = sys._getframe(2)
    while f is not None and f.f_globals.get("__name__", "").startswith("revtape"):
        f = f.f_back
    if f is None:
        return _Where(("<unknown>", 0))
    return _Where((f.f_code.co_filename, f.f_lineno))


def describe_where(where):
    if type(where) is not _Where:            # from a pickle: shown, never opened
        if isinstance(where, tuple) and len(where) == 2:
            return f"{where[0]}:{where[1]}"
        return repr(where)
    filename, lineno = where
    line = linecache.getline(filename, lineno).strip()
    return f"{filename}:{lineno}" + (f": {line}" if line else "")


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
            t = _WRAP(tape, nid, tape._vals[nid])
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

class Tape:
    """A recording of one run of a function: inputs, instructions, output.

    ``Tape()`` starts recording; ``track`` registers inputs; ``finish(output)``
    stops recording.  Replays (``forward``, ``gradient``, ...) re-run the
    recorded instructions at new inputs without calling the function again.
    """

    _treedef = None               # a pytree input's structure (pytree.py); None otherwise

    def __init__(self):
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

    # ------------------------------------------------ recording
    @property
    def recording(self):
        return self._recording

    @property
    def inputs(self):
        return list(self._inputs)

    @property
    def output(self):
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

    def track(self, value):
        """Register an input: a float becomes a TrackedReal, an array a TrackedArray."""
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
        return _WRAP(self, nid, value)

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
        return _WRAP(self, nid, value)

    def _guard(self, pred, a, b, result):
        """Record that Python branched on `a <pred> b` being `result`."""
        if not self._recording:
            return
        ids = (self._arg_id(a), self._arg_id(b))
        self._instrs.append((_GUARD, -1, ids, {
            "pred": pred, "expected": bool(result), "where": _caller(),
            "index": self._n_guards}))
        self._n_guards += 1

    def finish(self, output):
        """Mark the output, stop recording and return the tape."""
        self._check_recording()
        if isinstance(output, (list, tuple)):
            from .tracked import stack
            output = stack(list(output))
        if getattr(output, "_is_tracked", False) and output._id >= 0:
            self._arg_id(output)       # raises for another tape's value
        else:
            output = self._new_node(self._vals[self._const(output)])
        self._output = output
        self._recording = False
        self._scalar_consts = {}
        return self

    # ------------------------------------------------ inspection
    def __len__(self):
        return len(self._instrs)

    def __bool__(self):  # a tape with no instructions is still a tape
        return True

    def listing(self, limit=None):
        lines = []
        for k, (op, out, args, params) in enumerate(self._instrs):
            if limit is not None and k >= limit:
                lines.append(f"  ... {len(self._instrs) - limit} more")
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

    def stats(self):
        """Instruction counts: all, guards, and calls of custom primitives (each
        calls back into Python at every replay)."""
        pycalls = sum(1 for op, *_ in self._instrs if op.family == ops.PYCALL)
        return {"tape_instructions": len(self._instrs), "guards": self._n_guards,
                "callback_instructions": pycalls}

    def __repr__(self):
        state = "recording" if self._recording else "finished"
        head = (f"<{type(self).__name__} {state}: {len(self._instrs)} instructions, "
                f"inputs {[f'%{t._id}' for t in self._inputs]}"
                + (f", output %{self._output._id}" if self._output is not None else "") + ">")
        return "\n".join([head] + self.listing(limit=50))

    # ------------------------------------------------ replay plumbing
    def _check_finished(self):
        if self._recording:
            raise RevtapeError("this tape is still recording; call tape.finish(output) first")

    def _pull_replay(self):
        """Bring the last compiled replay's input and output values into this tape,
        so that rt.value(tape.output) and rt.value(tape.inputs[i]) report it (as
        after a reference replay).  Done lazily, when a value is read, so that
        the compiled hot path only marks the tape.  The arena always holds one
        complete replay (the VM puts the previous one back when a guard
        refuses a replay) and is read while no other replay runs."""
        arena = self._replayed_by
        if arena is None:                         # another thread pulled it meanwhile
            return
        x, y, prog = arena.read_replay()
        if self._replayed_by is arena:
            self._replayed_by = None
        for t, (off, shape, is_float) in zip(self._inputs, prog.inputs):
            self._vals[t._id] = (float(x[off]) if is_float else
                                 x[off:off + math.prod(shape)].reshape(shape))
        self._vals[self._output._id] = float(y[0]) if prog.out_shape == () else y.reshape(
            prog.out_shape)

    def _set_inputs(self, x):
        """Validate a replay input against the recorded inputs and store it."""
        n = len(self._inputs)
        if self._treedef is not None:
            xs = tuple(pytree.leaves_of(self._treedef, x))
        elif n == 1:
            xs = (x,)
        else:
            if not isinstance(x, (tuple, list)) or len(x) != n:
                raise InputError(f"this tape has {n} inputs: pass a tuple of {n} values")
            xs = tuple(x)
        new = []
        for t, xi in zip(self._inputs, xs):
            rec = self._vals[t._id]
            new.append(check_input(xi, shape_of(rec), float_input=type(rec) is float))
        for t, v in zip(self._inputs, new):
            self._vals[t._id] = v
        self._replayed_by = None

    def _run_forward(self):
        vals = self._vals
        for op, out, args, params in self._instrs:
            if op is _GUARD:
                _check_guard(params, vals[args[0]], vals[args[1]])
                continue
            vals[out] = evaluate(op, [vals[a] for a in args], params)

    def _active_ids(self):
        if self._active is None:
            active = {t._id for t in self._inputs}
            for op, out, args, params in self._instrs:
                if op.diff and any(a in active for a in args):
                    active.add(out)
            self._active = active
        return self._active

    def _reverse(self, seed):
        adj = backprop(self._instrs, self._vals, self._output._id, seed, self._active_ids())
        return [adj.get(t._id) for t in self._inputs]

    def _grads_out(self, grads, out, tree=True):
        """Input-shaped gradients, written into out= when given (tree=False: a
        tuple of leaves even for a pytree input)."""
        res = []
        for t, g in zip(self._inputs, grads):
            rec = self._vals[t._id]
            if g is None:
                g = 0.0 if type(rec) is float else np.zeros(np.shape(rec))
            if type(rec) is float:
                res.append(float(g))
            else:
                res.append(np.array(np.broadcast_to(g, np.shape(rec)), dtype=np.float64))
        if self._treedef is not None and tree:
            return self._tree_out(res, out, [self._vals[t._id] for t in self._inputs])
        if out is not None:
            write_out(out, res, [self._vals[t._id] for t in self._inputs])
            return out
        return res[0] if len(res) == 1 else tuple(res)

    def _out_leaves(self, out):
        if self._treedef is None:
            return out
        leaves = pytree.leaves_of(self._treedef, out, "out=")
        return leaves[0] if len(leaves) == 1 else tuple(leaves)

    def _tree_out(self, res, out, templates):
        """Results per leaf in the input's pytree structure (written into a tree out=)."""
        if out is None:
            return pytree.unflatten(self._treedef, res)
        leaves = pytree.leaves_of(self._treedef, out, "out=")
        write_out(leaves[0] if len(leaves) == 1 else tuple(leaves), res, templates)
        return out

    def _scalar_output(self):
        if self._output is None:
            raise OutputError("the tape has no output; call tape.finish(output)")
        if type(self._vals[self._output._id]) is not float:
            raise OutputError(
                f"a gradient needs a scalar output, but this tape's output has shape "
                f"{shape_of(self._vals[self._output._id])}; use jacobian() instead")

    # ------------------------------------------------ reference replay
    def _replay(self, x):
        self._check_finished()
        if self._replayed_by is not None:
            self._pull_replay()
        # A replay that a guard refuses stops midway: put the previous
        # replay's values back, so that rt.value never mixes two replays.
        saved = list(self._vals)
        self._set_inputs(x)
        try:
            self._run_forward()
        except BaseException:
            self._vals[:] = saved
            raise
        out = self._vals[self._output._id]
        return out if type(out) is float else np.array(out)

    def forward(self, x):
        """Replay at x; returns the output value."""
        return self._replay(x)

    def value_and_gradient(self, x, out=None):
        """Replay at x; returns (value, gradient shaped like x)."""
        self._check_finished()
        self._scalar_output()
        if out is not None:
            check_out(self._out_leaves(out), [self._vals[t._id] for t in self._inputs])
        value = self._replay(x)
        return value, self._grads_out(self._reverse(1.0), out)

    def gradient(self, x, out=None):
        """Replay at x; returns the gradient of the scalar output, shaped like x."""
        return self.value_and_gradient(x, out)[1]

    def jacobian(self, x, out=None):
        """Replay at x; returns d output / d input with shape output.shape + input.shape."""
        self._check_finished()
        if out is not None:
            check_out(self._out_leaves(out), self._jacobian_templates())
        y = self._replay(x)
        yshape = shape_of(y)
        rows = []
        for k in range(int(np.prod(yshape, dtype=np.int64))):
            seed = np.zeros(int(np.prod(yshape, dtype=np.int64)))
            seed[k] = 1.0
            seed = float(seed[0]) if yshape == () else seed.reshape(yshape)
            rows.append(self._grads_out(self._reverse(seed), None, tree=False))
        res = []
        for i, t in enumerate(self._inputs):
            xshape = shape_of(self._vals[t._id])
            parts = [r if len(self._inputs) == 1 else r[i] for r in rows]
            res.append(np.array(parts, dtype=np.float64).reshape(tuple(yshape) + tuple(xshape)))
        if self._treedef is not None:
            return self._tree_out(res, out, self._jacobian_templates())
        if out is not None:
            write_out(out, res, self._jacobian_templates())
            return out
        return res[0] if len(res) == 1 else tuple(res)

    def _jacobian_templates(self):
        yshape = shape_of(self._vals[self._output._id])
        return [np.empty(tuple(yshape) + shape_of(self._vals[t._id])) for t in self._inputs]

    def hessian(self, x, out=None):
        """Replay at x; returns the Hessian of the scalar output (input.shape * 2)."""
        self._check_finished()
        self._scalar_output()
        if len(self._inputs) != 1:
            raise UnsupportedError("hessian() supports tapes with one input")
        return self._gradient_tape().jacobian(x, out)

    def hvp(self, x, v):
        """Hessian-vector product at x: one reverse sweep of the gradient tape seeded with v."""
        self._check_finished()
        self._scalar_output()
        return self._gradient_tape().vjp(x, v)

    def vjp(self, x, w):
        """w^T J at x for an array output (a reverse sweep seeded with w)."""
        self._check_finished()
        y = self._replay(x)
        seed = check_input(w, shape_of(y), float_input=type(y) is float)
        return self._grads_out(self._reverse(seed), None)

    def _gradient_tape(self):
        if self._htape is None:
            self._htape = trace_gradient(self)
        return self._htape

    # ------------------------------------------------ copy and pickle
    def __getstate__(self):
        if self._replayed_by is not None:     # the copy reports what the original does
            self._pull_replay()
        state = dict(self.__dict__)
        state["_inputs"] = list(self._inputs)   # strong in the state; weak again on load
        state["_outs"] = list(self._outs)
        state["_active"] = None
        state["_htape"] = None
        state["_replayed_by"] = None
        state.pop("_func", None)   # the user's function is not needed to replay
        return state

    def __setstate__(self, state):
        state = dict(state)
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
        from .tracked import constant
        return constant(value)

    def __repr__(self):
        return "NULL_TAPE"

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return "NULL_TAPE"


NULL_TAPE = _NullTape()


# ---------------------------------------------------------------- guards

def _check_guard(params, x, y):
    seen = bool(ops.GUARD_PREDICATES[params["pred"]][1](x, y))
    if seen != params["expected"]:
        raise branch_changed(params, x, y)


def branch_changed(params, x, y):
    sym = ops.GUARD_PREDICATES[params["pred"]][0]
    # guards that revtape records itself (sort order, argmax) say what they guard
    what = f" ({params['what']})" if "what" in params else ""
    return BranchChanged(
        f"the replay took another branch than the recording{what}: `{x!r} {sym} {y!r}` is now "
        f"{not params['expected']} (it was {params['expected']} when recorded) at "
        f"{describe_where(params['where'])}. Record a new tape at this input, use rt.grad(f) "
        f"(it re-records), or write the branch with np.where (compile(tape, guards=False) "
        f"replays the recorded branch)", guard=params["index"], where=params["where"],
        operands=(x, y))


# ---------------------------------------------------------------- reverse pass

def vjp_of(op, i, g, ans, argvals, params):
    """The contribution of instruction op's output adjoint g to argument i."""
    if op.partials:
        d = op.partials[i](ans, *argvals)
        if type(d) is float:
            if d == 1.0:
                return g
            if d == -1.0:
                return ops.P.neg(g)
        return ops.P.azmul(g, d)
    return op.vjp(i, g, ans, *argvals, **params)


def backprop(instrs, vals, out_id, seed, active):
    """Reverse sweep over instrs; returns {node id: adjoint} for active nodes.

    Works on plain values (reference replay) and on tracked values (recording
    the reverse pass onto another tape).  Unbroadcasting happens here, once
    for every op.
    """
    adj = {out_id: seed}
    add = ops.P.add
    # Scalar reads x[i] of one array, deferred until x's adjoint is complete
    # (at x's producer, or at the end for an input) and then added as ONE
    # scatter: a scalar loop over x would otherwise add one dense x-sized
    # vector per read, O(n) work each (and O(n^2) in a Hessian's program).
    reads = {}
    for op, out, args, params in reversed(instrs):
        if out < 0 or not op.diff:
            continue
        g = adj.pop(out, None)
        if out in reads:
            g = _add_reads(reads.pop(out), g, shape_of(vals[out]))
        if g is None:
            continue
        if op is _ITEM:
            if args[0] in active:
                idx, gs = reads.setdefault(args[0], ([], []))
                idx.append(params["i"])
                gs.append(g)
            continue
        argvals = [vals[a] for a in args]
        ans = vals[out]
        for i, a in enumerate(args):
            if a not in active:
                continue
            gi = ops.unbroadcast(vjp_of(op, i, g, ans, argvals, params), shape_of(argvals[i]))
            if a in reads:                  # they came first: keep the order of the sum
                adj[a] = _add_reads(reads.pop(a), adj.get(a), shape_of(argvals[i]))
            prev = adj.get(a)
            adj[a] = gi if prev is None else add(prev, gi)
    for node, node_reads in reads.items():
        adj[node] = _add_reads(node_reads, adj.get(node), shape_of(vals[node]))
    return adj


_ITEM = ops.OPS["item"]


def _add_reads(node_reads, prev, shape):
    """prev + the adjoints of the scalar reads x[i] of a node shaped `shape`,
    added in the order they were read back -- the order in which the C
    reverse sweep accumulates them."""
    P = ops.P
    idx, gs = node_reads
    if not getattr(prev, "_is_tracked", False) and not any(
            getattr(g, "_is_tracked", False) for g in gs):
        # plain numbers: np.add.at adds one by one, so each element is
        # ((prev + g1) + g2) + ... to the last bit
        out = np.zeros(shape) if prev is None else np.array(prev, dtype=np.float64)
        with np.errstate(all="ignore"):         # inf + -inf is a value here
            np.add.at(out.reshape(-1), idx, gs)
        return out[()]
    if len(gs) == 1:
        g = P.scatter_add(gs[0], idx=np.array(idx[0]), shape=shape)
    else:
        pieces = [P.reshape(gi, shape=(1,)) for gi in gs]
        g = P.scatter_add(P.concat(*pieces, axis=0), idx=np.array(idx), shape=shape)
    return g if prev is None else P.add(prev, g)


def trace_gradient(tape):
    """Record tape's forward and reverse passes onto a new tape: a tape of the gradient.

    Its output is the gradient (an array for an array input); replaying it
    gives gradients, and its Jacobian is the Hessian.  The original's guards
    are recorded again, so the gradient tape refuses the same branch changes.
    """
    from .api import HessianTape
    return HessianTape._from_tape(tape)


# ---------------------------------------------------------------- input and out= checks

def check_input(x, shape, float_input=False):
    """x as a float64 value of the recorded shape, or an InputError that says why."""
    if getattr(x, "_is_tracked", False):
        raise InputError("replay inputs are plain floats or arrays, not tracked values")
    try:
        arr = np.asarray(x)
    except Exception as e:  # e.g. ragged lists
        raise InputError(f"replay input could not be read as an array: {e}") from None
    if arr.dtype.kind not in "biuf":
        raise InputError(f"replay input must be real numbers, got dtype {arr.dtype}")
    if tuple(arr.shape) != tuple(shape):
        raise InputError(f"replay input has shape {arr.shape}, but the tape was recorded "
                         f"with shape {tuple(shape)}; record a new tape for this shape")
    # nan and +-inf are values: they replay as numpy computes them (optimizers
    # and samplers hand such points over on purpose and expect nan/-inf back).
    if float_input or arr.ndim == 0:
        return float(arr)
    out = np.array(arr, dtype=np.float64)
    out.setflags(write=False)
    return out


def check_out(out, templates):
    """Validate an out= argument (an array, or a tuple for several inputs)."""
    if len(templates) == 1:
        outs = (out,)
    else:
        if not isinstance(out, (tuple, list)) or len(out) != len(templates):
            raise InputError(f"out= must be a tuple of {len(templates)} arrays, one per input")
        outs = tuple(out)
    for o, t in zip(outs, templates):
        shape = shape_of(t)
        if not isinstance(o, np.ndarray):
            raise InputError("out= must be a float64 numpy array "
                             f"of shape {tuple(shape)}" + (" (scalar inputs have no out=)"
                                                           if shape == () else ""))
        if o.dtype != np.float64 or o.shape != tuple(shape):
            raise InputError(f"out= must be a float64 array of shape {tuple(shape)}, "
                             f"got {o.dtype} {o.shape}")
        if not o.flags.writeable:
            raise InputError("out= must be writeable")
    return outs


def write_out(out, results, templates):
    outs = check_out(out, templates)
    for o, r in zip(outs, results):
        o[...] = r
