"""Radon hierarchical regression (919 houses, 85 counties, gathers by the
county index, scales through the log bijector): revtape's compiled
value-and-gradient next to the hand-written C (csrc/reference.c,
ref_radon_vg) and numpy references.  Each benchmark first checks value and
gradient against the numpy reference (1e-10 relative).

    pytest benchmarks/test_radon.py --benchmark-only
"""

import numpy as np
import pytest

import revtape as rt
from revtape import _vm
from revtape import workloads as W

pytestmark = pytest.mark.benchmark(group="radon")

_cache = {}


def _setup():
    if not _cache:
        wl = W.radon()
        _cache["wl"] = wl
        _cache["ct"] = rt.compile(rt.GradientTape(wl.f, wl.x0))
        _cache["c"] = wl.make_c_vg(_vm.ffi, _vm.lib)
    return _cache["wl"], _cache["ct"], _cache["c"]


@pytest.mark.parametrize("column", ["revtape", "revtape-bind", "c-ref", "numpy-ref"])
def test_radon(benchmark, column):
    wl, ct, c_vg = _setup()
    x = wl.x0.copy()
    g = np.empty(x.size)
    if column == "revtape":
        call = lambda: ct.value_and_gradient(x, out=g)
    elif column == "revtape-bind":
        run = ct.bind(x, g)
        call = lambda: (run(), g)
    elif column == "c-ref":
        call = lambda: c_vg(x, g)
    else:
        call = lambda: wl.numpy_vg(x)
    v, gg = call()
    v_ref, g_ref = wl.numpy_vg(wl.x0)
    assert abs(v - v_ref) <= 1e-10 * abs(v_ref)
    np.testing.assert_allclose(gg, g_ref, rtol=1e-10, atol=1e-10 * np.abs(g_ref).max())
    benchmark.extra_info["column"] = column
    benchmark(call)
