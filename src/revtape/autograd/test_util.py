"""autograd.test_util: check_grads compares a function's reverse-mode (and
forward-mode) derivatives, to the given order, with central differences
along random directions, as autograd's does."""

from itertools import product
from typing import Any, Callable

import numpy as np

from .differential_operators import make_jvp as _nary_make_jvp
from .tracer import make_vjp
from .vspace import vspace
from .wrap_util import get_name, unary_to_nary

TOL = 1e-6
RTOL = 1e-6
EPS = 1e-6


def scalar_close(a, b):
    return abs(a - b) < TOL or abs(a - b) / abs(a + b) < RTOL


def _numerical_jvp(f, x):
    xs = vspace(x)

    def jvp(v):
        hi = f(xs.add(x, xs.scalar_mul(v, EPS / 2)))
        lo = f(xs.add(x, xs.scalar_mul(v, -EPS / 2)))
        ys = vspace(hi)
        return ys.scalar_mul(ys.add(hi, ys.scalar_mul(lo, -1.0)), 1.0 / EPS)

    return jvp


def _make_jvp(f, x):
    return _nary_make_jvp(f)(x)


def check_vjp(f, x):
    vjp, y = make_vjp(f, x)
    x_vs, y_vs = vspace(x), vspace(y)
    x_v, y_v = x_vs.randn(), y_vs.randn()
    vjp_y = vjp(y_v)
    assert vspace(vjp_y) == x_vs, f"VJP of {get_name(f)} has the wrong shape: {vspace(vjp_y)}"
    exact = x_vs.inner_prod(x_v, vjp_y)
    numeric = y_vs.inner_prod(y_v, _numerical_jvp(f, x)(x_v))
    assert scalar_close(numeric, exact), (
        f"Derivative (VJP) check of {get_name(f)} failed with arg {x}:\n"
        f"analytic: {exact}\nnumeric:  {numeric}")


def check_jvp(f, x):
    x_v = vspace(x).randn()
    check_equivalent(_make_jvp(f, x)(x_v)[1], _numerical_jvp(f, x)(x_v))


def check_equivalent(x, y):
    x_vs, y_vs = vspace(x), vspace(y)
    assert x_vs == y_vs, f"VSpace mismatch:\nx: {x_vs}\ny: {y_vs}"
    v = x_vs.randn()
    assert scalar_close(x_vs.inner_prod(x, v), x_vs.inner_prod(y, v)), \
        f"Value mismatch:\nx: {x}\ny: {y}"


@unary_to_nary
def check_grads(f, x, modes=None, order=2):
    """Check f's derivatives at x (modes "fwd", "rev"; order 1 or more):
    check_grads(f, argnum=0, modes=..., order=...)(*args)."""
    if modes is None:
        modes = ["fwd", "rev"]
    if not all(m in ("fwd", "rev") for m in modes):
        raise ValueError(f"modes are 'fwd' and 'rev', got {modes!r}")
    if "fwd" in modes:
        check_jvp(f, x)
        if order > 1:
            def jvp_f(x, v):
                return _make_jvp(f, x)(v)[1]
            jvp_f.__name__ = f"jvp_{get_name(f)}"
            check_grads(jvp_f, (0, 1), modes, order=order - 1)(x, vspace(x).randn())
    if "rev" in modes:
        check_vjp(f, x)
        if order > 1:
            def vjp_f(x, v):
                return make_vjp(f, x)[0](v)
            vjp_f.__name__ = f"vjp_{get_name(f)}"
            check_grads(vjp_f, (0, 1), modes, order=order - 1)(x, vspace(f(x)).randn())


def combo_check(fun: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., None]:
    """check_grads over every combination of the given argument values."""
    def _combo(*arg_lists, **kw_lists):
        kv = [[(k, v) for v in vs] for k, vs in kw_lists.items()]
        for a in product(*arg_lists):
            for k in product(*kv):
                check_grads(fun, *args, **kwargs)(*a, **dict(k))
    return _combo
