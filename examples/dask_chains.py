"""Chains past one machine with Dask: one NUTS chain per task.

    python examples/dask_chains.py                       # a LocalCluster here
    python examples/dask_chains.py tcp://scheduler:8786  # any running cluster

The compiled log density is scattered to the workers once (a LogDensity
pickles: its recorded tapes travel and each worker compiles its own copy);
every task then runs one littlemcmc chain against it and returns its draws,
which are gathered into one (chains, draws, dimension) array, mapped back to
the model's own scale with ``ld.constrain`` and, when ArviZ is installed,
turned into one InferenceData.

Workers import what the log density refers to by name: here ``eight_schools``
(examples/ is on the workers' path for a LocalCluster, which starts them from
this process; on a remote cluster, ``client.upload_file("eight_schools.py")``).

Threads or processes?  The VM releases the GIL while it replays, but a
sampler step is mostly Python (littlemcmc's tree building), so chains in
threads of one process contend for the GIL; one process per core (a
LocalCluster with threads_per_worker=1, or ProcessPoolExecutor) scales with
cores, and a cluster pays off when one chain takes longer than the ~seconds
of starting workers and shipping the log density.
"""

import sys

import numpy as np

import eight_schools as es


def run_chain(ld, draws, tune, seed):
    """One chain in a worker: (draws, ld.dimension) on the sampling space."""
    import littlemcmc as lmc
    trace, _ = lmc.sample(ld.logdensity_and_gradient, model_ndim=ld.dimension,
                          draws=draws, tune=tune, chains=1, cores=1,
                          random_seed=[seed], progressbar=False)
    return trace[0]


def sample(client, chains=4, draws=1000, tune=1000, seed=0):
    """(chains, draws, dimension) draws and the LogDensity that made them."""
    ld = es.log_density()
    [remote_ld] = client.scatter([ld], broadcast=True)     # shipped once per worker
    futures = [client.submit(run_chain, remote_ld, draws, tune, seed + c, pure=False)
               for c in range(chains)]
    return np.stack(client.gather(futures)), ld


def to_posterior(ld, draws):
    """Draws on the sampling space -> {"mu", "tau", "eta"} with leading (chains, draws),
    as one InferenceData when ArviZ is installed."""
    post = ld.constrain(draws)
    try:
        import arviz as az
    except ImportError:
        return post
    return az.from_dict(posterior=post, dims={"eta": ["school"]})


def main(address=None, chains=4, draws=1000, tune=1000, seed=0):
    from dask.distributed import Client, LocalCluster
    if address is None:
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            draws, ld = sample(client, chains, draws, tune, seed)
    else:
        with Client(address) as client:
            client.upload_file(es.__file__)
            draws, ld = sample(client, chains, draws, tune, seed)
    return to_posterior(ld, draws)


if __name__ == "__main__":
    post = main(*sys.argv[1:2])
    post = getattr(post, "posterior", post)           # InferenceData or the dict
    mu, tau = np.asarray(post["mu"]), np.asarray(post["tau"])
    print("posterior mean mu  %.2f" % mu.mean())
    print("posterior mean tau %.2f" % tau.mean())
