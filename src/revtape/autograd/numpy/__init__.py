"""numpy's namespace for programs written for autograd: ``import
revtape.autograd.numpy as np``.

Every numpy name is here.  numpy functions already reach revtape's rules on
tracked values through numpy's protocols; what this namespace adds is what
those protocols cannot: ``np.array``/``np.asarray`` of (nested) lists that
hold tracked values build a tracked array (numpy's own would refuse), so do ``np.r_[...]`` and
``np.c_[...]`` of tracked values, and a
function given a list of tracked values as an array (``np.sum([a, b])``)
stacks it first.  ``np.random`` is numpy's, ``np.linalg`` numpy's functions
as far as revtape differentiates them, ``np.fft`` refuses tracked values
(rt.UnsupportedError) until revtape supports it.
"""

import functools
import types as _types
from typing import Any

import numpy as _onp

from ...numpy_api.structure import array as _rt_array
from ...numpy_api.structure import c_, r_  # noqa: F401  (np.r_/np.c_ of tracked values)
from ...trace.tracked import istracked as _istracked
from . import fft, linalg, random  # noqa: F401  (np.fft, np.linalg, np.random)

# functions that take a sequence of arrays: numpy's dispatch already finds the
# tracked items, and their items may have different shapes
_SEQUENCE_FUNCTIONS = frozenset({
    "concatenate", "stack", "hstack", "vstack", "dstack", "column_stack", "row_stack", "block",
    "broadcast_arrays", "meshgrid", "einsum", "append", "select", "choose", "piecewise",
    "atleast_1d", "atleast_2d", "atleast_3d", "shape", "ndim", "size", "result_type",
    "iscomplexobj", "isrealobj", "iscomplex", "isreal", "may_share_memory", "shares_memory",
})


def _holds_tracked(v, depth=0):
    if _istracked(v):
        return True
    if isinstance(v, (list, tuple)) and depth < 8:
        return any(_holds_tracked(e, depth + 1) for e in v)
    return False


def array(obj: Any, dtype: Any = None, copy: bool = True, order: str = "K",
          subok: bool = False, ndmin: int = 0, like: Any = None) -> Any:
    """numpy.array; a (nested) list or tuple holding tracked values gives a
    tracked array whose elements' gradients flow back to them."""
    if _holds_tracked(obj):
        if dtype is not None and _onp.dtype(dtype).kind != "f":
            return _onp.array(_plain(obj), dtype=dtype)
        out = _rt_array(obj)
        while _onp.ndim(out) < ndmin:
            out = reshape(out, (1,) + _onp.shape(out))
        return out
    kw = {} if like is None else {"like": like}
    return _onp.array(obj, dtype=dtype, copy=copy, order=order, subok=subok, ndmin=ndmin, **kw)


def asarray(obj: Any, dtype: Any = None, order: str | None = None, **kwargs: Any) -> Any:
    """numpy.asarray; a tracked value is returned as is, a list holding tracked
    values stacked (as array)."""
    if _holds_tracked(obj):
        return array(obj, dtype=dtype)
    return _onp.asarray(obj, dtype=dtype, order=order, **kwargs)


def full(shape: Any, fill_value: Any, dtype: Any = None, order: str = "C",
         **kwargs: Any) -> Any:
    """numpy.full; a traced fill_value gives a traced array (ones * fill_value)."""
    if _istracked(fill_value):
        return _onp.ones(shape) * fill_value
    return _onp.full(shape, fill_value, dtype=dtype, order=order, **kwargs)


def _plain(v):
    if _istracked(v):
        return v.value
    if isinstance(v, (list, tuple)):
        return type(v)(_plain(e) for e in v)
    return v


def _wrap(name, f):
    @functools.wraps(f)
    def g(*args, **kwargs):
        if args and isinstance(args[0], (list, tuple)) and _holds_tracked(args[0]):
            args = (array(args[0]),) + args[1:]
        return f(*args, **kwargs)
    return g


_cache = {}


def __getattr__(name: str) -> Any:
    try:
        return _cache[name]
    except KeyError:
        pass
    try:
        v = getattr(_onp, name)
    except AttributeError:
        raise AttributeError(f"module 'revtape.autograd.numpy' has no attribute {name!r}") from None
    if callable(v) and not isinstance(v, type) and name not in _SEQUENCE_FUNCTIONS \
            and not isinstance(v, _types.ModuleType):
        v = _wrap(name, v)
    _cache[name] = v
    return v


def __dir__():
    return sorted(set(dir(_onp)) | set(globals()))


reshape = __getattr__("reshape")


def _namespace():
    import sys
    return sys.modules[__name__]
