"""littlemcmc NUTS on eight schools, with revtape's compiled gradient.

    python examples/eight_schools_littlemcmc.py

littlemcmc wants ``x -> (logp, gradient)``: exactly what a compiled tape's
``value_and_gradient`` returns, so no glue.  cores=1 keeps the chains in this
process (more cores would pickle the log density into worker processes).
"""

import littlemcmc as lmc

import eight_schools as es


def sample(draws=1000, tune=1000, chains=4, seed=0):
    """Draws of shape (chains, draws, es.DIM) on the sampling space."""
    ctape = es.compiled_logp()
    trace, _ = lmc.sample(ctape.value_and_gradient, model_ndim=es.DIM,
                              draws=draws, tune=tune, chains=chains, cores=1,
                              random_seed=list(range(seed, seed + chains)),
                              progressbar=False)
    return trace


if __name__ == "__main__":
    mu, tau = es.mu_tau(sample())
    print("posterior mean mu  %.2f" % mu.mean())
    print("posterior mean tau %.2f" % tau.mean())
