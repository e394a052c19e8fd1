"""Hessians and Hessian-vector products of compiled HessianTapes.

    pytest benchmarks/test_hessian.py --benchmark-only

Columns: forward-over-reverse in C (`ctape.hessian` / `ctape.hvp`: tangent
sweeps over the gradient program), the same program's Jacobian by reverse
sweeps (`rt_jacobian`, one per row: reverse-over-reverse, for comparison)
and, for hvp, one reverse sweep (`vjp`, H symmetric).  Every column is
first checked against finite differences of the numpy reference gradient.
"""

import numpy as np
import pytest

import revtape as rt
from revtape.bench import workloads
from revtape._vm import lib

CASES = {
    "eight-schools": lambda: workloads.eight_schools(),
    "rosenbrock-loop-20": lambda: workloads.rosenbrock_loop(n=20),
    "logreg-200x20": lambda: workloads.logreg(N=200, D=20),
}
_compiled = {}


def _case(name):
    if name not in _compiled:
        wl = CASES[name]()
        x = wl.x0 + 0.01
        ch = rt.compile(rt.HessianTape(wl.f, wl.x0))
        h = 1e-6
        fd = np.stack([(wl.numpy_vg(x + h * e)[1] - wl.numpy_vg(x - h * e)[1]) / (2 * h)
                       for e in np.eye(x.size)], axis=1)
        _compiled[name] = wl, x, ch, fd
    return _compiled[name]


@pytest.mark.benchmark(group="hessian")
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("column", ["tangent", "reverse-rows"])
def test_hessian(benchmark, name, column):
    wl, x, ch, fd = _case(name)
    if column == "tangent":
        run = lambda: ch.hessian(x)
    else:
        run = lambda: ch._jacobian(x, None, ch._grad_shapes[0], lib.rt_jacobian)
    np.testing.assert_allclose(run(), fd, rtol=1e-5, atol=1e-5)
    benchmark(run)


@pytest.mark.benchmark(group="hvp")
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("column", ["tangent", "reverse"])
def test_hvp(benchmark, name, column):
    wl, x, ch, fd = _case(name)
    v = np.linspace(-1.0, 1.0, x.size)
    run = (lambda: ch.hvp(x, v)) if column == "tangent" else (lambda: ch.vjp(x, v))
    np.testing.assert_allclose(run(), fd @ v, rtol=1e-5, atol=1e-5)
    benchmark(run)
