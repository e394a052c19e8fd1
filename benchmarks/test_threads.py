"""Gradients from 1 and 2 threads, each replaying its own copy.deepcopy(ctape).

Both benchmarks of a group do the same number of calls *per thread*, so with
perfect scaling the 2-thread time equals the 1-thread time (the 2-vs-1
speedup is 2 * t1 / t2)."""

import copy
import threading

import numpy as np
import pytest

from conftest import recorded
from revtape.bench import columns as C

CALLS = 2000


def _runs(name, n_threads, params):
    ffi, lib, why = C.vm()
    if why:
        pytest.skip(why)
    rec = recorded(name, **params)
    x = C.timing_point(rec.wl)
    v_ref, g_ref = rec.wl.numpy_vg(x.copy())
    runs = []
    for _ in range(n_threads):
        ct = copy.deepcopy(rec.ctape)
        xb, gb = x.copy(), np.empty_like(x)
        run = ct.bind(xb, gb)
        assert C.rel_err(run(), gb, v_ref, g_ref) <= C.RTOL
        runs.append((run, ct, xb, gb))
    return runs


def _threaded(runs):
    def work(run):
        for _ in range(CALLS):
            run()

    ts = [threading.Thread(target=work, args=(r[0],)) for r in runs]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


@pytest.mark.parametrize("name,params", [
    pytest.param("eight-schools", {}, marks=pytest.mark.benchmark(group="threads-eight-schools")),
    pytest.param("logreg", {"N": 1000, "D": 20}, marks=pytest.mark.benchmark(group="threads-logreg")),
])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_threads(benchmark, name, params, n_threads):
    runs = _runs(name, n_threads, params)
    benchmark.extra_info.update({"threads": n_threads, "calls_per_thread": CALLS})
    benchmark.pedantic(_threaded, args=(runs,), rounds=7, iterations=1, warmup_rounds=1)
