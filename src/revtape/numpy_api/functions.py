"""The numpy API of tracked values: the handlers numpy's protocols dispatch
to (``__array_ufunc__`` -> array_ufunc, ``__array_function__`` ->
HANDLED_FUNCTIONS) and the array functions behind them (reductions, shape
functions, indexing, stacking, norms, ...).

It sits above tracked.py (the value types and their operators): it imports
them, and registers itself there at import (tracked.register_numpy_api) so
that a handle's methods reach these functions without tracked.py importing
this module.
"""

import sys

import numpy as np

from ..core import ops
from ..core.apitypes import ArrayLike
from ..trace import tape as _tape_module
from ..trace import tracked as _tracked
from ..errors import ConversionError, UnsupportedError
from ..trace.values import shape_of

from ..trace.tracked import (TrackedArray, TrackedReal, _record1, _record2, _value_of, compare,
                             istracked, matmul, power, public_name)

P = ops.P


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
    """np.std: sqrt(var), whose derivative at zero spread (one element, or all
    equal) is 0, as numpy's value is constant there and autograd answers 0;
    sqrt's infinite slope at 0 times var's zero adjoint would be nan.  A
    variance of nan or inf (ddof >= n) stays so."""
    v = var(x, axis, dtype, out, ddof, keepdims, where=where, mean=mean,
            correction=correction)
    spread = P.ne(v, 0.0)
    return P.where(spread, P.sqrt(P.where(spread, v, 1.0)), 0.0)


def reshape(x, shape, order="C"):
    """Reshape in numpy's orders: C (and None, numpy's spelling of it; 'A',
    as a tracked value is logically C-contiguous) is a view; F a gather."""
    if order is None or order == "A":
        order = "C"
    if order not in ("C", "F"):
        raise ValueError("order must be one of 'C', 'F', 'A'")
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    v = _value_of(x)
    n = int(np.prod(shape_of(v), dtype=np.int64))
    if order == "F":
        idx = np.arange(n).reshape(shape_of(v)).reshape(tuple(int(s) for s in shape), order="F")
        if np.array_equal(idx.ravel(), np.arange(n)):
            return reshape(x, idx.shape)
        return P.take(x, idx=np.ascontiguousarray(idx))
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
    return reshape(a, (-1,), "C" if order in ("A", "K", None) else order)


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
    np.outer: outer,
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


def _producer(t):
    """The op that computed tracked value t on its tape (None for inputs/constants)."""
    for instr in reversed(t._tape.instructions):   # (all of them, columns included)
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
        n = len(tape)
        bool(reduce("all", mask))          # bool() of a tracked value records the guard
        if len(tape) > n and tape.instructions[-1][1] == -1:
            tape.instructions[-1][3]["what"] = what


# ---------------------------------------------------------------- ufuncs

# The ufuncs that record one row each, the comparisons, the reductions and
# the constant powers are derived from the op table's fields (ops.UFUNC_OPS
# ...): a new row with its numpy/scipy ufunc needs no edit here.  What is
# below is the rest: ufuncs computed from several rows, and refusals.
_UFUNC_OPS = ops.UFUNC_OPS
_UFUNC_COMPARE = ops.UFUNC_COMPARE
_REDUCE_UFUNCS = ops.REDUCE_UFUNCS



def _gammainc_in_x(name):
    def f(a: ArrayLike, x: ArrayLike) -> "np.ndarray | float":
        if istracked(a):
            raise UnsupportedError(
                f"scipy.special.{name}(a, x) on tracked values is differentiable in x only: "
                "the derivative with respect to the shape a is not implemented; pass a as a "
                "plain number or array")
        return getattr(P, name)(a, x)
    f.__name__ = name
    f.__doc__ = (f"scipy.special.{name}(a, x), the regularised incomplete gamma function: "
                 "differentiable in x only (a tracked a raises UnsupportedError).\n\n"
                 "Parameters\n----------\na : float or array_like\n    The shape, a plain "
                 "value.\nx : float or array_like\n    Plain or tracked; broadcast with a.\n\n"
                 "Returns\n-------\nfloat or ndarray\n    Elementwise; tracked when x is.\n")
    return f


_UFUNC_SPECIAL = {
    np.power: power, np.float_power: power, np.positive: lambda x: x,
    np.matmul: matmul, np.true_divide: P.div,
    np.log2: lambda x: P.mul(P.log(x), 1.0 / np.log(2.0)),
    np.log10: lambda x: P.mul(P.log(x), 1.0 / np.log(10.0)),
    np.exp2: lambda x: P.pow(2.0, x),
    # numpy's loops multiply by the constant 180/pi (pi/180): the same product
    np.rad2deg: lambda x: P.mul(x, 180.0 / np.pi), np.degrees: lambda x: P.mul(x, 180.0 / np.pi),
    np.deg2rad: lambda x: P.mul(x, np.pi / 180.0), np.radians: lambda x: P.mul(x, np.pi / 180.0),
    np.hypot: lambda x, y: hypot(x, y),
    np.fmax: lambda x, y: fmax(x, y), np.fmin: lambda x, y: fmin(x, y),
    np.isnan: lambda x: np.isnan(_value_of(x)),
    np.isfinite: lambda x: np.isfinite(_value_of(x)),
    np.isinf: lambda x: np.isinf(_value_of(x)),
}


# scipy is optional and imported by the user's program, not by revtape: its
# ufuncs join the dispatch tables when scipy.special is imported
ops.lazyscipy.when_imported("scipy.special", lambda sps: _UFUNC_SPECIAL.update({
    sps.gammainc: _gammainc_in_x("gammainc"), sps.gammaincc: _gammainc_in_x("gammaincc")}))


def fmax(x, y):
    """np.fmax: the maximum, ignoring a nan operand (nan only where both are).
    Selects, so the adjoint goes to the operand that was taken."""
    return P.where(P.ne(y, y), x, P.where(P.ne(x, x), y, P.maximum(x, y)))


def fmin(x, y):
    return P.where(P.ne(y, y), x, P.where(P.ne(x, x), y, P.minimum(x, y)))


def hypot(x, y):
    """np.hypot without overflow and, as C99/numpy, inf when either operand is
    infinite, nan or not.

    s * sqrt((x/s)**2 + (y/s)**2) with s = max(|x|, |y|) held constant
    (stop_gradient): the squares are at most 1, so nothing overflows, the
    values are those of m * sqrt(1 + (k/m)**2), and the derivatives are
    sqrt(x*x + y*y)'s at every order.  A max/min form differentiated through
    would split the adjoint of a tie |x| == |y| evenly: right at first order,
    wrong at second (its Hessian there was 0).

    At the origin, where hypot has no derivative, the gradient is 0 (the
    smallest subgradient, as autograd's abs at 0; autograd's hypot gives
    0/0 = nan there): the squares' sum is replaced by 1 under the sqrt, whose
    slope at 0 is infinite, and the result by 0."""
    ax, ay = P.abs(x), P.abs(y)
    m = P.maximum(ax, ay)
    zero = P.eq(m, 0.0)
    s = P.stop_gradient(P.where(P.logical_or(zero, P.eq(m, np.inf)), 1.0, m))
    u = P.add(P.square(P.div(x, s)), P.square(P.div(y, s)))
    r = P.where(zero, 0.0, P.mul(s, P.sqrt(P.where(zero, 1.0, u))))
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
                           "with supported numpy functions (docs/ops.md lists them)")


# the layers below reach this module only through these hooks
_tape_module.register_handles(stack=stack)   # a list output of Tape.finish
_tracked.register_numpy_api(sys.modules[__name__])
