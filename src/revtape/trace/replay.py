"""The reference replay (Python/numpy) and the reverse pass.

The reference replay re-runs a tape's instructions with numpy: the
executable specification the compiled C replay is tested against.  Run on
tracked values instead of arrays, ``backprop`` records a tape's reverse pass
onto a new tape (``record_gradient``), which is how Hessians get second
derivatives.  ``Replay`` is the part of Tape that replays; tape.py holds the
recording.
"""

import math
from typing import Any, overload

import numpy as np

from ..core import ops, pytree
from ..core.apitypes import FloatArray, NDArray, PyTree
from ..errors import InputError, OutputError, RevtapeError, UnsupportedError
from .guards import _check_guard
from .values import check_input, check_out, evaluate, shape_of, write_out

_GUARD = ops.OPS["guard"]


class Replay:
    """Tape's replay methods (forward, gradient, jacobian, hessian, hvp, vjp)
    and their plumbing; mixed into Tape."""

    # runtime/arena.py's _FastMarks once a one-call ctape.bind() exists for this tape:
    # then _replayed_by stays that object, which knows the last replay.
    _fast_marks = None

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
        got = arena.read_replay()
        if got is None:                           # _FastMarks: no compiled replay since
            return
        x, y, prog = got
        if self._replayed_by is arena and self._fast_marks is None:
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
        if self._fast_marks is None:
            self._replayed_by = None
        else:
            self._fast_marks.clear()

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

    def forward(self, x: PyTree) -> Any:
        """Replay at x; returns the output value (a float, or an array for a
        Jacobian tape)."""
        return self._replay(x)

    @overload
    def value_and_gradient(self, x: NDArray[Any],
                           out: FloatArray | None = None) -> tuple[float, FloatArray]: ...
    @overload
    def value_and_gradient(self, x: float, out: None = None) -> tuple[float, float]: ...
    @overload
    def value_and_gradient(self, x: PyTree, out: PyTree = None) -> tuple[float, Any]: ...

    def value_and_gradient(self, x: PyTree, out: PyTree = None) -> tuple[float, Any]:
        """Replay at x; returns (value, gradient shaped like x).

        Parameters
        ----------
        x : float, ndarray, tuple or pytree
            The input, structured, shaped and typed as the recorded one.
        out : ndarray (or the structure of x), optional
            Where to write the gradient (float64, shaped like x); returned.

        Returns
        -------
        (float, gradient)
            The scalar output's value and its gradient, structured like x.

        Raises
        ------
        InputError
            x or out has the wrong structure, shape or dtype.
        OutputError
            The output is not a scalar (use ``jacobian``).
        BranchChanged
            x takes another branch of a recorded comparison.
        """
        self._check_finished()
        self._scalar_output()
        if out is not None:
            check_out(self._out_leaves(out), [self._vals[t._id] for t in self._inputs])
        value = self._replay(x)
        return value, self._grads_out(self._reverse(1.0), out)

    @overload
    def gradient(self, x: NDArray[Any], out: FloatArray | None = None) -> FloatArray: ...
    @overload
    def gradient(self, x: float, out: None = None) -> float: ...
    @overload
    def gradient(self, x: PyTree, out: PyTree = None) -> Any: ...

    def gradient(self, x: PyTree, out: PyTree = None) -> Any:
        """Replay at x; returns the gradient of the scalar output, shaped like x
        (``value_and_gradient(x, out)[1]``: the same parameters)."""
        return self.value_and_gradient(x, out)[1]

    def jacobian(self, x: PyTree, out: PyTree = None) -> Any:
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

    def hessian(self, x: PyTree, out: PyTree = None) -> Any:
        """Replay at x; returns the Hessian of the scalar output (input.shape * 2)."""
        self._check_finished()
        self._scalar_output()
        if len(self._inputs) != 1:
            raise UnsupportedError("hessian() supports tapes with one input")
        return self._gradient_tape().jacobian(x, out)

    def hvp(self, x: PyTree, v: PyTree) -> Any:
        """Hessian-vector product at x: one reverse sweep of the gradient tape seeded with v."""
        self._check_finished()
        self._scalar_output()
        return self._gradient_tape().vjp(x, v)

    def vjp(self, x: PyTree, w: PyTree) -> Any:
        """w^T J at x for an array output (a reverse sweep seeded with w)."""
        self._check_finished()
        y = self._replay(x)
        seed = check_input(w, shape_of(y), float_input=type(y) is float)
        return self._grads_out(self._reverse(seed), None)

    def _gradient_tape(self):
        if self._htape is None:
            self._htape = trace_gradient(self)
        return self._htape



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
    for every op.  With out_id None, seed is a dict {node id: seed}: several
    outputs swept at once (a pytree output's leaves).
    """
    adj = dict(seed) if out_id is None else {out_id: seed}
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
    (hessian.HessianTape is such a tape with f's value and Hessian methods.)
    """
    gtape = tape._new_tape()
    record_gradient(gtape, tape)
    return gtape


def record_gradient(dst, src):
    """Record src's forward and reverse passes onto the empty tape dst, whose
    output becomes src's gradient; returns the node id of f's value on dst."""
    src._check_finished()
    src._scalar_output()
    if len(src._inputs) != 1:
        raise UnsupportedError(
            "this tape has several inputs; for Hessians of a function of a tuple or a "
            "pytree record rt.HessianTape(f, x) or use rt.hessian(f) / rt.hvp(f): they lay "
            "the inputs out as one vector")
    xin = src._inputs[0]
    hx = dst.track(src._vals[xin._id])
    env = list(src._vals)         # constants stay plain; computed nodes become tracked
    env[xin._id] = hx
    for op, out, args, params in src._instrs:
        if op is _GUARD:
            a, b = env[args[0]], env[args[1]]
            if getattr(a, "_is_tracked", False) or getattr(b, "_is_tracked", False):
                dst.copy_guard(a, b, params)
            continue
        env[out] = ops.apply(op, [env[a] for a in args], params)
    adj = backprop(src._instrs, env, src._output._id, 1.0, src._active_ids())
    g = adj.get(xin._id)
    if g is None:
        g = 0.0 if type(src._vals[xin._id]) is float else np.zeros(np.shape(src._vals[xin._id]))
    elif ops.shape_of(g) != ops.shape_of(src._vals[xin._id]):
        g = ops.broadcast_to(g, ops.shape_of(src._vals[xin._id]))
    value_id = dst._arg_id(env[src._output._id])
    dst.finish(g)
    return value_id
