"""pytensor_op: a LogDensity as a PyTensor Op, for ``pm.Potential``.

PyTensor (PyMC's graph library) takes a foreign function as an ``Op``: its
``perform`` computes the output from numpy inputs and its ``grad`` returns
the graph of the vector-Jacobian product.  Three Ops come from one
LogDensity, each a replay of its compiled programs:

    LogDensityOp  x -> logp             the forward-only program (PyMC's
                                        logp, point evaluations)
    GradientOp    x -> dlogp/dx         the value-and-gradient program
                                        (what NUTS asks for through grad)
    HvpOp         (x, v) -> H(x) v      forward-over-reverse in C, so that
                                        second derivatives of the graph
                                        (pytensor.gradient.hessian, R_op)
                                        work too

``x`` is the LogDensity's flat vector; calling the value Op on a structure
shaped like x0 (a dict of PyMC variables, ...) lays the leaves out in x0's
leaf order (sorted dict keys) first.  The Ops compare equal when they wrap
the same LogDensity, so PyTensor merges repeated uses, and they pickle with
it (PyMC's worker processes for ``cores > 1``).
"""

import numpy as np

from ._deps import require
from ..core import pytree
from ..errors import InputError


def _log_density(ld):
    from ..models.logdensity import LogDensity, NegativeLogDensity
    if isinstance(ld, (LogDensity, NegativeLogDensity)):
        return ld
    if callable(ld):
        raise InputError("pytensor_op takes an rt.LogDensity, not a function: build one with "
                         "rt.LogDensity(logp, x0) (x0 in the parameters' own space: PyMC "
                         "transforms its variables itself)")
    raise InputError(f"pytensor_op takes an rt.LogDensity, not a {type(ld).__name__}")


def _structure_of(ld):
    """The LogDensity holding x0's layout (a NegativeLogDensity's base)."""
    return getattr(ld, "base", ld)


def _ops():
    """The Op classes, defined once pytensor is imported (on first use)."""
    global _OPS
    if _OPS is not None:
        return _OPS
    require("pytensor", "pytensor")
    import pytensor.tensor as pt
    from pytensor.gradient import grad_not_implemented
    from pytensor.graph.basic import Apply
    from pytensor.graph.op import Op

    def vector_input(op, x):
        dim = op.ld.dimension
        x = pt.as_tensor_variable(x)
        if x.ndim != 1:
            raise InputError(f"{type(op).__name__} takes the flat parameter vector (ndim 1, "
                             f"length {dim}); got a {x.ndim}-d variable. Pass a structure "
                             "shaped like x0 to the value Op, or pt.concatenate the leaves")
        if x.type.shape[0] is not None and x.type.shape[0] != dim:
            raise InputError(f"{type(op).__name__} takes a vector of length {dim}; got one of "
                             f"length {x.type.shape[0]}")
        if x.dtype != "float64":
            # the tape computes in float64; PyTensor differentiates the cast
            x = pt.cast(x, "float64")
        return x

    class LogDensityOp(Op):
        """x (the flat float64 vector) -> the log density, a float64 scalar."""

        __props__ = ("ld",)

        def __init__(self, ld):
            self.ld = ld

        def __reduce__(self):
            # the class is made on first use (pytensor imported lazily), so
            # it pickles by name through this module
            return (_rebuild, (type(self).__name__, self.ld))

        def __call__(self, x, **kwargs):
            if (not hasattr(x, "type") and pytree.is_container(x)
                    and not pytree._is_scalar_list(x)):
                x = flat_vector(self.ld, x)
            return super().__call__(x, **kwargs)

        def make_node(self, x):
            return Apply(self, [vector_input(self, x)], [pt.dscalar()])

        def perform(self, node, inputs, outputs):
            # the forward sweep alone: no adjoints, no gradient copy
            outputs[0][0] = np.asarray(self.ld.logdensity(inputs[0]), dtype=np.float64)

        @property
        def gradient_op(self):
            """The Op x -> the gradient (what grad builds on)."""
            return GradientOp(self.ld)

        def grad(self, inputs, output_grads):
            return [output_grads[0] * GradientOp(self.ld)(inputs[0])]

        def infer_shape(self, fgraph, node, shapes):
            return [()]

    class GradientOp(Op):
        """x -> the gradient of the log density, a float64 vector like x."""

        __props__ = ("ld",)

        def __init__(self, ld):
            self.ld = ld

        def __reduce__(self):
            # the class is made on first use (pytensor imported lazily), so
            # it pickles by name through this module
            return (_rebuild, (type(self).__name__, self.ld))

        def make_node(self, x):
            return Apply(self, [vector_input(self, x)], [pt.dvector()])

        def perform(self, node, inputs, outputs):
            outputs[0][0] = self.ld.gradient(inputs[0])

        def grad(self, inputs, output_grads):
            # the Hessian is symmetric: the vjp of the gradient is H @ ct
            return [HvpOp(self.ld)(inputs[0], output_grads[0])]

        def R_op(self, inputs, eval_points):
            if eval_points[0] is None:
                return [None]
            return [HvpOp(self.ld)(inputs[0], eval_points[0])]

        def infer_shape(self, fgraph, node, shapes):
            return [shapes[0]]

    class HvpOp(Op):
        """(x, v) -> H(x) v, the Hessian of the log density times v."""

        __props__ = ("ld",)

        def __init__(self, ld):
            self.ld = ld

        def __reduce__(self):
            # the class is made on first use (pytensor imported lazily), so
            # it pickles by name through this module
            return (_rebuild, (type(self).__name__, self.ld))

        def make_node(self, x, v):
            return Apply(self, [vector_input(self, x), vector_input(self, v)], [pt.dvector()])

        def perform(self, node, inputs, outputs):
            outputs[0][0] = np.asarray(self.ld.hvp(inputs[0], inputs[1]), dtype=np.float64)

        def grad(self, inputs, output_grads):
            x, v = inputs
            return [grad_not_implemented(self, 0, x, "third derivatives of a revtape log "
                                         "density are not available"),
                    HvpOp(self.ld)(x, output_grads[0])]

        def infer_shape(self, fgraph, node, shapes):
            return [shapes[0]]

    def flat_vector(ld, tree):
        """The leaves of tree (PyTensor variables or numbers shaped like x0's
        leaves) end to end in x0's leaf order."""
        base = _structure_of(ld)
        if base._transformed:
            raise InputError("this LogDensity has bijectors, so its flat vector is the "
                             "unconstrained parameter; pass that vector, or build the "
                             "LogDensity without bijectors= for PyMC, which transforms its "
                             "own variables")
        td = base._parts.treedef
        if td is not None:
            leaves = pytree.leaves_of(td, tree)
        elif base._tree and isinstance(tree, (tuple, list)) and len(tree) == len(base._x_shapes):
            leaves = list(tree)
        else:
            raise InputError("pass the flat parameter vector, or a structure shaped like x0 "
                             f"({len(base._x_shapes)} leaves)")
        parts = []
        for path, leaf, shape in zip(_paths(base), leaves, base._x_shapes):
            leaf = pt.as_tensor_variable(leaf)
            if leaf.ndim != len(shape) or any(
                    s is not None and s != want for s, want in zip(leaf.type.shape, shape)):
                raise InputError(f"{path} has shape {leaf.type.shape} where x0's leaf has "
                                 f"shape {shape}")
            parts.append(pt.reshape(leaf, (int(np.prod(shape)),)))
        return pt.concatenate(parts)

    _OPS = (LogDensityOp, GradientOp, HvpOp)
    return _OPS


_OPS = None


def _rebuild(name, ld):
    return {cls.__name__: cls for cls in _ops()}[name](ld)


def _paths(base):
    td = base._parts.treedef
    if td is not None:
        return pytree.leaf_paths(td)
    return [f"x[{i}]" for i in range(len(base._x_shapes))] if base._tree else ["x"]


def pytensor_op(ld):
    """The PyTensor Op ``x -> logp`` of ld (an rt.LogDensity), with its
    gradient Op and a value-only ``perform``: ``pm.Potential("lik",
    pytensor_op(ld)(x))``, x the flat vector or a structure shaped like x0."""
    ld = _log_density(ld)
    return _ops()[0](ld)
