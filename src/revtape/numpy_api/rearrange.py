"""numpy functions that only move elements, on tracked values: split and its
variants, swapaxes/moveaxis/rollaxis, repeat, roll, tile, flip/fliplr/
flipud/rot90, pad (the modes that copy elements), reshape in Fortran order.

Each is one gather (the ``take`` row) whose flat indices are numpy's own
function applied to the array of x's element indices: what numpy does to
the elements, it does to their indices, so shapes, axis handling, negative
axes and error messages are numpy's by construction.  The reverse rule is
take's (a scatter-add), so an element copied twice (repeat, tile, pad's
edge) gets both adjoints.  Keywords that would change the values are
honoured through numpy's function; pad's modes that compute new values
(``linear_ramp``, the statistics, ``reflect_type='odd'``, a callable) are
refused by name.
"""

import numpy as np

from ..core import ops
from ..errors import UnsupportedError
from ..trace import tracked as _t
from . import functions as _api

P = ops.P
_value_of, istracked = _t._value_of, _t.istracked


def _indices(x):
    s = tuple(np.shape(_value_of(x)))
    return np.arange(int(np.prod(s, dtype=np.int64)), dtype=np.int64).reshape(s)


def _gather(x, idx):
    """x's elements at the flat indices idx (an integer array of any shape)."""
    idx = np.asarray(idx)
    s = tuple(np.shape(_value_of(x)))
    if idx.size == int(np.prod(s, dtype=np.int64)) and np.array_equal(idx.ravel(),
                                                                       np.arange(idx.size)):
        return _api.reshape(x, idx.shape)   # nothing moves (roll by 0, a tile of ones, ...)
    return P.take(x, idx=np.ascontiguousarray(idx, dtype=np.int64))


def _plain_int(name, key, v):
    if istracked(v) or (isinstance(v, (list, tuple)) and any(istracked(e) for e in v)):
        raise UnsupportedError(f"np.{name}(..., {key}=...) with a tracked value: the result's "
                               "shape would depend on the data; pass plain integers")
    return v


# ---------------------------------------------------------------- split

def _split_with(fn, name):
    def split(ary, indices_or_sections, axis=0):
        _plain_int(name, "indices_or_sections", indices_or_sections)
        return [_gather(ary, i) for i in fn(_indices(ary), indices_or_sections, axis)]
    split.__name__ = name
    split.__doc__ = f"np.{name}: one gather per piece (a list of tracked arrays, as numpy's)."
    return split


def _split_no_axis(fn, name):
    def split(ary, indices_or_sections):
        _plain_int(name, "indices_or_sections", indices_or_sections)
        return [_gather(ary, i) for i in fn(_indices(ary), indices_or_sections)]
    split.__name__ = name
    split.__doc__ = f"np.{name}: one gather per piece (a list of tracked arrays, as numpy's)."
    return split


split = _split_with(np.split, "split")
array_split = _split_with(np.array_split, "array_split")
hsplit = _split_no_axis(np.hsplit, "hsplit")
vsplit = _split_no_axis(np.vsplit, "vsplit")
dsplit = _split_no_axis(np.dsplit, "dsplit")


# ---------------------------------------------------------------- axes

def swapaxes(a, axis1, axis2):
    """np.swapaxes: a transpose (one gather)."""
    return _gather(a, np.swapaxes(_indices(a), axis1, axis2))


def moveaxis(a, source, destination):
    """np.moveaxis: a transpose (one gather)."""
    return _gather(a, np.moveaxis(_indices(a), source, destination))


def rollaxis(a, axis, start=0):
    """np.rollaxis: a transpose (one gather)."""
    return _gather(a, np.rollaxis(_indices(a), axis, start))


# ---------------------------------------------------------------- copies and shifts

def repeat(a, repeats, axis=None):
    """np.repeat: each element's adjoint is the sum over its copies."""
    _plain_int("repeat", "repeats", repeats)
    return _gather(a, np.repeat(_indices(a), repeats, axis))


def roll(a, shift, axis=None):
    _plain_int("roll", "shift", shift)
    return _gather(a, np.roll(_indices(a), shift, axis))


def tile(A, reps):
    _plain_int("tile", "reps", reps)
    return _gather(A, np.tile(_indices(A), reps))


def flip(m, axis=None):
    return _gather(m, np.flip(_indices(m), axis))


def fliplr(m):
    return _gather(m, np.fliplr(_indices(m)))


def flipud(m):
    return _gather(m, np.flipud(_indices(m)))


def rot90(m, k=1, axes=(0, 1)):
    _plain_int("rot90", "k", k)
    return _gather(m, np.rot90(_indices(m), k, axes))


# ---------------------------------------------------------------- pad

# the modes that copy elements of the array (an index map); the others
# compute new values from them
_COPY_MODES = ("edge", "reflect", "symmetric", "wrap", "empty")
_VALUE_MODES = ("linear_ramp", "maximum", "mean", "median", "minimum")


def pad(array, pad_width, mode="constant", **kwargs):
    """np.pad: the array's elements gathered into place; ``constant`` fills
    with constant_values (plain numbers; a tracked fill is refused), the
    copying modes (edge, reflect, symmetric, wrap; ``empty`` as zeros) are
    gathers.  The modes that compute values (linear_ramp, maximum, mean,
    median, minimum), ``reflect_type='odd'`` and a callable mode are
    refused by name."""
    _plain_int("pad", "pad_width", pad_width)
    if callable(mode):
        raise UnsupportedError("np.pad(..., mode=<function>) is not supported on tracked values; "
                               "pad with a named mode or build the border with np.concatenate")
    if mode in _VALUE_MODES:
        raise UnsupportedError(f"np.pad(..., mode={mode!r}) is not supported on tracked values "
                               f"(supported: 'constant', {', '.join(map(repr, _COPY_MODES[:-1]))}); "
                               "build the border with np.concatenate of reductions")
    if kwargs.get("reflect_type", "even") != "even":
        raise UnsupportedError("np.pad(..., reflect_type='odd') is not supported on tracked "
                               "values: it computes 2*edge - x, not a copy; only 'even' is")
    idx = _indices(array)
    if mode == "constant":
        cv = kwargs.pop("constant_values", 0)
        if kwargs:
            raise ValueError(f"unsupported keyword arguments for mode 'constant': {set(kwargs)}")
        if istracked(cv) or (isinstance(cv, (list, tuple)) and _t_any(cv)):
            raise UnsupportedError("np.pad(..., constant_values=...) with a tracked value is not "
                                   "supported; pad with a plain number and add the tracked "
                                   "border with np.where")
        where = np.pad(idx, pad_width, mode="constant", constant_values=-1)
        fill = np.pad(np.zeros(idx.shape), pad_width, mode="constant", constant_values=cv)
        inside = where >= 0
        if inside.all():
            return _gather(array, where)
        if not idx.size:
            return fill
        # a gather of every position (the border reads element 0), then the border's values
        return P.where(inside.astype(np.float64), _gather(array, np.where(inside, where, 0)),
                       fill)
    if mode == "empty":
        # numpy leaves the border uninitialised; zeros are one of its values
        return pad(array, pad_width, "constant", **kwargs)
    if mode not in _COPY_MODES:
        raise ValueError(f"mode {mode!r} is not supported")
    return _gather(array, np.pad(idx, pad_width, mode=mode, **kwargs))


def _t_any(v):
    return any(istracked(e) or (isinstance(e, (list, tuple)) and _t_any(e)) for e in v)


_api.HANDLED_FUNCTIONS.update({
    np.split: split, np.array_split: array_split, np.hsplit: hsplit, np.vsplit: vsplit,
    np.dsplit: dsplit, np.swapaxes: swapaxes, np.moveaxis: moveaxis, np.rollaxis: rollaxis,
    np.repeat: repeat, np.roll: roll, np.tile: tile, np.flip: flip, np.fliplr: fliplr,
    np.flipud: flipud, np.rot90: rot90, np.pad: pad,
})

__all__ = ["split", "array_split", "hsplit", "vsplit", "dsplit", "swapaxes", "moveaxis",
           "rollaxis", "repeat", "roll", "tile", "flip", "fliplr", "flipud", "rot90", "pad"]
