"""Gaussian-process marginal likelihood (Cholesky-based), n = 50 and 200:
revtape's compiled value-and-gradient next to the textbook numpy/scipy
(LAPACK) analytic one.  Each benchmark first checks value and gradient
against the analytic reference (1e-8 relative, as the bench does).

    pytest benchmarks/test_gp.py --benchmark-only --benchmark-group-by=param:n
"""

import numpy as np
import pytest

import revtape as rt
from revtape import workloads as W

pytestmark = pytest.mark.benchmark(group="gp")

_cache = {}


def _setup(n):
    if n not in _cache:
        wl = W.gp(n=n)
        ct = rt.compile(rt.GradientTape(wl.f, wl.x0))
        _cache[n] = wl, ct
    return _cache[n]


def _check(vg, wl):
    v, g = vg(wl.x0)
    v_ref, g_ref = wl.numpy_vg(wl.x0)
    assert abs(v - v_ref) <= 1e-8 * abs(v_ref)
    np.testing.assert_allclose(g, g_ref, rtol=1e-8, atol=1e-8 * np.abs(g_ref).max())


@pytest.mark.parametrize("n", [50, 200])
@pytest.mark.parametrize("column", ["revtape", "revtape-bind", "numpy-ref"])
def test_gp(benchmark, column, n):
    wl, ct = _setup(n)
    x = wl.x0.copy()
    g = np.empty(3)
    if column == "revtape":
        vg = lambda xx: ct.value_and_gradient(xx, out=g)
        call = lambda: ct.value_and_gradient(x, out=g)
    elif column == "revtape-bind":
        run = ct.bind(x, g)
        vg = lambda xx: (run(), g)          # x holds x0
        call = run
    else:
        vg = wl.numpy_vg
        call = lambda: wl.numpy_vg(x)
    _check(vg, wl)
    benchmark.extra_info.update({"n": n, "column": column})
    benchmark(call)
