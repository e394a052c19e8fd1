"""numpy functions built from several rows on tracked values: kron, cross,
linspace, select, piecewise, nan_to_num, and real/imag/conj/angle of real input.

Each computes what numpy's own implementation computes, operation for
operation where the values depend on it (cross's products and differences,
linspace's ``arange * step + start`` with the last sample set to ``stop``),
so the values are numpy's; shapes and argument errors are numpy's too,
taken from numpy's function run on placeholder arrays of the same shapes.
"""

import numpy as np

from ..core import ops
from ..errors import UnsupportedError
from ..trace import tracked as _t
from . import functions as _api
from . import rearrange as _re

P = ops.P
_value_of, istracked = _t._value_of, _t.istracked


def _shape(x):
    return tuple(np.shape(_value_of(x)))


def _as_operand(x):
    return x if istracked(x) else np.asarray(x, dtype=np.float64)


def _placeholder(x):
    return np.zeros(_shape(x))


# ---------------------------------------------------------------- kron

def kron(a, b):
    """np.kron: every product a[i] * b[j] in numpy's layout -- a product of two
    gathers (or of a gather and numpy's kron of the plain operand)."""
    a, b = _as_operand(a), _as_operand(b)
    sa, sb = _shape(a), _shape(b)
    nd = max(len(sa), len(sb))
    sa, sb = (1,) * (nd - len(sa)) + sa, (1,) * (nd - len(sb)) + sb
    ia = np.kron(np.arange(int(np.prod(sa, dtype=np.int64))).reshape(sa),
                 np.ones(sb, dtype=np.int64))
    ib = np.kron(np.ones(sa, dtype=np.int64),
                 np.arange(int(np.prod(sb, dtype=np.int64))).reshape(sb))
    left = _re._gather(_api.reshape(a, sa), ia) if istracked(a) else np.asarray(a).ravel()[ia]
    right = _re._gather(_api.reshape(b, sb), ib) if istracked(b) else np.asarray(b).ravel()[ib]
    return P.mul(left, right)


# ---------------------------------------------------------------- cross

def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """np.cross of 3-vectors (and numpy's deprecated 2-vector forms), with
    numpy's products and differences in numpy's order."""
    a, b = _as_operand(a), _as_operand(b)
    # numpy's checks, messages and deprecation warning, on placeholders
    shape = np.shape(np.cross(_placeholder(a), _placeholder(b), axisa, axisb, axisc, axis))
    if axis is not None:
        axisa = axisb = axisc = axis
    a = _re.moveaxis(a, axisa, -1) if istracked(a) else np.moveaxis(a, axisa, -1)
    b = _re.moveaxis(b, axisb, -1) if istracked(b) else np.moveaxis(b, axisb, -1)
    na, nb = _shape(a)[-1], _shape(b)[-1]
    comp = lambda v, i: v[..., i]
    a0, a1, b0, b1 = comp(a, 0), comp(a, 1), comp(b, 0), comp(b, 1)
    z = P.sub(P.mul(a0, b1), P.mul(a1, b0))
    if na == 2 and nb == 2:
        return z
    if na == 2:
        b2 = comp(b, 2)
        x, y = P.mul(a1, b2), P.neg(P.mul(a0, b2))
    elif nb == 2:
        a2 = comp(a, 2)
        x, y = P.neg(P.mul(a2, b1)), P.mul(a2, b0)
    else:
        a2, b2 = comp(a, 2), comp(b, 2)
        x = P.sub(P.mul(a1, b2), P.mul(a2, b1))
        y = P.sub(P.mul(a2, b0), P.mul(a0, b2))
    prefix = np.broadcast_shapes(_shape(a)[:-1], _shape(b)[:-1])
    parts = [c if _shape(c) == prefix else ops.broadcast_to(c, prefix) for c in (x, y, z)]
    out = _api.stack(parts, axis=-1)
    return _re.moveaxis(out, -1, axisc)


# ---------------------------------------------------------------- linspace

def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *,
             device=None):
    """np.linspace with tracked start and/or stop: numpy's arange * step +
    start, the last sample stop itself (endpoint=True).  numpy's special
    case for a step that underflows to zero (nonzero start - stop below
    ~1e-308 * num) is not reproduced: the samples are then all start."""
    if device not in (None, "cpu"):
        raise ValueError(f"Device not understood. Only \"cpu\" is allowed, but received: {device}")
    if dtype is not None and np.dtype(dtype) != np.float64:
        raise UnsupportedError("np.linspace(..., dtype=...) on tracked values: they are float64")
    import operator
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    start, stop = _as_operand(start), _as_operand(stop)
    div = (num - 1) if endpoint else num
    delta = P.sub(stop, start)
    nd = len(_shape(delta))
    y = np.arange(0, num, dtype=np.float64).reshape((-1,) + (1,) * nd)
    step = P.div(delta, float(div)) if div > 0 else np.nan
    y = P.add(P.mul(y, step if div > 0 else delta), start)
    if endpoint and num > 1:
        shape = _shape(y)
        last = _api.reshape(ops.broadcast_to(stop, shape[1:]), (1,) + shape[1:])
        y = _api.concatenate([y[:num - 1], last], axis=0)
    if axis != 0:
        y = _re.moveaxis(y, 0, axis)
    return (y, step) if retstep else y


# ---------------------------------------------------------------- select, piecewise

def select(condlist, choicelist, default=0):
    """np.select: numpy's chain of wheres, the first true condition winning;
    conditions may be plain booleans or tracked comparison results."""
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    if len(condlist) == 0:
        raise ValueError("select with an empty condition list is not possible")
    conds = [c if istracked(c) else np.asarray(c) for c in condlist]
    for i, c in enumerate(conds):
        if not istracked(c) and c.dtype != bool:
            raise TypeError(f"invalid entry {i} in condlist: should be boolean ndarray")
    choices = [_as_operand(c) for c in choicelist]
    shape = np.broadcast_shapes(*[_shape(v) for v in conds + choices + [_as_operand(default)]])
    out = default
    for c, v in zip(conds[::-1], choices[::-1]):
        out = P.where(c if istracked(c) else c.astype(np.float64), v, out)
    if _shape(out) != shape:
        out = ops.broadcast_to(out, shape)
    return out


def piecewise(x, condlist, funclist, *args, **kw):
    """np.piecewise: as numpy, each function is called on the elements its
    condition selects (x[cond]; a tracked condition, a comparison on tracked
    values, is guarded like x[mask]) and its results are gathered into
    place, later conditions overriding earlier ones, unselected elements 0
    (or the extra 'otherwise' function's)."""
    x = _as_operand(x)
    shape = _shape(x)
    conds = _listify(condlist, len(shape))
    if not istracked(x) and not any(istracked(c) for c in conds):
        return np.piecewise(x, condlist, funclist, *args, **kw)
    if len(shape) == 0:
        flat = piecewise(_api.reshape(x, (1,)), [_api.reshape(c, (1,)) if istracked(c)
                                                 else np.reshape(c, (1,)) for c in conds],
                         funclist, *args, **kw)
        return _api.reshape(flat, ())
    masks = []
    for c in conds:
        m = np.asarray(_value_of(c)) != 0
        if m.shape != shape:
            raise ValueError(f"np.piecewise: a condition of shape {m.shape} for x of shape "
                             f"{shape}")
        if istracked(c):
            # which elements each function sees depends on the data: guarded
            _api._guard_all(P.eq(P.ne(c, 0.0), m.astype(np.float64)),
                            "the elements selected by a condition of np.piecewise changed")
        masks.append(m)
    n2 = len(funclist)
    if n2 == len(conds) + 1:
        other = ~np.any(masks, axis=0) if masks else np.ones(shape, dtype=bool)
        masks.append(other)
    elif n2 != len(conds):
        raise ValueError(f"with {len(conds)} condition(s), either {len(conds)} or "
                         f"{len(conds) + 1} functions are expected")
    pieces, owner = [np.zeros(1)], np.zeros(shape, dtype=np.int64)
    offset = 1
    for m, fn in zip(masks, funclist):
        k = int(m.sum())
        if callable(fn):
            vals = fn(_api.getitem(x, m) if istracked(x) else np.asarray(x)[m], *args, **kw)
        else:
            vals = fn
        vals = _as_operand(vals)
        if _shape(vals) != (k,):
            vals = (ops.broadcast_to(vals, (k,)) if istracked(vals)
                    else np.broadcast_to(vals, (k,)))
        pieces.append(vals)
        owner[m] = offset + np.arange(k)
        offset += k
    # later conditions override earlier ones: owner holds the last writer's slot
    joined = _api.concatenate([_api.reshape(p, (-1,)) if istracked(p) else np.ravel(p)
                               for p in pieces], axis=0)
    if not istracked(joined):
        return joined[owner]
    return P.take(joined, idx=np.ascontiguousarray(owner))


def _listify(condlist, ndim):
    """numpy's reading of condlist: one condition unless it is a sequence of
    arrays or lists (a plain boolean array of x's shape is one condition)."""
    if istracked(condlist) or np.isscalar(condlist):
        return [condlist]
    first = condlist[0] if len(condlist) else None
    if not isinstance(first, (list, np.ndarray)) and not istracked(first) and ndim != 0:
        return [condlist]
    return list(condlist)


# ---------------------------------------------------------------- nan_to_num

def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """np.nan_to_num: selects recomputed at every replay (nan, +inf, -inf
    replaced by nan=, posinf=, neginf=; the largest finite floats by
    default); the derivative is 1 at finite elements, 0 at replaced ones.
    copy= is about memory (a tracked value is never written in place)."""
    big = float(np.finfo(np.float64).max)
    hi = big if posinf is None else posinf
    lo = -big if neginf is None else neginf
    return P.where(P.ne(x, x), nan, P.where(P.eq(x, np.inf), hi,
                                            P.where(P.eq(x, -np.inf), lo, x)))


# ---------------------------------------------------------------- complex parts of real values

def real(val):
    """np.real of a tracked (real) value: the value itself."""
    return val


def imag(val):
    """np.imag of a tracked (real) value: zeros, a constant."""
    return np.zeros(_shape(val))


def angle(z, deg=False):
    """np.angle of a tracked real value: arctan2(0, z) as numpy (0, or pi
    for negative values and -0.0), with derivative 0."""
    a = P.arctan2(0.0, P.stop_gradient(z))
    return P.mul(a, 180.0 / np.pi) if deg else a


_api.HANDLED_FUNCTIONS.update({
    np.kron: kron, np.cross: cross, np.linspace: linspace, np.select: select,
    np.piecewise: piecewise, np.nan_to_num: nan_to_num, np.real: real, np.imag: imag, np.angle: angle,
})
_api._UFUNC_SPECIAL.update({np.conjugate: lambda x: x})

__all__ = ["kron", "cross", "linspace", "select", "piecewise", "nan_to_num", "real", "imag", "angle"]
