"""revtape.autograd: HIPS autograd's public API on revtape.

    from revtape.autograd import grad, jacobian, hessian
    import revtape.autograd.numpy as np

Programs written for autograd run with their ``autograd`` imports renamed.
Each call records the function afresh on a revtape tape and sweeps it
backwards with the op table's rules, as autograd traces at each call: nothing
is cached, so nothing can be stale.  For the compiled speed of a gradient
asked for many times, call ``rt.grad`` (docs/guide/autograd.md).

Not in revtape yet, and refused with rt.UnsupportedError naming them:
complex numbers (holomorphic_grad), FFT, scipy.signal.convolve, odeint.
"""

from .builtins import dict, isinstance, list, tuple, type  # noqa: A004
from .differential_operators import (checkpoint, deriv, elementwise_grad, grad, grad_and_aux,
                                     grad_named, hessian, hessian_tensor_product,
                                     hessian_vector_product, holomorphic_grad, jacobian,
                                     make_ggnvp, make_hvp, make_jvp, make_vjp, multigrad_dict,
                                     tensor_jacobian_product, value_and_grad,
                                     vector_jacobian_product)
from .extend import primitive

__all__ = [
    "grad", "value_and_grad", "grad_and_aux", "elementwise_grad", "jacobian", "hessian",
    "hessian_tensor_product", "hessian_vector_product", "tensor_jacobian_product",
    "vector_jacobian_product", "make_vjp", "make_jvp", "make_hvp", "make_ggnvp", "deriv",
    "holomorphic_grad", "grad_named", "multigrad_dict", "checkpoint", "primitive",
    "dict", "list", "tuple", "isinstance", "type",
]
