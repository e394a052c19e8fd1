"""Watching a recording run: which user code ran, which objects were `self`
in it, which functions were called, and which random draws it made.

rt.grad turns what it sees into binding guards (transforms.py); every
recording (rt.grad and the explicit tapes) turns the draws into a
RandomDrawWarning, and rt.grad into recording on every call, because a draw
recorded on a tape is a constant that every replay would reuse.

How the run is watched, without taking anything from profilers, debuggers
or coverage that are already running:

* 3.12+: ``sys.monitoring`` under a tool id of our own, freed afterwards:
  PY_START everywhere, PY_RETURN and CALL as local events on user code only
  (far cheaper than global events: docs/design.md).  CALL gives
  the callable and its first argument, so a draw called from user code is
  seen exactly, with its line.
* 3.11, nothing else watching: ``sys.settrace``, one event per Python frame
  (the profile hook's two per call of any kind, C calls included, made the
  first call several times slower); user frames get a local tracer for
  their return, with line events off.
* 3.11 otherwise: ``sys.setprofile``.  A hook already installed from Python (the pure
  Python ``profile`` module, a user hook, an outer recording) is called from
  ours for every event and restored as it was.  cProfile's hook is C and
  cannot be called from Python, so while it runs we leave it alone and
  watch through ``sys.settrace`` instead, chaining the tracer (pdb,
  coverage) that may be there the same way.

Draws: numpy's Generator methods are Cython functions that emit no profile
event on 3.11, so besides the events (c_call of ``random.Random``'s C methods;
every CALL on 3.12+) the watcher compares the state of every generator the
user code could reach (its arguments and locals, globals it names, closure
cells, and up to three links into them -- ``self.sampler.rngs[0]``) before
and after the run.  A
state that moved is a draw; its call site is found in the code that ran.
"""

import dis
import functools
import os
import random as _random
import sys
import sysconfig
import threading
import types

import numpy as np

# the package root (this file is in its trace/ folder): frames in it are revtape's own
_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SKIP_DIRS = tuple({os.path.abspath(p) for p in (
    sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("purelib"),
    sysconfig.get_paths().get("platlib"), _PKG_DIR) if p})
_MISSING = object()
_UNREADABLE = object()


from ..errors import RandomDrawWarning, warn as warn_user  # noqa: E402  (defined with every revtape warning)


@functools.lru_cache(maxsize=4096)
def is_user_file(filename):
    if not filename or filename.startswith("<frozen"):
        return False
    path = os.path.abspath(filename)
    return not path.startswith(_SKIP_DIRS)


# ---------------------------------------------------------------- random number generators

_GENERATOR = np.random.Generator
_RANDOMSTATE = np.random.RandomState
_BITGEN = np.random.BitGenerator
_RNG_TYPES = (_GENERATOR, _RANDOMSTATE, _BITGEN, _random.Random)
_IS_RNG = {}
_NO_RNG_INSIDE = (type, np.ndarray, np.generic, float, int, complex, str, bytes, bool,
                  type(None), types.FunctionType, types.BuiltinFunctionType, types.CodeType,
                  functools.partial, np.ufunc)
# Methods of those objects that do not advance the stream.
_NOT_DRAWS = frozenset({
    "getstate", "get_state", "__getstate__", "__reduce__", "__reduce_ex__", "__repr__",
    "__str__", "__sizeof__", "__eq__", "__ne__", "__hash__", "__setstate__", "setstate",
    "set_state", "spawn", "__init__", "__new__", "__copy__", "__deepcopy__",
    "__init_subclass__", "__class_getitem__", "__dir__", "__format__", "__getattribute__",
    "__setattr__", "__delattr__", "__subclasshook__"})


def _public_methods(*classes):
    return {n for c in classes for n in dir(c)
            if not n.startswith("_") and callable(getattr(c, n, None))}


# Attribute names whose load marks a likely draw site in the code that ran
# (`rng.standard_normal`, `np.random.normal`, `random.gauss`, `randn`).
_DRAW_NAMES = frozenset(
    (_public_methods(_GENERATOR, _RANDOMSTATE, _random.Random)
     | {n for n in dir(np.random) if callable(getattr(np.random, n, None))
        and isinstance(getattr(np.random, n), types.MethodType)}
     | {"random_raw", "rvs"}) - _NOT_DRAWS - {"bit_generator"})


def _stream(obj):
    """The object whose state a draw from obj advances, with a label."""
    if isinstance(obj, _GENERATOR):
        return obj.bit_generator, f"Generator({type(obj.bit_generator).__name__})"
    if isinstance(obj, _RANDOMSTATE):
        return obj, "RandomState"                   # its gauss cache is part of the stream
    if isinstance(obj, _BITGEN):
        return obj, type(obj).__name__
    if isinstance(obj, _random.Random):
        return obj, "random.Random"
    return None, None


def _freeze(v):
    if isinstance(v, dict):
        return tuple((k, _freeze(x)) for k, x in v.items())
    if isinstance(v, (tuple, list)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, np.ndarray):
        return (v.dtype.str, v.tobytes())
    return v


def _fingerprint(stream):
    try:
        if isinstance(stream, _BITGEN):
            return _freeze(stream.state)
        if isinstance(stream, _RANDOMSTATE):
            return _freeze(stream.get_state(legacy=False))
        return stream.getstate()
    except Exception:           # a generator whose state cannot be read: never "moved"
        return _UNREADABLE


def _fresh_state(bitgen):
    """The state a bit generator had when it was made, when that can be known."""
    try:
        return _freeze(type(bitgen)(bitgen.seed_seq).state)
    except Exception:       # a bit generator built some other way: unknown
        return None


def _site(frame):
    """file:line of the innermost user frame at or above frame."""
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


@functools.lru_cache(maxsize=1024)
def _draw_loads(code):
    """(name loaded just before, name, line) for each load of a draw-like
    name in code: where a moved generator state most likely came from."""
    out, prev = [], None
    for ins in dis.get_instructions(code):
        if ins.opname.startswith("LOAD"):
            if ins.argval in _DRAW_NAMES and ins.positions and ins.positions.lineno:
                out.append((prev, ins.argval, ins.positions.lineno))
            prev = ins.argval
        elif ins.opname not in ("CACHE", "PRECALL", "EXTENDED_ARG", "NOP"):
            prev = None
    return tuple(out)


_FACTORIES = frozenset({"default_rng", "RandomState", "PCG64", "PCG64DXSM", "MT19937", "Philox",
                        "SFC64", "SystemRandom"})


@functools.lru_cache(maxsize=1024)
def _factory_lines(code):
    """Lines of code that make a generator (np.random.default_rng(),
    random.Random()): on 3.11 one made and drawn from in one expression
    leaves no trace but this."""
    out, prev = [], None
    for ins in dis.get_instructions(code):
        if ins.opname.startswith("LOAD"):
            if (ins.argval in _FACTORIES or (ins.argval in ("Generator", "Random")
                                             and prev == "random")) \
                    and ins.positions and ins.positions.lineno:
                out.append((ins.argval, ins.positions.lineno))
            prev = ins.argval
        elif ins.opname not in ("CACHE", "PRECALL", "EXTENDED_ARG", "NOP"):
            prev = None
    return tuple(out)


def _draw_sites(codes, names):
    """file:line of the likeliest draws of a generator known under `names`:
    `rng.normal` (rng one of its names) first, any other drawing method next,
    a bare `.random` (also numpy's module attribute) last."""
    ranked = []
    for code in codes:
        for prev, name, line in _draw_loads(code):
            rank = 0 if (prev in names or name in names) else (2 if name == "random" else 1)
            ranked.append((rank, code.co_filename, line))
    ranked.sort(key=lambda r: r[0])
    return list(dict.fromkeys(f"{f}:{line}" for _, f, line in ranked))


# ---------------------------------------------------------------- the watcher

class Watcher:
    """Runs f once and notes what it used (see the module docstring).

    codes      {code: (globals, owner class or None)} for user code that ran
    functions  {id: function} of Python functions seen being called (3.12+)
    selves     {id: object} that were self in a user method frame and existed
               before the run
    draws      [(what, "file:line")] random draws made during the run
    """

    _TOOL_IDS = (3, 4, 5, 0, 1, 2)

    def __init__(self):
        self.codes = {}
        self.functions = {}
        self.selves = {}
        self.created = set()
        self.draws = []
        self.draw_streams = []      # the stream of each draw (None: unknown)
        self._streams = {}  # id(stream) -> [stream, fingerprint, label, seen drawing, names]
        self._np_random_added = self._random_added = False
        self._thread = None
        self._entered = False
        self._globals_seen = set()
        self._codes_scanned = set()
        self._hooks = False
        self._objs_scanned = {}

    # ------------------------------------------------ events (all versions)
    def _enter(self, frame):
        code = frame.f_code
        if not is_user_file(code.co_filename):
            return
        if code.co_name == "__init__" and code.co_argcount:
            obj = frame.f_locals.get(code.co_varnames[0], _MISSING)
            if obj is not _MISSING:
                self.created.add(id(obj))       # made by this run: not a root
        locs = frame.f_locals
        if code not in self.codes:
            owner = None
            if code.co_argcount and code.co_varnames[0] in ("self", "cls"):
                obj = locs.get(code.co_varnames[0], _MISSING)
                if obj is not _MISSING:
                    owner = obj if isinstance(obj, type) and code.co_varnames[0] == "cls" \
                        else type(obj)
            self.codes[code] = (frame.f_globals, owner)
        if code.co_argcount and code.co_varnames[0] == "self":
            obj = locs.get("self", _MISSING)
            if obj is not _MISSING and id(obj) not in self.created and \
                    not getattr(obj, "_is_tracked", False):
                self.selves.setdefault(id(obj), obj)
        self._scan(frame, locs)

    def _scan(self, frame, locs):
        """Note the generators this frame can reach, before it runs.  Those
        in module globals and those f was given existed before the run: their
        state now is the baseline.  One first met in a nested frame's locals
        may have been made (and drawn from) during the run: it is compared
        with the state its seed gives."""
        first = not self._entered
        self._entered = True
        for k, v in locs.items():
            self._consider(v, 3, not first, k)
        globs = frame.f_globals
        if id(globs) not in self._globals_seen:
            self._globals_seen.add(id(globs))
            for k, v in list(globs.items()):
                if isinstance(v, _RNG_TYPES):
                    self._add(v, False, k)
        code = frame.f_code
        if code in self._codes_scanned:         # a helper called in a loop: once
            return
        self._codes_scanned.add(code)
        for name in code.co_names:
            v = globs.get(name, _MISSING)
            if v is not _MISSING:
                self._consider(v, 3, False, name)
        if "random" in code.co_names:
            self._add_global_streams()

    def _consider(self, v, depth, new, name=None):
        if isinstance(v, _RNG_TYPES):
            self._add(v, new, name)
        elif isinstance(v, types.MethodType) and isinstance(v.__self__, _RNG_TYPES):
            self._add(v.__self__, new, name)       # from numpy.random import normal
        elif isinstance(v, types.ModuleType):
            if v is np.random or v is _random:     # (np.random.normal: "random" in co_names)
                self._add_global_streams()
            elif id(v.__dict__) not in self._globals_seen and \
                    is_user_file(getattr(v, "__file__", None)):
                self._globals_seen.add(id(v.__dict__))
                for k, x in list(v.__dict__.items()):
                    if isinstance(x, _RNG_TYPES):
                        self._add(x, False, k)
        elif depth and not isinstance(v, _NO_RNG_INSIDE) and \
                self._objs_scanned.get(id(v), 0) < depth and not getattr(v, "_is_tracked", False):
            # self.rng, self.sampler.rng, self.rngs[i]: looked into once per object
            self._objs_scanned[id(v)] = depth
            if isinstance(v, (list, tuple, dict)):
                if len(v) <= 64:
                    for x in list(v.values() if isinstance(v, dict) else v):
                        self._consider(x, depth - 1, new, name)
                return
            try:
                d = getattr(v, "__dict__", None)
            except Exception:           # an object whose __getattr__ misbehaves
                return
            if type(d) is dict and len(d) <= 256:
                for k, x in list(d.items()):
                    self._consider(x, depth - 1, new, k)

    def _add_global_streams(self):
        if not self._np_random_added:
            self._np_random_added = True
            self._add(np.random.mtrand._rand, False, "random")
        if not self._random_added:
            self._random_added = True
            self._add(_random._inst, False, "random")

    def _add(self, obj, new, name=None):
        stream, label = _stream(obj)
        if stream is None:
            return
        if id(stream) in self._streams:
            if name:
                self._streams[id(stream)][4].add(name)
            return
        fp = _fingerprint(stream)
        entry = [stream, fp, label, False, {name} if name else set()]
        self._streams[id(stream)] = entry
        if new and isinstance(stream, _BITGEN):
            # first seen after the run made it: compare with its seeded start
            fresh = _fresh_state(stream)
            if fresh is None or fresh != fp:
                entry[1] = fresh

    def _leave(self, frame):
        # Generators f made itself (rng = np.random.default_rng()) are seen
        # only now; whether they were drawn from is judged from their seed.
        if is_user_file(frame.f_code.co_filename):
            for v in frame.f_locals.values():
                if isinstance(v, _GENERATOR) and id(v.bit_generator) not in self._streams:
                    self._add(v, True)

    def _exact(self, receiver, name, frame):
        if name in _NOT_DRAWS:
            return
        stream, label = _stream(receiver)
        if stream is None:
            return
        entry = self._streams.get(id(stream))
        if entry is None:
            entry = self._streams[id(stream)] = [stream, None, label, False, set()]
        if not entry[3]:
            entry[3] = True
            self.draws.append((f"{label}.{name}", _site(frame)))
            self.draw_streams.append(stream)

    # ------------------------------------------------ 3.11: profile hook
    def _profile(self, frame, event, arg):
        # ~60 events an op while recording: the common ones exit first
        if event == "c_call":
            recv = getattr(arg, "__self__", None)
            if recv is not None:
                t = type(recv)
                is_rng = _IS_RNG.get(t)
                if is_rng is None:
                    is_rng = _IS_RNG[t] = issubclass(t, _RNG_TYPES)
                if is_rng:
                    self._exact(recv, arg.__name__, frame)
        elif event == "call":
            self._enter(frame)
        elif event == "return":
            self._leave(frame)

    def _chained_profile(self, prev):
        def hook(frame, event, arg):
            self._profile(frame, event, arg)
            prev(frame, event, arg)
        return hook

    def _chained_trace(self, prev):
        def trace(frame, event, arg):
            if event == "call":
                self._enter(frame)
            return prev(frame, event, arg) if prev is not None else None
        return trace

    # ------------------------------------------------ 3.12+: sys.monitoring
    # Every Python function start and every call in the program reaches
    # these while recording: non-user code leaves after one cached lookup.
    def _monitor_start(self, code, offset):
        if is_user_file(code.co_filename) and threading.get_ident() == self._thread:
            if code not in self.codes:
                E = sys.monitoring.events
                sys.monitoring.set_local_events(self._tool, code, E.PY_RETURN | E.CALL)
                self._local.append(code)
            self._enter(sys._getframe(1))

    def _monitor_return(self, code, offset, retval):
        if is_user_file(code.co_filename) and threading.get_ident() == self._thread:
            self._leave(sys._getframe(1))

    def _monitor_call(self, code, offset, fn, arg0):
        t = type(fn)
        if t is types.FunctionType:
            if is_user_file(fn.__code__.co_filename):
                self.functions.setdefault(id(fn), fn)
            return
        if t is types.MethodType:
            f = fn.__func__
            if type(f) is types.FunctionType and is_user_file(f.__code__.co_filename):
                self.functions.setdefault(id(f), f)
            recv = fn.__self__
        else:
            recv = getattr(fn, "__self__", None)
        rt = type(recv)
        hit = _IS_RNG.get(rt)
        if hit is None:
            hit = _IS_RNG[rt] = issubclass(rt, _RNG_TYPES)
        if hit:
            if threading.get_ident() == self._thread:
                self._exact(recv, getattr(fn, "__name__", "?"), sys._getframe(1))
            return
        at = type(arg0)
        hit = _IS_RNG.get(at)
        if hit is None:
            hit = _IS_RNG[at] = issubclass(at, _RNG_TYPES)
        if hit and threading.get_ident() == self._thread:
            # rng.method(...) compiled as LOAD_ATTR(method) + CALL: the
            # callable is the class's unbound method, arg0 the generator
            name = getattr(fn, "__name__", None)
            if name and _unbound_of(at, name) is fn:
                self._exact(arg0, name, sys._getframe(1))

    def _run_monitoring(self, fn, args, kwargs):
        mon = sys.monitoring
        tool = None
        for t in self._TOOL_IDS:
            try:
                mon.use_tool_id(t, "revtape")
            except ValueError:              # held by a debugger, coverage, another thread
                continue
            tool = t
            break
        if tool is None:
            return _MISSING                 # every tool id taken: fall back to the 3.11 way
        E = mon.events
        try:
            self._thread = threading.get_ident()
            mon.register_callback(tool, E.PY_START, self._monitor_start)
            mon.register_callback(tool, E.PY_RETURN, self._monitor_return)
            mon.register_callback(tool, E.CALL, self._monitor_call)
            # Globally only PY_START; calls and returns are watched in user
            # code only (local events, set as each user code object starts):
            # the library code recording runs through stays cheap.
            self._tool, self._local = tool, []
            mon.set_events(tool, E.PY_START)
            return fn(*args, **kwargs)
        finally:
            mon.set_events(tool, 0)
            for code in self._local:
                mon.set_local_events(tool, code, 0)
            for ev in (E.PY_START, E.PY_RETURN, E.CALL):
                mon.register_callback(tool, ev, None)
            mon.free_tool_id(tool)

    # ------------------------------------------------ running
    def run(self, fn, *args, **kwargs):
        self._roots(fn, args, kwargs)
        try:
            if sys.version_info >= (3, 12):
                out = self._run_monitoring(fn, args, kwargs)
                if out is not _MISSING:
                    return out
            return self._run_hooks(fn, args, kwargs)
        finally:
            self._finish()

    def _trace_call(self, frame, event, arg):
        # the global trace function: one event per Python call (C calls and
        # returns in revtape's own frames raise none); user frames get a
        # local one that sees their return (no line events)
        if event == "call" and is_user_file(frame.f_code.co_filename):
            self._enter(frame)
            frame.f_trace_lines = False
            return self._trace_local
        return None

    def _trace_local(self, frame, event, arg):
        if event == "return":
            self._leave(frame)
        return self._trace_local

    def _run_hooks(self, fn, args, kwargs):
        self._hooks = True
        previous = sys.getprofile()
        if previous is None and sys.gettrace() is None:
            # Nothing else is watching: the trace hook costs one Python call
            # per Python frame, where the profile hook costs two per call of
            # any kind (the recording makes thousands).  What it misses, the
            # C methods of random.Random, the state comparison sees.
            sys.settrace(self._trace_call)
            try:
                return fn(*args, **kwargs)
            finally:
                sys.settrace(None)
        if previous is None or callable(previous):
            sys.setprofile(self._profile if previous is None else self._chained_profile(previous))
            try:
                return fn(*args, **kwargs)
            finally:
                sys.setprofile(previous)
        # A C profiler (cProfile) holds the profile hook and cannot be called
        # from Python: keep it running and watch calls through the trace hook.
        tracer = sys.gettrace()
        sys.settrace(self._chained_trace(tracer))
        try:
            return fn(*args, **kwargs)
        finally:
            sys.settrace(tracer)

    def run_static(self, fn, call, *args):
        """Run call(*args) (which runs fn) with no hook, comparing the
        generators fn can reach statically (closure, bound self, its
        module's globals and the globals its code names) before and after:
        the explicit tapes' check, which must not slow recording down."""
        self._roots(fn, (), {})
        target = _unwrap(fn)
        code = getattr(target, "__code__", None)
        globs = getattr(target, "__globals__", None)
        if code is not None and globs is not None:
            codes = [code]
            for c in code.co_consts:
                if isinstance(c, types.CodeType):
                    codes.append(c)
            for name in code.co_names:
                v = _unwrap(globs.get(name))
                if isinstance(v, types.FunctionType):
                    codes.append(v.__code__)
            self._entered = True
            for c in codes:
                self.codes.setdefault(c, (globs, None))
                for name in c.co_names:
                    v = globs.get(name, _MISSING)
                    if v is not _MISSING:
                        self._consider(v, 3, False)
                if "random" in c.co_names:
                    self._add_global_streams()
            self._globals_seen.add(id(globs))
            for v in list(globs.values()):
                if isinstance(v, _RNG_TYPES):
                    self._add(v, False)
        try:
            return call(*args)
        finally:
            self._finish()

    def _roots(self, fn, args, kwargs):
        """Generators reachable before the first frame starts (f may be a
        bound method or a partial whose first frame is not user code)."""
        for v in list(args) + list(kwargs.values()):
            self._consider(v, 3, False)
        seen = 0
        while seen < 8:
            seen += 1
            if isinstance(fn, functools.partial):
                for v in list(fn.args) + list(fn.keywords.values()):
                    self._consider(v, 3, False)
                fn = fn.func
            elif isinstance(fn, types.MethodType):
                self._consider(fn.__self__, 3, False)
                fn = fn.__func__
            else:
                break
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                self._consider(cell.cell_contents, 3, False)
            except ValueError:
                pass

    def _finish(self):
        streams, self._streams = self._streams, {}
        for stream, fp, label, exact, names in streams.values():
            if exact or _fingerprint(stream) == fp:
                continue
            sites = _draw_sites(self.codes, names)
            where = ", ".join(sites[:3]) if sites else "<in code revtape does not watch>"
            self.draws.append((f"a draw from a {label}", where))
            self.draw_streams.append(stream)
        if self._hooks and not self.draws:
            # 3.11 sees no call into numpy's Cython methods: a generator made
            # during the run and never bound to a name is invisible, so code
            # that makes one counts as drawing (eager is correct; frozen is not).
            for code in self.codes:
                for name, line in _factory_lines(code):
                    self.draws.append((f"a generator made during the run ({name})",
                                       f"{code.co_filename}:{line}"))
                    self.draw_streams.append(None)
                    return

    def draw_report(self):
        """'Generator(PCG64).standard_normal at file.py:12; ...'"""
        return "; ".join(f"{what} at {site}" for what, site in self.draws[:4]) + \
            ("; ..." if len(self.draws) > 4 else "")


def _unwrap(fn):
    for _ in range(8):
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif isinstance(fn, types.MethodType):
            fn = fn.__func__
        else:
            break
    return fn


def _unbound_of(cls, name):
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def warn_tape_draws(watcher):
    """The explicit tapes keep draws as constants: say so once, at recording."""
    if watcher.draws:
        warn_user(
            f"random numbers were drawn while this tape was recorded ({watcher.draw_report()}); "
            "the tape keeps them as constants, so every replay reuses these numbers. "
            "Use rt.grad(f) to draw afresh on every call, or pass the noise in as an argument; "
            "silence with warnings.filterwarnings('ignore', category=rt.RandomDrawWarning)",
            RandomDrawWarning)
