"""Fresh random draws in rt.grad's compiled replays.

A draw recorded on a tape is a constant, so a compiled replay would reuse the
first call's noise.  While rt.grad records f, every numpy Generator and
RandomState that f can reach -- its arguments, closure cells, the globals its
code names (and the closures and globals of the user functions those lead to),
attributes of objects reached from them (``self.rng``, ``self.sampler.rngs[0]``),
and numpy's legacy ``np.random.*`` functions -- is swapped, in place, for a
stand-in drawing from the same stream.  The stand-in makes each draw it can
replay a tracked tape input (so every use of the numbers is on the tape, or an
escape such as float(z) fails the recording, which is then redone with plain
draws) and logs the call that refills it.  A replay makes the logged calls, in
order, on the same generator objects (guarded by identity where they were
found), writes the numbers into the inputs, and runs the program: the numbers a
re-run of f would draw, and the generators end in the state a re-run leaves.

Replayed: standard_normal, random and standard_exponential (and the legacy
randn, rand, random_sample, sample, ranf, standard_normal, standard_exponential)
with a size; normal(loc, scale, size), uniform(low, high, size) and
exponential(scale, size) with scalar or array parameters, plain or tracked,
as the standard draw of the result's shape transformed on the tape
(loc + scale*z, low + (high-low)*u, scale*e: numpy's own formulas, checked bit
for bit against numpy on a copy of the stream at recording).  integers, choice
and permutation (legacy randint, choice, permutation) are replayed as data:
their integers come back as a DrawnIndex, whose use to index a tracked array
records a gather with refilled indices (ops.take_idx, the VM's GATHER_IDX),
whose use in arithmetic with tracked values makes it a float input, and whose
any other use raises DrawEscape; indexing a float64 array f reaches (closure,
global, attribute) succeeds on a second attempt that stands those arrays in
as _DataView views (lift).  Every other drawing method with plain parameters
(gamma, poisson, multivariate_normal, ...) is refilled by the very same call
(draw_generic).  Anything else (in-place draws such as shuffle, tracked
parameters outside normal/uniform/exponential, dtype/out arguments, a
generator reached where it cannot be swapped) leaves the recording
unreplayable: rt.grad then records on every call.  Exactness
does not rest on having swapped everything: after the run, the logged calls
are replayed on copies of every stream's starting state and must reproduce
each stream's final state, and every stream the watcher saw move must be one
of them.

Swaps are shared between threads recording at once (a reference count per
place) and the stand-ins log only in the thread that is recording, so other
threads drawing meanwhile get plain numpy behaviour (and make the recording
unreplayable, since the stream moved by more than the log).
"""

import functools
import sys
import threading
import types

import numpy as np

from ..trace import tape as _tape_module
from ..trace import tracked as _t
from ..errors import RevtapeError
from ..trace.watch import _freeze, _site, is_user_file

_GEN = np.random.Generator
_RS = np.random.RandomState
_tls = threading.local()
_lock = threading.Lock()
_installed = {}          # place key -> [place, real, replacement, count]
_stand_ins = {}          # id(real) -> [real, stand-in, count]

# method -> (standard draw it is a transform of, the transform's parameter
# names and defaults); a plain standard draw has no parameters
_G_SPECS = {
    "standard_normal": ("standard_normal", ()),
    "random": ("random", ()),
    "standard_exponential": ("standard_exponential", ()),
    "normal": ("standard_normal", (("loc", 0.0), ("scale", 1.0))),
    "uniform": ("random", (("low", 0.0), ("high", 1.0))),
    "exponential": ("standard_exponential", (("scale", 1.0),)),
}
_RS_SPECS = {
    "standard_normal": ("standard_normal", ()),
    "random_sample": ("random_sample", ()),
    "random": ("random_sample", ()),
    "sample": ("random_sample", ()),
    "ranf": ("random_sample", ()),
    "standard_exponential": ("standard_exponential", ()),
    "normal": ("standard_normal", (("loc", 0.0), ("scale", 1.0))),
    "uniform": ("random_sample", (("low", 0.0), ("high", 1.0))),
    "exponential": ("standard_exponential", (("scale", 1.0),)),
    "randn": ("standard_normal", "dims"),
    "rand": ("random_sample", "dims"),
}
# integer draws used as data (DrawnIndex), refilled by the same call
_G_DATA = frozenset({"integers", "choice", "permutation"})
_RS_DATA = frozenset({"randint", "choice", "permutation"})
# Generator methods that do not draw (looking them up marks nothing)
_G_QUIET = frozenset({"bit_generator", "spawn"})
# Every other drawing method (gamma, beta, poisson, multivariate_normal, ...)
# with plain parameters: its result is a tape input (float64) or a DrawnIndex
# (integers), refilled by the very same call.  In place or not numbers: refused.
_NOT_GENERIC = frozenset({"shuffle", "bytes", "seed", "get_state", "set_state", "tomaxint",
                          "random_integers"})


def _drawing_methods(cls, *taken):
    return frozenset(n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n))
                     and not any(n in t for t in taken)) - _NOT_GENERIC


def _active():
    return getattr(_tls, "log", None)


def _parse(specs, name, args, kwargs):
    """(base, size, params) of a replayable call, or None."""
    spec = specs.get(name)
    if spec is None:
        return None
    base, names = spec
    if names == "dims":                     # randn(d0, d1, ...), rand(...)
        if kwargs or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                             for d in args):
            return None
        return base, (tuple(int(d) for d in args) if args else None), {}
    if not names:                           # standard_normal(size=None, dtype=float64, ...)
        kw = dict(kwargs)
        size = kw.pop("size", args[0] if args else None)
        if len(args) > 1 or (args and "size" in kwargs):
            return None
        dtype = kw.pop("dtype", np.float64)
        if kw.pop("method", "zig") != "zig" or kw.pop("out", None) is not None or kw:
            return None
        try:
            if np.dtype(dtype) != np.float64:
                return None
        except TypeError:
            return None
        return base, size, {}
    params = dict(names)
    order = [n for n, _ in names] + ["size"]
    if len(args) > len(order):
        return None
    bound = dict(zip(order, args))
    for k, v in kwargs.items():
        if k not in order or k in bound:
            return None
        bound[k] = v
    size = bound.pop("size", None)
    params.update(bound)
    return base, size, params


def _plain(v):
    return _t._value_of(v) if _t.istracked(v) else v


def _bits_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


class DrawLog:
    """The swaps and the logged draws of one recording (rt.grad._record)."""

    def __init__(self, tape):
        self.tape = tape
        self.steps = []          # (real generator, method, args, kwargs): the refills
        self.inputs = []         # per draw input of the tape, in order: how to fill it
                                 # from the steps' results (_fill)
        self.opaque = []         # why the draws cannot be replayed
        self.reals = {}          # id(real) -> real, every generator swapped or passed
        self.before = {}         # id(stream) -> (kind, stream, state before the run)
        self.streams = {}        # ids the watcher may name a moved stream by
        self.places = []         # (place, real, method or None): where stand-ins are
        self.placed = []         # the same, after stop()
        self.thread = threading.get_ident()
        self.n_inputs = len(tape._inputs)
        self._prev = None
        self._stopped = False
        self.closed = False          # stopped: drawn indices may no longer join the tape
        self.gathered = {}           # id -> arrays f indexed with drawn indices (lift)

    def __bool__(self):
        return bool(self.reals)

    # ------------------------------------------------ starting and stopping
    @classmethod
    def start(cls, tape, fn, targs, kwargs, lift=False):
        """Swap stand-ins for the generators fn can reach (and for generator
        arguments in targs); log draws in this thread until stop().  lift:
        also swap the float64 arrays fn reaches (closure, globals, attributes)
        for views whose indexing by drawn indices is a refilled tape input."""
        log = cls(tape)
        for i, a in enumerate(targs):
            if type(a) in (_GEN, _RS):
                log._note(a)
                targs[i] = _stand_in(a)
        for k, a in list(kwargs.items()):
            if type(a) in (_GEN, _RS):
                log._note(a)
                kwargs[k] = _stand_in(a)
        places, legacy = _find(fn, targs, kwargs, arrays=lift)
        if legacy:
            mod = np.random.__dict__
            for name in list(_RS_SPECS) + sorted(_RS_DATA) + sorted(_RS_GENERIC):
                v = mod.get(name)
                if isinstance(v, types.MethodType) and v.__self__ is np.random.mtrand._rand:
                    places.append((("item", mod, name), v.__self__, name))
        for place, real, attr in places:
            if attr is not _ARRAY:
                log._note(real)
            held = _install(place, real, attr)
            if held is not None:
                log.places.append((place, real, held))
        log._prev, _tls.log = _active(), log
        return log

    def stop(self):
        if self._stopped:
            return
        self._stopped = self.closed = True
        _tls.log = self._prev
        for place, _, _ in self.places:
            _uninstall(place)
        self.placed, self.places = self.places, []
        for real in self.reals.values():
            _release(real)

    def _note(self, real):
        if id(real) in self.reals:
            return
        s = _acquire(real)
        self.streams[id(s)] = s              # the watcher may name it by its stand-in
        self.reals[id(real)] = real
        if type(real) is _GEN:
            bg = real.bit_generator
            self.streams[id(bg)] = bg
            if id(bg) not in self.before:
                self.before[id(bg)] = ("gen", bg, bg.state)
        else:
            bg = real._bit_generator
            self.streams[id(real)] = real
            self.streams[id(bg)] = bg
            if id(bg) in self.before:           # a RandomState sharing a Generator's stream
                self.refuse("a RandomState and another generator share one bit generator")
            self.before[id(bg)] = ("rs", real, real.get_state())

    def refuse(self, what):
        """Note a draw that cannot be replayed, with the user's line that made it."""
        self.opaque.append((what, _site(sys._getframe(1))))

    # ------------------------------------------------ drawing (called by the stand-ins)
    def draw(self, real, specs, name, args, kwargs, call):
        if id(real) not in self.reals:
            self.refuse(f"{name} on a generator found during the run")
            return call()
        parsed = _parse(specs, name, args, kwargs)
        if parsed is None:
            self.refuse(f"{type(real).__name__}.{name}"
                               + (" with these arguments" if name in specs else ""))
            return call()
        base, size, params = parsed
        if any(_t.istracked(v) and (v._tape is not self.tape or v._id < 0)
               for v in params.values()):
            self.refuse(f"{name} with a parameter from another tape")
            return call()
        if not params:
            return self._input(self._step(real, base, (), {"size": size}))
        # numpy's answer on a copy of the stream: its errors, its shape, its bits
        want = getattr(_twin(real), name)(**{k: _plain(v) for k, v in params.items()},
                                           size=size)
        zsize = np.shape(want) if isinstance(want, np.ndarray) else None
        z = self._input(self._step(real, base, (), {"size": zsize}))
        p = {}
        for k, v in params.items():
            if not _t.istracked(v):
                v = np.asarray(v, dtype=np.float64)
                v = float(v) if v.ndim == 0 else v
            p[k] = v
        if base == "standard_normal":
            out, scale = p["loc"] + p["scale"] * z, p["scale"]
        elif base == "standard_exponential":
            out, scale = p["scale"] * z, p["scale"]
        else:
            scale = p["high"] - p["low"]
            out = p["low"] + scale * z
        if not _bits_equal(_plain(out), want):
            self.refuse(f"{name}: the tape's transform of the standard draw did not "
                               "reproduce numpy's numbers")
            return want
        if _t.istracked(scale):
            # numpy refuses a negative scale (or an infinite range); the
            # predicate is recorded with the result seen (a zero scale: False),
            # so a replay whose parameters cross the boundary re-records, and
            # that recording raises numpy's own error if numpy refuses them
            from ..numpy_api.structure import _guard_all
            if base == "random":
                _guard_all(np.abs(scale) < np.inf,
                           f"the range of {name}'s tracked bounds became infinite or nan")
            else:
                _guard_all(scale > 0, f"{name}'s tracked scale crossed 0")
        return out

    def _step(self, real, method, args, kwargs):
        """Make one logged call on the real generator: (step number, result)."""
        value = getattr(real, method)(*args, **kwargs)
        self.steps.append((real, method, args, kwargs))
        return len(self.steps) - 1, value

    def _input(self, step, recipe=None):
        j, value = step
        self.inputs.append(recipe or ("step", j))
        return self.tape.track(value)

    def draw_data(self, real, name, args, kwargs, call):
        """integers, choice, permutation: integer results become DrawnIndex
        (indices of tracked arrays, or numbers promoted to float on the
        tape), float results tape inputs; the refill is the same call."""
        if id(real) not in self.reals or any(_t.istracked(v) for v in
                                             list(args) + list(kwargs.values())):
            self.refuse(f"{name} with these arguments")
            return call()
        if name == "permutation" and not (args and isinstance(args[0], (int, np.integer))
                                          or isinstance(kwargs.get("x"), (int, np.integer))):
            if not (args and isinstance(args[0], np.ndarray) and args[0].dtype.kind in "iuf"):
                self.refuse(f"{name} of this argument")
                return call()
        j, value = self._step(real, name, args, kwargs)
        kind = np.asarray(value).dtype.kind
        if kind in "iu":
            return DrawnIndex(self, j, value)
        if kind == "f" and np.asarray(value).dtype == np.float64:
            return self._input((j, value))
        self.refuse(f"{name} returning {np.asarray(value).dtype}")
        return value

    def draw_generic(self, real, name, args, kwargs, call):
        """Any other drawing method with plain parameters: the result is a
        tape input (float64) or a DrawnIndex (integers), refilled by the same
        call on the same generator -- the same numbers, the same stream."""
        if id(real) not in self.reals or "out" in kwargs or _holds_tracked(args, kwargs):
            self.refuse(f"{type(real).__name__}.{name}"
                        + (" with tracked parameters" if id(real) in self.reals else ""))
            return call()
        j, value = self._step(real, name, args, kwargs)
        dtype = np.asarray(value).dtype
        if dtype.kind in "iu":
            return DrawnIndex(self, j, value)
        if dtype == np.float64:
            return self._input((j, value))
        self.refuse(f"{type(real).__name__}.{name} returning {dtype}")
        return value

    def gather_data(self, real, key):
        """real[key] (real a float64 array f reaches, key holding drawn
        indices) as a tape input that each replay refills by indexing the
        array again with the fresh draws."""
        parts = key if type(key) is tuple else (key,)
        drawn = [p for p in parts if type(p) is DrawnIndex]
        if any(p._log is not self for p in drawn) or self.closed:
            drawn[0]._escape()
        template = tuple(_Slot(("D", p._j)) if type(p) is DrawnIndex else p for p in parts)
        key_now = tuple(p._a if type(p) is DrawnIndex else p for p in parts)
        value = real[key_now[0] if len(key_now) == 1 else key_now]      # numpy's IndexError
        self.inputs.append(("rows", real, template))
        self.gathered[id(real)] = real
        return self.tape.track(np.asarray(value, dtype=np.float64))

    # ------------------------------------------------ after the run
    def rewind(self):
        for kind, stream, state in self.before.values():
            if kind == "gen":
                stream.state = state
            else:
                stream.set_state(state)

    def exact(self):
        """The logged calls account for every move of every stream."""
        if self.opaque or len(self.tape._inputs) - self.n_inputs != len(self.inputs):
            return False            # (an input that no refill recipe fills)
        twins = {}
        for key, (kind, stream, state) in self.before.items():
            if kind == "gen":
                twin = _GEN(type(stream)())
                twin.bit_generator.state = state
            else:
                twin = _RS(type(stream._bit_generator)())
                twin.set_state(state)
            twins[key] = twin
        for real, method, args, kwargs in self.steps:
            key = id(real.bit_generator if type(real) is _GEN else real._bit_generator)
            getattr(twins[key], method)(*args, **kwargs)
        for key, (kind, stream, _) in self.before.items():
            if kind == "gen":
                same = _freeze(twins[key].bit_generator.state) == _freeze(stream.state)
            else:
                same = _freeze(twins[key].get_state(legacy=False)) == \
                    _freeze(stream.get_state(legacy=False))
            if not same:
                return False
        return True

    def recorded(self):
        return tuple(self.tape._vals[t._id] for t in self.tape._inputs[self.n_inputs:])

    def add_guards(self, guards, snapshot):
        """Replays draw from the generators found at record time: guard that
        each place still holds its generator (a rebinding re-records)."""
        drew = {id(real) for real, _, _, _ in self.steps} | set(self.gathered)
        for (kind, holder, key), real, want in self.placed:
            if id(real) not in drew:
                continue                    # not drawn from: rebinding it changes nothing
            if kind == "cell":
                guards.cells.append((holder, want))
            elif kind == "item":
                guards.items.append((holder, key, want))
            elif kind == "slot":
                guards.attrs.append((holder, key, want))
            else:                               # a list element: the list's snapshot
                guards.containers.append((holder, snapshot(holder)))

    def replay(self, run, guarded=True):
        """The compiled call: draw afresh into the draw inputs, then run.  A
        program with guards may refuse the replay (rt.grad then re-records):
        the streams it drew from are put back first, as if the call never drew
        (saved before each replay: ~3 us a Generator, ~100 us a RandomState,
        whose MT19937 state is 624 words)."""
        steps = tuple((getattr(real, m), a, kw) for real, m, a, kw in self.steps)
        drew = {id(real.bit_generator if type(real) is _GEN else real._bit_generator)
                for real, _, _, _ in self.steps}
        states = tuple(v for key, v in self.before.items() if key in drew) if guarded else ()
        fills = tuple(_FILLS[r[0]](r) for r in self.inputs)

        def replay(x):
            saved = [(s.state if k == "gen" else s.get_state()) for k, s, _ in states]
            try:
                results = [d(*a, **kw) for d, a, kw in steps]
                xs = (x if type(x) is tuple else (x,)) + tuple(f(results) for f in fills)
                return run(xs)
            except BaseException:       # a guard failed: as if this call never drew
                for (k, s, _), st in zip(states, saved):
                    if k == "gen":
                        s.state = st
                    else:
                        s.set_state(st)
                raise
        return replay


def _holds_tracked(args, kwargs):
    for v in list(args) + list(kwargs.values()):
        if _t.istracked(v) or (isinstance(v, (list, tuple)) and any(_t.istracked(x) for x in v)):
            return True
    return False


def _twin(real):
    if type(real) is _GEN:
        bg = real.bit_generator
        twin = _GEN(type(bg)())
        twin.bit_generator.state = bg.state
    else:
        twin = _RS(type(real._bit_generator)())
        twin.set_state(real.get_state())
    return twin


# ---------------------------------------------------------------- drawn integers

class DrawEscape(RevtapeError):
    """Drawn integers were used where the tape cannot follow them (rt.grad
    then records f with plain draws, on every call)."""


def _fill_step(recipe):
    j = recipe[1]
    return lambda results: results[j]


def _fill_float(recipe):
    j = recipe[1]
    return lambda results: np.asarray(results[j], dtype=np.float64)


def _fill_flat(recipe):
    _, base, template = recipe

    def fill(results):
        key = tuple(results[p[1]] if type(p) is _Slot else p for p in template)
        # numpy's own indexing: its bounds checks and its IndexError
        return np.asarray(base[key[0] if len(key) == 1 else key], dtype=np.float64).reshape(-1)
    return fill


def _fill_rows(recipe):
    _, real, template = recipe

    def fill(results):
        key = tuple(results[p[1]] if type(p) is _Slot else p for p in template)
        # the array as it is now (as a re-run reads it), indexed by numpy
        return np.asarray(real[key[0] if len(key) == 1 else key], dtype=np.float64)
    return fill


_FILLS = {"step": _fill_step, "float": _fill_float, "flat": _fill_flat, "rows": _fill_rows}


_ARRAY = "array"        # _find's marker for a float64 array place (lift)


class _DataView(np.ndarray):
    """Stands in, in its place, for a float64 array f reaches (second
    recording attempt, after drawn indices indexed a plain array): indexing
    it with drawn indices gives a refilled tape input; everything else is the
    plain array's behaviour, with plain results."""

    def __getitem__(self, key):
        real = self.__dict__.get("_rt_real")
        if real is not None and (type(key) is DrawnIndex or (type(key) is tuple and any(
                type(k) is DrawnIndex for k in key))):
            log = _active()
            if log is not None:
                return log.gather_data(real, key)
        return np.ndarray.__getitem__(self.view(np.ndarray), key)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = tuple(x.view(np.ndarray) if isinstance(x, _DataView) else x for x in inputs)
        if "out" in kwargs:
            kwargs["out"] = tuple(x.view(np.ndarray) if isinstance(x, _DataView) else x
                                  for x in kwargs["out"])
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __reduce__(self):
        return self.view(np.ndarray).__reduce__()


class _Slot(tuple):
    """A drawn index's place in an index template: ("D", step)."""


class DrawnIndex:
    """Integers drawn while rt.grad records f (rng.choice, permutation,
    integers).  Indexing a tracked array with them records a gather whose
    indices are a tape input (GATHER_IDX), refilled on every replay by the
    same draw; used in arithmetic with tracked values they are float inputs.
    Any other use (indexing a plain array, len-free iteration, int()) would
    bake this draw into the tape, so it raises DrawEscape and rt.grad records
    f with plain draws instead."""

    __slots__ = ("_log", "_j", "_a", "_node")
    _rt_drawn = True

    def __init__(self, log, j, value):
        self._log, self._j, self._a, self._node = log, j, np.asarray(value), None

    shape = property(lambda self: self._a.shape)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    dtype = property(lambda self: self._a.dtype)

    def __len__(self):
        return len(self._a)

    def __repr__(self):
        return f"DrawnIndex({self._a!r})"

    def _escape(self, *_, **__):
        raise DrawEscape(
            "integers drawn while rt.grad recorded f were used other than to index a tracked "
            "array or in arithmetic with tracked values (e.g. to index a plain numpy array); "
            "rt.grad records f on every call instead. Pass the indexed data to f as an "
            "argument to get a compiled replay")

    __array__ = __iter__ = __index__ = __int__ = __float__ = __bool__ = __getitem__ = _escape
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __and__ = __or__ = __xor__ = _escape
    __lt__ = __le__ = __gt__ = __ge__ = __neg__ = __abs__ = _escape

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if any(_t.istracked(v) for v in inputs):
            return NotImplemented            # the tracked operand's rule takes it (_rt_node)
        self._escape()

    def __array_function__(self, func, types_, args, kwargs):
        self._escape()

    def _arith(self, other):
        if _t.istracked(other):
            return NotImplemented
        self._escape()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _arith
    __truediv__ = __rtruediv__ = __pow__ = __rpow__ = __matmul__ = __rmatmul__ = _arith

    def _rt_node(self, tape):
        """The draw as float64 data on the tape (numpy promotes ints so)."""
        log = self._log
        if tape is not log.tape or log.closed:
            self._escape()
        if self._node is None:
            log.inputs.append(("float", self._j))
            self._node = log.tape.track(np.asarray(self._a, dtype=np.float64))
        return self._node._id

    @staticmethod
    def _rt_getitem(x, key):
        """x[key], key a DrawnIndex or a tuple holding some."""
        parts = key if type(key) is tuple else (key,)
        drawn = [p for p in parts if type(p) is DrawnIndex]
        log = drawn[0]._log
        if any(p._log is not log for p in drawn) or log.closed or \
                x._tape is not log.tape or x._id < 0:
            drawn[0]._escape()
        shape = _t._value_of(x).shape if hasattr(_t._value_of(x), "shape") else ()
        base = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)
        template = tuple(_Slot(("D", p._j)) if type(p) is DrawnIndex else p for p in parts)
        key_now = tuple(p._a if type(p) is DrawnIndex else p for p in parts)
        flat = base[key_now[0] if len(key_now) == 1 else key_now]      # numpy's IndexError
        log.inputs.append(("flat", base, template))
        ix = log.tape.track(np.asarray(flat, dtype=np.float64).reshape(-1))
        out = _t.ops.P.take_idx(x, ix)
        return out if np.ndim(flat) == 1 else _t.ops.P.reshape(out, shape=np.shape(flat))


# ---------------------------------------------------------------- stand-ins

_G_GENERIC = _drawing_methods(_GEN, _G_SPECS, _G_DATA, _G_QUIET)
_RS_GENERIC = _drawing_methods(_RS, _RS_SPECS, _RS_DATA)


def _generic(log, real, name):
    def draw(*args, **kwargs):
        return log.draw_generic(real, name, args, kwargs,
                                lambda: getattr(real, name)(*args, **kwargs))
    return draw


class _GeneratorStandIn(_GEN):
    """A Generator on the real one's bit generator (so isinstance and every
    method work); the replayable methods log when the recording thread calls
    them, and any other public method looked up there marks the recording
    unreplayable."""

    def __init__(self, real):
        _GEN.__init__(self, real.bit_generator)
        self._rt_real = real

    def __getattribute__(self, name):
        if name[0] != "_" and name not in _G_SPECS and name not in _G_QUIET and \
                name not in _G_DATA:
            log = _active()
            if log is not None and log.thread == threading.get_ident():
                if name in _G_GENERIC:
                    return _generic(log, object.__getattribute__(self, "_rt_real"), name)
                log.refuse(f"Generator.{name}")
        return object.__getattribute__(self, name)

    def __reduce__(self):
        return self._rt_real.__reduce__()


def _g_method(name):
    unbound = getattr(_GEN, name)

    @functools.wraps(unbound)
    def method(self, *args, **kwargs):
        log = _active()
        if log is None:
            return unbound(self, *args, **kwargs)
        return log.draw(self._rt_real, _G_SPECS, name, args, kwargs,
                        lambda: unbound(self, *args, **kwargs))
    return method


def _g_data_method(name):
    unbound = getattr(_GEN, name)

    @functools.wraps(unbound)
    def method(self, *args, **kwargs):
        log = _active()
        if log is None:
            return unbound(self, *args, **kwargs)
        return log.draw_data(self._rt_real, name, args, kwargs,
                             lambda: unbound(self, *args, **kwargs))
    return method


for _name in _G_SPECS:
    setattr(_GeneratorStandIn, _name, _g_method(_name))
for _name in _G_DATA:
    setattr(_GeneratorStandIn, _name, _g_data_method(_name))


class _RandomStateStandIn(_RS):
    """A RandomState (so isinstance checks, scipy's check_random_state among
    them, accept it) that forwards every public attribute to the real one,
    whose gauss cache is part of its stream; the replayable methods log when
    the recording thread calls them.  Its own state (a RandomState on the
    real one's bit generator) is never drawn from."""

    def __init__(self, real):
        _RS.__init__(self, real._bit_generator)
        object.__setattr__(self, "_rt_real", real)

    def __getattribute__(self, name):
        if name[0] == "_" or name in _RS_SPECS or name in _RS_DATA:
            return object.__getattribute__(self, name)
        real = object.__getattribute__(self, "_rt_real")
        log = _active()
        if log is not None and log.thread == threading.get_ident() and name != "get_state":
            if name in _RS_GENERIC:
                return _generic(log, real, name)
            log.refuse(f"RandomState.{name}")
        return getattr(real, name)

    def __reduce__(self):
        return self._rt_real.__reduce__()


def _rs_method(name):
    def method(self, *args, **kwargs):
        real = self._rt_real
        log = _active()
        if log is None:
            return getattr(real, name)(*args, **kwargs)
        return log.draw(real, _RS_SPECS, name, args, kwargs,
                        lambda: getattr(real, name)(*args, **kwargs))
    method.__name__ = name
    return method


def _rs_data_method(name):
    def method(self, *args, **kwargs):
        real = self._rt_real
        log = _active()
        if log is None:
            return getattr(real, name)(*args, **kwargs)
        return log.draw_data(real, name, args, kwargs,
                             lambda: getattr(real, name)(*args, **kwargs))
    method.__name__ = name
    return method


for _name in _RS_SPECS:
    setattr(_RandomStateStandIn, _name, _rs_method(_name))
for _name in _RS_DATA:
    setattr(_RandomStateStandIn, _name, _rs_data_method(_name))


class _BoundDraw:
    """Stands in for a bound draw method held in a namespace (np.random.normal,
    `from numpy.random import randn`): calls the stand-in's method; knows the
    original, which guards collected meanwhile expect (unswap_guards)."""

    __slots__ = ("_rt_stand_in", "_rt_name", "_rt_original")

    def __init__(self, stand_in, name, original):
        self._rt_stand_in, self._rt_name, self._rt_original = stand_in, name, original

    def __call__(self, *args, **kwargs):
        return getattr(self._rt_stand_in, self._rt_name)(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._rt_original, name)

    def __repr__(self):
        return repr(self._rt_original)


def _original(v):
    t = type(v)
    if t is _GeneratorStandIn or t is _RandomStateStandIn:
        return v._rt_real
    if t is _BoundDraw:
        return v._rt_original
    if t is _DataView:
        return v.__dict__.get("_rt_real", v)
    return v


def unswap_guards(guards):
    """Guards collected while stand-ins sit in their places (this recording's
    are put back before collecting, but another thread's may still be there)
    expect the originals, which the places hold again afterwards."""
    guards.items[:] = [(d, k, _original(v)) for d, k, v in guards.items]
    guards.attrs[:] = [(o, a, _original(v)) for o, a, v in guards.attrs]
    guards.values[:] = [(d, k, _original(v)) for d, k, v in guards.values]
    guards.cells[:] = [(c, _original(v)) for c, v in guards.cells]


def _acquire(real):
    with _lock:
        e = _stand_ins.get(id(real))
        if e is None:
            s = _GeneratorStandIn(real) if type(real) is _GEN else _RandomStateStandIn(real)
            _stand_ins[id(real)] = e = [real, s, 0]
        e[2] += 1
        return e[1]


def _stand_in(real):
    return _stand_ins[id(real)][1]


def _release(real):
    with _lock:
        e = _stand_ins.get(id(real))
        if e is not None:
            e[2] -= 1
            if e[2] <= 0:
                del _stand_ins[id(real)]


# ---------------------------------------------------------------- places

def _get(place):
    kind, holder, key = place
    if kind == "cell":
        return holder.cell_contents
    if kind == "item":
        return holder.get(key, None)
    if kind == "index":
        return holder[key] if key < len(holder) else None
    return getattr(holder, key, None)


def _set(place, v):
    kind, holder, key = place
    if kind == "cell":
        holder.cell_contents = v
    elif kind == "item" or kind == "index":
        holder[key] = v
    else:
        setattr(holder, key, v)


def _install(place, real, attr):
    """Put real's stand-in (or its method attr) at place; shared, counted.
    Returns what the place held (None: not swapped)."""
    kind, holder, key = place
    pkey = (kind, id(holder), key)
    with _lock:
        e = _installed.get(pkey)
        if e is not None:
            e[3] += 1
            return e[1]
        try:
            current = _get(place)
        except Exception:
            return None
        if attr is _ARRAY:
            if current is not real:
                return None
        elif not (current is real or (attr is not None and current == getattr(real, attr))):
            return None
        if attr is _ARRAY:
            rep = real.view(_DataView)
            rep._rt_real = real
        else:
            s = _stand_ins[id(real)][1]
            rep = s if attr is None else _BoundDraw(s, attr, current)
        try:
            _set(place, rep)
        except Exception:            # a read-only place: not swapped (draws there are seen)
            return None
        _installed[pkey] = [place, current, rep, 1]
        return current


def _uninstall(place):
    kind, holder, key = place
    pkey = (kind, id(holder), key)
    with _lock:
        e = _installed.get(pkey)
        if e is None:
            return
        e[3] -= 1
        if e[3] > 0:
            return
        del _installed[pkey]
        try:
            if _get(place) is e[2]:          # f did not rebind it meanwhile
                _set(place, e[1])
        except Exception:
            pass


def _find(fn, args, kwargs, max_depth=3, arrays=False):
    """[(place, real generator, method name or None)] reachable from fn and
    its arguments (with arrays: also (place, float64 array, _ARRAY)), and
    whether code that may call np.random.* is reachable."""
    finder = _Finder(arrays)
    for a in list(args) + list((kwargs or {}).values()):
        finder.value(a, None, max_depth)
    finder.value(fn, None, max_depth)
    return finder.out, finder.legacy


# values whose attributes hold no generator f could draw from
_OPAQUE = (types.ModuleType, type, np.ndarray, np.generic, int, float, complex, str, bytes,
           bool, type(None), types.BuiltinFunctionType, np.ufunc, _GEN, _RS,
           _RandomStateStandIn)


class _Finder:
    """The walk of _find: values (and where they live: a place _install can
    swap), the functions they reach (closure cells, the globals their code
    names, defaults), containers and object attributes, `depth` links deep."""

    def __init__(self, arrays):
        self.out, self.seen, self.legacy, self.arrays = [], set(), False, arrays

    def value(self, v, place, depth):
        t = type(v)
        if t is _GEN or t is _RS:
            if place is not None:
                self.out.append((place, v, None))
            return
        if t is np.ndarray:
            if self.arrays and place is not None and v.dtype == np.float64 and \
                    id(v) not in self.seen:
                self.seen.add(id(v))
                self.out.append((place, v, _ARRAY))
            return
        if t is types.MethodType:
            self.method(v, place, depth)
            return
        if t is types.FunctionType:
            self.function(v, depth)
            return
        if t is functools.partial:
            self.function(v.func, depth)
            for a in v.args:
                self.value(a, None, depth - 1)
            return
        if v is np.random:
            self.legacy = True
            return
        if id(v) in self.seen or depth <= 0:
            return
        if t is list or t is dict or t is tuple:
            self.container(v, t, depth)
            return
        if isinstance(v, _OPAQUE) or getattr(v, "_is_tracked", False):
            return
        self.seen.add(id(v))
        self.attributes(v, depth)

    def method(self, v, place, depth):
        """A bound method: a generator's drawing method is a place of its own
        (f = rng.normal); any other reaches its object and its function."""
        s = v.__self__
        if type(s) in (_GEN, _RS) and place is not None:
            if v.__name__ in (_G_SPECS.keys() | _G_DATA | _G_GENERIC if type(s) is _GEN
                              else _RS_SPECS.keys() | _RS_DATA | _RS_GENERIC):
                self.out.append((place, s, v.__name__))
            return
        self.value(s, None, depth)
        self.function(v.__func__, depth)

    def container(self, v, t, depth):
        """List and dict items are places (up to 64); tuple items cannot be swapped."""
        self.seen.add(id(v))
        if t is list:
            if len(v) <= 64:
                for i, x in enumerate(v):
                    self.value(x, ("index", v, i), depth - 1)
        elif t is dict:
            if len(v) <= 64:
                for k, x in list(v.items()):
                    self.value(x, ("item", v, k), depth - 1)
        else:
            for x in v[:64]:
                self.value(x, None, depth - 1)

    def attributes(self, v, depth):
        """An object's __dict__ entries and __slots__ are places; its class's
        (user-defined, heap type) functions and property getters are walked."""
        try:
            d = object.__getattribute__(v, "__dict__")
        except Exception:
            d = None
        if type(d) is dict and len(d) <= 256:
            for k, x in list(d.items()):
                self.value(x, ("item", d, k), depth - 1)
        for klass in type(v).__mro__:
            for name in klass.__dict__.get("__slots__", ()) or ():
                if isinstance(name, str):
                    try:
                        x = object.__getattribute__(v, name)
                    except Exception:
                        continue
                    self.value(x, ("slot", v, name), depth - 1)
            if klass.__module__ != "builtins" and klass.__flags__ & (1 << 9):
                for x in list(klass.__dict__.values()):
                    if isinstance(x, (staticmethod, classmethod)):
                        x = x.__func__
                    if type(x) is types.FunctionType:
                        self.function(x, depth)
                    elif isinstance(x, property) and x.fget is not None:
                        self.function(x.fget, depth)

    def function(self, f, depth):
        """A user function's closure cells and the globals its code names are
        places; code naming `random` may call np.random.* (legacy)."""
        if id(f) in self.seen or type(f) is not types.FunctionType or \
                not is_user_file(f.__code__.co_filename):
            return
        self.seen.add(id(f))
        for cell in f.__closure__ or ():
            try:
                x = cell.cell_contents
            except ValueError:
                continue
            self.value(x, ("cell", cell, None), depth)
        globs = f.__globals__
        for code in _codes(f.__code__):
            names = code.co_names
            if "random" in names:
                self.legacy = True
            for name in names:
                if name in globs:
                    self.value(globs[name], ("item", globs, name), depth)
        for d in (f.__defaults__ or ()):
            self.value(d, None, depth - 1)


@functools.lru_cache(maxsize=1024)
def _codes(code):
    out = [code]
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out.extend(_codes(c))
    return tuple(out)


_tape_module.register_drawn_type(DrawnIndex, DrawnIndex._rt_getitem)
