"""Structural numpy functions on tracked values: cumsum/cumprod, sort and
argsort/argmax/argmin, einsum, tensordot, append.

cumsum/cumprod are one instruction each (csrc/instr/linalg/cumulative.h), along the last
axis; another axis is moved last and back with gathers.  sort is a gather
by the permutation argsort found at recording; einsum and tensordot lower
to transposes (gathers), matmul, broadcast multiplies and sums.

argsort/argmax/argmin (and sort's permutation) are computed at recording
and recorded as constants: plain integer arrays, usable as indices.  Since
they depend on the data, each records a guard that its answer still holds
-- the gathered values are still in order, the selected element is still
the extreme one -- so a replay at an input where the order changed raises
``rt.BranchChanged`` (``rt.grad`` re-records), as comparisons do.
"""

import string
from typing import Any

import numpy as np

from ..core import ops
from ..core.apitypes import ArrayLike, NDArray
from . import functions as _api
from ..trace import tracked as _t
from .functions import _guard_all, masked_getitem  # noqa: F401 (structure.masked_getitem)
from ..errors import UnsupportedError

P = ops.P
_value_of, istracked = _t._value_of, _t.istracked


def _shape(x):
    return tuple(np.shape(_value_of(x)))


def _refuse(name, **kw):
    for k, v in kw.items():
        if v is not None:
            raise UnsupportedError(f"np.{name}(..., {k}=...) is not supported on tracked values")


def _dtype_ok(name, dtype):
    if dtype is not None and np.dtype(dtype) != np.float64:
        raise UnsupportedError(f"np.{name}(..., dtype={dtype}) on tracked values: they are float64")


def _move_last(x, axis):
    """x with `axis` moved last, and the function that moves it back."""
    nd = len(_shape(x))
    axis = axis % nd
    if axis == nd - 1:
        return x, lambda y: y
    perm = [i for i in range(nd) if i != axis] + [axis]
    inv = list(np.argsort(perm))
    return ops.transpose(x, perm), lambda y: ops.transpose(y, inv)


def _scan(name, a, axis, dtype, out):
    _refuse(name, out=out)
    _dtype_ok(name, dtype)
    if axis is None or len(_shape(a)) == 0:
        a, axis = _api.reshape(a, (-1,)), 0
    x, back = _move_last(a, int(axis))
    return back(getattr(P, name)(x))


def cumsum(a, axis=None, dtype=None, out=None):
    return _scan("cumsum", a, axis, dtype, out)


def cumprod(a, axis=None, dtype=None, out=None):
    return _scan("cumprod", a, axis, dtype, out)


# ---------------------------------------------------------------- order statistics

def _check_kind(name, kind, order, stable=None):
    if order is not None:
        raise UnsupportedError(f"np.{name}(..., order=...) applies to structured arrays")
    if kind not in (None, "quicksort", "mergesort", "heapsort", "stable"):
        raise ValueError(f"sort kind must be one of 'quicksort', 'heapsort', 'stable', got {kind!r}")


def _sorted_perm(x, axis):
    """argsort of x's value along axis (stable), and a guard that it stays sorted."""
    v = _value_of(x)
    perm = np.argsort(v, axis=axis, kind="stable")
    if istracked(x):
        shape = np.shape(v)
        flat = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)
        y = P.take(x, idx=np.ascontiguousarray(np.take_along_axis(flat, perm, axis=axis)))
        nd = len(shape)
        ax = axis % nd
        if shape[ax] > 1:
            lo = tuple(slice(None, -1) if i == ax else slice(None) for i in range(nd))
            hi = tuple(slice(1, None) if i == ax else slice(None) for i in range(nd))
            _guard_all(P.le(_api.getitem(y, lo), _api.getitem(y, hi)),
                       "the sort order recorded by np.sort/np.argsort no longer holds")
        return perm, y
    return perm, None


def sort(a, axis=-1, kind=None, order=None, **kw):
    """np.sort: a gather by the permutation that sorts a's recorded value
    (differentiable: each sorted element's adjoint goes back to where it came
    from); guarded: a replay where the order differs raises BranchChanged."""
    _check_kind("sort", kind, order)
    if axis is None:
        a, axis = _api.reshape(a, (-1,)), 0
    if len(_shape(a)) == 0:
        raise np.exceptions.AxisError(axis, 0)
    perm, y = _sorted_perm(a, axis)
    return y


def argsort(a, axis=-1, kind=None, order=None, **kw):
    """np.argsort: a plain integer array (recorded as a constant, guarded)."""
    _check_kind("argsort", kind, order)
    if axis is None:
        a, axis = _api.reshape(a, (-1,)), 0
    perm, _ = _sorted_perm(a, axis)
    return perm


def _arg_extreme(name, a, axis, out, keepdims):
    _refuse(name, out=out)
    v = _value_of(a)
    fn = np.argmax if name == "argmax" else np.argmin
    kd = {"keepdims": True} if keepdims is True else {}
    idx = fn(v, axis=axis, **kd)
    if istracked(a):
        # guard: the chosen element is still >= (<=) every element of its slice
        shape = np.shape(v)
        flat = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)
        if axis is None:
            sel = np.full(shape, int(np.argmax(v) if name == "argmax" else np.argmin(v)))
        else:
            i = np.expand_dims(fn(v, axis=axis), axis)
            sel = np.broadcast_to(np.take_along_axis(flat, i, axis=axis), shape)
        chosen = P.take(a, idx=np.ascontiguousarray(sel))
        _guard_all(P.ge(chosen, a) if name == "argmax" else P.le(chosen, a),
                   f"the index recorded by np.{name} is no longer the extreme one")
    return idx


def argmax(a, axis=None, out=None, keepdims=None):
    return _arg_extreme("argmax", a, axis, out, keepdims)


def argmin(a, axis=None, out=None, keepdims=None):
    return _arg_extreme("argmin", a, axis, out, keepdims)


# ---------------------------------------------------------------- einsum and tensordot

def _parse(subscripts, shapes):
    """Explicit operand labels and output labels, '...' expanded."""
    subscripts = subscripts.replace(" ", "")
    if "->" in subscripts:
        ins, out = subscripts.split("->")
    else:
        ins, out = subscripts, None
    ins = ins.split(",")
    if len(ins) != len(shapes):
        raise ValueError(f"einsum: {len(ins)} operand subscripts for {len(shapes)} operands")
    used = set("".join(ins) + (out or ""))
    spare = [c for c in string.ascii_letters if c not in used]
    n_ell = 0
    for term, s in zip(ins, shapes):
        if "..." in term:
            n_ell = max(n_ell, len(s) - (len(term) - 3))
    ell = "".join(spare[:n_ell])
    labels = []
    for term, s in zip(ins, shapes):
        if "..." in term:
            k = len(s) - (len(term) - 3)
            term = term.replace("...", ell[n_ell - k:] if k else "")
        if len(term) != len(s) or not all(c in string.ascii_letters for c in term):
            raise ValueError(f"einsum: subscripts {term!r} do not fit an operand of shape {s}")
        labels.append(term)
    if out is None:
        counts = {}
        for term in labels:
            for c in term:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    else:
        out = out.replace("...", ell)
    # a label's size is the same in every operand, or 1 in some: those
    # broadcast (numpy's einsum broadcasting, '...' axes and named labels alike)
    sizes = {}
    for term, s in zip(labels, shapes):
        for c, n in zip(term, s):
            m = sizes.setdefault(c, n)
            if m != n and 1 not in (m, n):
                raise ValueError(f"einsum: operands could not be broadcast together: label "
                                 f"{c!r} has sizes {m} and {n}")
            sizes[c] = max(m, n) if 1 in (m, n) else n
    if len(set(out)) != len(out) or any(c not in sizes for c in out):
        raise ValueError(f"einsum: output subscripts {out!r} are invalid")
    return labels, out, sizes


def _take_diagonals(x, term):
    """Repeated labels in one operand ('ii') -> one axis (their diagonal)."""
    while len(set(term)) != len(term):
        c = next(c for c in term if term.count(c) > 1)
        i = term.index(c)
        j = term.index(c, i + 1)
        x = _diag_axes(x, i, j)
        term = term[:i] + term[i + 1:j] + term[j + 1:] + c
    return x, term


def _diag_axes(x, i, j):
    s = _shape(x)
    flat = np.arange(int(np.prod(s, dtype=np.int64))).reshape(s)
    return P.take(x, idx=np.ascontiguousarray(np.diagonal(flat, 0, i, j)))


def _reorder(x, term, want):
    if term == want:
        return x
    return ops.transpose(x, [term.index(c) for c in want])


def _sum_labels(x, term, keep):
    """Sum x over the labels of term that are not in keep."""
    axes = tuple(i for i, c in enumerate(term) if c not in keep)
    if not axes:
        return x, term
    return _api.reduce("sum", x, axes), "".join(c for c in term if c in keep)


def _pair(x, tx, y, ty, keep, sizes):
    """Contract two labelled operands, keeping the labels in `keep`."""
    batch = "".join(c for c in tx if c in ty and c in keep)
    contract = "".join(c for c in tx if c in ty and c not in keep)
    only_x = "".join(c for c in tx if c not in ty)
    only_y = "".join(c for c in ty if c not in tx)
    size = lambda labels: int(np.prod([sizes[c] for c in labels], dtype=np.int64))
    if not batch:
        # (only_x, contract) @ (contract, only_y): one matmul
        a = _api.reshape(_reorder(x, tx, only_x + contract), (size(only_x), size(contract)))
        b = _api.reshape(_reorder(y, ty, contract + only_y), (size(contract), size(only_y)))
        r = P.matmul(a, b)
        return _api.reshape(r, tuple(sizes[c] for c in only_x + only_y)), only_x + only_y
    # batched: broadcast multiply, then sum the contracted labels
    full = batch + only_x + only_y + contract
    shape_x = tuple(sizes[c] if c in tx else 1 for c in full)
    shape_y = tuple(sizes[c] if c in ty else 1 for c in full)
    a = _api.reshape(_reorder(x, tx, "".join(c for c in full if c in tx)), shape_x)
    b = _api.reshape(_reorder(y, ty, "".join(c for c in full if c in ty)), shape_y)
    r = P.mul(a, b)
    return _sum_labels(r, full, batch + only_x + only_y)


def _from_sublists(first, rest):
    """numpy's sublist form einsum(op0, [0, 1], op1, [1, 2], [0, 2]) as its
    subscripts string and operands: label k in 0-51 is numpy's letter for it
    ('A'-'Z', then 'a'-'z', so an implicit output keeps their order),
    Ellipsis is '...'."""
    args = (first,) + tuple(rest)
    out, pairs = (args[-1], args[:-1]) if len(args) % 2 else (None, args)
    letters = string.ascii_uppercase + string.ascii_lowercase

    def term(sub):
        parts = []
        for k in sub:
            if k is Ellipsis:
                parts.append("...")
            elif isinstance(k, (int, np.integer)) and 0 <= int(k) < 52:
                parts.append(letters[int(k)])
            else:
                raise ValueError(f"einsum: subscript {k!r} in a sublist is not an integer in "
                                 "[0, 52) or Ellipsis")
        return "".join(parts)

    spec = ",".join(term(sub) for sub in pairs[1::2])
    return spec + ("" if out is None else "->" + term(out)), tuple(pairs[0::2])


def einsum(subscripts, *operands, out=None, dtype=None, order="K", casting="safe",
           optimize=False):
    """np.einsum for tracked operands, lowered to existing instructions:
    diagonals and transposes (gathers), matmul (one contraction without
    batch labels), broadcast multiply and sum (with batch labels).  Explicit
    and implicit output, '...'; any number of operands, contracted left to
    right.  `optimize` changes only the order of work in numpy and is
    accepted; out= is refused.  Broadcasting as numpy's: a label (named or
    under '...') of size 1 in one operand stretches to its size in another.
    The sublist form einsum(a, [0, 1], b, [1, 2], [0, 2]) is read as the
    equivalent subscripts string."""
    if not isinstance(subscripts, str):
        subscripts, operands = _from_sublists(subscripts, operands)
    _refuse("einsum", out=out)
    _dtype_ok("einsum", dtype)
    if not operands:
        raise ValueError("einsum: no operands")
    labels, outl, sizes = _parse(subscripts, [_shape(x) for x in operands])
    xs, terms = [], []
    for x, term in zip(operands, labels):
        if any(n != sizes[c] for c, n in zip(term, _shape(x))):
            # a size-1 axis against a longer one: the operand broadcast to it
            x = ops.broadcast_to(x, tuple(sizes[c] for c in term))
        x, term = _take_diagonals(x, term)
        xs.append(x)
        terms.append(term)
    # sum labels that appear in one operand only and not in the output
    for k in range(len(xs)):
        others = set(outl).union(*[set(t) for j, t in enumerate(terms) if j != k])
        xs[k], terms[k] = _sum_labels(xs[k], terms[k], others)
    x, tx = xs[0], terms[0]
    for k in range(1, len(xs)):
        keep = set(outl).union(*[set(t) for t in terms[k + 1:]])
        x, tx = _pair(x, tx, xs[k], terms[k], keep, sizes)
    x, tx = _sum_labels(x, tx, set(outl))
    return _reorder(x, tx, outl)


def tensordot(a, b, axes=2):
    na, nb = len(_shape(a)), len(_shape(b))
    if isinstance(axes, (int, np.integer)):
        ax_a, ax_b = list(range(na - int(axes), na)), list(range(int(axes)))
    else:
        ax_a, ax_b = axes
        ax_a = [ax_a] if isinstance(ax_a, (int, np.integer)) else list(ax_a)
        ax_b = [ax_b] if isinstance(ax_b, (int, np.integer)) else list(ax_b)
    if len(ax_a) != len(ax_b):
        raise ValueError("shape-mismatch for sum")
    ax_a = [i % na for i in ax_a]
    ax_b = [i % nb for i in ax_b]
    letters = iter(string.ascii_letters)
    la = [next(letters) for _ in range(na)]
    lb = [next(letters) for _ in range(nb)]
    for i, j in zip(ax_a, ax_b):
        lb[j] = la[i]
    out = [c for i, c in enumerate(la) if i not in ax_a] + \
          [c for j, c in enumerate(lb) if j not in ax_b]
    return einsum(f"{''.join(la)},{''.join(lb)}->{''.join(out)}", a, b)


def inner(a, b):
    """np.inner: the sum over the last axes of a and b (a scalar operand
    multiplies), by tensordot."""
    if len(_shape(a)) == 0 or len(_shape(b)) == 0:
        return P.mul(a, b)
    if _shape(a)[-1] != _shape(b)[-1]:
        raise ValueError(f"shapes {_shape(a)} and {_shape(b)} not aligned: "
                         f"{_shape(a)[-1]} (dim {len(_shape(a)) - 1}) != "
                         f"{_shape(b)[-1]} (dim {len(_shape(b)) - 1})")
    if len(_shape(a)) == 1 and len(_shape(b)) == 1:
        return _api.dot(a, b)
    return tensordot(a, b, ([-1], [-1]))


def append(arr, values, axis=None):
    if axis is None:
        return _api.concatenate([_api.reshape(arr, (-1,)) if np.ndim(_value_of(arr)) else
                               _api.reshape(arr, (1,)),
                               _api.reshape(values, (-1,)) if np.ndim(_value_of(values)) else
                               _api.reshape(values, (1,))], axis=0)
    return _api.concatenate([arr, values], axis=axis)


# ---------------------------------------------------------------- lists mixing tracked values and floats

def _holds_tracked(v):
    if istracked(v):
        return True
    if isinstance(v, (list, tuple)):
        return any(_holds_tracked(e) for e in v)
    return False


def array(obj: ArrayLike, dtype: Any = None) -> NDArray[Any]:
    """An array from (nested) lists or tuples that mix tracked values with
    numbers and arrays -- ``rt.array([t1, 2.0, t2])`` -- as autograd's and
    JAX's ``np.array`` do: a tracked array when anything inside is tracked
    (the elements are stacked: each one's gradient flows back to it), else
    ``np.array(obj)``.  (numpy's own np.array always returns a plain ndarray,
    which cannot hold a gradient: it raises ConversionError on tracked
    elements, and revtape does not replace numpy's function.)

    Parameters
    ----------
    obj : array_like
        Nested lists or tuples of floats, arrays and tracked values, or an
        array (tracked or not).
    dtype : data-type, optional
        A float dtype (float64; a tracked array is always float64); an
        integer or other dtype is refused on tracked elements.

    Returns
    -------
    ndarray or TrackedArray
        A TrackedArray when anything inside obj is tracked, else ``np.array(obj, dtype)``.
    """
    _dtype_ok("array", dtype)
    if istracked(obj):
        return obj
    if not _holds_tracked(obj):
        return np.array(obj, dtype=np.float64 if dtype is None else dtype)
    items = [array(e) for e in obj]
    shapes = {_shape(e) for e in items}
    if len(shapes) != 1:
        raise ValueError("setting an array element with a sequence: the elements have shapes "
                         f"{sorted(shapes)} (an array needs them all equal)")
    return _stack(items)


def _operand(v):
    """One operand of concatenate/stack: a list or tuple holding tracked values
    becomes a tracked array (rt.array), plain lists become float arrays."""
    if isinstance(v, (list, tuple)):
        return array(v)
    return v


_concatenate, _stack = _api.concatenate, _api.stack
_hstack, _vstack = _api.hstack, _api.vstack


def concatenate(arrays, *args, **kw):
    return _concatenate([_operand(a) for a in arrays], *args, **kw)


def stack(arrays, *args, **kw):
    return _stack([_operand(a) for a in arrays], *args, **kw)


def hstack(tup, *args, **kw):
    return _hstack([_operand(a) for a in tup], *args, **kw)


def vstack(tup, *args, **kw):
    return _vstack([_operand(a) for a in tup], *args, **kw)


def atleast_3d(*arys):
    """np.atleast_3d: (n,) -> (1, n, 1), (m, n) -> (m, n, 1), as numpy."""
    if len(arys) != 1:
        return tuple(atleast_3d(a) for a in arys)
    x = _operand(arys[0])
    s = _shape(x)
    new = {0: (1, 1, 1), 1: (1,) + s + (1,), 2: s + (1,)}.get(len(s), s)
    return x if new == s else _api.reshape(x, new)


def dstack(tup, *, dtype=None, casting="same_kind"):
    _dtype_ok("dstack", dtype)
    return _concatenate([atleast_3d(a) for a in tup], axis=2)


def column_stack(tup):
    """np.column_stack: 1-d items become columns, the rest are stacked on axis 1."""
    cols = []
    for a in tup:
        a = _operand(a)
        nd = len(_shape(a))
        # numpy: array(a, ndmin=2).T -- (n,) -> (n, 1), a scalar -> (1, 1)
        cols.append(_api.reshape(a, (_shape(a) or (1,)) + (1,)) if nd < 2 else a)
    return _concatenate(cols, axis=1)


# ---------------------------------------------------------------- np.r_ and np.c_

# numpy's class behind np.r_ (its module is private in numpy 2)
_AxisConcatenator = next(c for c in type(np.r_).__mro__ if c.__name__ == "AxisConcatenator")


class AxisConcatenator(_AxisConcatenator):
    """numpy's np.r_ / np.c_ (the same directives, slices, scalars and
    ndmin/trans1d rules) for items that include tracked values or lists
    holding them: the result is a tracked concatenation.  numpy's own np.r_
    turns each item into a plain array with np.array, which no tracked value
    can pass (it raises ConversionError); without tracked items this one is
    numpy's.  The matrix directives 'r' and 'c' are refused on tracked items.

    ``rt.r_`` is ``AxisConcatenator(0)`` and ``rt.c_`` is
    ``AxisConcatenator(-1, ndmin=2, trans1d=0)``; index them as numpy's:
    ``rt.r_[x, 0.0, y]``, ``rt.c_[a, b]``.

    Parameters
    ----------
    axis : int, default 0
        The axis items are concatenated along (a string directive overrides it).
    matrix : bool, default False
        numpy's np.matrix mode (refused on tracked items).
    ndmin : int, default 1
        Each item is made at least this many dimensions.
    trans1d : int, default -1
        Where an upgraded 1-d item's axis goes (numpy's rule).
    """

    __slots__ = ()

    def __getitem__(self, key):
        items = key if isinstance(key, tuple) else (key,)
        if not _holds_tracked(list(items)):
            return _AxisConcatenator.__getitem__(self, key)
        axis, ndmin, trans1d = self.axis, self.ndmin, self.trans1d
        objs = []
        for k, item in enumerate(items):
            if isinstance(item, str):
                if k != 0:
                    raise ValueError("special directives must be the first entry.")
                if item in ("r", "c"):
                    raise UnsupportedError("np.r_['r', ...] / np.r_['c', ...] build np.matrix "
                                           "objects, which cannot hold tracked values")
                try:
                    vec = [int(v) for v in item.split(",")]
                except ValueError as e:
                    raise ValueError(f"unknown special directive {item!r}") from e
                if len(vec) == 1:
                    axis = vec[0]
                else:
                    axis, ndmin = vec[:2]
                    if len(vec) == 3:
                        trans1d = vec[2]
                continue
            if not _holds_tracked(item):
                # numpy's own rules for one plain item (slice, scalar, array)
                objs.append(_AxisConcatenator(axis, False, ndmin, trans1d)[item])
                continue
            x = array(item)
            nd = len(_shape(x))
            if nd < ndmin:
                x = _api.reshape(x, (1,) * (ndmin - nd) + _shape(x))
                if trans1d != -1:
                    k2, k1 = ndmin - nd, trans1d
                    if k1 < 0:
                        k1 += k2 + 1
                    axes = list(range(ndmin))
                    x = ops.transpose(x, axes[:k1] + axes[k2:] + axes[k1:k2])
            objs.append(x)
        return _concatenate(objs, axis=axis)


r_ = AxisConcatenator(0)
c_ = AxisConcatenator(-1, ndmin=2, trans1d=0)


# ---------------------------------------------------------------- polyval

def polyval(p, x):
    """np.polyval by numpy's own Horner loop (y = 0*x + p[0], then y*x + p[i]),
    so values -- nan from 0*inf included -- are numpy's; p and/or x tracked."""
    if not istracked(p):
        p = _operand(p) if isinstance(p, (list, tuple)) else np.asarray(p, dtype=np.float64)
    if len(_shape(p)) != 1:
        raise UnsupportedError("np.polyval on tracked values takes a 1-d coefficient array")
    if not istracked(x):
        x = np.asarray(_operand(x) if isinstance(x, (list, tuple)) else x, dtype=np.float64)
    y = P.mul(x, 0.0)
    for i in range(_shape(p)[0]):
        y = P.add(P.mul(y, x) if i else y, _api.getitem(p, i) if istracked(p) else float(p[i]))
    return y


_api.HANDLED_FUNCTIONS.update({
    np.cumsum: cumsum, np.cumprod: cumprod, np.sort: sort, np.argsort: argsort,
    np.argmax: argmax, np.argmin: argmin, np.einsum: einsum, np.tensordot: tensordot,
    np.append: append, np.polyval: polyval,
    np.concatenate: concatenate, np.stack: stack, np.hstack: hstack, np.vstack: vstack,
    np.inner: inner, np.atleast_3d: atleast_3d, np.dstack: dstack, np.column_stack: column_stack,
})

__all__ = ["cumsum", "cumprod", "sort", "argsort", "argmax", "argmin", "einsum", "tensordot",
           "append", "array", "polyval", "masked_getitem", "r_", "c_"]
