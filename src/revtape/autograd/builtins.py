"""autograd's builtins: container constructors and type tests that see
through traced values.  revtape's traced values sit in ordinary Python
containers, so tuple, list and dict are Python's own; isinstance and type
answer for the value a traced one stands for (isinstance(x, np.ndarray) is
True for a traced array, type(x) is float for a traced scalar)."""

import builtins as _b
from typing import Any

import numpy as _np

tuple = _b.tuple
list = _b.list
dict = _b.dict


def _kind(x):
    if getattr(x, "_is_tracked", False):
        v = x.value
        return _b.type(v) if not _b.isinstance(v, _np.ndarray) else _np.ndarray
    return None


def isinstance(x: object, types: Any) -> bool:
    k = _kind(x)
    if k is None:
        return _b.isinstance(x, types)
    types = types if _b.isinstance(types, _b.tuple) else (types,)
    return any(_b.issubclass(k, t) for t in types) or _b.isinstance(x, types)


def type(x: object) -> "_b.type[Any]":
    k = _kind(x)
    return _b.type(x) if k is None else k
