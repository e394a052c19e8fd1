"""const_graph: in autograd, a function whose graph is traced once and then
re-evaluated.  Here it is fun itself, run afresh at each call: the same
values, without a cached graph that could go stale."""

import functools
from typing import Any, Callable


def const_graph(fun: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
    partial = functools.partial(fun, *args, **kwargs)

    @functools.wraps(fun)
    def run(*a):
        return partial(*a)
    return run
