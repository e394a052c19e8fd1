"""rt.grad and rt.value_and_grad: record once, replay compiled, re-record when stale.

A recorded tape is a snapshot of one run of f.  It is valid while

1. the call has the same structure (shapes and dtypes of array arguments,
   values of static arguments) -- the cache key;
2. the code and bindings that run used are unchanged -- binding guards,
   collected by WATCHING the recording run (watch.py: sys.monitoring on
   3.12+, a trace or chained profile hook on 3.11), not by static analysis: the
   __code__, defaults and closure cells of every Python function that ran,
   the globals and module/class attributes their code names, the class
   attribute a method was found under, attributes of the objects f reached
   (self, arguments, closures, globals), and revtape's own op-table epoch;
3. every comparison Python branched on comes out the same -- branch guards,
   checked by the C VM during the forward sweep.

A function that draws random numbers while recorded is recorded on every
call instead (a compiled tape would freeze the draws), with one
RandomDrawWarning.

Any failure re-records (``on_stale="rerecord"``, the default) or raises
StaleTape (``on_stale="raise"``).  Up to 8 variants (recorded branches) are
kept per cache key; past that the function is recorded on every call, with
one warning, for EAGER_RETRY calls (doubling each time it thrashes again),
then caching is tried again.  The cache keeps the cache_size most recently
used keys.
"""

import array
import builtins
import collections
import copy
import functools
import itertools
import sys
import threading
import types
from collections import namedtuple
from struct import pack as _struct_pack
from typing import Any, Sequence

import numpy as np

from . import draws as _draws, functional, progcache
from ..core import ops
from ..core.apitypes import Function, OnStale
from .functional import _holds_tracked
from ..trace.recording import gc_paused
from ..runtime.compiled import CompiledTape, _check_compilable
from ..runtime.vm import ffi as _ffi, lib as _lib
from ..errors import (BranchChanged, InputError, PicklingError, RevtapeError, StaleTape,
                      StaleTapeWarning)
from ..errors import warn as warn_user
from ..trace.tape import Tape
from ..trace.watch import RandomDrawWarning, Watcher

MAX_VARIANTS = 8
EAGER_RETRY = 32          # eager calls past MAX_VARIANTS before caching is tried again (doubles)
DEFAULT_CACHE_SIZE = 64   # input structures kept (least recently used dropped first)
_MISSING = object()
CacheInfo = namedtuple("CacheInfo", "records replays branch_failures stale variants eager "
                                    "size maxsize evictions")
_NULL = _ffi.NULL
_DOUBLES = _ffi.typeof("double[]")
_from_buffer = _ffi.from_buffer
_vg = _lib.rt_value_and_grad
_copyto = np.copyto
_memmove = _ffi.memmove
_ND = np.ndarray
_F64 = np.dtype(np.float64)
_empty = np.empty
_get_ident = threading.get_ident




# ---------------------------------------------------------------- watching the recording run
# (watch.py: sys.monitoring on 3.12+, a chained profile/trace hook on 3.11)

_Watcher = Watcher

# ---------------------------------------------------------------- binding guards

class Guards:
    """Identity checks on everything a recording depended on.

    Three flat lists keep the per-call check a few tens of nanoseconds a
    guard: (mapping, key, expected) for namespace entries, (object,
    attribute, expected) for function attributes, (cell, expected) for
    closure cells; plus (container, snapshot) for the mutable containers the
    code reached (of any length: one C-level comparison of the items, which
    tests identity first) and (array, shape, dtype, bytes) for the arrays it
    reached, which an in-place write changes without rebinding anything.
    """

    def __init__(self):
        self.items = []
        self.attrs = []
        self.cells = []
        self.containers = []
        self.values = []         # (mapping, key, expected): identity, or equality for scalars
        self.arrays = []         # (array, shape, dtype, bytes): contents when recorded
        self.epoch = ops.EPOCH[0]
        self._seen = set()
        self.pre = {}            # container snapshots taken before the run
        self.roots = []          # objects whose attribute reads are guarded (objects())
        self.unwatched = []      # what f reads that cannot be guarded (StaleTapeWarning)
        self._compiled = None

    def check(self):
        """None when every guard holds, else a description of the first that fails."""
        return self.compiled_check()()

    def compiled_check(self):
        if self._compiled is None:
            self._compiled = self._compile()
        return self._compiled

    def _compile(self):
        # Generated straight-line code, as TorchDynamo does for its guards: one
        # identity test a line, no loop, no tuple unpacking (its cost per guard:
        # docs/design.md).
        # ORIG: a place may hold, for a moment, a random-draw stand-in another
        # thread's recording put there (_draws.py); it counts as the original.
        # Evaluated only when the identity test fails: no cost on the fast path.
        env = {"MISSING": _MISSING, "differs": _differs, "EPOCH": ops.EPOCH,
               "ORIG": _draws._original}
        lines = ["def check():"]

        def bind(obj):
            name = f"o{len(env)}"
            env[name] = obj
            return name

        for d, k, v in self.items:
            lines.append(f"    if (v := {bind(d)}.get({k!r}, MISSING)) is not {bind(v)} and "
                         f"ORIG(v) is not {bind(v)}: return {f'{k!r} was rebound'!r}")
        for o, a, v in self.attrs:
            what = f"{getattr(o, '__qualname__', type(o).__name__)}.{a} changed"
            lines.append(f"    if (v := getattr({bind(o)}, {a!r}, MISSING)) is not {bind(v)} and "
                         f"ORIG(v) is not {bind(v)}: return {what!r}")
        for c, v in self.cells:
            lines.append(f"    try:\n        if (v := {bind(c)}.cell_contents) is not {bind(v)} and "
                         f"ORIG(v) is not {bind(v)}: "
                         "return 'a closure variable was rebound'\n    except ValueError:\n"
                         "        return 'a closure variable was deleted'")
        for d, k, v in self.values:
            ok = f"(v := {bind(d)}.get({k!r}, MISSING)) is {bind(v)}"
            if type(v) in _SCALARS:
                ok += f" or (type(v) is {bind(type(v))} and v == {bind(v)})"
            else:
                ok += f" or ORIG(v) is {bind(v)}"
            lines.append(f"    if not ({ok}): return {f'attribute {k!r} was rebound'!r}")
        for c, snap in self.containers:
            lines.append(f"    if differs({bind(c)}, {bind(snap)}): "
                         "return 'a container the function read was modified'")
        for a, shape, dtype, data in self.arrays:
            a = bind(a)
            lines.append(f"    if {a}.shape != {shape!r} or {a}.dtype is not {bind(dtype)} or "
                         f"{a}.tobytes() != {bind(data)}: "
                         "return 'an array the function read was changed in place'")
        lines.append(f"    if EPOCH[0] != {self.epoch}: return \"revtape's op table changed\"")
        lines.append("    return None")
        exec("\n".join(lines), env)
        # out of its own globals: a function in the dict it reads its names from
        # is a cycle, which only the cyclic collector frees
        return env.pop("check")

    def __len__(self):
        return (len(self.items) + len(self.attrs) + len(self.cells) + len(self.containers)
                + len(self.values) + len(self.arrays) + 1)

    # ------------------------------------------------ building
    def item(self, d, k):
        key = (id(d), k)
        if key not in self._seen:
            self._seen.add(key)
            self.items.append((d, k, d.get(k, _MISSING)))

    def attr(self, o, a):
        key = (id(o), a)
        if key not in self._seen:
            self._seen.add(key)
            self.attrs.append((o, a, getattr(o, a, _MISSING)))

    def function(self, fn, depth=0):
        """Guard a callable's code, defaults and closure (recursing into partials)."""
        if id(fn) in self._seen or depth > 4:
            return
        self._seen.add(id(fn))
        if isinstance(fn, functools.partial):
            for a in ("func", "args", "keywords"):
                self.attr(fn, a)
            for v in fn.args:
                self.state(v)
            self.state(fn.keywords)             # a dict: p.keywords["a"] = 6 changes it
            self.function(fn.func, depth + 1)
        elif isinstance(fn, types.MethodType):
            self.attr(fn, "__func__")
            self.function(fn.__func__, depth + 1)
        elif isinstance(fn, types.FunctionType):
            for a in ("__code__", "__defaults__", "__kwdefaults__"):
                self.attr(fn, a)
            for v in fn.__defaults__ or ():
                self.state(v)
            if fn.__kwdefaults__:
                for v in fn.__kwdefaults__.values():
                    self.state(v)
            for cell in fn.__closure__ or ():
                try:
                    v = cell.cell_contents
                except ValueError:
                    continue
                self.cells.append((cell, v))
                self.roots.append(v)
                self.state(v, self.pre.get(id(cell)))
                if callable(v) and not isinstance(v, type):
                    self.function(v, depth + 1)
        elif callable(fn) and not isinstance(fn, (type, types.BuiltinFunctionType, np.ufunc)):
            call = _mro_lookup(type(fn), "__call__")
            if isinstance(call, types.FunctionType):
                self.function(call, depth + 1)

    def code(self, code, globs, owner, functions=()):
        """Guard what one code object that ran depended on.  `functions` are
        the function objects found for it (no heap scan: from the call
        events on 3.12+, else from where the code could have been looked
        up -- see _functions_for)."""
        for fn in functions:
            self.function(fn)
        # a method: the class attribute it was found under
        if owner is not None:
            for klass in owner.__mro__:
                if code.co_name in klass.__dict__:
                    self.item(klass.__dict__, code.co_name)
                    break
            # an instance attribute shadowing the method would also rebind it
        # globals and module/class attribute chains the code names
        names = code.co_names
        for name in names:
            if name in globs:
                self.item(globs, name)
                self.roots.append(globs[name])
                self._chain(globs[name], names, 2)
                self.state(globs[name], self.pre.get((id(globs), name)))
            elif hasattr(builtins, name):
                self.item(globs, name)                 # still not shadowed by a global
                self.item(builtins.__dict__, name)

    def objects(self, roots, names, max_depth=3):
        """Guard the attribute reads f could have made on objects it reached.

        Which attributes were read is not traced; the names any code that ran
        mentions (co_names) stand for them.  For each object reached (roots,
        then the values of its guarded attributes, down to max_depth links:
        ``self.prior.scale``), every such name that is an instance attribute
        (in __dict__ or a __slots__ slot) is guarded like a global: identity,
        or equality for plain scalars.  A class attribute is guarded where the
        class defines it, and against being shadowed on the instance.  A
        property is not evaluated here: its getter ran as user code, so what
        it read (``self._y``) is guarded like any other read.
        """
        stack = [(o, 0) for o in roots]
        visited = set()
        while stack:
            o, depth = stack.pop()
            if not _traversable(o) or id(o) in visited:
                continue
            visited.add(id(o))
            if isinstance(o, (list, tuple, dict)):
                self.state(o)               # every item, whatever the length
                if depth < max_depth:
                    stack.extend((v, depth + 1) for v in (o.values() if isinstance(o, dict)
                                                          else o) if _traversable(v))
                continue
            cls = type(o)
            if _custom_getattr(cls) and any(n not in cls.__dict__ for n in names):
                self.unwatched.append(f"{cls.__qualname__} defines its own attribute lookup "
                                      "(__getattr__ or __getattribute__): what its attributes "
                                      "return is not watched")
            try:
                d = getattr(o, "__dict__", None)
            except Exception:               # a __getattr__ that misbehaves: no guards here
                continue
            if type(d) is not dict:
                d = None
            for name in names:
                klass = _mro_owner(cls, name)
                raw = klass.__dict__[name] if klass is not None else _MISSING
                if raw is not _MISSING and isinstance(raw, types.MemberDescriptorType):
                    v = getattr(o, name, _MISSING)          # a __slots__ slot
                    if not getattr(v, "_is_tracked", False):
                        self.attr(o, name)
                        if depth < max_depth:
                            stack.append((v, depth + 1))
                    continue
                if isinstance(raw, property):
                    self.item(klass.__dict__, name)
                    if raw.fget is not None:
                        self.function(raw.fget)
                    continue
                if d is not None and name in d:
                    v = d[name]
                    if getattr(v, "_is_tracked", False) or (id(d), name) in self._seen:
                        continue
                    self._seen.add((id(d), name))
                    self.values.append((d, name, v))
                    self.state(v)
                    if isinstance(v, (types.FunctionType, functools.partial, types.MethodType)):
                        self.function(v)                    # self.link = user_fn: its code too
                    if depth < max_depth:
                        stack.append((v, depth + 1))
                elif raw is not _MISSING:
                    if d is not None:
                        self.item(d, name)                  # not shadowed on the instance
                    if klass.__flags__ & _HEAPTYPE:         # a Python class: rebindable
                        self.item(klass.__dict__, name)     # the class attribute itself
                        if not callable(raw) and not isinstance(raw, _DESCRIPTORS):
                            self.state(raw)                 # Cfg.weights[0] = 5 changes it
                            if depth < max_depth:
                                stack.append((raw, depth + 1))

    def _chain(self, obj, names, depth):
        if depth == 0 or not isinstance(obj, (types.ModuleType, type)):
            return
        ns = obj.__dict__
        for name in names:
            if name in ns:
                self.item(ns, name) if isinstance(obj, types.ModuleType) else self.attr(obj, name)
                self._chain(ns[name], names, depth - 1)

    def state(self, obj, before=None, depth=0):
        """Guard what an in-place change of obj would change: an array's
        contents (numpy arrays of any dtype, compared byte for byte), a
        mutable container's items (lists, dicts, sets, bytearrays, deques,
        compared item by item), recursively into the containers and tuples it
        holds -- whatever their length."""
        t = type(obj)
        if t in _IMMUTABLE or depth > 64 or id(obj) in self._seen:
            return
        if isinstance(obj, np.ndarray):
            self._seen.add(id(obj))
            a = _draws._original(obj)
            if type(a) is not np.ndarray:
                a = a.view(np.ndarray)
            if a.dtype.hasobject:
                for v in a.flat:
                    self.state(v, None, depth + 1)
            self.arrays.append((obj, a.shape, a.dtype, a.tobytes() if before is None
                                else before))
            return
        if t is tuple:
            self._seen.add(id(obj))
            for v in obj:
                self.state(v, None, depth + 1)
            return
        if not isinstance(obj, _MUTABLE_CONTAINERS):
            return
        self._seen.add(id(obj))
        self.containers.append((obj, before if before is not None else _snapshot(obj)))
        for v in (obj.values() if isinstance(obj, dict) else obj):
            if isinstance(v, (types.FunctionType, functools.partial, types.MethodType)):
                self.function(v)
            self.roots.append(v)
            self.state(v, None, depth + 1)


def _snapshot(c):
    """A shallow copy of a container's state, or an array's bytes (what an
    in-place change changes).  Holding the items keeps their ids from being
    reused while the guard lives."""
    if isinstance(c, np.ndarray):
        return _draws._original(c).view(np.ndarray).tobytes()
    return type(c)(c)


def _differs(c, snap):
    """Whether a container's items changed since snap (its copy).  The C-level
    comparison tests each pair by identity first, so unchanged items (arrays
    among them) cost a pointer comparison; an item replaced by one whose ==
    is no single bool (another array) counts as a change."""
    try:
        return bool(c != snap)
    except Exception:
        return True


def _custom_getattr(cls):
    """A Python class with its own attribute lookup: its attributes may be
    computed from anything, so no guard on its __dict__ covers them."""
    if not cls.__flags__ & _HEAPTYPE:
        return False
    for name in ("__getattr__", "__getattribute__"):
        owner = _mro_owner(cls, name)
        if owner is not None and owner.__flags__ & _HEAPTYPE and \
                not owner.__module__.startswith(("revtape", "numpy")):
            return True
    return False


_HEAPTYPE = 1 << 9          # Py_TPFLAGS_HEAPTYPE: classes made by a class statement
_IMMUTABLE = frozenset({int, float, complex, str, bytes, bool, type(None), frozenset, range,
                        types.FunctionType, types.BuiltinFunctionType, types.ModuleType,
                        type, np.float64, np.int64, np.bool_})
_MUTABLE_CONTAINERS = (list, dict, set, bytearray, collections.deque, array.array)
_DESCRIPTORS = (staticmethod, classmethod, property, types.MemberDescriptorType,
                types.GetSetDescriptorType)
_SCALARS = (int, float, complex, str, bytes, bool, np.float64, np.int64)
_OPAQUE = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
           functools.partial, np.ndarray, np.generic, np.ufunc, int, float, complex, str, bytes,
           bool, type(None), types.CodeType, types.CellType, np.dtype, set, frozenset)


def _traversable(o):
    """Objects whose attributes f may have read (not modules and classes:
    _chain guards those; not numbers, arrays, functions)."""
    return not isinstance(o, _OPAQUE) and not getattr(o, "_is_tracked", False)


def _mro_owner(cls, name):
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass
    return None


def _mro_lookup(cls, name):
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def _pre_snapshots(fn):
    """Snapshots, taken before the run, of the small containers f's own code
    names through globals or closure cells: a run that mutates them
    (fs.pop()) must be compared with the state it started from."""
    target = fn
    while isinstance(target, (functools.partial, types.MethodType)):
        target = target.func if isinstance(target, functools.partial) else target.__func__
    code = getattr(target, "__code__", None)
    globs = getattr(target, "__globals__", None)
    if code is None or globs is None:
        return {}
    out = {}
    for name in code.co_names:
        v = globs.get(name)
        if isinstance(v, _MUTABLE_CONTAINERS + (np.ndarray,)):
            out[(id(globs), name)] = _snapshot(v)
    for cell in target.__closure__ or ():
        try:
            v = cell.cell_contents
        except ValueError:
            continue
        if isinstance(v, _MUTABLE_CONTAINERS + (np.ndarray,)):
            out[id(cell)] = _snapshot(v)
    return out


def _functions_for(watcher, fn):
    """{code: [function objects]} for the code that ran, without scanning the
    heap: the functions seen being called (3.12+), f and what it wraps, the
    globals the code names, the class attribute a method was found under,
    and the module attribute a top-level function's qualified name leads to.
    A function made during the run has none: its code is a constant of a
    parent whose function is guarded, and its cells hold this run's values."""
    found = {}

    def add(f):
        while isinstance(f, (functools.partial, types.MethodType, staticmethod, classmethod)):
            f = f.func if isinstance(f, functools.partial) else f.__func__
        code = getattr(f, "__code__", None)
        if isinstance(f, types.FunctionType) and code in watcher.codes:
            lst = found.setdefault(code, [])
            if not any(g is f for g in lst):
                lst.append(f)

    add(fn)
    for f in watcher.functions.values():
        add(f)
    for code, (globs, owner) in watcher.codes.items():
        if code in found:
            continue
        add(globs.get(code.co_name))
        if owner is not None:
            add(_mro_lookup(owner, code.co_name))
        qual = code.co_qualname if hasattr(code, "co_qualname") else code.co_name
        if code not in found and "<locals>" not in qual:
            obj = sys.modules.get(globs.get("__name__"))
            for part in qual.split("."):
                obj = getattr(obj, part, None) if obj is not None else None
            add(obj)
    return found


def collect_guards(fn, watcher, pre, args=(), kwargs=None):
    g = Guards()
    g.pre = pre
    g.function(fn)
    target = fn
    for _ in range(8):
        if isinstance(target, functools.partial):
            g.roots.extend(target.args)
            g.roots.extend(target.keywords.values())
            target = target.func
        elif isinstance(target, types.MethodType):
            g.roots.append(target.__self__)
            target = target.__func__
        else:
            break
    if not isinstance(target, types.FunctionType) and callable(target):
        g.roots.append(target)                  # a callable object: its attributes
    g.roots.extend(a for a in args if not isinstance(a, np.ndarray))
    g.roots.extend((kwargs or {}).values())
    functions = _functions_for(watcher, fn)
    for code, (globs, owner) in watcher.codes.items():
        g.code(code, globs, owner, functions.get(code, ()))
    g.roots.extend(watcher.selves.values())
    names = set()
    for code in watcher.codes:
        names.update(code.co_names)
    g.objects(g.roots, names)
    g.roots = []
    return g


# ---------------------------------------------------------------- the cached transform
#
# Threads.  One GradFunction may be called from many threads at once.  The
# cache (keys -> entries -> variants) is shared and changed only under
# self._lock, which never covers user code; each variant's compiled program is
# replayed by one thread only: the recording thread uses the program it
# compiled, every other thread a deep copy (which recompiles) made on its first
# use there.  The copies compile the same tape, so every thread gets the bits
# a serial caller would.  Entries' variant lists are tuples, replaced whole, so
# a thread iterating one never sees it change.

class _Replica:
    """One thread's copy of a variant's compiled program, and the arena slots
    its inputs are written to."""

    __slots__ = ("ctape", "vg", "slots", "p", "value", "g", "g_ptr", "g_split", "status")

    def __init__(self, ctape):
        self.ctape = ctape
        self.vg = ctape.value_and_gradient
        # Inputs sit at the start of the arena, in order, each ravelled.  This
        # replica belongs to one thread, so writing them straight into the arena
        # and replaying with x = NULL is one memcpy per argument and no check:
        # the argument's shape and dtype kind are already part of the cache key.
        arena, k, slots = ctape._vals, 0, []
        base = _from_buffer(_DOUBLES, arena)
        for _, shape, _ in ctape.program.inputs:
            n = int(np.prod(shape, dtype=np.int64))
            slots.append((base + k, arena[k:k + n].reshape(shape), 8 * n))
            k += n
        self.slots = tuple(slots)
        self.p = ctape._p
        self.value = _ffi.new("double *")
        self.status = ctape._status
        shapes = ctape._grad_shapes
        floats = ctape._in_float[:len(shapes)]
        if len(shapes) == 1 and not floats[0]:
            self.g, self.g_split = _empty(shapes[0]), None     # the gradient is a copy of g
        else:
            self.g, self.g_split = _empty(ctape._g_len), ctape._split_grad
        self.g_ptr = _from_buffer(_DOUBLES, self.g)

    def run(self, parts):
        for (ptr, view, nbytes), a in zip(self.slots, parts):
            if type(a) is _ND and a.dtype is _F64 and a.flags.c_contiguous:
                _memmove(ptr, a, nbytes)
            else:
                _copyto(view, a, casting="unsafe")     # dtype kinds are checked in _split
        st = _vg(self.p, _NULL, self.value, self.g_ptr)
        if st:
            self.status(st, _NULL)
        g = self.g.copy()
        return self.value[0], (g if self.g_split is None else self.g_split(g, None))


class _Variant:
    __slots__ = ("ctape", "guards", "_check", "replicas", "draw_replay", "aux", "fun", "tape",
                 "n_grad", "lock")

    def __init__(self, ctape, guards, fun=None, tape=None, n_grad=None):
        self.ctape = ctape
        self.guards = guards
        # the guards' check is generated code (exec): made on the first replay,
        # so that a program asking for one gradient never pays for it
        self._check = None
        self.replicas = {} if ctape is None else {threading.get_ident(): _Replica(ctape)}
        self.draw_replay = None      # f draws from generators: _draws.DrawLog.replay
        self.aux = None              # has_aux: the aux spec (functional.aux_spec)
        self.fun = fun               # the function recorded: the guards are about it
        # ctape None: not compiled yet (the first call answered from the
        # recording); the first replay compiles `tape`
        self.tape = tape
        self.n_grad = n_grad
        self.lock = None if ctape is not None else threading.Lock()

    @property
    def check(self):
        """The compiled guard check: None when every guard holds, else why not."""
        c = self._check
        if c is None:
            c = self._check = self.guards.compiled_check()
        return c

    def replica(self):
        """This thread's replica, made on its first use here.  A thread id is
        reused only after its thread ended, so a replica is never shared by two
        live threads.  A new thread first takes over a replica whose thread
        has no thread state any more (ended, or a C thread between two calls):
        the table holds as many replicas as threads ever called at once, not
        one per thread that ever called."""
        ident = threading.get_ident()
        r = self.replicas.get(ident)
        if r is None:
            if self.ctape is None:
                with self.lock:
                    if self.ctape is None:       # compiled once, by the first thread here
                        ctape = CompiledTape(self.tape, n_grad=self.n_grad)
                        r = self.replicas[ident] = _Replica(ctape)
                        self.ctape, self.tape = ctape, None
                        return r
            r = _orphan(self.replicas)
            self.replicas[ident] = r if r is not None else _Replica(copy.deepcopy(self.ctape))
            r = self.replicas[ident]
        return r


def _dead_idents(table):
    """The keys of `table` that name no live thread state: a thread that is
    in a call (even one that released the GIL in C) has one."""
    # (only the ids kept: a local holding the frames would hold this frame,
    # a cycle that only the collector frees)
    live = set(sys._current_frames())
    return [i for i in list(table) if i not in live]


def _orphan(replicas):
    """Remove every replica of a thread without a thread state from
    `replicas`; return one of them for reuse (or None)."""
    found = None
    for i in _dead_idents(replicas):
        r = replicas.pop(i, None)
        if found is None:
            found = r
    return found


class _Entry:
    __slots__ = ("variants", "eager", "eager_left", "backoff", "last", "layout")

    def __init__(self):
        self.layout = None      # pytree arguments: functional.layout_of
        self.last = 0           # a stamp from GradFunction._ticks: when last used
        self.variants = ()
        self.eager = False      # past MAX_VARIANTS: record every call for a while
        self.eager_left = -1    # eager calls before caching is tried again (< 0: never)
        self.backoff = EAGER_RETRY


def _normalise_argnums(argnums):
    if isinstance(argnums, (int, np.integer)) and not isinstance(argnums, bool):
        return True, (int(argnums),)
    try:
        nums = tuple(argnums)
    except TypeError:
        raise InputError(f"argnums must be an int or a tuple of ints, got {argnums!r}") from None
    if not nums:
        raise InputError("argnums is empty: name at least one argument to differentiate")
    if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in nums):
        raise InputError(f"argnums must be ints, got {argnums!r}")
    nums = tuple(int(i) for i in nums)
    if len(set(nums)) != len(nums):
        raise InputError(f"argnums {nums} names an argument twice; name each once "
                         "(as jax.grad requires)")
    return False, nums


class GradFunction:
    """The function returned by rt.grad / rt.value_and_grad."""

    def __init__(self, fun: Function, argnums: int | Sequence[int] = 0,
                 on_stale: OnStale = "rerecord", with_value: bool = False,
                 has_aux: bool = False, *, cache_size: int | None = DEFAULT_CACHE_SIZE,
                 private: bool = False) -> None:
        if on_stale not in ("rerecord", "raise"):
            raise ValueError("on_stale must be 'rerecord' or 'raise'")
        if not callable(fun):
            raise InputError(f"rt.grad needs a callable, got {type(fun).__name__}")
        if cache_size is not None and (not isinstance(cache_size, (int, np.integer))
                                       or isinstance(cache_size, bool) or cache_size < 1):
            raise InputError(f"cache_size must be a positive int or None (unbounded), "
                             f"got {cache_size!r}")
        self.fun = fun
        self._argnums_arg = argnums
        self._single, self.argnums = _normalise_argnums(argnums)
        self.on_stale = on_stale
        self.with_value = with_value
        self.has_aux = has_aux
        self.cache_size = None if cache_size is None else int(cache_size)
        self._fast = self.argnums in ((0,), (-1,))     # g(x): one argument, differentiated
        self._plans = {}                                # len(args) -> _plan(len(args))
        self._private = private
        self._reset(private)
        functools.update_wrapper(self, fun, updated=())
        if "__name__" not in self.__dict__:       # a partial or a callable object
            inner = getattr(getattr(fun, "func", None), "__name__", None)
            self.__name__ = f"partial({inner})" if inner else f"{type(fun).__name__} object"

    def _reset(self, private=False):
        # The cache and its counters belong to the function, shared by every
        # rt.grad object made for it with the same options (progcache.py):
        # rt.grad(f)(x) written inline reuses f's programs.  A deep copy's
        # are its own (private).
        options = (self._single, self.argnums, self.on_stale, self.with_value,
                   self.has_aux, self.cache_size)
        st = self._state = (progcache.private_state(self.fun, options)
                            if private else progcache.state_for(self.fun, options))
        self._cache = st.cache           # key -> _Entry
        self._lock = st.lock
        # The hot path takes no lock: a hit stamps its entry from a shared
        # counter (next() on itertools.count is atomic), and replays are counted
        # per thread (each thread writes only its own key).  Least recently
        # used = smallest stamp, found when a new key is inserted.
        self._ticks = st.ticks
        self._replays = st.replays
        self._stats = st.stats
        self._warned = False
        self._warned_draws = False
        self._warned_unwatched = False

    def _fold_replays(self):
        """Fold the replay counts of threads without a thread state into key
        0, so that the counters do not grow with every thread that called."""
        with self._lock:
            counts = self._replays
            for i in _dead_idents(counts):
                if i:
                    counts[0] = counts.get(0, 0) + counts.pop(i, 0)

    # ------------------------------------------------ call
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """f's gradient (``value_and_grad``: ``(value, gradient)``) at these
        arguments: a replay of the program recorded for their structure."""
        if self._fast and len(args) == 1 and not kwargs and type(args[0]) is np.ndarray:
            a = args[0]
            key, parts, argnums = (a.shape, a.dtype), None, (0,)
        else:
            try:
                key, parts, argnums = self._split(args, kwargs)
            except functional.Traced:           # inside an outer recording: trace through
                argnums = self._plans.get(len(args)) or self._plan(len(args))
                value, grads, aux = functional.traced_value_and_grads(
                    self.fun, args, kwargs, argnums[0], self.has_aux)
                return self._result((value, aux) if self.has_aux else value, grads)
        entry = self._cache.get(key)
        if entry is not None:
            if entry.eager and not self._retry(entry):
                return self._eager(args, kwargs, argnums)
            for i, v in enumerate(entry.variants):
                if v.fun is not self.fun and not self._owner_ok():
                    return self(*args, **kwargs)          # now under this function's own state
                reason = (v._check or v.check)()
                if reason is not None:
                    with self._lock:
                        self._stats["stale"] += 1
                    if self.on_stale == "raise":
                        raise StaleTape(f"the cached tape of {self.__name__} is stale: {reason}. "
                                        "To re-record instead, create the transform with "
                                        "rt.grad(f, on_stale='rerecord') (the default), or call "
                                        f"{self.__name__}.clear_cache() first")
                    with self._lock:
                        entry.variants = ()        # bindings changed: every variant is suspect
                    break
                ident = _get_ident()
                r = v.replicas.get(ident)
                if r is None:                 # this thread's first call here
                    r = v.replica()
                    self._fold_replays()
                try:
                    if v.draw_replay is not None:
                        value, grads = v.draw_replay((args[0],) if parts is None
                                                     else tuple(parts))
                    elif v.aux is not None:
                        value, grads = functional.AuxReplay(r.ctape, v.aux)(
                            args[0] if parts is None
                            else (parts[0] if len(parts) == 1 else tuple(parts)))
                    else:
                        value, grads = r.vg(args[0]) if parts is None else r.run(parts)
                except BranchChanged as e:
                    with self._lock:
                        self._stats["branch_failures"] += 1
                    if self.on_stale == "raise":
                        raise StaleTape(f"the cached tape of {self.__name__} took another "
                                        f"branch: {e}. To re-record instead, create the "
                                        "transform with rt.grad(f, on_stale='rerecord') "
                                        "(the default)") from e
                    continue
                entry.last = next(self._ticks)
                self._replays[ident] = self._replays.get(ident, 0) + 1
                if i:
                    with self._lock:              # most recently used first
                        if v in entry.variants:
                            entry.variants = (v,) + tuple(w for w in entry.variants
                                                          if w is not v)
                if entry.layout is not None:
                    grads = functional.regroup(grads, entry.layout)
                elif self._single and type(grads) is not tuple and not self.has_aux:
                    return (value, grads) if self.with_value else grads
                return self._result(value, grads)
        return self._record(key, args, kwargs, argnums)

    def _owner_ok(self):
        """A variant recorded from another function object with the same key
        (progcache.py) is guarded on that object: replay it only while this
        function's key is still the shared one (its closure cells, code and
        defaults not rebound since); else move to the state of its key now."""
        if progcache.same_key(self.fun, self._state):
            return True
        self._reset(private=self._private)
        return False

    def _split(self, args, kwargs):
        """Cache key, the tape inputs' values (differentiated arguments in argnums
        order, then float-array data in argument order), and argnums."""
        argnums, diffs = self._plans.get(len(args)) or self._plan(len(args))
        # a plain ndarray is never tracked: only other arguments are scanned
        if kwargs and functional.any_tracked((), kwargs):
            raise functional.Traced()
        key, data = [], []
        trees = {}
        for i, a in enumerate(args):
            if type(a) is _ND:                       # the common case first
                dt = a.dtype
                if diffs[i]:
                    if dt.kind not in "biuf":
                        raise InputError(f"argument {i} is differentiated: pass a real float "
                                         f"array, got dtype {dt}")
                    key.append((a.shape, dt))
                    continue
                if dt.kind == "f":                   # data: a tape input
                    key.append((None, a.shape, dt))
                    data.append(a)
                    continue
            elif _holds_tracked(a, 0):
                raise functional.Traced()
            elif not diffs[i] and _scalar_data(a) and i not in self._state.static_scalars:
                # a Python int/float that is not differentiated: a tape input
                # read at each replay, not a key (unless it steered the recording)
                key.append(("scalar", type(a)))
                data.append(a)
                continue
            elif diffs[i]:
                if isinstance(a, np.ndarray):
                    if a.dtype.kind not in "biuf":
                        raise InputError(f"argument {i} is differentiated: pass a real float "
                                         f"array, got dtype {a.dtype}")
                    key.append((a.shape, a.dtype))
                elif isinstance(a, (float, int, np.floating, np.integer)):
                    key.append("f")
                elif functional.pytree.is_container(a):     # a pytree: its leaves are inputs
                    k, trees[i] = functional.tree_key(a)
                    key.append(k)
                else:
                    raise InputError(f"argument {i} is differentiated: pass a float or an array, "
                                     f"got {type(a).__name__}")
                continue
            key.append(("static", _static_key(a, f"argument {i}")))
        if kwargs:
            for k in sorted(kwargs):
                key.append((k, _static_key(kwargs[k], f"keyword argument {k!r}")))
        diff = []
        for i in argnums:
            if i in trees:
                diff.extend(trees[i])
            else:
                diff.append(args[i])
        return tuple(key), diff + data, argnums

    def _plan(self, n):
        """(argnums with negatives resolved, a differentiated flag per position)
        for a call with n positional arguments."""
        if n == 0:
            raise InputError(f"{self.__name__} was called without positional arguments; "
                             f"it differentiates positional argument(s) {self._argnums_arg!r}: "
                             "call it as g(x, ...)")
        bad = [i for i in self.argnums if not -n <= i < n]
        if bad:
            raise InputError(f"argnums {self._argnums_arg!r} names argument {bad[0]}, but "
                             f"{self.__name__} was called with {n} positional argument"
                             f"{'s' if n != 1 else ''}")
        argnums = tuple(i % n for i in self.argnums)
        if len(set(argnums)) != len(argnums):
            raise InputError(f"argnums {self._argnums_arg!r} names the same argument twice "
                             f"for a call with {n} positional arguments")
        plan = self._plans[n] = (argnums, tuple(i in argnums for i in range(n)))
        return plan

    def _retry(self, entry):
        """True when an eager entry's pause is over and caching is tried again."""
        with self._lock:
            if entry.eager_left < 0:
                return False
            entry.eager_left -= 1
            if entry.eager_left > 0:
                return False
            entry.eager = False
            entry.variants = ()
            return True

    def _entry_for(self, key):
        with self._lock:
            entry = self._cache.get(key)
            if entry is None:
                cache = self._cache
                while self.cache_size is not None and len(cache) >= self.cache_size:
                    del cache[min(cache, key=lambda k: cache[k].last)]
                    self._stats["evictions"] += 1
                entry = cache[key] = _Entry()
            entry.last = next(self._ticks)
            if not entry.eager and len(entry.variants) >= MAX_VARIANTS:
                entry.eager = True
                entry.variants = ()
                entry.eager_left = entry.backoff
                entry.backoff = min(2 * entry.backoff, 64 * EAGER_RETRY)
                warn, self._warned = not self._warned, True
            else:
                warn = False
        if warn:
            warn_user(f"{self.__name__} needed more than {MAX_VARIANTS} recorded variants "
                      "(branches or redefinitions keep changing); revtape now records it on "
                      f"every call, trying to cache it again after {entry.eager_left} calls",
                      StaleTapeWarning)
        return entry

    def _record(self, key, args, kwargs, argnums, proxy_draws=True, why=None):
        """Record f at this call, compile it and answer from the compiled replay
        (or from the recording, when its draws cannot be replayed)."""
        entry = self._entry_for(key)
        if entry.eager:
            return self._eager(args, kwargs, argnums)
        tape = Tape()
        targs = list(args)
        for i in argnums:
            targs[i] = functional.track_arg(tape, args[i])
        scalars = []            # scalar arguments recorded as data (see _split)
        for i, a in enumerate(args):
            if i not in argnums and type(a) is np.ndarray and a.dtype.kind == "f":
                targs[i] = tape.track(a)
            elif (i not in argnums and _scalar_data(a)
                  and i not in self._state.static_scalars):
                targs[i] = tape.track(float(a))
                scalars.append(i)
        pre = _pre_snapshots(self.fun)
        # generators f reaches draw through stand-ins while it runs (_draws.py)
        tkwargs = dict(kwargs)          # generator keywords are swapped in the copy
        draws = _draws.DrawLog.start(tape, self.fun, targs, tkwargs, lift=proxy_draws == "lift") \
            if proxy_draws else None
        watcher = _Watcher()
        steered = False
        try:
            with gc_paused():
                out = watcher.run(self.fun, *targs, **tkwargs)
        except Exception as e:
            if scalars:
                # a scalar argument was used where a plain number is needed
                # (range bound, shape, index, float(), a C function): f's
                # program depends on its value, which becomes part of the key
                steered = True
            elif not draws:
                raise
            else:
                return self._record_again(e, draws, proxy_draws, key, args, kwargs, argnums)
        finally:
            if draws is not None:
                draws.stop()
        if steered:
            if draws is not None:
                draws.rewind()
            with self._lock:
                st = self._state
                st.static_scalars = st.static_scalars | frozenset(scalars)
                if not entry.variants and self._cache.get(key) is entry:
                    del self._cache[key]
            key, _, _ = self._split(args, kwargs)
            return self._record(key, args, kwargs, argnums, proxy_draws, why)
        if self.has_aux:
            out, aux = functional.split_aux(out)
        tape.finish(functional.size1_scalar(out))
        tape._scalar_output()
        spec = functional.aux_spec(tape, aux) if self.has_aux else None
        _, parts, _ = self._split(args, kwargs)
        n_diff = len(parts) - len(scalars) - sum(
            1 for i, a in enumerate(args) if i not in argnums
            and type(a) is np.ndarray and a.dtype.kind == "f")
        entry.layout = functional.layout_of(args, argnums)
        if draws and not draws.exact():
            # first: what cannot be replayed and where (_draws.py says what can)
            watcher.draws[:0] = [(f"{what} (not replayable compiled)", site)
                                 for what, site in dict.fromkeys(draws.opaque)]
            draws = None
        if draws is not None and not draws.steps:
            draws = None
        if any(s is None or draws is None or id(s) not in draws.streams
               for s in watcher.draw_streams) or (watcher.draws and draws is None):
            return self._answer_uncompiled(entry, tape, aux if self.has_aux else None,
                                           n_diff, watcher, why)
        guards = collect_guards(self.fun, watcher, pre, args, kwargs)
        _draws.unswap_guards(guards)
        if guards.unwatched and not self._warned_unwatched:
            self._warned_unwatched = True
            warn_user(f"{self.__name__} reads state that revtape cannot watch: "
                      f"{guards.unwatched[0]}; a change there is not seen by the cached "
                      f"program. Pass such values as arguments, or call "
                      f"{self.__name__}.clear_cache() after changing them",
                      StaleTapeWarning)
        if draws is not None:
            draws.add_guards(guards, _snapshot)
        return self._compile_variant(entry, tape, n_diff, guards, draws, spec, parts,
                                     args, kwargs, argnums)

    def _record_again(self, e, draws, proxy_draws, key, args, kwargs, argnums):
        """f failed while recording with its draws on the tape: f could not take
        them as tracked values (float(z), z.astype(int)), or failed for its own
        reasons.  Put the generators back and record once more, another way."""
        draws.stop()
        draws.rewind()
        if isinstance(e, _draws.DrawEscape) and proxy_draws is True:
            # drawn indices met a plain array (A[idx], A a closure or global
            # array): once more, with f's float arrays standing in as views
            # whose gathers by drawn indices are refilled inputs
            return self._record(key, args, kwargs, argnums, proxy_draws="lift")
        try:
            return self._record(key, args, kwargs, argnums, proxy_draws=False,
                                why=f"its draws could not stay on the tape: {e}")
        except RevtapeError:
            if isinstance(e, RevtapeError):
                raise
            # f's own error with tracked draw parameters (numpy's ValueError for
            # a negative scale) reads as a conversion error in the plain run
            raise e from None

    def _answer_uncompiled(self, entry, tape, aux, n_diff, watcher, why):
        """f draws numbers a compiled tape would replay as constants: re-running
        f on every call draws as f does (the entry turns eager for good); this
        call's answer is the recording's own, so the generator advanced once."""
        with self._lock:
            entry.eager = True
            entry.eager_left = -1            # for good: not the variant cap's pause
            entry.variants = ()
            self._stats["records"] += 1
            warn, self._warned_draws = not self._warned_draws, True
        if warn:
            warn_user(f"{self.__name__} draws random numbers ({watcher.draw_report()}); "
                      "revtape records it on every call so that each call draws afresh "
                      "(correct, but not compiled"
                      + (f"; {why}" if why else "") + "). Compiled replays draw "
                      "afresh from numpy Generators and RandomStates (and np.random.*) "
                      "whose numbers stay on the tape: any method with plain "
                      "parameters, normal/uniform/exponential also with tracked ones, "
                      "integers/choice/permutation as indices of tracked or reachable "
                      "arrays; or pass the noise in as an argument", RandomDrawWarning)
        value = tape.values[tape.output_id]
        grads = tape._grads_out(tape._reverse(1.0), None)
        if isinstance(grads, tuple):
            grads = grads[:n_diff]               # not the data arguments
        if entry.layout is not None:
            grads = functional.regroup(grads, entry.layout)
        if self.has_aux:
            value = (value, functional.plain_aux(aux))
        return self._result(value, grads)

    def _compile_variant(self, entry, tape, n_diff, guards, draws, spec, parts,
                         args, kwargs, argnums):
        """Add the recording as a new variant of entry and answer this call.

        A plain variant (no draws, no aux) is compiled on its first replay:
        this call is answered from the recording itself (its values and the
        reference reverse pass), so a program asking for one gradient pays
        for recording only.  The others compile now and answer from their
        first replay."""
        if spec is None and draws is None:
            return self._lazy_variant(entry, tape, n_diff, guards, args, argnums)
        ctape = CompiledTape(tape, n_grad=n_diff)
        variant = _Variant(ctape, guards, self.fun)
        variant.aux = spec
        if spec is not None:
            def run(xs):
                return functional.AuxReplay(variant.replica().ctape, spec)(
                    xs[0] if len(xs) == 1 else tuple(xs))
        else:
            def run(xs):
                return variant.replica().run(xs)
        if draws is not None:
            # each replay draws afresh from the same generators, into the
            # calling thread's replica
            variant.draw_replay = draws.replay(run, guarded=bool(ctape._program.guards))
            parts = parts + list(draws.recorded())
        with self._lock:
            self._stats["records"] += 1
            entry.variants = (variant,) + entry.variants
        try:
            value, grads = run(parts)
        except BranchChanged:
            # C and numpy rounded a comparison differently at a tie: this point
            # is on a boundary; answer from the recording itself.
            with self._lock:
                entry.variants = tuple(w for w in entry.variants if w is not variant)
            return self._eager(args, kwargs, argnums)
        if entry.layout is not None:
            grads = functional.regroup(grads, entry.layout)
        return self._result(value, grads)

    def _lazy_variant(self, entry, tape, n_diff, guards, args, argnums):
        # what rt.compile would refuse, refused now rather than on the next call
        _check_compilable(tape)
        variant = _Variant(None, guards, self.fun, tape, n_diff)
        value = tape.values[tape.output_id]
        grads = tape._grads_out(tape._reverse(1.0), None)
        if isinstance(grads, tuple):
            grads = grads[:n_diff]               # not the data arguments
            if len(grads) == 1:
                grads = grads[0]
        with self._lock:
            self._stats["records"] += 1
            entry.variants = (variant,) + entry.variants
        if entry.layout is not None:
            grads = functional.regroup(grads if isinstance(grads, tuple) else (grads,),
                                       entry.layout)
        return self._result(float(value), grads)

    def _eager(self, args, kwargs, argnums):
        with self._lock:
            self._stats["records"] += 1
        tape = Tape()
        targs = list(args)
        for i in argnums:
            targs[i] = functional.track_arg(tape, args[i])
        out = self.fun(*targs, **kwargs)
        if self.has_aux:
            out, aux = functional.split_aux(out)
        tape.finish(functional.size1_scalar(out))
        tape._scalar_output()
        value = tape.values[tape.output_id]
        grads = tape._grads_out(tape._reverse(1.0), None)
        layout = functional.layout_of(args, argnums)
        if layout is not None:
            grads = functional.regroup(grads, layout)
        if self.has_aux:
            value = (value, functional.plain_aux(aux))
        return self._result(value, grads)

    def _result(self, value, grads):
        if self._single:
            g = grads[0] if isinstance(grads, tuple) else grads
        else:
            g = grads if isinstance(grads, tuple) else (grads,)
        if self.has_aux and not self.with_value:
            return g, value[1]               # JAX: grad(f, has_aux=True) -> (grad, aux)
        return (value, g) if self.with_value else g

    # ------------------------------------------------ introspection
    def cache_info(self) -> "CacheInfo":
        """records, replays, branch_failures, stale, variants, eager (an input
        structure is being recorded on every call), size (cached input
        structures), maxsize (cache_size) and evictions (structures dropped as
        least recently used)."""
        with self._lock:
            entries = list(self._cache.values())
            stats = dict(self._stats)
            stats["replays"] = sum(list(self._replays.values()))
        return CacheInfo(variants=sum(len(e.variants) for e in entries),
                         eager=any(e.eager for e in entries), size=len(entries),
                         maxsize=self.cache_size, **stats)

    def clear_cache(self) -> None:
        """Drop the recorded programs of f (shared by every rt.grad object made
        for f with the same options; a deep copy's are its own)."""
        with self._lock:
            self._cache.clear()

    # ------------------------------------------------ copies and pickles
    # A copy or a pickle carries f and the options, never the cache object.
    # copy.copy and an unpickled transform find f's shared cache, as a new
    # rt.grad(f) does (the same guards run on every hit); a deep copy gets a
    # cache of its own, so that it shares nothing with the original: its
    # programs are rebuilt (guards collected against the copy's own objects)
    # on its first call.
    def _options(self):
        return (self._argnums_arg, self.on_stale, self.with_value, self.cache_size, self.has_aux)

    def __copy__(self):
        return _rebuild_grad(self.fun, *self._options())

    def __deepcopy__(self, memo):
        new = _rebuild_grad(copy.deepcopy(self.fun, memo), *self._options(), private=True)
        memo[id(self)] = new
        return new

    def __reduce__(self):
        _check_picklable(self.fun, self.__name__)
        return (_rebuild_grad, (self.fun,) + self._options())


def _rebuild_grad(fun, argnums, on_stale, with_value, cache_size, has_aux=False, private=False):
    return GradFunction(fun, argnums, on_stale, with_value, has_aux, cache_size=cache_size,
                        private=private)


def _check_picklable(fun, name):
    """pickle stores a Python function by reference (module and qualified name)
    and fails on a lambda or a nested function with a message about attribute
    lookup; say what to do instead.  Picklers that store functions by value
    (cloudpickle, used by dask and Ray; dill) are left to do so."""
    if not isinstance(fun, types.FunctionType):
        return                   # bound methods, partials, objects: pickle's own rules
    obj = sys.modules.get(fun.__module__)
    for part in fun.__qualname__.split("."):
        obj = getattr(obj, part, None)
    if obj is fun:
        return
    frame = sys._getframe(2)
    for _ in range(32):
        if frame is None:
            break
        mod = frame.f_globals.get("__name__", "")
        if "cloudpickle" in mod or mod.split(".")[0] == "dill":
            return
        frame = frame.f_back
    raise PicklingError(
        f"cannot pickle rt.grad({fun.__qualname__}): pickle stores a function by reference "
        f"(module {fun.__module__!r}, name {fun.__qualname__!r}), and a lambda or a function "
        "defined inside another function cannot be found that way. Define the function at "
        "the top level of a module, or pickle with cloudpickle (which stores it by value)")


_INT_EXACT = 2 ** 53        # ints past this lose digits as a double: keyed instead


def _scalar_data(a):
    """A Python or numpy int/float that, not differentiated, is a tape input."""
    t = type(a)
    if t is float or t is int or isinstance(a, (np.floating, np.integer)):
        return t is not bool and -_INT_EXACT <= a <= _INT_EXACT   # not nan, inf, huge
    return False


def _float_bits(x):
    # the bit pattern: -0.0 and 0.0 are different keys, nan equals itself
    return _struct_pack("<d", x)


def _static_key(a, where="argument"):
    """The cache key of a static argument, by value.

    numbers and strings by (type, value), floats by their bits; tuples, lists,
    dicts and sets of keyable values recursively; numpy arrays that are not
    data (ints, bools, or inside a container) by dtype, shape and bytes; any
    other hashable object by its own hash and ==; anything else is refused.
    """
    t = type(a)
    if t is float or isinstance(a, np.floating):
        return (t, _float_bits(float(a)))
    if t in (int, bool, str, bytes, type(None)) or isinstance(a, (np.integer, np.bool_)):
        return (t, a)
    if isinstance(a, (complex, np.complexfloating)):
        return (t, _float_bits(a.real), _float_bits(a.imag))
    if isinstance(a, (tuple, list)):
        return (t, tuple(_static_key(v, where) for v in a))
    if isinstance(a, dict):
        return (t, tuple((_static_key(k, where), _static_key(v, where)) for k, v in a.items()))
    if isinstance(a, (set, frozenset)):
        return (t, frozenset(_static_key(v, where) for v in a))
    if isinstance(a, np.ndarray):
        if a.dtype.hasobject:
            return (t, a.shape, _static_key(a.tolist(), where))
        return (t, a.dtype.str, a.shape, a.tobytes())
    if getattr(a, "_is_tracked", False):
        raise InputError(f"{where} is a tracked value but not in argnums; add its position "
                         "to argnums to differentiate it")
    try:
        hash(a)
    except TypeError:
        raise InputError(
            f"{where} ({t.__name__}) is static -- neither differentiated (argnums) nor a float "
            "array (data) -- and rt.grad keys its cache by the value of static arguments, but "
            f"a {t.__name__} is unhashable. Make it hashable (a tuple, a frozen dataclass), or "
            "pass it through a closure: rt.grad(lambda x: f(x, arg))") from None
    return (t, a)     # kept alive by the cache: its id is never reused while cached


def grad(fun: Function, argnums: int | Sequence[int] = 0, on_stale: OnStale = "rerecord",
         has_aux: bool = False, *, cache_size: int | None = DEFAULT_CACHE_SIZE) -> GradFunction:
    """grad(f)(x) -> gradient; recorded and compiled on the first call per input
    structure, replayed after, re-recorded when a guard fails.  The cache keeps
    the `cache_size` most recently used input structures (None: unbounded).

    Parameters
    ----------
    fun : callable
        The function to differentiate; it returns a scalar (with
        ``has_aux=True``: a pair ``(scalar, aux)``).
    argnums : int or sequence of int, default 0
        Which positional arguments to differentiate: an int gives that
        argument's gradient, a sequence a tuple of gradients.  Each may be a
        float, an array or a pytree; the other arguments are data, re-read on
        every call.
    on_stale : {"rerecord", "raise"}, default "rerecord"
        What a call does when a guard fails (another branch, or something f
        read was redefined or rebound): record f again, or raise
        ``rt.StaleTape``.
    has_aux : bool, default False
        f returns ``(value, aux)``; aux is returned beside the gradient, as in JAX.
    cache_size : int or None, default 64
        How many input structures (shapes, dtypes, pytree layouts) keep a
        compiled program, least recently used dropped first; None: unbounded.

    Returns
    -------
    GradFunction
        A function of f's arguments returning f's gradient (``(gradient,
        aux)`` with has_aux), shaped like the differentiated argument(s);
        ``.cache_info()`` and ``.clear_cache()`` report on and drop its
        programs.  Programs are shared process-wide by every ``rt.grad(f)``
        with the same options, so ``rt.grad(f)(x)`` written inline in a loop
        replays too.  Safe to call from many threads; deep-copies and pickles.

    Raises
    ------
    InputError
        fun is not callable, or cache_size is not a positive int or None.
    StaleTape
        (from a call) a guard failed under ``on_stale="raise"``.

    Examples
    --------
    >>> import numpy as np, revtape as rt
    >>> g = rt.grad(lambda x: np.sum(np.sin(x)))
    >>> g(np.zeros(2))
    array([1., 1.])
    """
    return GradFunction(fun, argnums, on_stale, with_value=False, has_aux=has_aux,
                        cache_size=cache_size)


def value_and_grad(fun: Function, argnums: int | Sequence[int] = 0,
                   on_stale: OnStale = "rerecord", has_aux: bool = False, *,
                   cache_size: int | None = DEFAULT_CACHE_SIZE) -> GradFunction:
    """value_and_grad(f)(x) -> (value, gradient), like jax.value_and_grad.

    Parameters
    ----------
    fun : callable
        The function to differentiate; it returns a scalar (with
        ``has_aux=True``: a pair ``(scalar, aux)``).
    argnums : int or sequence of int, default 0
        Which positional arguments to differentiate: an int gives that
        argument's gradient, a sequence a tuple of gradients.  Each may be a
        float, an array or a pytree; the other arguments are data, re-read on
        every call.
    on_stale : {"rerecord", "raise"}, default "rerecord"
        What a call does when a guard fails (another branch, or something f
        read was redefined or rebound): record f again, or raise
        ``rt.StaleTape``.
    has_aux : bool, default False
        f returns ``(value, aux)``; aux is returned beside the gradient, as in JAX.
    cache_size : int or None, default 64
        How many input structures (shapes, dtypes, pytree layouts) keep a
        compiled program, least recently used dropped first; None: unbounded.

    Returns
    -------
    GradFunction
        As ``rt.grad``'s, returning ``(value, gradient)`` (with has_aux:
        ``((value, aux), gradient)``).

    Examples
    --------
    >>> import numpy as np, revtape as rt
    >>> rt.value_and_grad(lambda x: np.sum(x ** 2))(np.array([1.0, 2.0]))
    (5.0, array([2., 4.]))
    """
    return GradFunction(fun, argnums, on_stale, with_value=True, has_aux=has_aux,
                        cache_size=cache_size)
