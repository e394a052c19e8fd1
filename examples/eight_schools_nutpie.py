"""nutpie (NUTS in Rust) on eight schools, with revtape's compiled gradient.

    python examples/eight_schools_nutpie.py

nutpie's ``from_pyfunc`` takes a factory for the log density: it is called
once per chain, so every chain gets its own compiled tape and the chains,
which nutpie runs on threads, never share one.
"""

import numpy as np
import nutpie
from nutpie.compiled_pyfunc import from_pyfunc

import eight_schools as es


def make_model():
    def make_logp_fn():
        return es.compiled_logp().value_and_gradient      # x -> (logp, gradient)

    def make_expand_fn(seed1, seed2, chain):
        # what nutpie stores per draw: the model's parameters on their own
        # scale, each as an ndarray (a numpy scalar is refused as "incorrect type")
        def expand(x):
            return {"mu": np.array(x[0]), "tau": np.exp(x[1:2]).reshape(()),
                    "eta": x[2:].copy()}
        return expand

    return from_pyfunc(es.DIM, make_logp_fn, make_expand_fn,
                       [np.dtype("float64")] * 3, [(), (), (8,)], ["mu", "tau", "eta"])


def sample(draws=1000, tune=1000, chains=4, seed=0, cores=None):
    """An arviz InferenceData with mu, tau and eta in its posterior group."""
    return nutpie.sample(make_model(), draws=draws, tune=tune, chains=chains,
                         seed=seed, cores=cores or chains, progress_bar=False)


if __name__ == "__main__":
    post = sample().posterior
    print("posterior mean mu  %.2f" % float(post["mu"].mean()))
    print("posterior mean tau %.2f" % float(post["tau"].mean()))
