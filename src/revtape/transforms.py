"""rt.grad and rt.value_and_grad: record once, replay compiled, re-record when stale.

A recorded tape is a snapshot of one run of f.  It is valid while

1. the call has the same structure (shapes and dtypes of array arguments,
   values of static arguments) -- the cache key;
2. the code and bindings that run used are unchanged -- binding guards,
   collected by WATCHING the recording run (watch.py: sys.monitoring on
   3.12+, a chained profile hook on 3.11), not by static analysis: the
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
one warning.
"""

import builtins
import functools
import inspect
import sys
import types
import warnings
from collections import namedtuple

import numpy as np

from . import functional, ops
from .api import gc_paused
from .compiled import CompiledTape
from .errors import BranchChanged, InputError, OutputError, StaleTape
from .tape import Tape
from .watch import RandomDrawWarning, Watcher, _freeze

MAX_VARIANTS = 8
_MISSING = object()
CacheInfo = namedtuple("CacheInfo", "records replays branch_failures stale variants eager")


class StaleTapeWarning(RuntimeWarning):
    """A function re-records so often that revtape stopped caching it."""


# ---------------------------------------------------------------- watching the recording run
# (watch.py: sys.monitoring on 3.12+, a chained profile/trace hook on 3.11)

_Watcher = Watcher

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
        self.values = []         # (mapping, key, expected): identity, or equality for scalars
        self.epoch = ops.EPOCH[0]
        self._seen = set()
        self.pre = {}            # container snapshots taken before the run
        self.roots = []          # objects whose attribute reads are guarded (objects())
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
        for d, k, v in self.values:
            ok = f"(v := {bind(d)}.get({k!r}, MISSING)) is {bind(v)}"
            if type(v) in _SCALARS:
                ok += f" or (type(v) is {bind(type(v))} and v == {bind(v)})"
            lines.append(f"    if not ({ok}): return {f'attribute {k!r} was rebound'!r}")
        for c, snap in self.containers:
            test = (f"{bind(c)} != {bind(snap)}" if isinstance(snap, (list, dict))
                    else f"snapshot({bind(c)}) != {bind(snap)}")
            lines.append(f"    if {test}: return 'a container the function read was modified'")
        lines.append(f"    if EPOCH[0] != {self.epoch}: return \"revtape's op table changed\"")
        lines.append("    return None")
        exec("\n".join(lines), env)
        return env["check"]

    def __len__(self):
        return (len(self.items) + len(self.attrs) + len(self.cells) + len(self.containers)
                + len(self.values) + 1)

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
                self.roots.append(v)
                self._container(v, self.pre.get(id(cell)))
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
                self._container(globs[name], self.pre.get((id(globs), name)))
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
                items = o.values() if isinstance(o, dict) else o
                if len(o) <= 64 and depth < max_depth:
                    if not isinstance(o, tuple):
                        self._container(o, None)
                    stack.extend((v, depth + 1) for v in items)
                continue
            cls = type(o)
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
                    if isinstance(v, (types.FunctionType, functools.partial, types.MethodType)):
                        self.function(v)                    # self.link = user_fn: its code too
                    if depth < max_depth:
                        stack.append((v, depth + 1))
                elif raw is not _MISSING:
                    if d is not None:
                        self.item(d, name)                  # not shadowed on the instance
                    if klass.__flags__ & _HEAPTYPE:         # a Python class: rebindable
                        self.item(klass.__dict__, name)     # the class attribute itself

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
            for v in (obj.values() if isinstance(obj, dict) else obj):
                if isinstance(v, (types.FunctionType, functools.partial, types.MethodType)):
                    self.function(v)
                self.roots.append(v)


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


_HEAPTYPE = 1 << 9          # Py_TPFLAGS_HEAPTYPE: classes made by a class statement
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
        self._warned_draws = False
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

    def _record(self, entry, args, kwargs, proxy_draws=True):
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
        draws = _DrawInputs(tape, targs) if proxy_draws else None
        watcher = _Watcher()
        try:
            with gc_paused():
                out = watcher.run(self.fun, *targs, **kwargs)
        except Exception:
            if not draws:
                raise
            # f could not take its draws as tracked values (float(z), z.astype(int)):
            # put the generators back and record it with plain draws
            draws.rewind()
            return self._record(entry, args, kwargs, proxy_draws=False)
        if self.has_aux:
            out, aux = functional.split_aux(out)
        tape.finish(out)
        tape._scalar_output()
        spec = functional.aux_spec(tape, aux) if self.has_aux else None
        _, diff, data = self._split(args, kwargs)
        entry.layout = functional.layout_of(args, self.argnums)
        if draws and not draws.exact(watcher):
            draws = None
            watcher.draws.append(("a draw from a Generator argument that cannot be replayed",
                                  "(a method other than standard_normal/random/"
                                  "standard_exponential(size))"))
        if draws is not None and not draws.log:
            draws = None
        if any(s is None or draws is None or id(s) not in draws.streams
               for s in watcher.draw_streams) or (watcher.draws and draws is None):
            # A compiled tape would replay these draws as constants.  Re-running
            # f on every call draws as f does; this call's answer is the
            # recording's own, so the generator advanced exactly once.
            entry.eager = True
            if not self._warned_draws:
                self._warned_draws = True
                warnings.warn(f"{self.__name__} draws random numbers ({watcher.draw_report()}); "
                              "revtape records it on every call so that each call draws afresh "
                              "(correct, but not compiled). Pass the noise in as an argument "
                              "to get a compiled replay", RandomDrawWarning, stacklevel=3)
            self._stats["records"] += 1
            value = tape._vals[tape._output._id]
            grads = tape._grads_out(tape._reverse(1.0), None)
            if isinstance(grads, tuple):
                grads = grads[:len(diff)]         # not the data arguments
            if entry.layout is not None:
                grads = functional.regroup(grads, entry.layout)
            if self.has_aux:
                value = (value, functional.plain_aux(aux))
            return self._result(value, grads)
        guards = collect_guards(self.fun, watcher, pre, args, kwargs)
        ctape = CompiledTape(tape, n_grad=len(diff))
        self._stats["records"] += 1
        variant = _Variant(ctape, guards)
        if spec is not None:
            variant.replay = functional.AuxReplay(ctape, spec)
        first = variant.replay             # this call replays the recording's own draws
        entry.variants.insert(0, variant)
        x = diff + data
        if draws is not None:
            variant.replay = draws.replay(variant.replay)
            x = x + list(draws.recorded())
        try:
            value, grads = first(x[0] if len(x) == 1 else tuple(x))
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


class _DrawingGenerator(np.random.Generator):
    """Stands in, while f is recorded, for a numpy Generator passed to f as an
    argument, drawing from the same bit generator.  standard_normal, random
    and standard_exponential called with a size alone return the numbers as
    tracked tape inputs, so every use of them is on the tape (or an escape
    such as float(z) fails the recording, which is then redone with plain
    draws); each replay refills those inputs by the same calls, in order, on
    the same generator -- the numbers a re-run of f would draw.  Any other
    method marks the recording not replayable (f is then recorded on every
    call)."""

    _REPLAYABLE = ("standard_normal", "random", "standard_exponential")

    def __init__(self, gen, tape, log):
        np.random.Generator.__init__(self, gen.bit_generator)
        self._rt = (gen, tape, log)
        self._rt_opaque = False

    def __getattribute__(self, name):
        if not name.startswith("_") and name not in _DrawingGenerator._REPLAYABLE \
                and name not in ("bit_generator", "spawn"):
            object.__setattr__(self, "_rt_opaque", True)
        return object.__getattribute__(self, name)

    def _rt_draw(self, name, args, kwargs):
        value = getattr(np.random.Generator, name)(self, *args, **kwargs)
        if len(args) + len(kwargs) > 1 or (kwargs and "size" not in kwargs):
            object.__setattr__(self, "_rt_opaque", True)     # dtype, out, loc...: not replayed
            return value
        gen, tape, log = self._rt
        size = args[0] if args else kwargs.get("size")
        log.append((gen, name, size))
        return tape.track(value)

    def standard_normal(self, *args, **kwargs):
        return self._rt_draw("standard_normal", args, kwargs)

    def random(self, *args, **kwargs):
        return self._rt_draw("random", args, kwargs)

    def standard_exponential(self, *args, **kwargs):
        return self._rt_draw("standard_exponential", args, kwargs)


class _DrawInputs:
    """The Generator arguments of one recording, replaced by
    _DrawingGenerator, and the draws logged as tape inputs."""

    def __init__(self, tape, targs):
        self.tape, self.log, self.proxies, self.streams, self.before = tape, [], [], {}, []
        for i, a in enumerate(targs):
            if type(a) is np.random.Generator:
                p = _DrawingGenerator(a, tape, self.log)
                targs[i] = p
                self.proxies.append(p)
                self.streams[id(a.bit_generator)] = a.bit_generator
                self.before.append((a.bit_generator, a.bit_generator.state))
        self.n_inputs = len(tape._inputs)

    def __bool__(self):
        return bool(self.proxies)

    def rewind(self):
        for bg, state in self.before:
            bg.state = state

    def exact(self, watcher):
        """The logged calls account for every move of the generators."""
        if any(p._rt_opaque for p in self.proxies):
            return False
        copies = {id(bg): np.random.Generator(type(bg)()) for bg, _ in self.before}
        for bg, state in self.before:
            copies[id(bg)].bit_generator.state = state
        for gen, name, size in self.log:
            getattr(copies[id(gen.bit_generator)], name)(size=size)
        return all(_freeze(copies[id(bg)].bit_generator.state) == _freeze(bg.state)
                   for bg, _ in self.before)

    def recorded(self):
        return tuple(self.tape._vals[t._id] for t in self.tape._inputs[self.n_inputs:])

    def replay(self, value_and_gradient):
        steps = [(getattr(gen, name), size) for gen, name, size in self.log]
        streams = [bg for bg, _ in self.before]

        def replay(x):
            saved = [bg.state for bg in streams]
            xs = (x if type(x) is tuple else (x,)) + tuple(draw(size=size) for draw, size in steps)
            try:
                return value_and_gradient(xs)
            except BaseException:       # a branch guard failed: as if this call never drew
                for bg, st in zip(streams, saved):
                    bg.state = st
                raise
        return replay


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
