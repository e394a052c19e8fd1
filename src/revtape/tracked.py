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
from .tape import NULL_TAPE, _norm, as_value, shape_of

P = ops.P

try:  # scipy is optional at run time; its ufuncs dispatch here when present
    import scipy.special as _sps
except ImportError:  # pragma: no cover
    _sps = None


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


class Tracked:
    """Common behaviour of TrackedReal and TrackedArray."""

    __slots__ = ("_tape", "_id", "_const")
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

    # ------------------------------------------------ escapes
    def __float__(self):
        raise ConversionError(_NO_FLOAT.format(what="float"))

    def __int__(self):
        raise ConversionError(_NO_FLOAT.format(what="int"))

    __index__ = __int__

    def __complex__(self):
        raise ConversionError(_NO_FLOAT.format(what="complex"))

    def __array__(self, dtype=None, copy=None):
        if dtype is not None and np.dtype(dtype) == object:
            # an object array holds the tracked value itself: nothing is lost
            box = np.empty((), dtype=object)
            box[()] = self
            return box
        raise ConversionError(_NO_FLOAT.format(what="ndarray") + ". (Functions that call "
                              "np.asarray internally cannot be traced; for logsumexp use "
                              "revtape.special.logsumexp; for scipy.linalg's solve_triangular, "
                              "cholesky, cho_factor, cho_solve, solve, inv, det imported before "
                              "revtape use revtape.linalg's.)")

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
                f"np.{getattr(func, '__name__', func)} is not supported on tracked values; "
                "express it with supported numpy functions (see the README's op list)")
        return handler(*args, **kwargs)

    # ------------------------------------------------ array methods
    def sum(self, axis=None, keepdims=False): return reduce("sum", self, axis, keepdims)
    def prod(self, axis=None, keepdims=False): return reduce("prod", self, axis, keepdims)
    def max(self, axis=None, keepdims=False): return reduce("max", self, axis, keepdims)
    def min(self, axis=None, keepdims=False): return reduce("min", self, axis, keepdims)
    def all(self, axis=None, keepdims=False): return reduce("all", self, axis, keepdims)
    def any(self, axis=None, keepdims=False): return reduce("any", self, axis, keepdims)
    def mean(self, axis=None, keepdims=False): return mean(self, axis, keepdims)

    def reshape(self, *shape, order="C"):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return reshape(self, shape, order)

    def ravel(self, order="C"): return reshape(self, (-1,), order)
    flatten = ravel
    def transpose(self, *axes): return transpose(self, axes if axes else None)
    def dot(self, o): return dot(self, o)
    def clip(self, a_min=None, a_max=None): return clip(self, a_min, a_max)
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


_tape_module._WRAP = wrap


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


def dot(a, b):
    if np.ndim(_value_of(a)) == 0 or np.ndim(_value_of(b)) == 0:
        return P.mul(a, b)
    return P.matmul(a, b)


_NOVALUE = getattr(np, "_NoValue", None)


def _trivial(k, v):
    """An extra reduction argument that changes nothing (numpy's defaults)."""
    if v is None or v is _NOVALUE:
        return True
    if k == "where":
        return v is True
    if k == "dtype":
        return np.dtype(v) == np.float64
    return False


def reduce(name, x, axis=None, keepdims=False, **unused):
    for k, v in unused.items():
        if not _trivial(k, v):
            raise UnsupportedError(f"np.{name}(..., {k}=...) is not supported on tracked values")
    shape = shape_of(_value_of(x))
    return getattr(P, name)(x, axis=ops._as_tuple_axis(axis, len(shape)), keepdims=bool(keepdims))


def mean(x, axis=None, keepdims=False, **unused):
    shape = shape_of(_value_of(x))
    ax = ops._as_tuple_axis(axis, len(shape))
    n = int(np.prod(shape if ax is None else [shape[a] for a in ax], dtype=np.int64))
    return P.mul(reduce("sum", x, axis, keepdims, **unused), 1.0 / n)


def var(x, axis=None, keepdims=False, ddof=0, **unused):
    shape = shape_of(_value_of(x))
    ax = ops._as_tuple_axis(axis, len(shape))
    n = int(np.prod(shape if ax is None else [shape[a] for a in ax], dtype=np.int64))
    d = P.sub(x, mean(x, axis, keepdims=True))
    return P.mul(reduce("sum", P.square(d), axis, keepdims), 1.0 / (n - ddof))


def std(x, axis=None, keepdims=False, ddof=0, **unused):
    return P.sqrt(var(x, axis, keepdims, ddof))


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
_POWER_SPECIAL = {2.0: ops.OPS["square"], 0.5: ops.OPS["sqrt"], -1.0: ops.OPS["reciprocal"]}


def getitem(x, key):
    shape = x.shape
    if type(key) is int and len(shape) == 1:
        n = shape[0]
        if not -n <= key < n:
            raise IndexError(f"index {key} is out of bounds for axis 0 with size {n}")
        return _record1(_ITEM, x, {"i": key % n})
    if istracked(key) or (isinstance(key, tuple) and any(istracked(k) for k in key)):
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


def clip(x, a_min=None, a_max=None, **kw):
    a_min = kw.pop("min", a_min)
    a_max = kw.pop("max", a_max)
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


def concatenate(xs, axis=0, **kw):
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


def stack(xs, axis=0, **kw):
    xs = list(xs)
    shape = shape_of(_value_of(xs[0]))
    axis = axis % (len(shape) + 1)
    new = tuple(shape[:axis]) + (1,) + tuple(shape[axis:])
    return concatenate([reshape(x, new) for x in xs], axis=axis)


def hstack(xs, **kw):
    xs = [atleast_1d(x) for x in xs]
    return concatenate(xs, axis=0 if np.ndim(_value_of(xs[0])) == 1 else 1)


def vstack(xs, **kw):
    return concatenate([atleast_2d(x) for x in xs], axis=0)


def atleast_1d(x):
    return reshape(x, (1,)) if np.ndim(_value_of(x)) == 0 else x


def atleast_2d(x):
    nd = np.ndim(_value_of(x))
    return reshape(x, (1,) * (2 - nd) + shape_of(_value_of(x))) if nd < 2 else x


def outer(a, b):
    return P.mul(reshape(a, (-1, 1)), reshape(b, (1, -1)))


def inner(a, b):
    if np.ndim(_value_of(a)) <= 1 and np.ndim(_value_of(b)) <= 1:
        return dot(a, b)
    raise UnsupportedError("np.inner of matrices is not supported on tracked values; use @")


def diff(x, n=1, axis=-1):
    for _ in range(n):
        nd = np.ndim(_value_of(x))
        ax = axis % nd
        hi = tuple(slice(1, None) if i == ax else slice(None) for i in range(nd))
        lo = tuple(slice(None, -1) if i == ax else slice(None) for i in range(nd))
        x = P.sub(getitem(x, hi), getitem(x, lo))
    return x


def norm(x, ord=None, axis=None, keepdims=False):
    if ord not in (None, 2, "fro") or (axis is not None and np.ndim(_value_of(x)) > 1 and ord == 2):
        raise UnsupportedError("np.linalg.norm on tracked values supports the 2-norm only")
    return P.sqrt(reduce("sum", P.square(x), axis, keepdims))


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    if b is not None or return_sign:
        raise UnsupportedError("logsumexp(b=..., return_sign=...) is not supported on tracked values")
    return reduce("logsumexp", a, axis, keepdims)


def _plain_like(f):
    return lambda x, *a, **k: f(np.empty(shape_of(_value_of(x))), *a, **k)


HANDLED_FUNCTIONS = {
    np.sum: lambda x, axis=None, keepdims=False, **k: reduce("sum", x, axis, keepdims, **k),
    np.prod: lambda x, axis=None, keepdims=False, **k: reduce("prod", x, axis, keepdims, **k),
    np.max: lambda x, axis=None, keepdims=False, **k: reduce("max", x, axis, keepdims, **k),
    np.min: lambda x, axis=None, keepdims=False, **k: reduce("min", x, axis, keepdims, **k),
    np.all: lambda x, axis=None, keepdims=False, **k: reduce("all", x, axis, keepdims, **k),
    np.any: lambda x, axis=None, keepdims=False, **k: reduce("any", x, axis, keepdims, **k),
    np.mean: mean, np.var: var, np.std: std,
    np.dot: dot, np.vdot: lambda a, b: dot(reshape(a, (-1,)), reshape(b, (-1,))),
    np.inner: inner, np.outer: outer,
    np.where: where, np.clip: clip,
    np.concatenate: concatenate, np.stack: stack, np.hstack: hstack, np.vstack: vstack,
    np.reshape: lambda x, shape=None, order="C", **k: reshape(x, k.get("newshape", shape), order),
    np.ravel: lambda x, order="C": reshape(x, (-1,), order),
    np.transpose: transpose, np.squeeze: squeeze, np.expand_dims: expand_dims,
    np.broadcast_to: broadcast_to, np.atleast_1d: atleast_1d, np.atleast_2d: atleast_2d,
    np.diff: diff, np.linalg.norm: norm,
    np.shape: lambda x: shape_of(_value_of(x)), np.ndim: lambda x: np.ndim(_value_of(x)),
    np.size: lambda x, axis=None: np.size(np.empty(shape_of(_value_of(x))), axis),
    np.zeros_like: _plain_like(np.zeros_like), np.ones_like: _plain_like(np.ones_like),
    np.empty_like: _plain_like(np.zeros_like),
    np.full_like: lambda x, fill_value, **k: np.full(shape_of(_value_of(x)), fill_value),
    np.copy: lambda x, **k: x,
    np.take: lambda x, indices, axis=None, **k: (
        getitem(reshape(x, (-1,)), indices) if axis is None else getitem(
            x, (slice(None),) * (axis % np.ndim(_value_of(x))) + (indices,))),
}
if hasattr(np, "amax"):
    HANDLED_FUNCTIONS[np.amax] = HANDLED_FUNCTIONS[np.max]
    HANDLED_FUNCTIONS[np.amin] = HANDLED_FUNCTIONS[np.min]


# ---------------------------------------------------------------- ufuncs

_UFUNC_OPS = {
    np.add: "add", np.subtract: "sub", np.multiply: "mul", np.divide: "div",
    np.negative: "neg", np.exp: "exp", np.log: "log", np.log1p: "log1p",
    np.expm1: "expm1", np.sqrt: "sqrt", np.square: "square", np.reciprocal: "reciprocal",
    np.sin: "sin", np.cos: "cos", np.tan: "tan", np.tanh: "tanh", np.sinh: "sinh",
    np.cosh: "cosh", np.arctan: "arctan", np.absolute: "abs", np.fabs: "abs",
    np.maximum: "maximum", np.minimum: "minimum", np.fmax: "maximum", np.fmin: "minimum",
    np.logaddexp: "logaddexp", np.arctan2: "arctan2",
    np.logical_and: "logical_and", np.logical_or: "logical_or", np.logical_not: "logical_not",
    np.sign: "sign", np.floor: "floor", np.ceil: "ceil",
}
if _sps is not None:
    _UFUNC_OPS.update({_sps.gammaln: "gammaln", _sps.digamma: "digamma", _sps.expit: "expit",
                       _sps.log_expit: "log_expit", _sps.erf: "erf", _sps.xlogy: "xlogy"})

_UFUNC_COMPARE = {np.less: "lt", np.less_equal: "le", np.greater: "gt",
                  np.greater_equal: "ge", np.equal: "eq", np.not_equal: "ne"}

_UFUNC_SPECIAL = {
    np.power: power, np.float_power: power, np.positive: lambda x: x,
    np.matmul: matmul, np.true_divide: P.div,
    np.log2: lambda x: P.mul(P.log(x), 1.0 / np.log(2.0)),
    np.log10: lambda x: P.mul(P.log(x), 1.0 / np.log(10.0)),
    np.exp2: lambda x: P.pow(2.0, x),
    np.cbrt: lambda x: P.mul(P.sign(x), P.pow(P.abs(x), 1.0 / 3.0)),
    np.hypot: lambda x, y: P.sqrt(P.add(P.square(x), P.square(y))),
    np.isnan: lambda x: np.isnan(_value_of(x)),
    np.isfinite: lambda x: np.isfinite(_value_of(x)),
    np.isinf: lambda x: np.isinf(_value_of(x)),
}


def _polygamma(n, x):
    if istracked(n) or np.ndim(n) or int(n) != n or int(n) not in (0, 1):
        raise UnsupportedError("polygamma on tracked values supports n = 0 and 1")
    return P.digamma(x) if int(n) == 0 else P.trigamma(x)


_REDUCE_UFUNCS = {np.add: "sum", np.multiply: "prod", np.maximum: "max", np.minimum: "min",
                  np.logical_and: "all", np.logical_or: "any"}


def array_ufunc(ufunc, method, inputs, kwargs):
    if method == "__call__" and not kwargs:
        name = _UFUNC_OPS.get(ufunc)
        if name is not None:
            a = inputs[0]
            if len(inputs) == 1:
                return _record1(ops.OPS[name], a)
            if len(inputs) == 2 and type(a) in (TrackedReal, TrackedArray):
                return _record2(ops.OPS[name], a, inputs[1], False)
    out = kwargs.pop("out", None)
    if out is not None and any(o is not None for o in (out if isinstance(out, tuple) else (out,))):
        raise ConversionError("a ufunc with out= would write a tracked value into a plain array; "
                              "use the returned value instead of out=")
    kwargs = {k: v for k, v in kwargs.items() if not (k in ("dtype", "casting", "order") and v in
                                                      (None, "same_kind", "K"))}
    if method == "reduce":
        name = _REDUCE_UFUNCS.get(ufunc)
        if name is None:
            return NotImplemented
        return reduce(name, inputs[0], kwargs.get("axis", 0), kwargs.get("keepdims", False))
    if method != "__call__" or kwargs.get("where", True) is not True:
        raise UnsupportedError(f"np.{ufunc.__name__}.{method} is not supported on tracked values")
    kwargs.pop("where", None)
    if kwargs:
        raise UnsupportedError(f"np.{ufunc.__name__}(..., {', '.join(kwargs)}=) is not supported "
                               "on tracked values")
    name = _UFUNC_OPS.get(ufunc)
    if name is not None:
        return getattr(P, name)(*inputs)
    pred = _UFUNC_COMPARE.get(ufunc)
    if pred is not None:
        return compare(pred, *inputs)
    special = _UFUNC_SPECIAL.get(ufunc)
    if special is not None:
        return special(*inputs)
    raise UnsupportedError(f"np.{ufunc.__name__} is not supported on tracked values; express it "
                           "with supported numpy functions (see the README's op list)")


# ---------------------------------------------------------------- scipy.special.logsumexp
# The scipy.special functions above are ufuncs and dispatch through
# __array_ufunc__.  logsumexp is a Python function that converts its input
# with np.asarray, so it cannot dispatch; revtape wraps it once, at import,
# so that `scipy.special.logsumexp(tracked)` records one instruction and any
# other input goes to scipy untouched.  (`from scipy.special import
# logsumexp` done before importing revtape keeps scipy's own function; the
# error it then raises names revtape.special.logsumexp.)

def _install_logsumexp():
    if _sps is None or getattr(_sps.logsumexp, "_revtape", False):
        return
    import functools
    original = _sps.logsumexp
    original_polygamma = _sps.polygamma

    @functools.wraps(original_polygamma)
    def polygamma_dispatch(n, x):
        if istracked(x):
            return _polygamma(n, x)
        return original_polygamma(n, x)

    polygamma_dispatch._revtape = True
    _sps.polygamma = polygamma_dispatch

    @functools.wraps(original)
    def logsumexp_dispatch(a, axis=None, b=None, keepdims=False, return_sign=False):
        if istracked(a) or istracked(b):
            return logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=return_sign)
        return original(a, axis=axis, b=b, keepdims=keepdims, return_sign=return_sign)

    logsumexp_dispatch._revtape = True
    _sps.logsumexp = logsumexp_dispatch


_install_logsumexp()
