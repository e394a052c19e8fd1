"""flatten(value) -> (vector, unflatten): a nested list/tuple/dict of arrays
as one flat vector and back.  Works inside a differentiated function: the
vector is a tracked concatenation, unflatten slices a tracked vector."""

from typing import Any, Callable

import numpy as onp

from ..numpy import _namespace
from ..vspace import flatten as _tree_flatten
from ..vspace import unflatten as _tree_unflatten


np = _namespace()


def flatten(value: Any) -> tuple[Any, Callable[[Any], Any]]:
    leaves, tdef = _tree_flatten(value)
    shapes = [onp.shape(v.value if getattr(v, "_is_tracked", False) else v) for v in leaves]
    scalars = [onp.ndim(v) == 0 and not isinstance(v, onp.ndarray) for v in leaves]
    sizes = [int(onp.prod(s, dtype=onp.int64)) for s in shapes]
    if leaves:
        vec = np.concatenate([np.ravel(v) for v in leaves])
    else:
        vec = onp.zeros(0)

    def unflatten(vector):
        out, k = [], 0
        for shape, size, sc in zip(shapes, sizes, scalars):
            piece = vector[k:k + size]
            out.append(piece[0] if sc else np.reshape(piece, shape))
            k += size
        return _tree_unflatten(tdef, out)

    return vec, unflatten


def flatten_func(func: Callable[..., Any], example: Any
                 ) -> tuple[Callable[..., Any], Callable[[Any], Any], Any]:
    """(flat_func, unflatten, flat_example) for a func of a structured value."""
    _ex, unflatten = flatten(example)

    def flat_func(x, *args, **kwargs):
        return flatten(func(unflatten(x), *args, **kwargs))[0]

    return flat_func, unflatten, _ex
