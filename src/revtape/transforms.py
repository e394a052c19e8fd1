"""rt.grad and rt.value_and_grad: record once, replay compiled, re-record when stale.

A recorded tape is a snapshot of one run of f.  It is valid while

1. the call has the same structure (shapes and dtypes of array arguments,
   values of static arguments) -- the cache key;
2. the code and bindings that run used are unchanged -- binding guards,
   collected by WATCHING the recording run (sys.setprofile), not by static
   analysis: the __code__, defaults and closure cells of every Python
   function that ran, the globals and module/class attributes their code
   names, the class attribute a method was found under, and revtape's own
   op-table epoch;
3. every comparison Python branched on comes out the same -- branch guards,
   checked by the C VM during the forward sweep.

Any failure re-records (``on_stale="rerecord"``, the default) or raises
StaleTape (``on_stale="raise"``).  Up to 8 variants (recorded branches) are
kept per cache key; past that the function is recorded on every call, with
one warning.
"""

import builtins
import functools
import gc
import inspect
import os
import sys
import sysconfig
import types
import warnings
from collections import namedtuple

import numpy as np

from . import functional, ops
from .api import gc_paused
from .compiled import CompiledTape
from .errors import BranchChanged, InputError, OutputError, StaleTape
from .tape import Tape

MAX_VARIANTS = 8
_MISSING = object()
CacheInfo = namedtuple("CacheInfo", "records replays branch_failures stale variants eager")


class StaleTapeWarning(RuntimeWarning):
    """A function re-records so often that revtape stopped caching it."""


# ---------------------------------------------------------------- watching the recording run

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_SKIP_DIRS = tuple({os.path.abspath(p) for p in (
    sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("purelib"),
    sysconfig.get_paths().get("platlib"), _PKG_DIR) if p})


@functools.lru_cache(maxsize=4096)
def _is_user_file(filename):
    if not filename or filename.startswith("<frozen"):
        return False
    path = os.path.abspath(filename)
    return not path.startswith(_SKIP_DIRS)


class _Watcher:
    """A profile hook that notes every user code object that runs, with its
    globals and (for methods) the class it was looked up on."""

    def __init__(self):
        self.codes = {}

    def __call__(self, frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        if code in self.codes or not _is_user_file(code.co_filename):
            return
        owner = None
        if code.co_argcount and code.co_varnames[0] in ("self", "cls"):
            obj = frame.f_locals.get(code.co_varnames[0], _MISSING)
            if obj is not _MISSING:
                owner = obj if isinstance(obj, type) and code.co_varnames[0] == "cls" else type(obj)
        self.codes[code] = (frame.f_globals, owner)

    def run(self, fn, *args, **kwargs):
        previous = sys.getprofile()
        sys.setprofile(self)
        try:
            return fn(*args, **kwargs)
        finally:
            sys.setprofile(previous)


# ---------------------------------------------------------------- binding guards

class Guards:
    """Identity checks on everything a recording depended on.

    Three flat lists keep the per-call check a few tens of nanoseconds a
    guard: (mapping, key, expected) for namespace entries, (object,
    attribute, expected) for function attributes, (cell, expected) for
    closure cells; plus (container, snapshot) for small mutable containers
    the code read (a list it pops a callee from).
    """

    def __init__(self):
        self.items = []
        self.attrs = []
        self.cells = []
        self.containers = []
        self.epoch = ops.EPOCH[0]
        self._seen = set()
        self.pre = {}            # container snapshots taken before the run
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
        # identity test a line, no loop, no tuple unpacking -- ~20 ns a guard.
        env = {"MISSING": _MISSING, "snapshot": _snapshot, "EPOCH": ops.EPOCH}
        lines = ["def check():"]

        def bind(obj):
            name = f"o{len(env)}"
            env[name] = obj
            return name

        for d, k, v in self.items:
            lines.append(f"    if {bind(d)}.get({k!r}, MISSING) is not {bind(v)}: "
                         f"return {f'{k!r} was rebound'!r}")
        for o, a, v in self.attrs:
            what = f"{getattr(o, '__qualname__', type(o).__name__)}.{a} changed"
            lines.append(f"    if getattr({bind(o)}, {a!r}, MISSING) is not {bind(v)}: return {what!r}")
        for c, v in self.cells:
            lines.append(f"    try:\n        if {bind(c)}.cell_contents is not {bind(v)}: "
                         "return 'a closure variable was rebound'\n    except ValueError:\n"
                         "        return 'a closure variable was deleted'")
        for c, snap in self.containers:
            test = (f"{bind(c)} != {bind(snap)}" if isinstance(snap, (list, dict))
                    else f"snapshot({bind(c)}) != {bind(snap)}")
            lines.append(f"    if {test}: return 'a container the function read was modified'")
        lines.append(f"    if EPOCH[0] != {self.epoch}: return \"revtape's op table changed\"")
        lines.append("    return None")
        exec("\n".join(lines), env)
        return env["check"]

    def __len__(self):
        return len(self.items) + len(self.attrs) + len(self.cells) + len(self.containers) + 1

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
            self.function(fn.func, depth + 1)
        elif isinstance(fn, types.MethodType):
            self.attr(fn, "__func__")
            self.function(fn.__func__, depth + 1)
        elif isinstance(fn, types.FunctionType):
            for a in ("__code__", "__defaults__", "__kwdefaults__"):
                self.attr(fn, a)
            for cell in fn.__closure__ or ():
                try:
                    v = cell.cell_contents
                except ValueError:
                    continue
                self.cells.append((cell, v))
                self._container(v, self.pre.get(id(cell)))
                if callable(v) and not isinstance(v, type):
                    self.function(v, depth + 1)
        elif callable(fn) and not isinstance(fn, (type, types.BuiltinFunctionType, np.ufunc)):
            call = _mro_lookup(type(fn), "__call__")
            if isinstance(call, types.FunctionType):
                self.function(call, depth + 1)

    def code(self, code, globs, owner):
        # the function objects that own this code (the callee that actually ran)
        for ref in gc.get_referrers(code):
            if isinstance(ref, types.FunctionType) and ref.__code__ is code:
                self.function(ref)
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
                self._chain(globs[name], names, 2)
                self._container(globs[name], self.pre.get((id(globs), name)))
            elif hasattr(builtins, name):
                self.item(globs, name)                 # still not shadowed by a global
                self.item(builtins.__dict__, name)

    def _chain(self, obj, names, depth):
        if depth == 0 or not isinstance(obj, (types.ModuleType, type)):
            return
        ns = obj.__dict__
        for name in names:
            if name in ns:
                self.item(ns, name) if isinstance(obj, types.ModuleType) else self.attr(obj, name)
                self._chain(ns[name], names, depth - 1)

    def _container(self, obj, before):
        if isinstance(obj, (list, dict)) and len(obj) <= 64 and id(obj) not in self._seen:
            self._seen.add(id(obj))
            self.containers.append((obj, before if before is not None else _snapshot(obj)))


_PLAIN = (int, float, complex, str, bytes, bool, type(None), types.FunctionType,
          types.BuiltinFunctionType, functools.partial, np.ufunc)


def _snapshot(c):
    """A comparable copy of a small container's state.  Plain items (numbers,
    strings, functions) compare by ==, which tests identity first: one C-level
    list comparison.  Anything else (arrays) compares by identity."""
    if isinstance(c, dict):
        if all(type(v) in _PLAIN for v in c.values()):
            return dict(c)
        return tuple((k, id(v)) for k, v in c.items())
    if all(type(v) in _PLAIN for v in c):
        return list(c)
    return tuple(id(v) for v in c)


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
        if isinstance(v, (list, dict)) and len(v) <= 64:
            out[(id(globs), name)] = _snapshot(v)
    for cell in target.__closure__ or ():
        try:
            v = cell.cell_contents
        except ValueError:
            continue
        if isinstance(v, (list, dict)) and len(v) <= 64:
            out[id(cell)] = _snapshot(v)
    return out


def collect_guards(fn, watcher, pre):
    g = Guards()
    g.pre = pre
    g.function(fn)
    for code, (globs, owner) in watcher.codes.items():
        g.code(code, globs, owner)
    return g


# ---------------------------------------------------------------- the cached transform

class _Variant:
    __slots__ = ("ctape", "guards", "check", "replay")

    def __init__(self, ctape, guards):
        self.ctape = ctape
        self.guards = guards
        self.check = guards.compiled_check()
        self.replay = ctape.value_and_gradient


class _Entry:
    __slots__ = ("variants", "eager", "layout")

    def __init__(self):
        self.variants = []
        self.eager = False
        self.layout = None       # pytree arguments: functional.layout_of


class GradFunction:
    """The function returned by rt.grad / rt.value_and_grad."""

    def __init__(self, fun, argnums=0, on_stale="rerecord", with_value=False, has_aux=False):
        if on_stale not in ("rerecord", "raise"):
            raise ValueError("on_stale must be 'rerecord' or 'raise'")
        self.fun = fun
        self._single = isinstance(argnums, int)
        self.argnums = (argnums,) if self._single else tuple(argnums)
        self.on_stale = on_stale
        self.with_value = with_value
        self.has_aux = has_aux
        self._cache = {}
        self._stats = {"records": 0, "replays": 0, "branch_failures": 0, "stale": 0}
        self._warned = False
        functools.update_wrapper(self, fun, updated=())

    # ------------------------------------------------ call
    def __call__(self, *args, **kwargs):
        try:
            key, diff, data = self._split(args, kwargs)
        except functional.Traced:           # inside an outer recording: trace through
            value, grads, aux = functional.traced_value_and_grads(
                self.fun, args, kwargs, self.argnums, self.has_aux)
            return self._result((value, aux) if self.has_aux else value, grads)
        entry = self._cache.get(key)
        if entry is None:
            entry = self._cache[key] = _Entry()
        elif entry.eager:
            return self._eager(args, kwargs)
        else:
            x = diff[0] if len(diff) == 1 and not data else tuple(diff + data)
            for i, v in enumerate(entry.variants):
                reason = v.check()
                if reason is not None:
                    self._stats["stale"] += 1
                    if self.on_stale == "raise":
                        raise StaleTape(f"the cached tape of {self.__name__} is stale: {reason}; "
                                        "call again with on_stale='rerecord' or clear_cache()")
                    entry.variants = []          # bindings changed: every variant is suspect
                    break
                try:
                    value, grads = v.replay(x)
                except BranchChanged as e:
                    self._stats["branch_failures"] += 1
                    if self.on_stale == "raise":
                        raise StaleTape(f"the cached tape of {self.__name__} took another "
                                        f"branch: {e}") from e
                    continue
                if i:
                    entry.variants.insert(0, entry.variants.pop(i))
                self._stats["replays"] += 1
                if entry.layout is not None:
                    grads = functional.regroup(grads, entry.layout)
                elif self._single and not self.with_value and type(grads) is not tuple \
                        and not self.has_aux:
                    return grads
                return self._result(value, grads)
        return self._record(entry, args, kwargs)

    def _split(self, args, kwargs):
        """Cache key, differentiated values, and array data (tape inputs)."""
        if len(args) == 1 and not kwargs and self.argnums == (0,):
            a = args[0]
            if type(a) is np.ndarray:
                return (a.shape, a.dtype), [a], []
        key, diff, data = [], [], []
        if functional.any_tracked(args, kwargs):
            raise functional.Traced()
        for i, a in enumerate(args):
            if i in self.argnums:
                if isinstance(a, np.ndarray):
                    key.append((a.shape, a.dtype.char))
                elif isinstance(a, (float, int, np.floating, np.integer)):
                    key.append("f")
                elif functional.pytree.is_container(a):     # a pytree: its leaves are inputs
                    k, leaves = functional.tree_key(a)
                    key.append(k)
                    diff.extend(leaves)
                    continue
                else:
                    raise InputError(f"argument {i} is differentiated: pass a float or an array")
                diff.append(a)
            elif isinstance(a, np.ndarray) and a.dtype.kind == "f":
                key.append(("data", a.shape, a.dtype.char))
                data.append(a)
            else:
                key.append(("static", _static_key(a)))
        for k in sorted(kwargs):
            key.append((k, _static_key(kwargs[k])))
        return tuple(key), diff, data

    def _record(self, entry, args, kwargs):
        if len(entry.variants) >= MAX_VARIANTS:
            entry.eager = True
            if not self._warned:
                self._warned = True
                warnings.warn(f"{self.__name__} needed more than {MAX_VARIANTS} recorded variants "
                              "(branches or redefinitions keep changing); revtape now records it on "
                              "every call without caching", StaleTapeWarning, stacklevel=3)
            return self._eager(args, kwargs)
        tape = Tape()
        targs = list(args)
        for i in self.argnums:
            targs[i] = functional.track_arg(tape, args[i])
        for i, a in enumerate(args):
            if i not in self.argnums and isinstance(a, np.ndarray) and a.dtype.kind == "f":
                targs[i] = tape.track(a)
        pre = _pre_snapshots(self.fun)
        watcher = _Watcher()
        with gc_paused():
            out = watcher.run(self.fun, *targs, **kwargs)
        if self.has_aux:
            out, aux = functional.split_aux(out)
        tape.finish(out)
        tape._scalar_output()
        spec = functional.aux_spec(tape, aux) if self.has_aux else None
        guards = collect_guards(self.fun, watcher, pre)
        _, diff, data = self._split(args, kwargs)
        entry.layout = functional.layout_of(args, self.argnums)
        ctape = CompiledTape(tape, n_grad=len(diff))
        self._stats["records"] += 1
        variant = _Variant(ctape, guards)
        if spec is not None:
            variant.replay = functional.AuxReplay(ctape, spec)
        entry.variants.insert(0, variant)
        x = diff + data
        try:
            value, grads = variant.replay(x[0] if len(x) == 1 else x)
        except BranchChanged:
            # C and numpy rounded a comparison differently at a tie: this point
            # is on a boundary; answer from the recording itself.
            entry.variants.pop(0)
            return self._eager(args, kwargs)
        if entry.layout is not None:
            grads = functional.regroup(grads, entry.layout)
        return self._result(value, grads)

    def _eager(self, args, kwargs):
        self._stats["records"] += 1
        tape = Tape()
        targs = list(args)
        for i in self.argnums:
            targs[i] = functional.track_arg(tape, args[i])
        out = self.fun(*targs, **kwargs)
        if self.has_aux:
            out, aux = functional.split_aux(out)
        tape.finish(out)
        tape._scalar_output()
        value = tape._vals[tape._output._id]
        grads = tape._grads_out(tape._reverse(1.0), None)
        layout = functional.layout_of(args, self.argnums)
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
    def cache_info(self):
        return CacheInfo(variants=sum(len(e.variants) for e in self._cache.values()),
                         eager=any(e.eager for e in self._cache.values()), **self._stats)

    def clear_cache(self):
        self._cache.clear()


def _static_key(a):
    if isinstance(a, np.ndarray):
        return ("array", a.shape, a.dtype.str, a.tobytes())
    try:
        hash(a)
        return (type(a), a)
    except TypeError:
        return ("id", id(a))


def grad(fun, argnums=0, on_stale="rerecord", has_aux=False):
    """grad(f)(x) -> gradient; recorded and compiled on the first call per input
    structure, replayed after, re-recorded when a guard fails.  With
    has_aux=True f returns (output, aux) and grad(f)(x) -> (gradient, aux)."""
    return GradFunction(fun, argnums, on_stale, with_value=False, has_aux=has_aux)


def value_and_grad(fun, argnums=0, on_stale="rerecord", has_aux=False):
    """value_and_grad(f)(x) -> (value, gradient), like jax.value_and_grad; with
    has_aux=True -> ((value, aux), gradient)."""
    return GradFunction(fun, argnums, on_stale, with_value=True, has_aux=has_aux)
