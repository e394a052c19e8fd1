"""Batched replay: eight schools at k = 1000 points per call.

    pytest benchmarks/test_batch.py --benchmark-only
    python benchmarks/test_batch.py          # per-point numbers and ratios

Columns (each first checked against the numpy reference at every row):
``batch/1t`` and ``batch/2t`` -- ``ctape.batch_value_and_gradient(X,
threads=n)``, one C call per thread with the GIL released; ``c-ref`` -- the
hand-written C value and gradient (csrc/bench/reference.c, revtape.bench._ref) looped over the rows in
C (``ref_eight_schools_batch``), so neither side pays a per-point call from
Python; ``bind-loop`` -- the per-point Python loop over ``ctape.bind``
that batching replaces.
"""

import os
import sys
import time

import numpy as np
import pytest

try:
    import revtape as rt
except ImportError:  # running from a checkout without PYTHONPATH=src
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "src"))
    import revtape as rt
from revtape.bench import workloads
from revtape.bench._ref import ffi, lib

K = 1000
COLUMNS = ["batch/1t", "batch/2t", "c-ref", "bind-loop"]


def setup(k=K):
    wl = workloads.eight_schools()
    ctape = rt.compile(rt.GradientTape(wl.f, wl.x0))
    X = np.random.default_rng(0).normal(size=(k, wl.x0.size))
    return wl, ctape, X


def column(name, ctape, X):
    """A no-argument callable for a column, returning (values, grads)."""
    k, n = X.shape
    if name.startswith("batch/"):
        threads = int(name.split("/")[1][:-1])
        ctape.batch_value_and_gradient(X[:2], threads=threads)       # build the arenas
        out = np.empty((k, n))
        return lambda: ctape.batch_value_and_gradient(X, out=out, threads=threads)
    if name == "c-ref":
        values, G = np.empty(k), np.empty((k, n))
        xp, vp, gp = (ffi.from_buffer("double[]", a) for a in (X, values, G))
        fn = lib.ref_eight_schools_batch

        def run():
            fn(xp, k, vp, gp)
            return values, G
        return run
    if name == "bind-loop":
        xb, gb = np.empty(n), np.empty(n)
        values, G = np.empty(k), np.empty((k, n))
        run1 = ctape.bind(xb, gb)

        def run():
            for r in range(k):
                xb[:] = X[r]
                values[r] = run1()
                G[r] = gb
            return values, G
        return run
    raise ValueError(name)


def check(wl, run, X):
    values, G = run()
    for r in range(0, len(X), 97):
        v, g = wl.numpy_vg(X[r])
        assert np.isclose(values[r], v, rtol=1e-12) and np.allclose(G[r], g, rtol=1e-12)


@pytest.mark.benchmark(group="batch-eight-schools-k1000")
@pytest.mark.parametrize("name", COLUMNS)
def test_batch(benchmark, name):
    wl, ctape, X = setup()
    run = column(name, ctape, X)
    check(wl, run, X)
    benchmark.extra_info.update({"k": K, "column": name})
    benchmark(run)


def main(rounds=40):
    """Per-point times (min over rounds, the columns taking turns so the shared
    machine's noisy spells hit them alike) and the ratios the issue asks for."""
    wl, ctape, X = setup()
    runs = {name: column(name, ctape, X) for name in COLUMNS}
    for run in runs.values():
        check(wl, run, X)
    best = {name: float("inf") for name in COLUMNS}
    for _ in range(rounds):
        for name, run in runs.items():
            t0 = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - t0)
    per = {name: t / K * 1e9 for name, t in best.items()}
    print(f"eight schools, k = {K} points per call, {ctape.stats()['program_instructions']} "
          "program instructions; ns per point (min of {rounds} rounds):".format(rounds=rounds))
    for name in COLUMNS:
        print(f"  {name:10s} {per[name]:9.1f} ns   {per[name] / per['c-ref']:6.2f}x c-ref")
    print(f"  throughput 2 threads / 1 thread: {best['batch/1t'] / best['batch/2t']:.2f}x")
    return per


if __name__ == "__main__":
    main()
