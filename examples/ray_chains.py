"""Chains past one machine with Ray: one NUTS chain per task.

    python examples/ray_chains.py                 # a local Ray instance
    python examples/ray_chains.py auto            # the running cluster (ray start --head ...)

The same plan as examples/dask_chains.py: the compiled log density is put in
Ray's object store once (``ray.put``; a LogDensity pickles with its recorded
tapes, and each worker compiles its own copy), one task per chain runs
littlemcmc against it, and the draws are gathered, mapped back with
``ld.constrain`` and (with ArviZ installed) turned into one InferenceData.
Workers import ``eight_schools`` by name: ``runtime_env={"working_dir": ...}``
ships examples/ to a remote cluster.
"""

import os
import sys

import numpy as np
import ray

import eight_schools as es
from dask_chains import to_posterior

HERE = os.path.dirname(os.path.abspath(__file__))


@ray.remote(num_cpus=1)
def run_chain(ld, draws, tune, seed):
    import littlemcmc as lmc
    trace, _ = lmc.sample(ld.logdensity_and_gradient, model_ndim=ld.dimension,
                          draws=draws, tune=tune, chains=1, cores=1,
                          random_seed=[seed], progressbar=False)
    return trace[0]


def sample(chains=4, draws=1000, tune=1000, seed=0):
    """(chains, draws, dimension) draws and the LogDensity that made them
    (ray.init must have been called)."""
    ld = es.log_density()
    ref = ray.put(ld)                                   # shipped once, shared by the tasks
    tasks = [run_chain.remote(ref, draws, tune, seed + c) for c in range(chains)]
    return np.stack(ray.get(tasks)), ld


def main(address=None, chains=4, draws=1000, tune=1000, seed=0, num_cpus=2):
    env = {"working_dir": HERE, "excludes": ["*.png"]} if address else {
        # local workers start from this process's files: put examples/ on their path
        "env_vars": {"PYTHONPATH": os.pathsep.join(p for p in [HERE] + sys.path if p)}}
    ray.init(address=address, num_cpus=None if address else num_cpus,
             runtime_env=env, include_dashboard=False, log_to_driver=False)
    try:
        draws, ld = sample(chains, draws, tune, seed)
    finally:
        ray.shutdown()
    return to_posterior(ld, draws)


if __name__ == "__main__":
    post = main(*sys.argv[1:2])
    post = getattr(post, "posterior", post)
    print("posterior mean mu  %.2f" % float(np.mean(post["mu"])))
    print("posterior mean tau %.2f" % float(np.mean(post["tau"])))
