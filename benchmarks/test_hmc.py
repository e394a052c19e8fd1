"""HMC end to end on eight schools: the same sampler driven by each tool's
value-and-gradient (REVTAPE_BENCH_HMC_ITERS iterations, default 100)."""

import time

import numpy as np
import pytest

from conftest import COLUMNS, ready_column
from revtape import config
from revtape.bench import columns as C
from revtape.bench.hmc import hmc

pytestmark = pytest.mark.benchmark(group="hmc")

N_ITER = config.get("REVTAPE_BENCH_HMC_ITERS")
_reference = {}


def _ref_samples(wl):
    if "s" not in _reference:
        _reference["s"] = hmc(wl.numpy_vg, wl.x0, N_ITER)[0]
    return _reference["s"]


@pytest.mark.parametrize("column", [c for c in COLUMNS if c != "revtape-ref"])
def test_hmc(benchmark, column):
    col, rec = ready_column(column, "eight-schools")
    wl = rec.wl
    x0 = np.array(wl.x0, dtype=np.float64)
    vg, kw = C.sampler_callable(column, col)
    t0 = time.perf_counter()
    samples, acc = hmc(vg, x0, N_ITER, **kw)
    once = time.perf_counter() - t0
    # the same RNG stream and the same gradients give the same chain
    np.testing.assert_allclose(samples, _ref_samples(wl), rtol=0, atol=1e-6)
    benchmark.extra_info.update({"column": column, "n_iter": N_ITER, "accept_rate": acc})
    rounds = int(max(1, min(10, 5.0 / max(once, 1e-9))))
    benchmark.pedantic(hmc, args=(vg, x0, N_ITER), kwargs=kw, rounds=rounds, iterations=1,
                       warmup_rounds=0)
