"""nutpie_model: a LogDensity as the compiled model ``nutpie.sample`` takes.

nutpie (NUTS in Rust) calls the log density from its own threads, taking the
GIL per call; the LogDensity's pooled compiled copies serve those calls
without recompiling (docs/guide/threads.md).  What nutpie stores per draw
(the "expand" function) is the parameter in f's own space and structure,
``ld.constrain(x)``, one named variable per leaf of x0, in x0's leaf order
(sorted dict keys) -- the order of the names nutpie is given, which its
Rust side requires the expand dict to follow.
"""

import numpy as np

from ._deps import require
from ..core import pytree
from ..errors import InputError


def variables(ld):
    """[(name, shape)] of the draws nutpie stores: one per leaf of x0, in
    leaf order, in f's (constrained) space."""
    td = ld._parts.treedef
    if td is not None:
        names = pytree.leaf_paths(td)
    elif ld._tree:
        names = [f"x[{i}]" for i in range(len(ld._x_shapes))]
    else:
        names = ["x"]
    if len(set(names)) != len(names):
        raise InputError(f"x0's leaves give the same name twice ({names}); nutpie needs "
                         "one name per variable")
    return list(zip(names, ld._x_shapes))


def _leaves(ld, tree):
    td = ld._parts.treedef
    if td is not None:
        return pytree.leaves_of(td, tree)
    return list(tree) if ld._tree else [tree]


def nutpie_model(ld):
    """What ``nutpie.sample`` takes for ld (an rt.LogDensity): its log density
    and gradient at the compiled tape's speed from nutpie's threads, and the
    constrained draws as variables named after x0's leaves."""
    require("nutpie", "nutpie")
    from_pyfunc = require("nutpie.compiled_pyfunc", "nutpie").from_pyfunc
    from ..models.logdensity import LogDensity
    if not isinstance(ld, LogDensity):
        raise InputError(f"nutpie_model takes an rt.LogDensity, not a {type(ld).__name__}: "
                         "build one with rt.LogDensity(logp, x0, bijectors=...)")
    vars_ = variables(ld)
    names = [n for n, _ in vars_]
    shapes = [tuple(s) for _, s in vars_]

    def make_logp_fn():
        return ld.logdensity_and_gradient

    def make_expand_fn(*seeds):
        def expand(x):
            leaves = _leaves(ld, ld.constrain(np.asarray(x, dtype=np.float64)))
            # nutpie wants ndarrays (a float is refused as "incorrect type"),
            # in the order of `names`
            return {n: np.asarray(v, dtype=np.float64).reshape(s)
                    for n, v, s in zip(names, leaves, shapes)}
        return expand

    return from_pyfunc(ld.dimension, make_logp_fn, make_expand_fn,
                       [np.dtype("float64")] * len(names), shapes, names)
