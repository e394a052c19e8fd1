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
others by identity); any other callable by identity.  Keys name objects by
id and the state holds them (its pins), so an id is never reused while its
key is cached.

A hit never skips a check: the variants found run the same binding guards
(grad.py) as in the object that recorded them, and an rt.grad object whose
function is not the one that recorded a variant re-derives its key before
replaying it (grad.GradFunction._owner_ok), so a function whose closure cell
or code was rebound after the transform was made leaves the shared state.

The cache is bounded: the REVTAPE_PROGRAM_CACHE most recently used functions
are kept (least recently used dropped first; each keeps its own bound on
input structures, cache_size); a state's key, its pins, keeps what it names
alive until then.  Dropping a state frees its programs once no rt.grad
object holds it.  clear() empties it.
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


_BY_VALUE = (int, bool, str, bytes, type(None))


def _value(v, pins):
    t = type(v)
    if t is float:
        return (t, _pack("<d", v))          # -0.0 and 0.0 differ; nan equals itself
    if t in _BY_VALUE:
        return (t, v)
    pins.append(v)
    return id(v)


def function_key(fun, pins, depth=0):
    """The cache key of a callable (see the module docstring); never raises.

    Objects named by identity enter the key as their id and are appended to
    pins: a State keeps its pins alive, so an id in a cached key is never
    reused by another object (ints hash and compare faster than wrappers)."""
    t = type(fun)
    if t is types.FunctionType and depth <= 4:
        code, globs = fun.__code__, fun.__globals__
        pins.append(code)
        pins.append(globs)
        cells = fun.__closure__
        if cells:
            contents = []
            for c in cells:
                try:
                    contents.append(_value(c.cell_contents, pins))
                except ValueError:              # an empty cell (deleted, or not yet bound)
                    contents.append(None)
            cells = tuple(contents)
        d, kwd = fun.__defaults__, fun.__kwdefaults__
        return (id(code), id(globs), cells,
                None if d is None else tuple([_value(v, pins) for v in d]),
                None if kwd is None else tuple([(k, _value(v, pins)) for k, v in kwd.items()]))
    if t is types.MethodType and depth <= 4:
        return ("method", function_key(fun.__func__, pins, depth + 1),
                _value(fun.__self__, pins))
    if t is functools.partial and depth <= 4:
        return ("partial", function_key(fun.func, pins, depth + 1),
                tuple([_value(v, pins) for v in fun.args]),
                tuple([(k, _value(v, pins)) for k, v in fun.keywords.items()]))
    pins.append(fun)
    return id(fun)


class State:
    """What rt.grad objects for one function share: the cache of input
    structures, the lock guarding it, the use stamps and counters, and the
    positions of scalar arguments found to steer the recording (keyed by
    value from then on)."""

    __slots__ = ("key", "pins", "cache", "lock", "ticks", "replays", "stats",
                 "static_scalars", "__weakref__")

    def __init__(self, key, pins=()):
        self.key = key
        self.pins = pins             # what the ids in key name, kept alive
        self.cache = {}
        self.lock = threading.Lock()
        self.ticks = itertools.count()
        self.replays = {}
        self.stats = {"records": 0, "branch_failures": 0, "stale": 0, "evictions": 0}
        self.static_scalars = frozenset()


def state_for(fun, options):
    """The shared State of fun under these transform options, made on first use."""
    pins = []
    key = (function_key(fun, pins), options)
    with _lock:
        st = _states.get(key)
        if st is not None:
            _states.move_to_end(key)
            _stats["hits"] += 1
            return st
    maxsize = config.get("REVTAPE_PROGRAM_CACHE")       # read on a miss only
    with _lock:
        st = _states.get(key)
        if st is not None:
            return st
        _stats["misses"] += 1
        st = State(key, tuple(pins))
        if maxsize:
            _states[key] = st
            while len(_states) > maxsize:
                _states.popitem(last=False)
                _stats["evictions"] += 1
        return st


def same_key(fun, state):
    """True when fun's key (now) is still the one state was found under (an id
    in it names the pinned object itself: pins keep it alive)."""
    return function_key(fun, []) == state.key[0]


def private_state(fun, options):
    """A State for fun that no other rt.grad object finds (a deep copy's)."""
    pins = []
    key = (function_key(fun, pins), options)
    return State(key, tuple(pins))


def clear():
    """Forget every shared state (programs held by live rt.grad objects stay theirs)."""
    with _lock:
        _states.clear()


def info():
    """(hits, misses, evictions, size, maxsize) of the function-level cache."""
    with _lock:
        return dict(_stats, size=len(_states), maxsize=config.get("REVTAPE_PROGRAM_CACHE"))
