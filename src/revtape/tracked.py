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
"""

import copy as _copy

import numpy as np

from . import ops
from .errors import ConversionError, UnsupportedError
from . import tape as _tape_module
from .tape import NULL_TAPE
from .values import _norm, as_value, shape_of

P = ops.P

try:  # scipy is optional at run time; its ufuncs dispatch here when present
    import scipy.special as _sps
except ImportError:  # pragma: no cover
    _sps = None


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


def value(v):
    """The plain value of v: a float or ndarray for tracked values, v itself otherwise."""
    if getattr(v, "_is_tracked", False):
        val = v.value
        return val if type(val) is float else np.array(val)
    if isinstance(v, (list, tuple)) and any(getattr(e, "_is_tracked", False) for e in v):
        return type(v)(value(e) for e in v)
    return v


def istracked(v):
    return getattr(v, "_is_tracked", False)


def tape_of(v):
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

    def __init__(self, value, tape=NULL_TAPE):
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
                              "solve, inv, det imported before revtape use revtape.linalg's.)")

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

    __rfloordiv__ = __mod__ = __rmod__ = __floordiv__

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
        return array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        handler = HANDLED_FUNCTIONS.get(func)
        if handler is None:
            raise UnsupportedError(
                f"{public_name(func)} is not supported on tracked values; "
                "express it with supported numpy functions (see the README's op list)")
        return handler(*args, **kwargs)

    # ------------------------------------------------ array methods
    # ndarray's method signatures (the same as the functions')
    def sum(self, *a, **k): return _np_sum(self, *a, **k)
    def prod(self, *a, **k): return _np_prod(self, *a, **k)
    def max(self, *a, **k): return _np_max(self, *a, **k)
    def min(self, *a, **k): return _np_min(self, *a, **k)
    def all(self, *a, **k): return _np_all(self, *a, **k)
    def any(self, *a, **k): return _np_any(self, *a, **k)
    def mean(self, *a, **k): return mean(self, *a, **k)
    def var(self, *a, **k): return var(self, *a, **k)
    def std(self, *a, **k): return std(self, *a, **k)

    def reshape(self, *shape, order="C"):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return reshape(self, shape, order)

    def ravel(self, order="C"): return reshape(self, (-1,), order)
    flatten = ravel
    def transpose(self, *axes): return transpose(self, axes if axes else None)
    def dot(self, o, out=None): return dot(self, o, out)
    def clip(self, min=None, max=None, out=None, **kw): return clip(self, min, max, out, **kw)
    def squeeze(self, axis=None): return squeeze(self, axis)
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
        return transpose(self)


class TrackedReal(Tracked):
    """A tracked scalar (a node of shape ())."""

    __slots__ = ()


class TrackedArray(Tracked):
    """A tracked float64 array (any shape with ndim >= 1)."""

    __slots__ = ()

    def __len__(self):
        return self.shape[0]

    def __iter__(self):
        for i in range(self.shape[0]):
            yield self[i]

    def __getitem__(self, key):
        return getitem(self, key)

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


# ---------------------------------------------------------------- array functions

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
    return P.matmul(a, b)


def dot(a, b, out=None):
    _check_common("np.dot", out)
    if np.ndim(_value_of(a)) == 0 or np.ndim(_value_of(b)) == 0:
        return P.mul(a, b)
    return P.matmul(a, b)


_NOVALUE = getattr(np, "_NoValue", None)


def _given(v):
    return v is not None and v is not _NOVALUE


def _refuse(fname, key, advice=""):
    raise UnsupportedError(f"{fname}(..., {key}=...) is not supported on tracked values"
                           + (f"; {advice}" if advice else ""))


def _check_common(fname, out=None, dtype=None):
    """out= and dtype= of a numpy function: honoured when they change nothing
    (no out, float64), refused otherwise -- never ignored."""
    if out is not None and not (isinstance(out, tuple) and all(o is None for o in out)):
        _refuse(fname, "out", "a tracked result cannot be written into an array; use the "
                "returned value")
    if dtype is not None and np.dtype(dtype) != np.float64:
        _refuse(fname, "dtype", "tracked values are float64")


def _check_ufunc_kwargs(fname, kw):
    """The ufunc keywords np.clip and friends pass on: casting/order/subok change
    nothing for float64 results; dtype must be float64; where=/out= are refused."""
    _check_common(fname, kw.pop("out", None), kw.pop("dtype", None))
    for k in ("casting", "order", "subok"):
        kw.pop(k, None)
    where_ = kw.pop("where", True)
    if where_ is not True:
        _refuse(fname, "where", "use np.where(mask, f(x), other) to choose elements")
    if kw:
        _refuse(fname, next(iter(kw)))


def _mask_of(fname, where_, shape):
    """where= as a boolean array of x's shape; a tracked mask (a comparison
    result) as a tracked 0/1 array of x's shape: reductions then select by it
    (no guard -- the result is piecewise in x, like np.where's)."""
    if istracked(where_):
        mshape = shape_of(_value_of(where_))
        if np.broadcast_shapes(mshape, tuple(shape)) != tuple(shape):
            raise ValueError(f"{fname}(..., where=): a mask of shape {mshape} does not "
                             f"broadcast to the array's shape {tuple(shape)}")
        return P.where(where_, np.ones(shape), 0.0)
    return np.broadcast_to(np.asarray(where_, dtype=bool), shape)


_IDENTITY = {"sum": 0.0, "prod": 1.0, "all": 1.0, "any": 0.0}
_COMBINE_INITIAL = {"sum": "add", "prod": "mul", "max": "maximum", "min": "minimum"}


def reduce(name, x, axis=None, keepdims=False, dtype=None, out=None, initial=_NOVALUE,
           where=True):
    """A reduction with numpy's keywords: where= selects the reduced elements
    (the others count as the identity), initial= joins the result."""
    fname = f"np.{name}"
    _check_common(fname, out, dtype)
    if keepdims is _NOVALUE:
        keepdims = False
    shape = shape_of(_value_of(x))
    ax = ops._as_tuple_axis(axis, len(shape))
    if where is not True and where is not _NOVALUE:
        mask = _mask_of(fname, where, shape)
        if name in _IDENTITY:
            fill = _IDENTITY[name]
        elif _given(initial) and name in ("max", "min"):
            fill = float(initial)
        else:
            raise ValueError(f"reduction operation {name!r} does not have an identity, so to "
                             "use a where mask one has to specify 'initial'")
        if istracked(mask) or not mask.all():
            x = P.where(mask, x, fill)
    if _given(initial):
        if name not in _COMBINE_INITIAL:
            _refuse(fname, "initial")
        if istracked(initial):
            _refuse(fname, "initial", "add the tracked value to the result instead")
        if 0 in shape:
            _refuse(fname, "initial", "reduce a non-empty array")
        r = getattr(P, name)(x, axis=ax, keepdims=bool(keepdims))
        return getattr(P, _COMBINE_INITIAL[name])(r, float(initial))
    return getattr(P, name)(x, axis=ax, keepdims=bool(keepdims))


def _count(fname, shape, axis, keepdims, where_):
    """Elements per output of a reduction (a plain float, or an array with where=)."""
    ax = ops._as_tuple_axis(axis, len(shape))
    if where_ is True or where_ is _NOVALUE:
        return float(np.prod(shape if ax is None else [shape[a] for a in ax], dtype=np.int64))
    mask = _mask_of(fname, where_, shape)
    if istracked(mask):
        return reduce("sum", mask, axis, keepdims)
    return np.sum(mask, axis=ax, keepdims=bool(keepdims), dtype=np.float64)[()]


def mean(x, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
    _check_common("np.mean", out, dtype)
    keepdims = False if keepdims is _NOVALUE else keepdims
    n = _count("np.mean", shape_of(_value_of(x)), axis, keepdims, where)
    total = reduce("sum", x, axis, keepdims, where=where)
    return P.mul(total, 1.0 / n) if type(n) is float else P.div(total, n)


_mean = mean   # var's keyword `mean=` shadows the function there


def var(x, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True,
        mean=_NOVALUE, correction=_NOVALUE):
    """np.var with every keyword: ddof/correction (numpy's names for the same
    number), where= (the selected elements only) and mean= (a precomputed
    mean, keepdims-shaped)."""
    _check_common("np.var", out, dtype)
    keepdims = False if keepdims is _NOVALUE else keepdims
    if _given(correction):
        if ddof != 0:
            raise ValueError("ddof and correction can't be provided simultaneously.")
        ddof = correction
    if istracked(ddof):
        _refuse("np.var", "ddof", "ddof must be a plain number")
    m = mean if _given(mean) else _mean(x, axis, keepdims=True, where=where)
    sq = P.square(P.sub(x, m))
    n = _count("np.var", shape_of(_value_of(x)), axis, keepdims, where)
    total = reduce("sum", sq, axis, keepdims, where=where)
    if istracked(n):                     # a tracked where= mask: counted at each replay
        return P.div(total, P.maximum(P.sub(n, float(ddof)), 0.0))
    dof = np.maximum(np.subtract(n, float(ddof)), 0.0)[()]
    if type(dof) is float or np.ndim(dof) == 0:
        with np.errstate(divide="ignore"):
            return P.mul(total, float(np.divide(1.0, dof)))
    return P.div(total, dof)


def std(x, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True,
        mean=_NOVALUE, correction=_NOVALUE):
    return P.sqrt(var(x, axis, dtype, out, ddof, keepdims, where=where, mean=mean,
                      correction=correction))


def reshape(x, shape, order="C"):
    if order != "C":
        raise UnsupportedError("only C-order reshape is supported on tracked values")
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    v = _value_of(x)
    new = np.empty(shape_of(v), dtype=np.int8).reshape(tuple(int(s) for s in shape)).shape
    if new == shape_of(v):
        return x
    return P.reshape(x, shape=new)


def transpose(x, axes=None):
    return ops.transpose(x, axes)


def squeeze(x, axis=None):
    return reshape(x, np.squeeze(np.empty(shape_of(_value_of(x)), dtype=np.int8), axis).shape)


def expand_dims(x, axis):
    return reshape(x, np.expand_dims(np.empty(shape_of(_value_of(x)), dtype=np.int8), axis).shape)


def broadcast_to(x, shape, subok=False):
    return ops.broadcast_to(x, tuple(shape))


_ITEM = ops.OPS["item"]
_POWER_SPECIAL = ops.POWER_SPECIAL    # the rows with power= (x ** 2 -> square)


def getitem(x, key):
    shape = x.shape
    if type(key) is int and len(shape) == 1:
        n = shape[0]
        if not -n <= key < n:
            raise IndexError(f"index {key} is out of bounds for axis 0 with size {n}")
        return _record1(_ITEM, x, {"i": key % n})
    if type(key) in _tape_module.DRAWN_TYPES or (type(key) is tuple and any(
            type(k) in _tape_module.DRAWN_TYPES for k in key)):
        return _tape_module.drawn_getitem(x, key)     # indices drawn afresh per replay
    if istracked(key):
        return masked_getitem(x, key)         # x[x > c]: a guarded gather
    if isinstance(key, tuple) and any(istracked(k) for k in key):
        raise UnsupportedError("indexing with a tracked value depends on the data; use np.where "
                               "or index with plain integers")
    idx = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)[key]
    if np.ndim(idx) == 0:
        return P.item(x, i=int(idx))
    return P.take(x, idx=np.ascontiguousarray(idx))


def where(cond, x=None, y=None):
    if x is None or y is None:
        raise UnsupportedError("np.where(cond) (indices of a mask) depends on the data")
    return P.where(cond, x, y)


def clip(x, a_min=_NOVALUE, a_max=_NOVALUE, out=None, **kw):
    a_min = kw.pop("min", None) if a_min is _NOVALUE else a_min
    a_max = kw.pop("max", None) if a_max is _NOVALUE else a_max
    _check_ufunc_kwargs("np.clip", dict(kw, out=out))
    if istracked(a_min) or istracked(a_max) or np.ndim(a_min) or np.ndim(a_max):
        out = x
        if a_min is not None:
            out = P.maximum(out, a_min)
        if a_max is not None:
            out = P.minimum(out, a_max)
        return out
    lo = -np.inf if a_min is None else float(a_min)
    hi = np.inf if a_max is None else float(a_max)
    return P.clip(x, lo, hi)


def concatenate(xs, axis=0, out=None, *, dtype=None, casting="same_kind"):
    _check_common("np.concatenate", out, dtype)
    xs = list(xs)
    if axis is None:
        xs, axis = [reshape(x, (-1,)) for x in xs], 0
    shapes = [shape_of(_value_of(x)) for x in xs]
    nd = len(shapes[0])
    if nd == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    axis = axis % nd
    if not any(istracked(x) for x in xs):
        return np.concatenate([np.asarray(x) for x in xs], axis=axis)
    return P.concat(*xs, axis=axis)


def stack(xs, axis=0, out=None, *, dtype=None, casting="same_kind"):
    _check_common("np.stack", out, dtype)
    xs = list(xs)
    shape = shape_of(_value_of(xs[0]))
    axis = axis % (len(shape) + 1)
    new = tuple(shape[:axis]) + (1,) + tuple(shape[axis:])
    return concatenate([reshape(x, new) for x in xs], axis=axis)


def hstack(xs, *, dtype=None, casting="same_kind"):
    _check_common("np.hstack", None, dtype)
    xs = [atleast_1d(x) for x in xs]
    return concatenate(xs, axis=0 if np.ndim(_value_of(xs[0])) == 1 else 1)


def vstack(xs, *, dtype=None, casting="same_kind"):
    _check_common("np.vstack", None, dtype)
    return concatenate([atleast_2d(x) for x in xs], axis=0)


def atleast_1d(*xs):
    if len(xs) != 1:
        return tuple(atleast_1d(x) for x in xs)
    x = xs[0]
    return reshape(x, (1,)) if np.ndim(_value_of(x)) == 0 else x


def atleast_2d(*xs):
    if len(xs) != 1:
        return tuple(atleast_2d(x) for x in xs)
    x = xs[0]
    nd = np.ndim(_value_of(x))
    return reshape(x, (1,) * (2 - nd) + shape_of(_value_of(x))) if nd < 2 else x


def outer(a, b, out=None):
    _check_common("np.outer", out)
    return P.mul(reshape(a, (-1, 1)), reshape(b, (1, -1)))


def inner(a, b):
    if np.ndim(_value_of(a)) <= 1 and np.ndim(_value_of(b)) <= 1:
        return dot(a, b)
    raise UnsupportedError("np.inner of matrices is not supported on tracked values; use @")


def diff(x, n=1, axis=-1, prepend=_NOVALUE, append=_NOVALUE):
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n!r}")
    if prepend is not _NOVALUE or append is not _NOVALUE:
        # numpy: a scalar is broadcast to the shape of x with length 1 along axis
        nd = np.ndim(_value_of(x))
        ax = axis % nd
        def piece(extra):
            if np.ndim(_value_of(extra)) == 0:
                shape = list(shape_of(_value_of(x)))
                shape[ax] = 1
                return (broadcast_to(extra, shape) if istracked(extra)
                        else np.full(shape, float(extra)))
            return extra
        parts = ([piece(prepend)] if prepend is not _NOVALUE else []) + [x] + (
            [piece(append)] if append is not _NOVALUE else [])
        x = concatenate(parts, axis=ax)
    for _ in range(n):
        nd = np.ndim(_value_of(x))
        ax = axis % nd
        hi = tuple(slice(1, None) if i == ax else slice(None) for i in range(nd))
        lo = tuple(slice(None, -1) if i == ax else slice(None) for i in range(nd))
        x = P.sub(getitem(x, hi), getitem(x, lo))
    return x


def norm(x, ord=None, axis=None, keepdims=False):
    """np.linalg.norm with numpy's meaning of every ord: vector norms (None, 2,
    +-inf, 0, 1, any p) along one axis, matrix norms (None/'fro', +-1, +-inf)
    over two.  The spectral and nuclear norms (ord=+-2, 'nuc' on a matrix)
    need singular values and are refused, never replaced by another norm."""
    nd = np.ndim(_value_of(x))
    if axis is None:
        if ord is None:                 # the 2-norm of the flattened array, any ndim
            return P.sqrt(reduce("sum", P.square(x), None, keepdims))
        if nd not in (1, 2):
            raise ValueError("Improper number of dimensions to norm.")
        axis = tuple(range(nd))
    elif isinstance(axis, (int, np.integer)):
        axis = (int(axis),)
    axis = tuple(int(a) % nd for a in axis)
    if len(axis) == 1:
        ax = axis[0]
        if ord is None or ord == 2:
            return P.sqrt(reduce("sum", P.square(x), ax, keepdims))
        if isinstance(ord, str):
            raise ValueError(f"Invalid norm order '{ord}' for vectors")
        if ord == np.inf:
            return reduce("max", P.abs(x), ax, keepdims)
        if ord == -np.inf:
            return reduce("min", P.abs(x), ax, keepdims)
        if ord == 0:                    # a count: no derivative
            return reduce("sum", P.ne(x, 0.0), ax, keepdims)
        if ord == 1:
            return reduce("sum", P.abs(x), ax, keepdims)
        p = float(ord)
        return P.pow(reduce("sum", P.pow(P.abs(x), p), ax, keepdims), 1.0 / p)
    if len(axis) != 2:
        raise ValueError("Improper number of dimensions to norm.")
    row, col = axis
    if row == col:
        raise ValueError("Duplicate axes given.")
    if ord in (2, -2, "nuc"):
        raise UnsupportedError(
            f"np.linalg.norm(M, ord={ord!r}) of a matrix is the "
            + ("nuclear norm (sum of singular values)" if ord == "nuc" else
               "spectral norm (extreme singular value)")
            + ", which needs an SVD: not supported on tracked values. ord=None/'fro' is the "
              "Frobenius norm, ord=1/inf the max column/row sum")
    if ord is None or ord == "fro":
        r = P.sqrt(reduce("sum", P.square(x), axis, False))
    elif ord in (1, -1):
        pick = "max" if ord == 1 else "min"
        r = reduce(pick, reduce("sum", P.abs(x), row, False), col - (col > row), False)
    elif ord in (np.inf, -np.inf):
        pick = "max" if ord == np.inf else "min"
        r = reduce(pick, reduce("sum", P.abs(x), col, False), row - (row > col), False)
    else:
        raise ValueError("Invalid norm order for matrices.")
    if keepdims:
        shape = list(shape_of(_value_of(x)))
        shape[row] = shape[col] = 1
        r = reshape(r, tuple(shape))
    return r


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    if b is not None or return_sign:
        raise UnsupportedError("logsumexp(b=..., return_sign=...) is not supported on tracked values")
    return reduce("logsumexp", a, axis, keepdims)


def _plain_like(f):
    return lambda x, *a, **k: f(np.empty(shape_of(_value_of(x))), *a, **k)


# numpy's signatures, positional order included (np.sum(x, 0, None, None, True)
# must not read dtype as keepdims); every keyword honoured or refused.
def _np_sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=_NOVALUE, where=True):
    return reduce("sum", a, axis, keepdims, dtype, out, initial, where)


def _np_prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=_NOVALUE, where=True):
    return reduce("prod", a, axis, keepdims, dtype, out, initial, where)


def _np_max(a, axis=None, out=None, keepdims=False, initial=_NOVALUE, where=True):
    return reduce("max", a, axis, keepdims, None, out, initial, where)


def _np_min(a, axis=None, out=None, keepdims=False, initial=_NOVALUE, where=True):
    return reduce("min", a, axis, keepdims, None, out, initial, where)


def _np_all(a, axis=None, out=None, keepdims=False, *, where=True):
    return reduce("all", a, axis, keepdims, None, out, where=where)


def _np_any(a, axis=None, out=None, keepdims=False, *, where=True):
    return reduce("any", a, axis, keepdims, None, out, where=where)


def _np_reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    # copy= is about memory; a tracked value is immutable, so a view and a copy
    # are indistinguishable and every copy= is honoured
    if newshape is not None:
        if shape is not None:
            raise TypeError("You cannot specify 'newshape' and 'shape' arguments at the same time.")
        shape = newshape
    return reshape(a, shape, order)


def _np_ravel(a, order="C"):
    # a tracked value is logically C-contiguous: 'A' and 'K' read it in C order
    return reshape(a, (-1,), "C" if order in ("A", "K") else order)


def _np_take(a, indices, axis=None, out=None, mode="raise"):
    _check_common("np.take", out)
    if istracked(indices):
        raise UnsupportedError("np.take with tracked indices depends on the data; index with "
                               "plain integers")
    shape = shape_of(_value_of(a))
    n = int(np.prod(shape, dtype=np.int64)) if axis is None else shape[axis % len(shape)]
    if mode == "wrap":
        indices = np.mod(indices, n)
    elif mode == "clip":
        indices = np.clip(indices, 0, n - 1)
    elif mode != "raise":
        raise ValueError(f"clipmode must be one of 'clip', 'raise', or 'wrap' (got {mode!r})")
    if axis is None:
        return getitem(reshape(a, (-1,)), indices)
    return getitem(a, (slice(None),) * (axis % len(shape)) + (indices,))


def _np_full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, **kw):
    template = np.empty(shape_of(_value_of(a)))
    if istracked(fill_value):
        _check_common("np.full_like", None, dtype)
        return broadcast_to(fill_value, template.shape if shape is None else shape)
    return np.full_like(template, fill_value, dtype=dtype, order=order, subok=subok,
                        shape=shape, **kw)


# The nan-ignoring reductions.  nan is a value at replay time, so the mask of
# nan elements is computed on every replay (x != x), never frozen at recording.
def _isnan_mask(a):
    return P.ne(a, a)


def _np_nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=_NOVALUE,
               where=True):
    return _np_sum(P.where(_isnan_mask(a), 0.0, a), axis, dtype, out, keepdims, initial, where)


def _np_nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=_NOVALUE,
                where=True):
    return _np_prod(P.where(_isnan_mask(a), 1.0, a), axis, dtype, out, keepdims, initial, where)


def _np_nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
    _check_common("np.nanmean", out, dtype)
    if where is not True and where is not _NOVALUE:
        _refuse("np.nanmean", "where")
    ok = P.eq(a, a)
    return P.div(reduce("sum", P.where(ok, a, 0.0), axis, keepdims),
                 reduce("sum", ok, axis, keepdims))      # all-nan slice: 0/0 = nan, as numpy


def _nan_extreme(name, fill):
    def f(a, axis=None, out=None, keepdims=False, initial=_NOVALUE, where=True):
        nan = _isnan_mask(a)
        r = reduce(name, P.where(nan, fill, a), axis, keepdims, None, out, initial, where)
        if _given(initial) or (where is not True and where is not _NOVALUE):
            return r
        # an all-nan slice is nan, as numpy (which also warns)
        return P.where(reduce("all", nan, axis, keepdims), np.nan, r)
    f.__name__ = f"nan{name}"
    return f


HANDLED_FUNCTIONS = {
    np.nansum: _np_nansum, np.nanprod: _np_nanprod, np.nanmean: _np_nanmean,
    np.nanmax: _nan_extreme("max", -np.inf), np.nanmin: _nan_extreme("min", np.inf),
    np.sum: _np_sum, np.prod: _np_prod, np.max: _np_max, np.min: _np_min,
    np.all: _np_all, np.any: _np_any,
    np.mean: mean, np.var: var, np.std: std,
    np.dot: dot, np.vdot: lambda a, b: dot(reshape(a, (-1,)), reshape(b, (-1,))),
    np.inner: inner, np.outer: outer,
    np.where: where, np.clip: clip,
    np.concatenate: concatenate, np.stack: stack, np.hstack: hstack, np.vstack: vstack,
    np.reshape: _np_reshape, np.ravel: _np_ravel,
    np.transpose: transpose, np.squeeze: squeeze, np.expand_dims: expand_dims,
    np.broadcast_to: broadcast_to, np.atleast_1d: atleast_1d, np.atleast_2d: atleast_2d,
    np.diff: diff, np.linalg.norm: norm,
    np.shape: lambda x: shape_of(_value_of(x)), np.ndim: lambda x: np.ndim(_value_of(x)),
    np.size: lambda x, axis=None: np.size(np.empty(shape_of(_value_of(x))), axis),
    np.zeros_like: _plain_like(np.zeros_like), np.ones_like: _plain_like(np.ones_like),
    np.empty_like: _plain_like(np.zeros_like),
    np.full_like: _np_full_like,
    np.copy: lambda a, order="K", subok=False: a,
    np.take: _np_take,
    np.sinc: P.sinc,
}
if hasattr(np, "amax"):
    HANDLED_FUNCTIONS[np.amax] = HANDLED_FUNCTIONS[np.max]
    HANDLED_FUNCTIONS[np.amin] = HANDLED_FUNCTIONS[np.min]


# ---------------------------------------------------------------- x[mask] by a tracked mask

_MASK_OPS = ops.MASK_OPS     # rows with mask=True: comparisons and logical_*


_tape_module.register_handles(wrap=wrap, constant=constant, stack=stack)


def _producer(t):
    """The op that computed tracked value t on its tape (None for inputs/constants)."""
    for instr in reversed(t._tape._instrs):
        if instr[1] == t._id:
            return instr[0]
    return None


def masked_getitem(x, key):
    """x[mask] with a tracked boolean mask (a comparison or logical_* result):
    the elements where the mask held at recording, as one gather.  Which
    elements those are depends on the data, so a guard records that the mask
    is unchanged: a replay where any element of the mask differs raises
    rt.BranchChanged (rt.grad re-records), like any branch on a comparison."""
    if not istracked(key) or istracked(x) and key._tape is not x._tape and key._id >= 0:
        raise UnsupportedError("indexing with a tracked value depends on the data; use np.where "
                               "or index with plain integers")
    op = _producer(key) if key._id >= 0 else None
    if op is None or op.name not in _MASK_OPS:
        raise UnsupportedError(
            "indexing with a tracked value: only a boolean mask made by a comparison or "
            "np.logical_* on tracked values (x[x > c]) is supported; for other data-dependent "
            "choices use np.where or index with plain integers")
    m0 = np.asarray(_value_of(key)) != 0.0
    shape = tuple(np.shape(_value_of(x)))
    idx = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)[m0]
    _guard_all(P.eq(key, m0.astype(np.float64)),
               "the elements selected by a tracked boolean mask x[mask] changed")
    return P.take(x, idx=np.ascontiguousarray(idx))


def _guard_all(mask, what):
    """Record that every element of the tracked 0/1 mask holds (a guard)."""
    if istracked(mask) and bool(np.size(_value_of(mask))):
        tape = mask._tape
        n = len(tape._instrs)
        bool(reduce("all", mask))          # bool() of a tracked value records the guard
        if len(tape._instrs) > n and tape._instrs[-1][1] == -1:
            tape._instrs[-1][3]["what"] = what


# ---------------------------------------------------------------- ufuncs

# The ufuncs that record one row each, the comparisons, the reductions and
# the constant powers are derived from the op table's fields (ops.UFUNC_OPS
# ...): a new row with its numpy/scipy ufunc needs no edit here.  What is
# below is the rest: ufuncs computed from several rows, and refusals.
_UFUNC_OPS = ops.UFUNC_OPS
_UFUNC_COMPARE = ops.UFUNC_COMPARE
_REDUCE_UFUNCS = ops.REDUCE_UFUNCS



def _gammainc_in_x(name):
    def f(a, x):
        if istracked(a):
            raise UnsupportedError(
                f"scipy.special.{name}(a, x) on tracked values is differentiable in x only: "
                "the derivative with respect to the shape a is not implemented; pass a as a "
                "plain number or array")
        return getattr(P, name)(a, x)
    return f


_UFUNC_SPECIAL = {
    np.power: power, np.float_power: power, np.positive: lambda x: x,
    np.matmul: matmul, np.true_divide: P.div,
    np.log2: lambda x: P.mul(P.log(x), 1.0 / np.log(2.0)),
    np.log10: lambda x: P.mul(P.log(x), 1.0 / np.log(10.0)),
    np.exp2: lambda x: P.pow(2.0, x),
    np.cbrt: lambda x: P.mul(P.sign(x), P.pow(P.abs(x), 1.0 / 3.0)),
    np.hypot: lambda x, y: hypot(x, y),
    np.fmax: lambda x, y: fmax(x, y), np.fmin: lambda x, y: fmin(x, y),
    np.isnan: lambda x: np.isnan(_value_of(x)),
    np.isfinite: lambda x: np.isfinite(_value_of(x)),
    np.isinf: lambda x: np.isinf(_value_of(x)),
}


if _sps is not None:
    _UFUNC_SPECIAL.update({_sps.gammainc: _gammainc_in_x("gammainc"),
                           _sps.gammaincc: _gammainc_in_x("gammaincc")})


def fmax(x, y):
    """np.fmax: the maximum, ignoring a nan operand (nan only where both are).
    Selects, so the adjoint goes to the operand that was taken."""
    return P.where(P.ne(y, y), x, P.where(P.ne(x, x), y, P.maximum(x, y)))


def fmin(x, y):
    return P.where(P.ne(y, y), x, P.where(P.ne(x, x), y, P.minimum(x, y)))


def hypot(x, y):
    """np.hypot without overflow (m * sqrt(1 + (k/m)**2), m = max(|x|, |y|),
    k = min) and, as C99/numpy, inf when either operand is infinite, nan or not."""
    ax, ay = P.abs(x), P.abs(y)
    m, k = P.maximum(ax, ay), P.minimum(ax, ay)
    safe = P.where(P.eq(m, 0.0), 1.0, m)
    r = P.mul(m, P.sqrt(P.add(1.0, P.square(P.div(k, safe)))))
    return P.where(P.logical_or(P.eq(ax, np.inf), P.eq(ay, np.inf)), np.inf, r)


def _polygamma(n, x):
    if istracked(n) or np.ndim(n) or int(n) != n or int(n) not in (0, 1):
        raise UnsupportedError("polygamma on tracked values supports n = 0 and 1")
    return P.digamma(x) if int(n) == 0 else P.trigamma(x)


def array_ufunc(ufunc, method, inputs, kwargs):
    if method == "__call__" and not kwargs:
        op = _UFUNC_OPS.get(ufunc)
        if op is not None:
            a = inputs[0]
            if len(inputs) == 1:
                return _record1(op, a)
            if len(inputs) == 2 and type(a) in (TrackedReal, TrackedArray):
                return _record2(op, a, inputs[1], False)
    fname = public_name(ufunc) + ("" if method == "__call__" else f".{method}")
    kwargs = dict(kwargs)
    out = kwargs.pop("out", None)
    if out is not None and any(o is not None for o in (out if isinstance(out, tuple) else (out,))):
        raise ConversionError(f"{fname} with out= would write a tracked value into a plain "
                              "array; use the returned value instead of out=")
    if method == "reduce":
        name = _REDUCE_UFUNCS.get(ufunc)
        if name is None:
            raise UnsupportedError(f"{fname} is not supported on tracked values")
        if kwargs.get("dtype") is None:
            kwargs.pop("dtype", None)
        result = reduce(name, inputs[0], kwargs.pop("axis", 0), kwargs.pop("keepdims", False),
                        kwargs.pop("dtype", None), None, kwargs.pop("initial", _NOVALUE),
                        kwargs.pop("where", True))
        if kwargs:
            _refuse(fname, next(iter(kwargs)))
        return result
    if method != "__call__":
        raise UnsupportedError(f"{fname} is not supported on tracked values")
    # casting=, order= and subok= cannot change a float64 result; dtype= must be
    # float64; where= would leave the unselected elements undefined (numpy
    # fills them only into an out= array, which a tracked value cannot be)
    _check_common(fname, None, kwargs.pop("dtype", None))
    for k in ("casting", "order", "subok"):
        kwargs.pop(k, None)
    if kwargs.pop("where", True) is not True:
        _refuse(fname, "where", "use np.where(mask, f(x), other) to choose elements")
    if kwargs.pop("signature", None) is not None:
        _refuse(fname, "signature")
    if kwargs:
        _refuse(fname, next(iter(kwargs)))
    op = _UFUNC_OPS.get(ufunc)
    if op is not None:
        return getattr(P, op.name)(*inputs)
    pred = _UFUNC_COMPARE.get(ufunc)
    if pred is not None:
        return compare(pred, *inputs)
    special = _UFUNC_SPECIAL.get(ufunc)
    if special is not None:
        return special(*inputs)
    raise UnsupportedError(f"{fname} is not supported on tracked values; express it "
                           "with supported numpy functions (see the README's op list)")


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
