"""Threads, processes or a cluster: the same chains scheduled four ways.

    python examples/threads_or_processes.py [chains draws]

Two workloads: eight schools under littlemcmc (a sampler step is mostly
Python: the GIL decides) and a logistic regression with 20000 rows, where
each gradient is milliseconds in the C VM, which releases the GIL.  Each is
run with its chains one after another, on a thread each, and in a pool of
worker processes (spawned: the LogDensity is pickled to them, as Dask and
Ray do).  Threads share one LogDensity (each thread compiles its own copy).
littlemcmc seeds numpy's global generator, which threads share: its chains
in threads are valid but not the sequential run's draws (processes are).
"""

import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np

import revtape as rt

import eight_schools as es

RNG = np.random.default_rng(0)
X = RNG.normal(size=(20000, 20))
Y = (X @ RNG.normal(size=20) + RNG.normal(size=20000) > 0).astype(float)


def logreg(w):
    z = X @ w
    return np.sum(Y * z - np.logaddexp(0.0, z)) - 0.5 * np.sum(w ** 2)


def nuts_chain(ld, draws, seed):
    import littlemcmc as lmc
    trace, _ = lmc.sample(ld.logdensity_and_gradient, model_ndim=ld.dimension, draws=draws,
                          tune=draws, chains=1, cores=1, random_seed=[seed], progressbar=False)
    return trace[0]


def gradient_chain(ld, calls, seed):
    """A stand-in for a sampler whose time is all in the gradient."""
    w = np.random.default_rng(seed).normal(size=ld.dimension) * 0.01
    for _ in range(calls):
        v, g = ld.logdensity_and_gradient(w)
        w = w + 1e-6 * g
    return w


def timed(how, job, ld, chains, n, workers):
    """(seconds, the chains' results); process start-up is inside the clock."""
    t = time.perf_counter()
    if how == "one after another":
        res = [job(ld, n, c) for c in range(chains)]
    elif how == "threads":
        with ThreadPoolExecutor(workers) as pool:
            res = list(pool.map(job, [ld] * chains, [n] * chains, range(chains)))
    else:
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
            res = list(pool.map(job, [ld] * chains, [n] * chains, range(chains)))
    return time.perf_counter() - t, res


def table(chains=4, draws=1000, calls=200, workers=None):
    """{(workload, how): (seconds, results)}."""
    workers = workers or min(chains, os.cpu_count() or 1)
    out = {}
    for name, job, ld, n in (("eight schools, littlemcmc", nuts_chain, es.log_density(), draws),
                             ("logreg 20000x20, gradients", gradient_chain,
                              rt.LogDensity(logreg, np.zeros(20)), calls)):
        for how in ("one after another", "threads", "processes"):
            out[name, how] = timed(how, job, ld, chains, n, workers)
    return out


if __name__ == "__main__":
    chains, draws = (int(a) for a in (sys.argv[1:3] or (4, 1000)))
    print(f"{chains} chains, {os.cpu_count()} cores")
    for (name, how), (sec, _) in table(chains, draws).items():
        print(f"{name:28s} {how:18s} {sec:6.2f} s")
