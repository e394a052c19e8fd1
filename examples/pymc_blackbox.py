"""PyMC with a revtape log-likelihood: the "black-box likelihood" pattern.

    python examples/pymc_blackbox.py        # needs pymc (pip install pymc)

PyMC builds its model graph from PyTensor operations.  A likelihood written
in plain numpy enters that graph as an ``Op``: ``revtape.interop.pytensor_op``
makes it from a LogDensity, with a value-only ``perform`` (the forward
sweep in C) and the gradient Op that PyMC's NUTS asks for through
``Op.grad`` (one compiled replay).  The priors stay in PyMC (it transforms
tau to log space itself), so the LogDensity has no bijectors: only the
likelihood of eight schools (non-centred) is a black box here.

The Op takes PyMC's variables in the LogDensity's structure (a dict like
x0; the flat vector works too).  A LogDensity and its Op pickle, so PyMC may
also run chains in worker processes (cores > 1).
"""

import numpy as np
import pymc as pm

import revtape as rt
from revtape import interop

import eight_schools as es


def loglike(p):
    """y_j ~ N(mu + tau * eta_j, sigma_j), written in numpy."""
    theta = p["mu"] + p["tau"] * p["eta"]
    return -0.5 * np.sum(((es.Y - theta) / es.SIGMA) ** 2)


# recorded and compiled once
LIKELIHOOD = rt.LogDensity(loglike, {"eta": np.zeros(8), "mu": 0.0, "tau": 1.0})


def model(ld=LIKELIHOOD):
    with pm.Model() as m:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        eta = pm.Normal("eta", 0.0, 1.0, shape=8)
        pm.Potential("likelihood", interop.pytensor_op(ld)({"eta": eta, "mu": mu, "tau": tau}))
    return m


def sample(draws=1000, tune=1000, chains=4, seed=0, cores=1):
    """An arviz InferenceData with mu, tau and eta in its posterior group."""
    with model():
        return pm.sample(draws=draws, tune=tune, chains=chains, cores=cores,
                         random_seed=seed, progressbar=False,
                         compute_convergence_checks=False)


if __name__ == "__main__":
    post = sample().posterior
    print("posterior mean mu  %.2f" % float(post["mu"].mean()))
    print("posterior mean tau %.2f" % float(post["tau"].mean()))
