"""Values as autograd sees them: leaves (floats, float arrays, tracked values)
inside lists, tuples and dicts; and autograd's VSpace (zeros, ones, randn,
inner products) over such values, which its test utilities and operators use.

autograd treats every list, tuple and dict as a container of separately
differentiated leaves (a list of floats gives a list of gradients), unlike
rt.grad's pytrees, which read a list of plain numbers as one array.  The
walk here is autograd's.  Only real numbers: complex values raise
rt.UnsupportedError where they come in.
"""

import numpy as np

from ..errors import InputError, UnsupportedError

_CONTAINERS = (list, tuple, dict)


def _is_container(x):
    return type(x) in _CONTAINERS or (isinstance(x, tuple) and hasattr(type(x), "_fields"))


def flatten(x):
    """(leaves, structure) of x in a fixed order (dict keys sorted)."""
    leaves = []
    return leaves, _flatten(x, leaves)


def _flatten(x, leaves):
    if isinstance(x, dict):
        keys = sorted(x, key=repr)
        return (type(x), keys, [_flatten(x[k], leaves) for k in keys])
    if isinstance(x, (list, tuple)):
        return (type(x), None, [_flatten(v, leaves) for v in x])
    leaves.append(x)
    return None


def unflatten(tdef, leaves):
    it = iter(leaves)
    return _unflatten(tdef, it)


def _unflatten(td, it):
    if td is None:
        return next(it)
    kind, keys, children = td
    vals = [_unflatten(c, it) for c in children]
    if keys is not None:
        out = kind() if kind is not dict else {}
        for k, v in zip(keys, vals):
            out[k] = v
        return out
    if kind is list or kind is tuple:
        return kind(vals)
    if hasattr(kind, "_fields"):
        return kind(*vals)
    return kind(vals)


def map_leaves(f, x):
    leaves, td = flatten(x)
    return unflatten(td, [f(v) for v in leaves])


def leaves_like(tdef, g, what):
    """The leaves of g, which must have structure tdef (a leaf may stand for a
    container only if tdef is a leaf)."""
    leaves, td = flatten(g)
    if _shape_of_tree(td) != _shape_of_tree(tdef):
        raise InputError(f"{what} has another structure than the function's output")
    return leaves


def _shape_of_tree(td):
    if td is None:
        return None
    kind, keys, children = td
    base = tuple if kind is tuple or hasattr(kind, "_fields") else kind
    return (base, tuple(keys) if keys is not None else None,
            tuple(_shape_of_tree(c) for c in children))


def as_float(v):
    """A plain leaf as revtape tracks it: a float or a float64 array."""
    if getattr(v, "_is_tracked", False):
        return v
    if isinstance(v, (bool, np.bool_)):
        raise InputError("cannot differentiate with respect to a bool")
    if np.iscomplexobj(v):
        raise UnsupportedError("complex numbers are not supported by revtape yet")
    if isinstance(v, (int, float, np.integer, np.floating)):
        return float(v)
    a = np.asarray(v)
    if a.dtype == object:
        raise InputError(f"cannot differentiate with respect to {type(v).__name__}")
    return np.array(a, dtype=np.float64)


def like_input(g, x):
    """A gradient shaped like its input x: a float for a Python/numpy scalar
    input, a float64 array for an array input (also of shape ())."""
    if getattr(g, "_is_tracked", False):
        return g
    if isinstance(x, np.ndarray) or (getattr(x, "_is_tracked", False) and np.ndim(x.value) > 0) \
            or isinstance(x, list):
        return np.asarray(g, dtype=np.float64)
    if np.ndim(g) == 0:
        return float(g) if not isinstance(x, np.ndarray) else np.asarray(g)
    return np.asarray(g)


# ---------------------------------------------------------------- VSpace

def _plain(v):
    return v.value if getattr(v, "_is_tracked", False) else v


class VSpace:
    """The vector space of a value: its structure, each leaf's shape.  As
    autograd's: zeros(), ones(), randn(), inner_prod, add, scalar_mul,
    covector (the identity: revtape's values are real)."""

    def __init__(self, value):
        leaves, self.tdef = flatten(value)
        self.shapes = []
        self.scalars = []
        for v in leaves:
            p = _plain(v)
            if np.iscomplexobj(p):
                raise UnsupportedError("complex numbers are not supported by revtape yet")
            self.shapes.append(tuple(np.shape(p)))
            self.scalars.append(not isinstance(p, np.ndarray) and np.ndim(p) == 0)
        self.size = int(sum(int(np.prod(s, dtype=np.int64)) for s in self.shapes))

    def __eq__(self, other):
        return (isinstance(other, VSpace) and _shape_of_tree(self.tdef) == _shape_of_tree(other.tdef)
                and self.shapes == other.shapes)

    def __hash__(self):
        return hash((repr(_shape_of_tree(self.tdef)), tuple(self.shapes)))

    def __repr__(self):
        return f"VSpace(shapes={self.shapes})"

    def _make(self, fill):
        leaves = []
        for s, sc in zip(self.shapes, self.scalars):
            a = fill(s)
            leaves.append(float(a) if sc else np.asarray(a, dtype=np.float64))
        return unflatten(self.tdef, leaves)

    def zeros(self):
        return self._make(np.zeros)

    def ones(self):
        return self._make(np.ones)

    def randn(self):
        return self._make(lambda s: np.random.randn(*s))

    def standard_basis(self):
        for k in range(self.size):
            flat = np.zeros(self.size)
            flat[k] = 1.0
            yield self.unflat(flat)

    def flat(self, x):
        leaves, _ = flatten(x)
        if not leaves:
            return np.zeros(0)
        return np.concatenate([np.ravel(_plain(v)) for v in leaves]).astype(np.float64)

    def unflat(self, flat):
        leaves, k = [], 0
        for s, sc in zip(self.shapes, self.scalars):
            n = int(np.prod(s, dtype=np.int64))
            piece = np.reshape(flat[k:k + n], s)
            leaves.append(float(piece) if sc else piece)
            k += n
        return unflatten(self.tdef, leaves)

    def inner_prod(self, x, y):
        return float(np.dot(self.flat(x), self.flat(y)))

    def add(self, x, y):
        return self._combine(x, y, lambda a, b: a + b)

    def scalar_mul(self, x, c):
        return map_leaves(lambda v: v * c, x)

    def covector(self, x):
        return x

    def _combine(self, x, y, f):
        lx, td = flatten(x)
        ly, _ = flatten(y)
        return unflatten(td, [f(a, b) for a, b in zip(lx, ly)])


def vspace(value):
    return VSpace(value)
