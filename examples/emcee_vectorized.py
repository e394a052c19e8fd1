"""emcee with ``vectorize=True``, served by revtape's batched replay: every
walker's log density in one C call, no Python per walker.

    python examples/emcee_vectorized.py

The target is a correlated Gaussian whose mean and covariance are known, so
the sample mean can be checked against the truth.
"""

import numpy as np
import emcee

import revtape as rt


def make_target(d=4, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((d, d))
    cov = A @ A.T / d + np.eye(d)
    mean = rng.standard_normal(d)
    prec = np.linalg.inv(cov)

    def logp(x):
        r = x - mean
        return -0.5 * np.sum(r * (prec @ r))
    return logp, mean, cov


def sample(d=4, walkers=32, steps=2000, seed=0):
    logp, mean, cov = make_target(d, seed)
    ctape = rt.compile(rt.GradientTape(logp, np.zeros(d)))
    sampler = emcee.EnsembleSampler(walkers, d, ctape.batch_forward, vectorize=True)
    rng = np.random.default_rng(seed + 1)
    sampler.run_mcmc(mean + rng.standard_normal((walkers, d)), steps, progress=False)
    return sampler.get_chain(discard=steps // 4, flat=True), mean, cov


if __name__ == "__main__":
    draws, mean, cov = sample()
    print("sample mean", np.round(draws.mean(axis=0), 3))
    print("true mean  ", np.round(mean, 3))
