"""The process-wide program cache behind rt.grad: `rt.grad(f)(x)` written inline
in a loop reuses the program recorded for f.

Each rt.grad object used to own its cache, so a transform built anew on every
call recorded and compiled f on every call.  Here the cache state (input
structures -> recorded variants, their counters and lock) belongs to the
FUNCTION, and every rt.grad object made for the same function with the same
options shares it.

"The same function" is decided as jax.jit decides it for its trace cache:
by what determines the function's behaviour, not by the function object.  A
lambda written inside a loop is a new object on every pass, but its code
object, its globals and the contents of its closure cells are the same.  The
key is

    the code object, the globals dict (by identity), the defaults and
    keyword defaults, and each closure cell's contents -- plain scalars
    (int, float, bool, str, None) by value (floats by their bits), anything
    else by identity;

a bound method by its function's key and its self (identity); a
functools.partial by its function's key and its arguments (scalars by value,
others by identity); any other callable by identity.  Keys hold the objects
they name, so an id is never reused while its key is cached.

A hit never skips a check: the variants found run the same binding guards
(grad.py) as in the object that recorded them, and an rt.grad object whose
function is not the one that recorded a variant re-derives its key before
replaying it (grad.GradFunction._owner_ok), so a function whose closure cell
or code was rebound after the transform was made leaves the shared state.

The cache is bounded: the REVTAPE_PROGRAM_CACHE most recently used functions
are kept (least recently used dropped first; each keeps its own bound on
input structures, cache_size).  Dropping a state frees its programs once no
rt.grad object holds it.  clear() empties it.
"""

import functools
import itertools
import threading
import types
from collections import OrderedDict
from struct import pack as _pack

from .. import config

_lock = threading.Lock()
_states = OrderedDict()          # key -> State, most recently used last
_stats = {"hits": 0, "misses": 0, "evictions": 0}


class _Id:
    """An object compared by identity (and kept alive while the key is)."""

    __slots__ = ("obj", "_h")

    def __init__(self, obj):
        self.obj = obj
        self._h = id(obj)

    def __hash__(self):
        return self._h

    def __eq__(self, other):
        return type(other) is _Id and other.obj is self.obj


_BY_VALUE = (int, bool, str, bytes, type(None))


def _value(v):
    t = type(v)
    if t is float:
        return (t, _pack("<d", v))          # -0.0 and 0.0 differ; nan equals itself
    if t in _BY_VALUE:
        return (t, v)
    return _Id(v)


def function_key(fun, depth=0):
    """The cache key of a callable (see the module docstring); never raises."""
    if depth > 4:
        return _Id(fun)
    t = type(fun)
    if t is types.FunctionType:
        cells = fun.__closure__
        if cells:
            contents = []
            for c in cells:
                try:
                    contents.append(_value(c.cell_contents))
                except ValueError:              # an empty cell (deleted, or not yet bound)
                    contents.append(None)
            cells = tuple(contents)
        kwd = fun.__kwdefaults__
        return (fun.__code__, _Id(fun.__globals__), cells,
                None if fun.__defaults__ is None else tuple(map(_value, fun.__defaults__)),
                None if kwd is None else tuple((k, _value(v)) for k, v in kwd.items()))
    if t is types.MethodType:
        return ("method", function_key(fun.__func__, depth + 1), _Id(fun.__self__))
    if t is functools.partial:
        return ("partial", function_key(fun.func, depth + 1), tuple(map(_value, fun.args)),
                tuple((k, _value(v)) for k, v in fun.keywords.items()))
    return _Id(fun)


class State:
    """What rt.grad objects for one function share: the cache of input
    structures, the lock guarding it, the use stamps and counters, and the
    positions of scalar arguments found to steer the recording (keyed by
    value from then on)."""

    __slots__ = ("key", "cache", "lock", "ticks", "replays", "stats", "static_scalars",
                 "__weakref__")

    def __init__(self, key):
        self.key = key
        self.cache = {}
        self.lock = threading.Lock()
        self.ticks = itertools.count()
        self.replays = {}
        self.stats = {"records": 0, "branch_failures": 0, "stale": 0, "evictions": 0}
        self.static_scalars = frozenset()


def state_for(fun, options):
    """The shared State of fun under these transform options, made on first use."""
    key = (function_key(fun), options)
    maxsize = config.get("REVTAPE_PROGRAM_CACHE")
    with _lock:
        st = _states.get(key)
        if st is not None:
            _states.move_to_end(key)
            _stats["hits"] += 1
            return st
        _stats["misses"] += 1
        st = State(key)
        if maxsize:
            _states[key] = st
            while len(_states) > maxsize:
                _states.popitem(last=False)
                _stats["evictions"] += 1
        return st


def same_key(fun, state):
    """True when fun's key (now) is still the one state was found under."""
    return (function_key(fun), state.key[1]) == state.key


def clear():
    """Forget every shared state (programs held by live rt.grad objects stay theirs)."""
    with _lock:
        _states.clear()


def info():
    """(hits, misses, evictions, size, maxsize) of the function-level cache."""
    with _lock:
        return dict(_stats, size=len(_states), maxsize=config.get("REVTAPE_PROGRAM_CACHE"))
