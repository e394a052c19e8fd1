"""autograd's calling convention for its operators: an operator on a
one-argument function, op(fun, x), becomes op(fun, argnum=0, ...)(*args,
**kwargs), differentiating with respect to args[argnum] (a tuple of argnums
differentiates with respect to that tuple of arguments)."""

import functools
from typing import Any, Callable


def get_name(f: object) -> str:
    return getattr(f, "__name__", "[unknown name]")


def _sub(args, pairs):
    args = list(args)
    for i, v in pairs:
        args[i] = v
    return tuple(args)


def unary_to_nary(unary_operator: Callable[..., Any]) -> Callable[..., Callable[..., Any]]:
    @functools.wraps(unary_operator)
    def nary_operator(fun, argnum=0, *op_args, **op_kwargs):
        if type(argnum) not in (int, tuple, list):
            raise TypeError(f"argnum must be an int or a tuple of ints, got {argnum!r}")

        def nary_f(*args, **kwargs):
            def unary_f(x):
                pairs = [(argnum, x)] if isinstance(argnum, int) else zip(argnum, x)
                return fun(*_sub(args, pairs), **kwargs)
            unary_f.__name__ = get_name(fun)
            x = args[argnum] if isinstance(argnum, int) else tuple(args[i] for i in argnum)
            return unary_operator(unary_f, x, *op_args, **op_kwargs)

        try:
            nary_f.__name__ = f"{get_name(unary_operator)}_of_{get_name(fun)}_wrt_argnum_{argnum}"
            nary_f.__doc__ = (f"{get_name(unary_operator)} of function {get_name(fun)} with "
                              f"respect to argument number {argnum}.")
        except (AttributeError, TypeError):
            pass
        return nary_f

    return nary_operator
