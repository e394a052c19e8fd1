"""Custom primitives (autograd's shape): @rt.primitive, rt.defvjp, rt.defjvp,
and rt.stop_gradient.

A primitive is a Python function that tracing does not look into: called on
tracked values it runs on their plain values and records ONE instruction
(the op table's ``pycall`` row), whose derivative comes from the rules the
user registers::

    @rt.primitive
    def logsumexp(x):
        m = np.max(x)
        return m + np.log(np.sum(np.exp(x - m)))

    rt.defvjp(logsumexp, lambda ans, x: lambda g: g * np.exp(x - ans))

Every replay -- the reference replay and the compiled VM, which calls back
into Python for that instruction only -- calls the function again on the
replay's values, and calls the VJP maker with this replay's ``ans`` and
arguments.  Nothing computed at recording time is reused (ReverseDiff #187:
a pullback closed over the recording's values gives wrong gradients after
replay).

Rules are looked up when they run, so redefining one changes later replays;
defvjp/defjvp also bump the op-table epoch that rt.grad's caches guard on,
so a cached rt.grad re-records after a redefinition (Zygote #22).
"""

import importlib

import threading
from typing import Any, Callable, Iterable, TypeVar

import numpy as np

from . import ops
from .apitypes import FunctionT
from ..errors import RevtapeError, UnsupportedError

_PYCALL = ops.OPS["pycall"]
_MISSING = object()


class Primitive:
    """A function made opaque to tracing by @rt.primitive."""

    def __init__(self, fun):
        self.fun = fun
        self._vjps = {}       # argnum -> vjp maker (None: not differentiable)
        self._jvps = {}       # argnum -> jvp function (None: not differentiable)
        self.__name__ = getattr(fun, "__name__", "primitive")
        self.__qualname__ = getattr(fun, "__qualname__", self.__name__)
        self.__module__ = getattr(fun, "__module__", None)
        self.__doc__ = getattr(fun, "__doc__", None)
        self.__wrapped__ = fun

    def __repr__(self):
        return f"<rt.primitive {self._name}>"

    @property
    def _name(self):
        mod = self.__module__
        return f"{mod}.{self.__qualname__}" if mod and mod != "__main__" else self.__qualname__

    def __call__(self, *args, **kwargs):
        tape = None
        for a in args:
            if getattr(a, "_is_tracked", False) and a._id >= 0:
                tape = a._tape
                break
        for k, v in kwargs.items():
            if _holds_tracked(v):
                raise UnsupportedError(
                    f"primitive {self._name}: keyword argument {k!r} holds a tracked value; "
                    "pass differentiated values positionally (keywords are static, as in autograd)")
        if tape is None:
            return self.fun(*[_plain_const(a, self) for a in args], **kwargs)
        template, argpos, dyn = [], [], []
        for i, a in enumerate(args):
            if getattr(a, "_is_tracked", False) and a._id >= 0:
                template.append(None)
                argpos.append(i)
                dyn.append(a)
            elif type(a) is np.ndarray:
                # captured by value, like every constant a tape records: later
                # writes to the caller's array do not reach the replays
                template.append(np.array(a))
            else:
                template.append(_plain_const(a, self))
        site = CallSite(self, template, argpos, kwargs)
        site.arg_shapes = [tuple(np.shape(a.value)) for a in dyn]
        out = tape._record(_PYCALL, dyn, {"site": site})
        site.out_shape = np.shape(tape.values[out._id])
        return out

    # Primitives are named module-level objects: copies are the object itself,
    # pickles refer to it by qualified name (the receiving process imports it).
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        mod, qual = self.__module__, self.__qualname__
        try:
            found = _lookup(mod, qual)
        except Exception:
            found = None
        if found is not self:
            raise UnsupportedError(
                f"primitive {self._name} cannot be pickled: it is found by its qualified name "
                f"({mod}.{qual}) in the receiving process, and that name does not lead to it "
                "here; define primitives at module level (not in a function or a lambda)")
        return (_lookup, (mod, qual))


def _lookup(module, qualname):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _holds_tracked(v):
    if getattr(v, "_is_tracked", False):
        return v._id >= 0
    if isinstance(v, (list, tuple)):
        return any(_holds_tracked(e) for e in v)
    if isinstance(v, dict):
        return any(_holds_tracked(e) for e in v.values())
    return False


def _plain_const(a, prim):
    """A non-recorded argument: NULL_TAPE constants become their value."""
    if getattr(a, "_is_tracked", False):
        return a._const if type(a._const) is float else np.array(a._const)
    if isinstance(a, (list, tuple, dict)) and _holds_tracked(a):
        raise UnsupportedError(
            f"primitive {prim._name}: an argument is a container holding tracked values; "
            "pass each tracked value as its own positional argument (as in autograd)")
    return a


def primitive(fun: FunctionT) -> FunctionT:
    """Make fun opaque to tracing: on tracked inputs it runs on plain values and
    records one instruction; give it derivatives with rt.defvjp / rt.defjvp.

    Parameters
    ----------
    fun : callable
        A function of floats and arrays returning a float or an array (numpy,
        scipy or any Python code: it is never traced).

    Returns
    -------
    callable
        fun as a primitive, called as fun is: plain arguments run fun itself;
        tracked ones record one instruction that calls back into fun at every
        replay.  Already a primitive: returned as it is.

    Raises
    ------
    TypeError
        fun is not callable.

    Examples
    --------
    >>> import numpy as np, revtape as rt
    >>> @rt.primitive
    ... def logsumexp(x):
    ...     m = np.max(x)
    ...     return m + np.log(np.sum(np.exp(x - m)))
    >>> rt.defvjp(logsumexp, lambda ans, x: lambda g: g * np.exp(x - ans))
    >>> rt.grad(logsumexp)(np.zeros(2))
    array([0.5, 0.5])
    """
    if isinstance(fun, Primitive):
        return fun
    if not callable(fun):
        raise TypeError("rt.primitive takes a function")
    return Primitive(fun)


def _check_primitive(fun, who):
    if not isinstance(fun, Primitive):
        raise UnsupportedError(f"rt.{who} needs a function made with @rt.primitive; got {fun!r}")


def _rules(makers, argnums, who):
    if argnums is None:
        argnums = range(len(makers))
    argnums = list(argnums)
    if len(argnums) != len(makers):
        raise ValueError(f"rt.{who}: {len(makers)} rules for argnums {argnums}")
    for m in makers:
        if m is not None and not callable(m):
            raise TypeError(f"rt.{who}: each rule is a function or None, got {m!r}")
    return dict(zip((int(a) for a in argnums), makers))


def defvjp(fun: Callable[..., Any], *vjpmakers: Callable[..., Any] | None,
           argnums: Iterable[int] | None = None) -> None:
    """Reverse-mode rules, autograd's signature: for argument i,
    ``vjpmaker(ans, *args, **kwargs)`` returns ``lambda g: <g times d ans / d args[i]>``
    (None: that argument is not differentiable, its gradient is zero).

    Parameters
    ----------
    fun : callable
        A function made with ``@rt.primitive``.
    *vjpmakers : callable or None
        One rule per argument (in argnums' order), each
        ``vjpmaker(ans, *args, **kwargs) -> (g -> contribution to args[i]'s
        gradient)``; written with numpy it may itself be differentiated
        (Hessians), as in autograd.
    argnums : iterable of int, optional
        Which arguments the rules are for; default 0, 1, ... in order.

    Raises
    ------
    UnsupportedError
        fun was not made with ``@rt.primitive``.
    ValueError
        The number of rules and of argnums differ.

    Notes
    -----
    Cached ``rt.grad`` programs that use fun re-record on their next call.
    """
    _check_primitive(fun, "defvjp")
    new = dict(fun._vjps)
    new.update(_rules(vjpmakers, argnums, "defvjp"))
    fun._vjps = new
    ops.EPOCH[0] += 1        # cached rt.grad transforms re-record (see module doc)


def defjvp(fun: Callable[..., Any], *jvpfuns: Callable[..., Any] | None,
           argnums: Iterable[int] | None = None) -> None:
    """Forward-mode rules, autograd's signature: for argument i,
    ``jvpfun(g, ans, *args, **kwargs)`` is the output's tangent from a tangent g of
    args[i] (None: not differentiable).

    Parameters
    ----------
    fun : callable
        A function made with ``@rt.primitive``.
    *jvpfuns : callable or None
        One rule per argument (in argnums' order), each
        ``jvpfun(g, ans, *args, **kwargs) -> tangent of ans``.
    argnums : iterable of int, optional
        Which arguments the rules are for; default 0, 1, ... in order.

    Raises
    ------
    UnsupportedError
        fun was not made with ``@rt.primitive``.
    """
    _check_primitive(fun, "defjvp")
    new = dict(fun._jvps)
    new.update(_rules(jvpfuns, argnums, "defjvp"))
    fun._jvps = new
    ops.EPOCH[0] += 1


class CallSite:
    """One recorded call of a primitive: its static arguments (template, with
    None where a tracked operand goes), the positions of the tracked operands
    and the keyword arguments.  Shared by the tape instruction and the
    compiled program's callback table."""

    def __init__(self, prim, template, argpos, kwargs):
        self.prim = prim
        self.template = template
        self.argpos = tuple(argpos)
        self.kwargs = dict(kwargs)
        self.arg_shapes = None      # shape of each tracked operand (() is a float)
        self.out_shape = None       # set once the recording call has returned

    def __repr__(self):
        return f"{self.prim._name}"

    def args(self, vals):
        args = list(self.template)
        for p, v in zip(self.argpos, vals):
            # copies: user code may keep or modify what it is given, and the
            # values it gets live in a tape or an arena that the next replay reuses
            args[p] = v if type(v) is float or getattr(v, "_is_tracked", False) else np.array(v)
        return args

    def forward(self, vals):
        return self._as_value(self.prim.fun(*self.args(vals), **self.kwargs), "returned",
                              self.out_shape)

    def _as_value(self, r, what, want):
        """r as a tape value (float, or float64 array of shape `want` if given)."""
        tr = type(r)
        if tr is float and (want is None or want == ()):
            return r                                  # the common scalar case, no numpy
        if tr is np.ndarray and r.dtype == np.float64 and (want is None or r.shape == want):
            return float(r) if r.ndim == 0 else r
        name = self.prim._name
        if type(what) is int:
            what = f"'s VJP for argument {what} returned"
        if getattr(r, "_is_tracked", False):
            raise UnsupportedError(f"primitive {name} {what} a tracked value; a primitive "
                                   "computes on plain values")
        try:
            arr = np.asarray(r, dtype=np.float64)
        except (TypeError, ValueError):
            raise UnsupportedError(f"primitive {name} {what} {type(r).__name__}; it must be a "
                                   "float or a float array") from None
        if want is not None and arr.shape != tuple(want):
            raise UnsupportedError(f"primitive {name} {what} shape {arr.shape} where shape "
                                   f"{tuple(want)} was expected (as when it was recorded)")
        return float(arr) if arr.ndim == 0 else arr

    def vjp(self, i, g, ans, vals):
        """d(out)/d(operand i) applied to g; on plain values, or on tracked ones
        when a reverse pass is being recorded (Hessians)."""
        p = self.argpos[i]
        rule = self.prim._vjps.get(p, _MISSING)
        shape = self.arg_shapes[i]
        if rule is None:
            return 0.0 if shape == () else np.zeros(shape)
        if rule is _MISSING:
            raise UnsupportedError(f"primitive {self.prim._name} has no VJP for argument {p}; "
                                   f"define it with rt.defvjp({self.prim.__name__}, ...) (None "
                                   "marks an argument as not differentiable)")
        if not (getattr(g, "_is_tracked", False) or getattr(ans, "_is_tracked", False)
                or any(getattr(v, "_is_tracked", False) for v in vals)):
            if not (g.any() if type(g) is np.ndarray else g != 0.0):
                return 0.0 if shape == () else np.zeros(shape)   # zero adjoint: nothing (azmul)
            r = self._as_value(rule(ans, *self.args(vals), **self.kwargs)(g), p, None)
            rshape = () if type(r) is float else r.shape
            if rshape == shape:
                return r
            try:
                ok = np.broadcast_shapes(shape, rshape) == rshape
            except ValueError:
                ok = False
            if not ok:     # the argument's shape, or one that broadcasting makes from it
                raise UnsupportedError(f"primitive {self.prim._name}'s VJP for argument {p} "
                                       f"returned shape {rshape} for an argument of shape {shape}")
            return self._as_value(ops.unbroadcast(r, shape), p, shape)
        name = self.prim._name
        try:
            return rule(ans, *self.args(vals), **self.kwargs)(g)
        except (RevtapeError, TypeError, ValueError) as e:
            raise UnsupportedError(
                f"second derivatives (Hessians, hvp) through primitive {name} need its VJP for "
                f"argument {p} to be written with differentiable operations on its inputs "
                f"(numpy functions revtape traces, or other primitives); differentiating it "
                f"failed: {type(e).__name__}: {e}") from e

    def has_jvp(self, needs):
        return all(self.prim._jvps.get(p, _MISSING) is not _MISSING
                   for p, need in zip(self.argpos, needs) if need)

    def jvp(self, tangents, ans, vals):
        """The output's tangent from operand tangents (None: no tangent)."""
        name = self.prim._name
        args = self.args(vals)
        total = None
        for p, t in zip(self.argpos, tangents):
            if t is None:
                continue
            rule = self.prim._jvps.get(p, _MISSING)
            if rule is _MISSING:
                raise UnsupportedError(
                    f"primitive {name} has no forward-mode rule for argument {p}, which jvp() "
                    f"needs; define one with rt.defjvp({self.prim.__name__}, ...) (hessian() and "
                    "hvp() do not need it: they fall back to reverse sweeps)")
            if rule is None or not np.any(t):
                continue
            contrib = rule(t, ans, *args, **self.kwargs)
            total = contrib if total is None else total + contrib
        shape = self.out_shape
        if total is None:
            return np.zeros(shape) if shape else 0.0
        total = self._as_value(total, "'s JVP returned", None)
        if np.shape(total) != shape:
            try:
                total = self._as_value(np.broadcast_to(total, shape), "'s JVP returned", None)
            except ValueError:
                raise UnsupportedError(f"primitive {name}'s JVP returned shape "
                                       f"{np.shape(total)} for an output of shape {shape}") from None
        return total

    # pickles and deep copies: the primitive by name (Primitive.__reduce__),
    # the static arguments by value


_T = TypeVar("_T")


def stop_gradient(x: _T) -> _T:
    """x's value, with a zero derivative (jax.lax.stop_gradient).  Maps over
    lists, tuples and dicts.

    Parameters
    ----------
    x : float, ndarray, tracked value, or a list/tuple/dict of them
        What to hold constant.

    Returns
    -------
    The same structure: tracked values replaced by ones whose derivative is
    zero (still on the tape, so replays see their new values); anything else
    unchanged.
    """
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(stop_gradient(e) for e in x)
    if isinstance(x, tuple):                                   # namedtuple
        return type(x)(*(stop_gradient(e) for e in x))
    if isinstance(x, dict):
        return type(x)((k, stop_gradient(v)) for k, v in x.items())
    if getattr(x, "_is_tracked", False) and x._id >= 0:
        return ops.P.stop_gradient(x)
    return x


# ---------------------------------------------------------------- the compiled side
# The VM calls rt_py_callback(ctx, mode, pc) for a PYCALL instruction; ctx is
# a handle to the Workspace whose arenas that replay runs on (each thread of a
# batched replay has its own).  Errors are stored and reported after the C
# call returns: the VM stops the sweep with RT_CALLBACK_FAILED.

def _install_callback(ffi):
    def escaped(exc_type, exc, tb):
        # An exception that got past the try below: a signal (Ctrl-C) pending
        # as C re-entered the callback raises before its first statement, or
        # one landing in the except clause.  error=1 tells the VM the
        # instruction failed (cffi's default, 0, would be read as success and
        # the instruction would keep the last replay's output); the error is
        # kept for the caller, who raises it after the C call returns.
        ctx = tb.tb_frame.f_locals.get("ctx") if tb is not None else None
        try:
            ffi.from_handle(ctx).put_error(exc)
        except BaseException:    # pragma: no cover - the caller raises a generic error
            pass
        return True              # handled: cffi prints nothing

    @ffi.def_extern(error=1, onerror=escaped)
    def rt_py_callback(ctx, mode, pc):
        try:
            ws = ffi.from_handle(ctx)
        except BaseException:      # pragma: no cover - a handle is always alive here
            return 1
        try:
            ws.call(mode, pc)
            return 0
        except BaseException as e:     # KeyboardInterrupt too: it surfaces after the call
            ws.put_error(e)
            return 1


class CallbackTable:
    """Per program: for each PYCALL instruction (by pc), where its operands and
    result live and which CallSite it runs."""

    def __init__(self, program, code, ints):
        self.by_pc = {}
        self.sites = list(program.callbacks)
        for pc in np.nonzero((code[:, 0] & 0xFFFF) == ops.OPCODE["PYCALL"])[0].tolist():
            _, n, o, slot, nargs, c = code[pc].tolist()
            site = self.sites[slot]
            entries = ints[c:c + 3 * nargs].reshape(nargs, 3).tolist() if nargs else []
            shape = tuple(site.out_shape) if site.out_shape is not None else ()
            operands = []
            for off, size, need in entries:
                operands.append((off, size, bool(need)))
            self.by_pc[pc] = (site, o, n, shape, operands)

    def __len__(self):
        return len(self.sites)


class Workspace:
    """The Python side of one pair of arenas that PYCALLs run on."""

    __slots__ = ("table", "vals", "adj", "errors")

    def __init__(self, table, vals, adj):
        self.table = table
        self.vals = vals
        self.adj = adj
        # by thread: the error is taken after the VM released the program, when
        # another thread's replay (and its failing callback) may already run on
        # the same workspace; each caller must get its own error, not another's
        self.errors = {}

    def put_error(self, e):
        self.errors[threading.get_ident()] = e

    def take_error(self, any_thread=False):
        """The error a callback of this thread's replay raised (any thread's: for
        a batch workspace, used by one worker at a time)."""
        if any_thread:
            return self.errors.popitem()[1] if self.errors else None
        return self.errors.pop(threading.get_ident(), None)

    def call(self, mode, pc):
        site, o, n, shape, operands = self.table.by_pc[pc]
        vals = self.vals
        # views of the arena: CallSite.args hands the user copies
        item = vals.item
        args = [item(off) if s == () else vals[off:off + size].reshape(s)
                for (off, size, _), s in zip(operands, site.arg_shapes)]
        if mode == 0:
            r = site.forward(args)
            if type(r) is float:
                vals[o] = r
            else:
                vals[o:o + n] = r.reshape(-1)
            return
        ans = item(o) if shape == () else vals[o:o + n].reshape(shape).copy()
        adj = self.adj
        if mode == 1:
            g = adj.item(o) if shape == () else adj[o:o + n].reshape(shape).copy()
            for i, (off, size, need) in enumerate(operands):
                if need:
                    gi = site.vjp(i, g, ans, args)
                    if type(gi) is float:
                        adj[off] += gi
                    else:
                        adj[off:off + size] += gi.reshape(-1)
            return
        tangents = []
        for (off, size, need), a in zip(operands, args):
            if not need:
                tangents.append(None)
            elif type(a) is float:
                tangents.append(adj.item(off))
            else:
                tangents.append(adj[off:off + size].reshape(np.shape(a)).copy())
        t = site.jvp(tangents, ans, args)
        if type(t) is float:
            adj[o] = t
        else:
            adj[o:o + n] = t.reshape(-1)


__all__ = ["primitive", "defvjp", "defjvp", "stop_gradient", "Primitive"]
