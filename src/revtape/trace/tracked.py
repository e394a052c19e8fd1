"""TrackedReal and TrackedArray: numbers that record what is done to them.

Operators, numpy ufuncs (``__array_ufunc__``) and numpy functions
(``__array_function__``) all end in the op table's primitives; an array
operation is one instruction, never scalarised.  A tracked value holds only
its tape and node id; its value lives in the tape, so a replay updates what
``rt.value`` reports.

Comparisons: a comparison whose result is one boolean (scalars) returns a
plain ``bool`` and records a guard, because Python is about to branch on it;
an elementwise comparison of arrays returns a tracked 0/1 mask, which
``np.where``/``maximum``/``clip`` use as a select (no guard), and whose
``bool()``/``.all()``/``.any()`` is guarded again when Python branches on it.

This module holds the value types, their operators and the recording fast
path.  The numpy protocol handlers and array functions (np.sum, np.reshape,
x[k], ...) are numpy_api.py, the layer above, reached through _API.
"""

import copy as _copy
from typing import Any

import numpy as np

from ..core import ops
from ..core.apitypes import ArrayLike
from ..errors import ConversionError, UnsupportedError
from . import tape as _tape_module
from .tape import NULL_TAPE, Tape
from .values import _norm, as_value, shape_of

P = ops.P


# ---------------------------------------------------------------- the numpy API hook
# numpy_api.py (the numpy protocol handlers and array functions) sits above
# this module: it imports the handle types from here, and this module never
# imports it back.  It registers itself at import (revtape/__init__ imports
# it), and the handles' numpy methods (x.sum(), x.reshape(), x[k],
# __array_ufunc__, ...) reach it through _API.


class _NoNumpyApi:
    def __getattr__(self, name):
        raise RuntimeError("revtape.trace.tracked is used without revtape.numpy_api.functions: "
                           "import revtape (which registers the numpy API)")


_API = _NoNumpyApi()


def register_numpy_api(module):
    global _API
    _API = module


def public_name(func):
    """The name a user writes for a numpy/scipy function or ufunc: np.linalg.solve,
    np.sin, scipy.special.betaln (for error messages)."""
    import sys
    name = getattr(func, "__name__", repr(func))
    if isinstance(func, np.ufunc):
        if getattr(np, name, None) is func:
            return f"np.{name}"
        for mod in ("scipy.special",):
            m = sys.modules.get(mod)
            if m is not None and getattr(m, name, None) is func:
                return f"{mod}.{name}"
        return name
    module = getattr(func, "__module__", None) or ""
    if module == "numpy" or module.startswith("numpy."):
        # numpy's public submodules (numpy.linalg, numpy.fft); private ones
        # (numpy._core.fromnumeric) are re-exported at the top
        public = module.split("._")[0] if "._" in module else module
        return "np" + public[len("numpy"):] + "." + name
    return f"{module}.{name}" if module else name


def _value_of(v):
    if getattr(v, "_is_tracked", False):
        return v.value
    return v


def value(v: Any) -> Any:
    """The plain value of v: a float or ndarray for tracked values, v itself otherwise.

    Parameters
    ----------
    v : object
        A tracked value, a list or tuple holding some, or anything else.

    Returns
    -------
    float, ndarray or v
        A tracked value's value (its last replay's, after a replay); a list or
        tuple of the values of its items; any other v unchanged.

    Examples
    --------
    >>> import numpy as np, revtape as rt
    >>> tape = rt.GradientTape(lambda x: np.sum(x * x), np.array([1.0, 2.0]))
    >>> rt.value(tape.output)
    5.0
    """
    if getattr(v, "_is_tracked", False):
        val = v.value
        return val if type(val) is float else np.array(val)
    if isinstance(v, (list, tuple)) and any(getattr(e, "_is_tracked", False) for e in v):
        return type(v)(value(e) for e in v)
    return v


def istracked(v: object) -> bool:
    """True for a TrackedReal or TrackedArray (a node of some tape).

    Parameters
    ----------
    v : object
        Any value.

    Returns
    -------
    bool
        Whether v is tracked; plain floats, arrays and containers of tracked
        values are not.
    """
    return getattr(v, "_is_tracked", False)


def tape_of(v: object) -> Tape:
    """The tape v records onto; rt.NULL_TAPE for an untracked value.

    Parameters
    ----------
    v : object
        Any value.

    Returns
    -------
    Tape
        The tape of a tracked value (recording or finished), else ``rt.NULL_TAPE``.
    """
    return v._tape if getattr(v, "_is_tracked", False) else NULL_TAPE


_NO_FLOAT = ("cannot turn a tracked value into a plain {what}: the gradient through it "
             "would silently be lost. Keep it tracked -- use numpy functions (np.where, "
             "np.maximum, np.stack) instead of float()/int() or writing it into a float "
             "ndarray -- or take rt.value(v) if you really want a constant")


def _math_advice(general=True):
    """When float() was called by a math.* function (math.exp(t) converts t with
    __float__), name the numpy function that keeps t tracked, read from the
    caller's source line; else the general advice."""
    import linecache
    import re
    import sys
    f = sys._getframe(2)
    while f is not None and f.f_globals.get("__name__", "").startswith("revtape"):
        f = f.f_back
    line = linecache.getline(f.f_code.co_filename, f.f_lineno) if f is not None else ""
    for name in re.findall(r"\bmath\.(\w+)\s*\(", line):
        alias = {"fabs": "abs", "pow": "power", "atan": "arctan", "atan2": "arctan2",
                 "asin": "arcsin", "acos": "arccos", "lgamma": "rt.special.gammaln",
                 "erf": "rt.special.erf"}.get(name, name)
        target = alias if alias.startswith("rt.") else (f"np.{alias}" if hasattr(np, alias)
                                                        else None)
        if target:
            return (f". math.{name} converts its argument to a plain float; use {target}, "
                    "which records it")
    if not general:
        return ""
    return (". math.* functions convert to a plain float: use the np.* function of the same "
            "name (np.exp for math.exp, np.log, np.sqrt, ...), which records it")


class Tracked:
    """Common behaviour of TrackedReal and TrackedArray."""

    __slots__ = ("_tape", "_id", "_const", "__weakref__")
    _is_tracked = True
    __array_priority__ = 1000

    def __init__(self, value: ArrayLike, tape: Tape = NULL_TAPE) -> None:
        if tape is NULL_TAPE:
            self._tape, self._id, self._const = NULL_TAPE, -1, as_value(value)
        else:
            t = tape.track(value)
            self._tape, self._id, self._const = tape, t._id, None
            tape._inputs[-1] = self

    # ------------------------------------------------ state
    @property
    def value(self):
        if self._id < 0:
            return self._const
        tape = self._tape
        if tape._replayed_by is not None:
            tape._pull_replay()
        return tape._vals[self._id]

    @property
    def tape(self):
        return self._tape

    @property
    def shape(self):
        return shape_of(self.value)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    dtype = np.dtype(np.float64)

    def __repr__(self):
        where = "NULL_TAPE" if self._id < 0 else f"%{self._id}"
        return f"{type(self).__name__}({self.value!r}, {where})"

    __hash__ = object.__hash__

    def __format__(self, spec):
        # printing a tracked value (f"{loss:.3f}" while debugging f) shows its
        # current value and records nothing: no gradient is lost
        v = self.value
        return format(v if type(v) is float else np.asarray(v), spec)

    # ------------------------------------------------ escapes
    def __float__(self):
        raise ConversionError(_NO_FLOAT.format(what="float") + _math_advice())

    def __int__(self):
        raise ConversionError(_NO_FLOAT.format(what="int") + _math_advice(general=False))

    def __round__(self, ndigits=None):
        raise ConversionError(
            "round() of a tracked value would drop its gradient (rounding is piecewise "
            "constant: its derivative is 0 almost everywhere, and np.round is not "
            "differentiable either). To branch on a rounded value use rt.value(v); for a "
            "step function inside the math use np.floor(v + 0.5), recorded with zero gradient")

    def __floor__(self):
        raise ConversionError("math.floor() of a tracked value would drop its gradient; use "
                              "np.floor(v) (recorded, with zero gradient) or rt.value(v)")

    def __ceil__(self):
        raise ConversionError("math.ceil() of a tracked value would drop its gradient; use "
                              "np.ceil(v) (recorded, with zero gradient) or rt.value(v)")

    def __trunc__(self):
        raise ConversionError("math.trunc() of a tracked value would drop its gradient; use "
                              "np.where(v < 0, np.ceil(v), np.floor(v)) (recorded, with zero "
                              "gradient) or rt.value(v)")

    __index__ = __int__

    def __complex__(self):
        raise ConversionError(_NO_FLOAT.format(what="complex"))

    def __array__(self, dtype=None, copy=None):
        if dtype is not None and np.dtype(dtype) == object:
            # an object array holds the tracked value itself: nothing is lost
            box = np.empty((), dtype=object)
            box[()] = self
            return box
        caller = _scipy_caller()
        if caller is not None:
            public, ours = caller
            raise ConversionError(
                f"{public} converts its input with np.asarray, so it cannot trace a tracked "
                "value. " + (
                    f"Use {ours}, revtape's version, which works on tracked and plain values."
                    if ours else "Express it with numpy functions, rt.special or rt.stats."))
        # np.array([t1, 2.0]) lands here too: numpy's np.array has no dispatch
        # hook and always returns a plain ndarray, so name the builders that record
        raise ConversionError(_NO_FLOAT.format(what="ndarray") + ". To build an array from "
                              "a list holding tracked values (np.array([t1, 2.0]), "
                              "np.asarray, nested lists) use rt.array([t1, 2.0]), or "
                              "np.stack/np.concatenate with a tracked element, which record it. "
                              "(Functions that call "
                              "np.asarray internally cannot be traced; for scipy.special's "
                              "logsumexp and polygamma use rt.special.logsumexp/polygamma; for "
                              "scipy.linalg's solve_triangular, cholesky, cho_factor, cho_solve, "
                              "solve, inv, det imported before revtape use revtape.numpy_api.linalg's.)")

    def item(self, *args):
        raise ConversionError(_NO_FLOAT.format(what="float"))

    def tolist(self):
        raise ConversionError(_NO_FLOAT.format(what="list"))

    # ------------------------------------------------ copies
    # While the tape records, a copy is the value itself: a copy with a tape
    # of its own would record onto an orphan tape and its gradient would
    # silently be zero.  After the tape finishes, copies take their tape along
    # through the same memo, so everything that shared a tape shares its copy.
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        if self._id >= 0 and self._tape._recording:
            memo[id(self)] = self
            return self
        new = object.__new__(type(self))
        memo[id(self)] = new
        new._id = self._id
        if self._id < 0:
            new._tape, new._const = NULL_TAPE, _copy.deepcopy(self._const, memo)
        else:
            new._tape, new._const = _copy.deepcopy(self._tape, memo), None
        return new

    def __reduce__(self):
        return (_rebuild, (type(self), self._tape, self._id, self._const))

    # ------------------------------------------------ arithmetic
    def __add__(self, o): return _record2(_ADD, self, o, False)
    def __radd__(self, o): return _record2(_ADD, self, o, True)
    def __sub__(self, o): return _record2(_SUB, self, o, False)
    def __rsub__(self, o): return _record2(_SUB, self, o, True)
    def __mul__(self, o): return _record2(_MUL, self, o, False)
    def __rmul__(self, o): return _record2(_MUL, self, o, True)
    def __truediv__(self, o): return _record2(_DIV, self, o, False)
    def __rtruediv__(self, o): return _record2(_DIV, self, o, True)
    def __pow__(self, o): return power(self, o)
    def __rpow__(self, o): return power(o, self)
    def __matmul__(self, o): return matmul(self, o)
    def __rmatmul__(self, o): return matmul(o, self)
    def __neg__(self): return _record1(_NEG, self)
    def __pos__(self): return self
    def __abs__(self): return P.abs(self)

    def __floordiv__(self, o):
        raise UnsupportedError("// has zero derivative almost everywhere; use np.floor(a / b) "
                               "if you mean it")

    __rfloordiv__ = __floordiv__
    # %: np.remainder's row (the divisor's sign, as Python and numpy)
    def __mod__(self, o): return P.remainder(self, o)
    def __rmod__(self, o): return P.remainder(o, self)

    # ------------------------------------------------ comparisons
    def __lt__(self, o): return compare("lt", self, o)
    def __le__(self, o): return compare("le", self, o)
    def __gt__(self, o): return compare("gt", self, o)
    def __ge__(self, o): return compare("ge", self, o)
    def __eq__(self, o): return compare("eq", self, o)
    def __ne__(self, o): return compare("ne", self, o)

    def __bool__(self):
        if self.size != 1:
            raise ValueError("the truth value of an array with more than one element is "
                             "ambiguous; use .any() or .all()")
        v = self if self.ndim == 0 else P.reshape(self, shape=())
        return compare("ne", v, 0.0)

    # ------------------------------------------------ numpy protocols
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _API.array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        handler = _API.HANDLED_FUNCTIONS.get(func)
        if handler is None:
            raise UnsupportedError(
                f"{public_name(func)} is not supported on tracked values; "
                "express it with supported numpy functions (docs/ops.md lists them)")
        return handler(*args, **kwargs)

    # ------------------------------------------------ array methods
    # ndarray's method signatures (the same as the functions')
    def sum(self, *a, **k): return _API._np_sum(self, *a, **k)
    def prod(self, *a, **k): return _API._np_prod(self, *a, **k)
    def max(self, *a, **k): return _API._np_max(self, *a, **k)
    def min(self, *a, **k): return _API._np_min(self, *a, **k)
    def all(self, *a, **k): return _API._np_all(self, *a, **k)
    def any(self, *a, **k): return _API._np_any(self, *a, **k)
    def mean(self, *a, **k): return _API.mean(self, *a, **k)
    def var(self, *a, **k): return _API.var(self, *a, **k)
    def std(self, *a, **k): return _API.std(self, *a, **k)

    def reshape(self, *shape, order="C"):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return _API.reshape(self, shape, order)

    def ravel(self, order="C"): return _API._np_ravel(self, order)
    flatten = ravel
    def swapaxes(self, axis1, axis2): return np.swapaxes(self, axis1, axis2)
    def repeat(self, repeats, axis=None): return np.repeat(self, repeats, axis)
    def conj(self): return self             # real values
    conjugate = conj
    real = property(lambda self: self)
    imag = property(lambda self: np.zeros(self.shape))
    def transpose(self, *axes): return _API.transpose(self, axes if axes else None)
    def dot(self, o, out=None): return _API.dot(self, o, out)
    def clip(self, min=None, max=None, out=None, **kw): return _API.clip(self, min, max, out, **kw)
    def squeeze(self, axis=None): return _API.squeeze(self, axis)
    def copy(self): return self
    # numpy-name methods whose handlers live in linalg.py / structure.py
    def cumsum(self, axis=None, dtype=None, out=None):
        return np.cumsum(self, axis=axis, dtype=dtype, out=out)

    def cumprod(self, axis=None, dtype=None, out=None):
        return np.cumprod(self, axis=axis, dtype=dtype, out=out)

    def argmax(self, axis=None, out=None, keepdims=False):
        return np.argmax(self, axis=axis, out=out, keepdims=keepdims)

    def argmin(self, axis=None, out=None, keepdims=False):
        return np.argmin(self, axis=axis, out=out, keepdims=keepdims)

    def argsort(self, axis=-1, kind=None, order=None):
        return np.argsort(self, axis=axis, kind=kind, order=order)

    def diagonal(self, offset=0, axis1=0, axis2=1):
        return np.diagonal(self, offset, axis1, axis2)

    def trace(self, offset=0, axis1=0, axis2=1, dtype=None, out=None):
        return np.trace(self, offset, axis1, axis2, dtype, out)

    def astype(self, dtype, copy=True):
        if np.dtype(dtype) != np.float64:
            raise UnsupportedError("tracked values are float64")
        return self

    @property
    def T(self):
        return _API.transpose(self)


class TrackedReal(Tracked):
    """A tracked scalar (a node of shape ()): it acts as a float, and every
    operation on it records onto its tape.

    Parameters
    ----------
    value : float
        The value.
    tape : Tape, default rt.NULL_TAPE
        A recording tape to register it on as an input (``tape.track(value)``
        is the usual spelling); the default is an untracked constant.
    """

    __slots__ = ()


class TrackedArray(Tracked):
    """A tracked float64 array (any shape with ndim >= 1): it acts as an
    ndarray, and every operation on it records onto its tape as one array
    instruction.

    Parameters
    ----------
    value : array_like
        The value (converted to float64).
    tape : Tape, default rt.NULL_TAPE
        A recording tape to register it on as an input (``tape.track(value)``
        is the usual spelling); the default is an untracked constant.
    """

    __slots__ = ()

    def __len__(self):
        return self.shape[0]

    def __iter__(self):
        for i in range(self.shape[0]):
            yield self[i]

    def __getitem__(self, key):
        return _API.getitem(self, key)

    def __setitem__(self, key, v):
        raise UnsupportedError(
            "tracked arrays are immutable; build the new array functionally, e.g. "
            "np.where(mask, v, x) or np.concatenate([x[:i], [v], x[i+1:]])")


def _rebuild(cls, tape, nid, const):
    t = object.__new__(cls)
    t._tape, t._id, t._const = tape, nid, const
    return t


# ---------------------------------------------------------------- the recording fast path
# Scalar code records one instruction per Python operation, so these paths
# skip the generic dispatch (ops.apply -> Tape._record) for the common cases:
# a tracked value of a recording tape with a Python number or another value
# of the same tape.  Everything else falls back to the generic path, which
# also produces the errors.

_ADD, _SUB, _MUL, _DIV, _NEG = (ops.OPS[n] for n in ("add", "sub", "mul", "div", "neg"))
_NO_PARAMS = {}
_new = object.__new__


def _record2(op, a, b, swap):
    tape = a._tape
    ia = a._id
    tb = type(b)
    if ia >= 0 and tape._recording:
        if tb is float or tb is int:
            ib = tape._scalar_const(float(b))
        elif (tb is TrackedReal or tb is TrackedArray) and b._tape is tape and b._id >= 0:
            ib = b._id
        else:
            ib = -1
        if ib >= 0:
            vals = tape._vals
            if swap:
                ia, ib = ib, ia
            va, vb = vals[ia], vals[ib]
            sf = op.sfwd
            if sf is not None and type(va) is float and type(vb) is float:
                try:
                    value = sf(va, vb)
                except (ArithmeticError, ValueError):
                    value = _norm(op.fwd(va, vb))
            else:
                value = _norm(op.fwd(va, vb))
            nid = len(vals)
            vals.append(value)
            tape._instrs.append((op, nid, (ia, ib), _NO_PARAMS))
            if nid >= tape._compact_next:      # a long tape: into columns (tape.COMPACT_AT)
                tape._compact()
            t = _new(TrackedReal if type(value) is float else TrackedArray)
            t._tape, t._id, t._const = tape, nid, None
            return t
    prim = getattr(P, op.name)
    return prim(b, a) if swap else prim(a, b)


def _record1(op, a, params=_NO_PARAMS):
    tape = a._tape
    if a._id < 0 or not tape._recording:
        return getattr(P, op.name)(a, **params)
    vals = tape._vals
    va = vals[a._id]
    sf = op.sfwd
    if sf is not None and type(va) is float:
        try:
            value = sf(va)
        except (ArithmeticError, ValueError):
            value = _norm(op.fwd(va))
    else:
        value = _norm(op.fwd(va, **params))
    nid = len(vals)
    vals.append(value)
    tape._instrs.append((op, nid, (a._id,), params))
    if nid >= tape._compact_next:
        tape._compact()
    t = _new(TrackedReal if type(value) is float else TrackedArray)
    t._tape, t._id, t._const = tape, nid, None
    return t


def wrap(tape, nid, v):
    """A tracked handle on node nid of tape (class from the value's shape)."""
    t = object.__new__(TrackedReal if type(v) is float else TrackedArray)
    t._tape = tape
    t._id = nid
    t._const = None
    return t




def constant(v):
    """A tracked constant: on NULL_TAPE, records nothing."""
    v = as_value(v)
    t = object.__new__(TrackedReal if type(v) is float else TrackedArray)
    t._tape, t._id, t._const = NULL_TAPE, -1, v
    return t


_tape_module.register_handles(wrap=wrap, constant=constant)


# ---------------------------------------------------------------- comparisons

def compare(pred, a, b):
    va, vb = _value_of(a), _value_of(b)
    if (type(va) is float or np.ndim(va) == 0) and (type(vb) is float or np.ndim(vb) == 0):
        result = bool(ops.GUARD_PREDICATES[pred][1](float(va), float(vb)))
        tape = a._tape if istracked(a) and a._id >= 0 else tape_of(b)
        if tape is not NULL_TAPE:
            tape._guard(pred, a, b, result)
        return result
    return getattr(P, pred)(a, b)


# ---------------------------------------------------------------- the operators x ** y, a @ b

_POWER_SPECIAL = ops.POWER_SPECIAL    # the rows with power= (x ** 2 -> square)


def power(x, y):
    """x ** y; constant exponents 2, 0.5, -1 and 1 become square, sqrt, reciprocal, x."""
    ty = type(y)
    if ty is float or ty is int or (not istracked(y) and np.ndim(y) == 0):
        c = float(y)
        special = _POWER_SPECIAL.get(c)
        if special is not None and istracked(x):
            return _record1(special, x)
        if c == 1.0 and istracked(x):
            return x
    return P.pow(x, y)


def matmul(a, b):
    if np.ndim(_value_of(a)) == 0 or np.ndim(_value_of(b)) == 0:
        raise ValueError("matmul: input operand does not have enough dimensions (use *)")
    if np.ndim(_value_of(a)) > 2 or np.ndim(_value_of(b)) > 2:
        return _API.HANDLED_FUNCTIONS[np.matmul](a, b)     # batched: numpy_api/linalg.py
    return P.matmul(a, b)


# ---------------------------------------------------------------- scipy's Python functions
# scipy.special's ufuncs (gammaln, expit, ...) dispatch through
# __array_ufunc__.  Its Python functions (logsumexp, polygamma, ...) convert
# their input with np.asarray and cannot dispatch: the few SPEC names are
# routed to revtape's on tracked arguments (_scipy_dispatch); any other (or
# all of them, with REVTAPE_SCIPY_DISPATCH=0) raises ConversionError from
# __array__, naming rt.special.<name> -- revtape's own function of the same
# name -- when there is one.

# revtape's replacement for a scipy function, named in the ConversionError a
# tracked argument raises inside scipy: {scipy package: fn(name, distribution
# or None) -> what to use instead, or None}.  The drop-in modules (special.py,
# linalg.py, stats.py) fill it when they import, so that this module, below
# them, imports none of them.
DROP_INS = {}


def _scipy_caller():
    """(public scipy name, revtape's replacement or None) of the scipy function
    that is converting a tracked value with np.asarray, or None when it is not
    scipy."""
    import sys
    f = sys._getframe(2)
    frames = []
    while f is not None:
        mod = f.f_globals.get("__name__", "")
        if mod.startswith("scipy."):
            frames.append(f)
        elif not mod.startswith(("numpy", "revtape")):
            break                          # user code: whoever called scipy (or asarray)
        f = f.f_back
    if not frames:
        return None
    # the outermost frame that is a public function of its scipy package (not
    # a decorator's wrapper in scipy._lib), else the outermost scipy frame
    outer = frames[-1]
    name = outer.f_code.co_name
    package = ".".join(outer.f_globals["__name__"].split(".")[:2])   # e.g. scipy.special
    public = f"{package}.{getattr(outer.f_code, 'co_qualname', name)}"
    for fr in reversed(frames):
        pkg = ".".join(fr.f_globals["__name__"].split(".")[:2])
        if callable(getattr(sys.modules.get(pkg), fr.f_code.co_name, None)):
            outer, name, package = fr, fr.f_code.co_name, pkg
            public = f"{package}.{getattr(fr.f_code, 'co_qualname', name)}"
            break
    else:
        # a decorator's wrapper (scipy._lib) converting before it calls the
        # function it wraps: name that function
        for v in list(outer.f_locals.values()):
            mod = getattr(v, "__module__", None) or ""
            fname = getattr(v, "__name__", "")
            pkg = ".".join(mod.split(".")[:2])
            if (callable(v) and mod.startswith("scipy.")
                    and getattr(sys.modules.get(pkg), fname, None) is not None):
                name, package, public = fname, pkg, f"{pkg}.{fname}"
                break
    dist = None
    if package == "scipy.stats":
        # a distribution method (norm.logpdf): its instance names the distribution
        # (a frozen one through .dist; multivariate ones only by class name)
        inst = outer.f_locals.get("self")
        inst = getattr(inst, "dist", inst)
        dist = getattr(inst, "name", None)
        if not isinstance(dist, str):
            cls = type(inst).__name__
            dist = cls[:-4] if cls.endswith("_gen") else None
        if dist:
            public = f"scipy.stats.{dist}.{name}"
    ours = DROP_INS[package](name, dist) if package in DROP_INS else None
    if package == "scipy.linalg" and ours is not None:
        public = f"scipy.linalg.{name}"
    return public, ours
