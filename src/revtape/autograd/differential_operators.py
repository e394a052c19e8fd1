"""autograd's differential operators (grad, jacobian, hessian, ...) with
autograd's signatures, all built on tracer.make_vjp.

Forward mode (make_jvp, deriv, the "fwd" checks) is the transpose trick: the
VJP is linear in its cotangent, so the VJP of the VJP is the JVP.  It costs
about two reverse sweeps and nests like everything else here.
"""

import inspect
from collections import OrderedDict
from typing import Any, Callable

import numpy as onp

from ..core.apitypes import Function, FunctionT
from ..errors import OutputError, UnsupportedError
from .tracer import make_vjp as _make_vjp
from .vspace import vspace
from .wrap_util import unary_to_nary



def _np():
    from .numpy import _namespace  # the tracked-aware namespace (stack, tensordot, ...)
    return _namespace()


def _scalar_output(ans, who):
    vs = vspace(ans)
    if vs.size != 1:
        raise OutputError(f"{who} only applies to real scalar-output functions (this one returned "
                          f"shapes {vs.shapes}). Try jacobian or elementwise_grad.")
    return vs


make_vjp = unary_to_nary(_make_vjp)


@unary_to_nary
def grad(fun, x):
    """The gradient of a scalar-valued fun with respect to argument argnum,
    shaped like that argument: grad(fun, argnum=0)(*args, **kwargs)."""
    vjp, ans = _make_vjp(fun, x)
    return vjp(_scalar_output(ans, "grad").ones())


@unary_to_nary
def elementwise_grad(fun, x):
    """The sum of the Jacobian's rows: the derivative of each output element with
    respect to its input when fun acts elementwise."""
    vjp, ans = _make_vjp(fun, x)
    return vjp(vspace(ans).ones())


@unary_to_nary
def make_jvp(fun, x):
    """jvp(v) -> (fun(x), the Jacobian of fun at x times v)."""
    vjp, ans = _make_vjp(fun, x)
    vjp_vjp, _ = _make_vjp(vjp, vspace(ans).zeros())
    return lambda v: (ans, vjp_vjp(v))


@unary_to_nary
def deriv(fun, x):
    """The directional derivative along ones (for a scalar x: df/dx)."""
    return make_jvp(fun)(x)(vspace(x).ones())[1]


@unary_to_nary
def jacobian(fun, x):
    """The Jacobian, of shape fun(x).shape + x.shape."""
    np = _np()
    vjp, ans = _make_vjp(fun, x)
    ans_vs, x_vs = vspace(ans), vspace(x)
    if len(ans_vs.shapes) != 1 or len(x_vs.shapes) != 1:
        raise UnsupportedError("jacobian takes a function from an array to an array; for "
                               "containers flatten them first (revtape.autograd.misc.flatten)")
    grads = [vjp(b) for b in ans_vs.standard_basis()]
    shape = ans_vs.shapes[0] + x_vs.shapes[0]
    if not grads:
        return onp.zeros(shape)
    return np.reshape(np.stack(grads), shape)


@unary_to_nary
def holomorphic_grad(fun, x):
    raise UnsupportedError("holomorphic_grad needs complex numbers, which revtape does not "
                           "support yet")


def grad_named(fun: Function, argname: str) -> Callable[..., Any]:
    """grad with respect to the argument called argname."""
    names = list(inspect.signature(fun).parameters)
    return grad(fun, names.index(argname))


@unary_to_nary
def hessian(fun, x):
    """The Hessian, jacobian(jacobian(fun))."""
    return jacobian(jacobian(fun))(x)


@unary_to_nary
def make_hvp(fun, x):
    """(hvp, grad(fun)(x)): hvp(v) is the Hessian at x times v."""
    return _make_vjp(grad(fun), x)


def hessian_tensor_product(fun: Function, argnum: int = 0) -> Callable[..., Any]:
    """A function of (*args, tensor, **kwargs): the Hessian of fun with respect
    to args[argnum] contracted with tensor."""
    np = _np()
    fun_grad = grad(fun, argnum)

    def vector_dot_grad(*args, **kwargs):
        args, vector = args[:-1], args[-1]
        return np.tensordot(fun_grad(*args, **kwargs), vector, np.ndim(vector))

    return grad(vector_dot_grad, argnum)


hessian_vector_product = hessian_tensor_product


def tensor_jacobian_product(fun: Function, argnum: int = 0) -> Callable[..., Any]:
    """A function of (*args, tensor, **kwargs): tensor contracted with fun's
    Jacobian with respect to args[argnum]."""
    np = _np()

    def vector_dot_fun(*args, **kwargs):
        args, vector = args[:-1], args[-1]
        return np.tensordot(vector, fun(*args, **kwargs), axes=np.ndim(vector))

    return jacobian(vector_dot_fun, argnum)


vector_jacobian_product = tensor_jacobian_product


def make_ggnvp(f: Function, g: Function | None = None, f_argnum: int = 0) -> Callable[..., Any]:
    """Generalized Gauss-Newton-vector products of g(f(x)) at x (g defaults to
    half the squared norm over the last axis)."""
    if g is None:
        def g(y):
            return 0.5 * _np().sum(y ** 2, axis=-1)

    @unary_to_nary
    def _make_ggnvp(f, x):
        f_vjp, f_x = _make_vjp(f, x)
        g_hvp, grad_g_x = _make_vjp(grad(g), f_x)
        f_jvp, _ = _make_vjp(f_vjp, vspace(grad_g_x).zeros())
        return lambda v: f_vjp(g_hvp(f_jvp(v)))

    return _make_ggnvp(f, f_argnum)


@unary_to_nary
def value_and_grad(fun, x):
    """(fun(*args), grad(fun)(*args)), from one recording."""
    vjp, ans = _make_vjp(fun, x)
    return ans, vjp(_scalar_output(ans, "value_and_grad").ones())


@unary_to_nary
def grad_and_aux(fun, x):
    """(gradient of fun's first output, its second output unchanged)."""
    vjp, (ans, aux) = _make_vjp(lambda x: tuple(fun(x)), x)
    return vjp((_scalar_output(ans, "grad_and_aux").ones(), vspace(aux).zeros())), aux


def multigrad_dict(fun: Function) -> Callable[..., "OrderedDict[str, Any]"]:
    """A function of fun's arguments returning an OrderedDict argname -> gradient,
    over all of them at once."""
    sig = inspect.signature(fun)
    params = sig.parameters
    var_pos = [n for n, p in params.items() if p.kind == p.VAR_POSITIONAL]
    var_kwd = [n for n, p in params.items() if p.kind == p.VAR_KEYWORD]
    plain = [n for n in params if n not in var_pos + var_kwd]

    def gradfun(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        argdict = OrderedDict(bound.arguments)

        def newfun(d):
            pos = tuple(d[n] for n in plain) + (tuple(d[var_pos[0]]) if var_pos else ())
            kw = dict(d[var_kwd[0]]) if var_kwd else {}
            return fun(*pos, **kw)

        g = grad(newfun)(dict(argdict))
        return OrderedDict((n, g[n]) for n in argdict)

    return gradfun


def checkpoint(fun: FunctionT) -> FunctionT:
    """fun itself: results and gradients as autograd's checkpoint gives them.
    (A revtape recording keeps its intermediate values; nothing is discarded
    to be recomputed, so this saves no memory.)"""
    def wrapped(*args, **kwargs):
        return fun(*args, **kwargs)
    wrapped.__name__ = getattr(fun, "__name__", "checkpointed")
    wrapped.__wrapped__ = fun
    return wrapped
