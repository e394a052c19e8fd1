"""autograd.extend: new primitives and their derivative rules.

primitive/defvjp/defjvp are revtape's (rt.primitive: the function is opaque to
tracing and recorded as one instruction).  The argnum forms take one maker
for every argument, as autograd's do.  Forward mode here is the transpose of
reverse mode (differential_operators), so a primitive needs a VJP; JVP rules
are kept for rt.jvp."""

from ..core.apitypes import Function, FunctionT
from ..core.primitives import Primitive, defjvp, defvjp, primitive
from ..errors import UnsupportedError
from .tracer import getval, isbox  # noqa: F401
from .vspace import VSpace, vspace  # noqa: F401

__all__ = ["primitive", "defvjp", "defjvp", "defvjp_argnum", "defvjp_argnums", "defjvp_argnum",
           "defjvp_argnums", "def_linear", "notrace_primitive", "vspace", "VSpace"]

# argument positions given a rule by the argnum forms (autograd's rules take
# any position; revtape's table is per position)
_MAX_ARGS = 32


def _need(fun, who):
    if not isinstance(fun, Primitive):
        raise UnsupportedError(f"{who} needs a function made with primitive(); got {fun!r}")


def defvjp_argnum(fun: Function, vjpmaker: Function) -> None:
    """vjpmaker(argnum, ans, args, kwargs) -> (g -> gradient for args[argnum])."""
    _need(fun, "defvjp_argnum")
    rules = [(lambda p: lambda ans, *args, **kw: vjpmaker(p, ans, args, kw))(p)
             for p in range(_MAX_ARGS)]
    defvjp(fun, *rules, argnums=range(_MAX_ARGS))


def defvjp_argnums(fun: Function, vjpmaker: Function) -> None:
    """vjpmaker(argnums, ans, args, kwargs) -> (g -> tuple of gradients)."""
    _need(fun, "defvjp_argnums")

    def rule(p):
        def make(ans, *args, **kw):
            vjp = vjpmaker((p,), ans, args, kw)
            return lambda g: vjp(g)[0]
        return make
    defvjp(fun, *[rule(p) for p in range(_MAX_ARGS)], argnums=range(_MAX_ARGS))


def defjvp_argnum(fun: Function, jvpmaker: Function) -> None:
    """jvpmaker(argnum, g, ans, args, kwargs) -> the output's tangent."""
    _need(fun, "defjvp_argnum")
    rules = [(lambda p: lambda g, ans, *args, **kw: jvpmaker(p, g, ans, args, kw))(p)
             for p in range(_MAX_ARGS)]
    defjvp(fun, *rules, argnums=range(_MAX_ARGS))


def defjvp_argnums(fun: Function, jvpmaker: Function) -> None:
    """jvpmaker(argnums, gs, ans, args, kwargs) -> the output's tangent."""
    _need(fun, "defjvp_argnums")
    rules = [(lambda p: lambda g, ans, *args, **kw: jvpmaker((p,), (g,), ans, args, kw))(p)
             for p in range(_MAX_ARGS)]
    defjvp(fun, *rules, argnums=range(_MAX_ARGS))


def def_linear(fun: Function) -> None:
    """Declare fun linear in each argument.  autograd gives it a JVP only; here
    the reverse rule of a linear primitive would need its transpose, which
    revtape cannot derive: give it a VJP with defvjp."""
    _need(fun, "def_linear")
    defjvp_argnum(fun, lambda argnum, g, ans, args, kwargs:
                  fun(*[g if i == argnum else a for i, a in enumerate(args)], **kwargs))


def notrace_primitive(fun: FunctionT) -> FunctionT:
    """A function called on the plain values of its arguments: its result is a
    constant to every differentiation (autograd's notrace_primitive)."""
    def wrapped(*args, **kwargs):
        return fun(*[getval(a) for a in args], **{k: getval(v) for k, v in kwargs.items()})
    wrapped.__name__ = getattr(fun, "__name__", "notrace_primitive")
    wrapped.__wrapped__ = fun
    return wrapped
