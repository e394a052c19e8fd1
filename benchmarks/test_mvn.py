"""Multivariate normal log density (n = 100, m = 20 observations), gradient
w.r.t. the mean and the Cholesky factor: revtape's compiled value-and-gradient
next to the numpy/scipy (LAPACK) analytic one.  Each benchmark first checks
value and gradient against it (1e-8 relative).

    pytest benchmarks/test_mvn.py --benchmark-only
"""

import numpy as np
import pytest

import revtape as rt
from revtape import workloads as W

pytestmark = pytest.mark.benchmark(group="mvn")

_cache = {}


def _setup():
    if not _cache:
        wl = W.mvn()
        _cache["wl"] = wl
        _cache["ct"] = rt.compile(rt.GradientTape(wl.f, wl.x0))
    return _cache["wl"], _cache["ct"]


@pytest.mark.parametrize("column", ["revtape", "revtape-bind", "numpy-ref"])
def test_mvn(benchmark, column):
    wl, ct = _setup()
    x = wl.x0.copy()
    g = np.empty(x.size)
    if column == "revtape":
        call = lambda: ct.value_and_gradient(x, out=g)
    elif column == "revtape-bind":
        run = ct.bind(x, g)
        call = lambda: (run(), g)
    else:
        call = lambda: wl.numpy_vg(x)
    v, gg = call()
    v_ref, g_ref = wl.numpy_vg(wl.x0)
    assert abs(v - v_ref) <= 1e-8 * abs(v_ref)
    np.testing.assert_allclose(gg, g_ref, rtol=1e-8, atol=1e-8 * np.abs(g_ref).max())
    benchmark.extra_info["column"] = column
    benchmark(call)
