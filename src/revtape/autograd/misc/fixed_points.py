"""fixed_point(f, a, x0, distance, tol): iterate x <- f(a)(x) from x0 until
distance(x, x_prev) <= tol; differentiable in a by the implicit function
theorem (the reverse pass iterates the adjoint fixed point), as autograd's."""

from typing import Any, Callable

from ...core.primitives import defvjp, primitive
from ..tracer import isolated, make_vjp
from ..vspace import vspace


def _iterate(f, a, x0, distance, tol):
    step = f(a)
    x, prev = step(x0), x0
    while distance(x, prev) > tol:
        x, prev = step(x), x
    return x


@primitive
def _fixed_point(a, f, x0, distance, tol):
    return _iterate(f, a, x0, distance, tol)


def _vjp(ans, a, f, x0, distance, tol):
    def rev_iter(params):
        a_, x_star, x_star_bar = params
        vjp_x, _ = make_vjp(f(a_), x_star)
        return lambda g: vjp_x(g) + x_star_bar

    def grad(g):
        with isolated():
            vjp_a, _ = make_vjp(lambda aa: f(aa)(ans), a)
            w = _iterate(rev_iter, (a, ans, g), vspace(x0).zeros(), distance, tol)
            return vjp_a(w)
    return grad


defvjp(_fixed_point, _vjp)


def fixed_point(f: Callable[[Any], Callable[[Any], Any]], a: Any, x0: Any,
                distance: Callable[[Any, Any], Any], tol: float) -> Any:
    """autograd's fixed_point: iterate x <- f(a)(x) from x0 until
    distance(x, x_prev) <= tol; differentiable in a."""
    return _fixed_point(a, f, x0, distance, tol)
