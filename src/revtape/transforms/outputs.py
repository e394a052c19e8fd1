"""Container outputs: a function returning a pytree (tuple, list, dict of
floats and arrays of different shapes) for rt.vjp, rt.jvp and rt.jacobian.

A tape has one output, so the leaves are recorded raveled end to end into
one vector (pack); the results of a replay are split back into the output's
structure (values, tangents: unpack; Jacobians: unpack_jacobian), and a
cotangent in that structure is laid out the same way (flat_cotangent).
"""

import math

import numpy as np

from ..core import ops, pytree
from ..errors import InputError
from ..trace.values import check_input, shape_of


class OutSpec:
    """The structure of a container output: its treedef and each leaf's shape."""

    __slots__ = ("treedef", "shapes", "bounds")

    def __init__(self, treedef, shapes):
        self.treedef = treedef
        self.shapes = shapes
        self.bounds = np.cumsum([0] + [math.prod(s) for s in shapes]).tolist()

    def __reduce__(self):
        return (OutSpec, (self.treedef, self.shapes))

    def pieces(self, flat):
        """flat's leading axis cut into the leaves' runs."""
        b = self.bounds
        return [flat[b[k]:b[k + 1]] for k in range(len(self.shapes))]


def _is_tracked(v):
    return getattr(v, "_is_tracked", False)


def pack(out):
    """(what the tape records as its output, OutSpec or None for an output
    that is not a container)."""
    if not pytree.is_container(out):
        return out, None
    leaves, td = pytree.flatten(out)
    shapes, flat, tracked = [], [], False
    for v in leaves:
        s = shape_of(v.value) if _is_tracked(v) else np.shape(v)
        shapes.append(tuple(s))
        if _is_tracked(v):
            tracked = True
            flat.append(ops.P.reshape(v, shape=(math.prod(s),)))
        else:
            flat.append(np.ravel(np.asarray(v, dtype=np.float64)))
    spec = OutSpec(td, shapes)
    if not flat:
        return np.zeros(0), spec
    if not tracked:
        return np.concatenate(flat), spec
    return (flat[0] if len(flat) == 1 else ops.P.concat(*flat, axis=0)), spec


def unpack(spec, flat):
    """A flat output (or tangent) vector in the output's structure."""
    if spec is None:
        return flat
    flat = np.asarray(flat, dtype=np.float64).reshape(-1)
    leaves = [float(p[0]) if s == () else p.reshape(s).copy()
              for p, s in zip(spec.pieces(flat), spec.shapes)]
    return pytree.unflatten(spec.treedef, leaves)


def unpack_jacobian(spec, jac, x_treedef=None):
    """The Jacobian of the packed output (rows: its elements; a tree of such
    for a pytree input) as the output's structure of Jacobians, each shaped
    leaf.shape + input.shape."""
    if spec is None:
        return jac
    if x_treedef is not None:
        per_x = pytree.leaves_of(x_treedef, jac, "Jacobian")
    elif isinstance(jac, tuple):
        per_x = list(jac)
    else:
        per_x = [jac]
    out = []
    for k, s in enumerate(spec.shapes):
        a, b = spec.bounds[k], spec.bounds[k + 1]
        blocks = []
        for j in per_x:
            j = np.asarray(j, dtype=np.float64)
            xs = j.shape[1:]
            blk = j.reshape((-1,) + xs)[a:b].reshape(s + xs)
            blocks.append(float(blk) if blk.shape == () else blk)
        if x_treedef is not None:
            out.append(pytree.unflatten(x_treedef, blocks))
        else:
            out.append(blocks[0] if not isinstance(jac, tuple) else tuple(blocks))
    return pytree.unflatten(spec.treedef, out)


def flat_cotangent(spec, w):
    """A cotangent in the output's structure as one flat vector (a plain
    tuple stands for a namedtuple output: np.linalg.eigh's, slogdet's)."""
    kind = spec.treedef.kind
    if (type(w) in (tuple, list) and kind is not tuple and isinstance(kind, type)
            and issubclass(kind, tuple) and len(w) == len(spec.treedef.children)):
        w = kind(*w)
    try:
        leaves = pytree.leaves_of(spec.treedef, w, "cotangent")
    except InputError:
        raise InputError(f"the cotangent must have the function's output structure, "
                         f"{spec.treedef}; got {pytree.flatten(w)[1]}") from None
    parts = [np.ravel(check_input(v, s, float_input=s == ()))
             for v, s in zip(leaves, spec.shapes)]
    return np.concatenate(parts) if parts else np.zeros(0)
