"""mici (dynamic multinomial HMC) on eight schools, with revtape's compiled gradient.

    python examples/eight_schools_mici.py

mici works with the *negative* log density, and its gradient function may
return ``(gradient, value)`` -- gradient first, the reverse of
``value_and_gradient`` -- which saves mici a second evaluation.
"""

import numpy as np
import mici

import eight_schools as es


def sample(draws=1000, tune=1000, chains=4, seed=0):
    """Draws of shape (chains, draws, es.DIM) on the sampling space."""
    ctape = es.compiled_logp()

    def neg_log_dens(x):
        return -ctape(x)

    def grad_and_value(x):
        value, grad = ctape.value_and_gradient(x)
        return -grad, -value

    system = mici.systems.EuclideanMetricSystem(neg_log_dens=neg_log_dens,
                                                grad_neg_log_dens=grad_and_value)
    integrator = mici.integrators.LeapfrogIntegrator(system)
    rng = np.random.default_rng(seed)
    sampler = mici.samplers.DynamicMultinomialHMC(system, integrator, rng)
    adapters = [mici.adapters.DualAveragingStepSizeAdapter(0.8),
                mici.adapters.OnlineVarianceMetricAdapter()]
    init = [rng.uniform(-2, 2, es.DIM) for _ in range(chains)]
    out = sampler.sample_chains(tune, draws, init, adapters=adapters, n_worker=1,
                                trace_funcs=[lambda state: {"x": state.pos}],
                                display_progress=False)
    return np.asarray(out.traces["x"])


if __name__ == "__main__":
    mu, tau = es.mu_tau(sample())
    print("posterior mean mu  %.2f" % mu.mean())
    print("posterior mean tau %.2f" % tau.mean())
