"""rt.jacobian(f), rt.hessian(f), rt.hvp(f), rt.jvp(f): cached, compiled,
guarded transforms (the forms without x), and JAX's one-shot rt.jvp / rt.vjp.

A cached transform records f on its first call for each input structure,
compiles the tape, and replays it after, with the same binding guards (the
watcher of transforms.py) and branch guards as rt.grad: a redefined helper or
a changed branch re-records (or raises StaleTape with on_stale="raise").

* ``rt.jacobian(f)(x, *args)``: one reverse sweep per output element in C.
* ``rt.hessian(f)(x, *args)``: the compiled gradient program of f (a
  HessianTape) and one tangent sweep per input element, in C.
* ``rt.hvp(f)(x, v, *args)``: one forward and one tangent sweep of that
  program -- what ``ctape.hvp`` costs, plus the guard checks.
* ``rt.jvp(f)(x, v, *args)`` -> ``(f(x), J v)``: one forward and one tangent sweep.

x (differentiated) is a float, an array or a pytree; the other arguments
are static: part of the cache key (arrays by their bytes), as JAX's
``static_argnums`` would be.  Each thread replays its own deep copy of a
compiled variant (made on its first call there), so a transform may be
called from many threads at once.
"""

import copy
import threading
from collections import namedtuple
from typing import Any, Callable, Sequence, overload

import numpy as np

from ..core import pytree
from ..core.apitypes import Function, PyTree
from ..trace.hessian import HessianTape, Parts
from ..trace.recording import gc_paused
from ..runtime.compiled import CompiledTape
from ..errors import BranchChanged, InputError, StaleTape, TapeMixError
from ..errors import warn as warn_user
from . import forward, outputs
from .functional import is_tracked, regroup, track_arg
from ..trace.tape import Tape
from ..trace.tracked import value as rt_value
from .grad import MAX_VARIANTS, grad, StaleTapeWarning, _pre_snapshots, _Watcher, collect_guards
from ..trace.watch import RandomDrawWarning

KINDS = ("jacobian", "hessian", "hvp", "jvp")
CacheInfo = namedtuple("CacheInfo", "records replays branch_failures stale variants")


def _static_key(a):
    """A static argument as part of the cache key (arrays by their bytes)."""
    if isinstance(a, np.ndarray):
        return ("array", a.shape, a.dtype.str, a.tobytes())
    if isinstance(a, (list, tuple)):
        return (type(a), tuple(_static_key(v) for v in a))
    if isinstance(a, dict):
        return (type(a), tuple((_static_key(k), _static_key(v)) for k, v in a.items()))
    try:
        hash(a)
    except TypeError:
        # keyed by identity it could match another object later at the same
        # address: refuse rather than risk a stale replay
        raise InputError(f"a static argument of a cached transform must be hashable (or a "
                         f"list, tuple, dict or array of such); got a {type(a).__name__}") from None
    return (type(a), a)


class _Variant:
    """One recorded branch: its guards, and a pool of idle replay functions
    (take() / give()), each bound to a compiled program of its own.  A call
    takes one and gives it back, so a copy is made only when every existing
    one is in use: as many copies as calls ran at once, whatever made the
    threads (a thread of C code taking the GIL per call has a new Python
    thread state, and threading.local nothing, at every call)."""

    def __init__(self, ctape, check, make_run):
        self.ctape = ctape
        self.check = check
        self._make_run = make_run
        self.copies_made = 1
        self._idle = [make_run(ctape)]       # list.pop/append are atomic: no lock

    def take(self):
        """run(x, v) on a program no other call is replaying (give it back)."""
        try:
            return self._idle.pop()
        except IndexError:
            self.copies_made += 1
            return self._make_run(copy.deepcopy(self.ctape))

    def give(self, run):
        self._idle.append(run)


def _hvp_runner(ctape):
    """ctape.hvp as a closure, with ctape.hvp's per-call decisions (which
    program, which sweep, which layout) taken once, and a direct path for
    float64 arrays of the input's shape: the same rt_jvp call on the same
    buffers, so the same bits."""
    h = ctape._hessian_program()
    general = ctape.hvp
    if (h._parts is not None or not h._single or h._in_float[0] or not h._tangents_defined()
            or h._grad_shapes[0] != h._x_shape or h._program.out_len != h._g_len):
        return lambda x, v: general(x, v)
    from ..runtime.vm import _F64, _ND, _DOUBLES, _from_buffer, ffi, lib
    shape, p, status, tape, arena = h._x_shape, h._p, h._status, h._tape, h._arena
    jvp, null, empty = lib.rt_jvp, ffi.NULL, np.empty

    def run(x, v):
        if (type(x) is _ND and type(v) is _ND and x.dtype is _F64 and v.dtype is _F64
                and x.shape == shape and v.shape == shape):
            fx, fv = x.flags, v.flags
            if fx.c_contiguous and fv.c_contiguous and fx.aligned and fv.aligned:
                hv = empty(shape)
                xp = _from_buffer(_DOUBLES, x)
                st = jvp(p, xp, _from_buffer(_DOUBLES, v), null, _from_buffer(_DOUBLES, hv))
                if st:
                    status(st, xp)
                if tape is not None:
                    tape._replayed_by = arena
                return hv
        return general(x, v)

    return run


class CachedTransform:
    """The function returned by rt.jacobian(f), rt.hessian(f), rt.hvp(f), rt.jvp(f)."""

    def __init__(self, fun: Function, kind: str, on_stale: str = "rerecord") -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}")
        if on_stale not in ("rerecord", "raise"):
            raise ValueError("on_stale must be 'rerecord' or 'raise'")
        self.fun = fun
        self.kind = kind
        self.on_stale = on_stale
        self._cache = {}
        self._lock = threading.Lock()
        self._stats = {"records": 0, "replays": 0, "branch_failures": 0, "stale": 0}
        self._warned = False
        self._warned_draws = False
        self.__name__ = getattr(fun, "__name__", type(fun).__name__)
        self.__doc__ = getattr(fun, "__doc__", None)
        self.__wrapped__ = fun
        self._takes_v = kind in ("hvp", "jvp")
        self._replay = getattr(self, "_replay_" + kind)
        replay = self._replay
        self._make_run = _hvp_runner if kind == "hvp" else (
            lambda ctape: lambda x, v: replay(ctape, x, v))

    def __repr__(self):
        return f"<rt.{self.kind}({self.__name__}) cached transform>"

    # ------------------------------------------------ call
    def __call__(self, x: PyTree, *args: Any, **kwargs: Any) -> Any:
        """The transform at x (hvp and jvp: at x along v, the next argument);
        the other arguments are f's data."""
        v = None
        if self._takes_v:
            if not args:
                raise TypeError(f"rt.{self.kind}(f) is called as rt.{self.kind}(f)(x, v, *args)")
            v, args = args[0], args[1:]
        plain = type(x) is np.ndarray and not args and not kwargs and (
            v is None or type(v) is np.ndarray)      # plain arrays: never tracked
        if not plain and forward.needs_tracing(x, v, args, kwargs):
            return self._traced(x, v, args, kwargs)
        if type(x) is np.ndarray and not args and not kwargs:
            key = (x.shape, x.dtype.char)          # the common case, keyed in a few ns
        else:
            key = self._key(x, args, kwargs)
        variants = self._cache.get(key)
        if variants:
            for var in variants:            # lists are replaced whole, never changed
                reason = var.check()
                if reason is not None:
                    self._stats["stale"] += 1
                    if self.on_stale == "raise":
                        raise StaleTape(f"the cached tape of {self.__name__} is stale: {reason}; "
                                        "call again with on_stale='rerecord' or clear_cache()")
                    with self._lock:
                        self._cache[key] = []
                    break
                run = var.take()
                try:
                    res = run(x, v)
                except BranchChanged as e:
                    var.give(run)
                    self._stats["branch_failures"] += 1
                    if self.on_stale == "raise":
                        raise StaleTape(f"the cached tape of {self.__name__} took another "
                                        f"branch: {e}") from e
                    continue
                except BaseException:
                    var.give(run)
                    raise
                var.give(run)
                self._stats["replays"] += 1
                return res
        return self._record(key, x, v, args, kwargs)

    def _traced(self, x, v, args, kwargs):
        """The transform called inside another transform's recording (x, v or
        an argument tracked): recorded onto that tape (forward.py), nothing
        cached.  Tracked extra arguments are primals with zero tangents, so
        the outer transform differentiates through them too."""
        fun, args = self.fun, list(args)
        pos = [i for i, a in enumerate(args) if forward.needs_tracing(a)]

        def g(x, *tracked):
            for i, a in zip(pos, tracked):
                args[i] = a
            return fun(x, *args, **kwargs)

        extra = tuple(args[i] for i in pos)
        zeros = tuple(pytree.unflatten(pytree.flatten(a)[1], [
            0.0 if np.ndim(rt_value(leaf)) == 0 else np.zeros(np.shape(rt_value(leaf)))
            for leaf in pytree.flatten(a)[0]]) for a in extra)
        if self.kind == "jvp":
            return forward.traced_jvp(g, (x, *extra), (v, *zeros))
        if self.kind == "jacobian":
            return forward.traced_jacobian(g, x, extra)
        gradient = grad(g)                    # traced too: its arguments are tracked
        if self.kind == "hessian":
            return forward.traced_jacobian(gradient, x, extra)
        return forward.traced_jvp(gradient, (x, *extra), (v, *zeros))[1]     # hvp

    def _key(self, x, args, kwargs):
        leaves, td = pytree.flatten(x)
        shapes = []
        for leaf in leaves:
            if is_tracked(leaf):
                raise InputError(f"rt.{self.kind}(f) takes plain values; nest rt.grad for "
                                 "higher derivatives of a scalar function")
            pytree.check_leaf(leaf)
            shapes.append((np.shape(leaf), "a" if isinstance(leaf, (np.ndarray, list)) else "f"))
        return (td, tuple(shapes), tuple(_static_key(a) for a in args),
                tuple((k, _static_key(kwargs[k])) for k in sorted(kwargs)))

    @staticmethod
    def _replay_jacobian(ctape, x, v):
        return ctape.jacobian(x)

    @staticmethod
    def _replay_hessian(ctape, x, v):
        return ctape.hessian(x)

    @staticmethod
    def _replay_hvp(ctape, x, v):
        return ctape.hvp(x, v)

    @staticmethod
    def _replay_jvp(ctape, x, v):
        return _jvp_with_value(ctape, x, v)

    def _record(self, key, x, v, args, kwargs):
        # f runs outside the lock (it may call this transform itself); the
        # cache is changed under it, by replacing an entry's list whole, so a
        # thread iterating the old list never sees it change
        ctape, guards, draws, shape = self._build(x, args, kwargs)
        replay = self._replay
        if shape is not None and shape[0] is not None:
            replay = self._unpacking(*shape)
        if draws:
            # f draws random numbers: a cached program would replay them as
            # constants, so nothing is cached and every call records afresh
            if not self._warned_draws:
                self._warned_draws = True
                warn_user(f"{self.__name__} draws random numbers ({draws}); rt.{self.kind}"
                          "(f) records it on every call so that each call draws afresh "
                          "(correct, but not compiled). Pass the noise in as an argument",
                          RandomDrawWarning)
            return replay(ctape, x, v)
        make_run = self._make_run if replay is self._replay else (
            lambda ctape: lambda x, v: replay(ctape, x, v))
        var = _Variant(ctape, guards.compiled_check(), make_run)
        with self._lock:
            variants = self._cache.get(key, [])
            if len(variants) >= MAX_VARIANTS:
                warn, self._warned = not self._warned, True
                variants = variants[:-1]            # the least recently recorded goes
            else:
                warn = False
            self._cache[key] = [var] + variants
            self._stats["records"] += 1
        if warn:
            warn_user(f"{self.__name__} needed more than {MAX_VARIANTS} recorded variants "
                      "(its branches keep changing); the oldest are dropped",
                      StaleTapeWarning)
        return replay(ctape, x, v)

    def _unpacking(self, spec, x_treedef):
        """The replay of a variant whose f returns a container (outputs.py)."""
        if self.kind == "jacobian":
            return lambda ctape, x, v: outputs.unpack_jacobian(spec, ctape.jacobian(x), x_treedef)
        if self.kind == "jvp":
            def replay_jvp(ctape, x, v):
                y, ydot = _jvp_with_value(ctape, x, v)
                return outputs.unpack(spec, y), outputs.unpack(spec, ydot)
            return replay_jvp
        return self._replay

    def _build(self, x, args, kwargs):
        fun = self.fun
        tape = Tape()
        pre = _pre_snapshots(fun)
        watcher = _Watcher()
        second_order = self.kind in ("hessian", "hvp")
        leaves, td = pytree.flatten(x)
        parts = None
        if second_order and td.kind is not None:
            # a pytree: f is recorded on one flat vector, so the gradient is one
            # vector and the Hessian one matrix (HessianTape's layout)
            parts = Parts(leaves, td)
            z = tape.track(parts.flatten(x))
            tx = parts.tree(parts.split(z))
        else:
            tx = track_arg(tape, x)
            if td.kind is not None:
                tape._treedef = td
        with gc_paused():
            out = watcher.run(fun, tx, *args, **kwargs)
        spec = None
        if not second_order:
            out, spec = outputs.pack(out)
        tape.finish(out)
        guards = collect_guards(fun, watcher, pre, (x, *args), kwargs)
        draws = watcher.draw_report() if getattr(watcher, "draws", None) else None
        if second_order:
            tape._scalar_output()
            htape = HessianTape._from_tape(tape)
            htape._parts = parts
            return CompiledTape(htape), guards, draws, None
        return CompiledTape(tape), guards, draws, (spec, td if td.kind is not None else None)

    # ------------------------------------------------ copy and pickle
    # A copy starts with an empty cache (it records on its first call): the
    # compiled variants belong to this object's threads; f travels by reference.
    def __reduce__(self):
        return (CachedTransform, (self.fun, self.kind, self.on_stale))

    def __deepcopy__(self, memo):
        return CachedTransform(self.fun, self.kind, self.on_stale)

    __copy__ = lambda self: self.__deepcopy__({})

    # ------------------------------------------------ introspection
    def cache_info(self) -> "CacheInfo":
        """records, replays, branch_failures, stale and variants (programs kept)."""
        return CacheInfo(variants=sum(len(v) for v in self._cache.values()), **self._stats)

    def clear_cache(self) -> None:
        """Drop the recorded programs."""
        self._cache.clear()


def _jvp_with_value(ctape, x, v):
    """(f(x), J v): one forward and one tangent sweep; the value is the output
    the sweep left in the arena, read while owning the program (each thread
    replays its own copy, so it is this call's)."""
    ydot = ctape._jvp_flat(x, v)
    _, y, _ = ctape._arena.read_replay()
    shape = ctape._program.out_shape
    if shape == ():
        return float(y[0]), float(ydot[0])
    return y.reshape(shape), ydot.reshape(shape)


# ---------------------------------------------------------------- JAX's one-shot forms

def _record_primals(f, primals):
    if not isinstance(primals, (tuple, list)):
        raise InputError("primals must be a tuple (or list) of arguments, as in jax.jvp")
    tape = Tape()
    targs = [track_arg(tape, p) for p in primals]
    try:
        with gc_paused():
            out = f(*targs)
    except TapeMixError as e:
        raise TapeMixError(f"{e}. A function given to rt.jvp or rt.vjp inside another "
                           "transform's recording must take the values it differentiates as "
                           "primals, not read the outer function's tracked values from a "
                           "closure") from None
    out, spec = outputs.pack(out)
    tape.finish(out)
    layout = []
    for p in primals:
        if pytree.is_container(p):
            td = pytree.flatten(p)[1]
            layout.append((td, td.n_leaves))
        else:
            layout.append(None)
    leaves = [leaf for p in primals for leaf in (pytree.flatten(p)[0] if pytree.is_container(p)
                                                 else [p])]
    return tape, layout, leaves, spec


def _flat_arg(leaves):
    return leaves[0] if len(leaves) == 1 else tuple(leaves)


@overload
def jvp(f: Function, primals: None = None, tangents: None = None) -> CachedTransform: ...
@overload
def jvp(f: Function, primals: Sequence[PyTree], tangents: Sequence[PyTree]) -> tuple[Any, Any]: ...


def jvp(f: Function, primals: Sequence[PyTree] | None = None,
        tangents: Sequence[PyTree] | None = None) -> CachedTransform | tuple[Any, Any]:
    """rt.jvp(f, primals, tangents) -> (f(*primals), J tangents), as jax.jvp: f
    recorded at primals and one tangent sweep in C.  rt.jvp(f) without primals
    is the cached transform: rt.jvp(f)(x, v) -> (f(x), J v).  At tracked
    primals or tangents (inside rt.grad, rt.jvp, ...) the tangent is recorded
    onto their tape, so the transforms compose to any order.  f may return a
    pytree: the value and the tangent then have its structure.

    Parameters
    ----------
    f : callable
        The function, of ``len(primals)`` positional arguments.
    primals : tuple or list, optional
        Where to evaluate: one float, array or pytree per argument of f.
        Without it, the cached transform ``rt.jvp(f)(x, v)``.
    tangents : tuple or list
        One tangent per primal, structured like it.  Primals and tangents may
        be tracked values themselves (nested forward and reverse modes compose).

    Returns
    -------
    (value, tangent) or CachedTransform
        f's value and its directional derivative J tangents (shaped like the
        value); without primals, the cached transform.

    Raises
    ------
    InputError
        primals or tangents are not tuples of matching length.
    """
    if primals is None:
        return CachedTransform(f, "jvp")
    if not isinstance(primals, (tuple, list)):
        raise InputError("primals must be a tuple (or list) of arguments, as in jax.jvp")
    if not isinstance(tangents, (tuple, list)) or len(tangents) != len(primals):
        raise InputError("tangents must be a tuple with one tangent per primal, as in jax.jvp")
    if forward.needs_tracing(tuple(primals), tuple(tangents)):
        # inside another transform's recording: the tangent is recorded too
        return forward.traced_jvp(f, tuple(primals), tuple(tangents))
    tape, layout, leaves, spec = _record_primals(f, primals)
    ctape = CompiledTape(tape)
    tleaves = []
    for t, e in zip(tangents, layout):
        tleaves.extend(pytree.leaves_of(e[0], t, "tangent") if e is not None else [t])
    ydot = ctape._jvp_flat(_flat_arg(leaves), _flat_arg(tleaves))
    out = tape.values[tape.output_id]
    if spec is not None:
        return outputs.unpack(spec, out), outputs.unpack(spec, ydot)
    shape = ctape._program.out_shape
    return out, (float(ydot[0]) if shape == () else ydot.reshape(shape))


def vjp(f: Function, *primals: PyTree) -> tuple[Any, Callable[[PyTree], tuple[Any, ...]]]:
    """rt.vjp(f, *primals) -> (f(*primals), vjp_fun), as jax.vjp: vjp_fun(w)
    returns a tuple with one cotangent per primal (shaped like it: pytrees
    too), each call one reverse sweep in C at the recorded primals.  At
    tracked primals (inside another transform's recording), or for a tracked
    w, the sweep is recorded onto their tape.

    Parameters
    ----------
    f : callable
        The function of the primals; its value may be a scalar, an array or a
        pytree of arrays.
    *primals : float, ndarray or pytree
        Where to evaluate, one per positional argument of f.

    Returns
    -------
    (value, vjp_fun)
        f's value, and a function of a cotangent w (structured like the
        value) returning ``w^T J``: a tuple with one cotangent per primal.
    """
    if forward.needs_tracing(tuple(primals)):
        return forward.traced_vjp(f, tuple(primals))
    tape, layout, leaves, spec = _record_primals(f, primals)
    ctape = CompiledTape(tape)
    out = tape.values[tape.output_id]
    x = _flat_arg(leaves)
    lock = threading.Lock()
    if spec is not None:
        out = outputs.unpack(spec, out)

    def vjp_fun(w):
        if forward.needs_tracing(w):
            # a tracked cotangent: its sweep must be recorded, not run in C
            return forward.traced_vjp(f, tuple(primals))[1](w)
        if spec is not None:
            w = outputs.flat_cotangent(spec, w)
        with lock:                          # the closure's program is one object
            g = ctape.vjp(x, w)
        return regroup(g, layout)

    return out, vjp_fun
