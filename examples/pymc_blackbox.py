"""PyMC with a revtape log-likelihood: the "black-box likelihood" pattern.

    python examples/pymc_blackbox.py        # needs pymc (pip install pymc)

PyMC builds its model graph from PyTensor operations.  A likelihood written
in plain numpy enters that graph as an ``Op`` whose ``perform`` calls the
compiled log density, plus a second ``Op`` for its gradient, which PyMC's
NUTS asks for through ``Op.grad``.  revtape gives both from one recording.
The priors stay in PyMC (it transforms tau to log space itself); only the
likelihood of eight schools (non-centred) is a black box here.

The Ops take one flat vector (``ld.dimension`` long, in the LogDensity's
leaf order): any model's parameters fit it, and PyTensor differentiates the
``pt.concatenate`` that builds it.  A LogDensity pickles, so PyMC may also
run chains in worker processes (cores > 1).
"""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

import revtape as rt

import eight_schools as es


def loglike(p):
    """y_j ~ N(mu + tau * eta_j, sigma_j), written in numpy."""
    theta = p["mu"] + p["tau"] * p["eta"]
    return -0.5 * np.sum(((es.Y - theta) / es.SIGMA) ** 2)


# recorded and compiled once; flat order eta[0..7], mu, tau (sorted keys)
LIKELIHOOD = rt.LogDensity(loglike, {"eta": np.zeros(8), "mu": 0.0, "tau": 1.0})


class LogLike(Op):
    """A flat parameter vector -> the log-likelihood (a forward sweep in C)."""

    def __init__(self, ld):
        self.ld = ld
        self.grad_op = LogLikeGrad(ld)

    def make_node(self, x):
        x = pt.as_tensor_variable(x)
        return Apply(self, [x], [pt.dscalar()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.asarray(self.ld.logdensity(inputs[0]), dtype=np.float64)

    def grad(self, inputs, output_grads):
        return [output_grads[0] * self.grad_op(inputs[0])]


class LogLikeGrad(Op):
    """A flat parameter vector -> the gradient (forward and reverse sweep in C)."""

    def __init__(self, ld):
        self.ld = ld

    def make_node(self, x):
        x = pt.as_tensor_variable(x)
        return Apply(self, [x], [pt.dvector()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = self.ld.gradient(inputs[0])


def model(ld=LIKELIHOOD):
    with pm.Model() as m:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        eta = pm.Normal("eta", 0.0, 1.0, shape=8)
        flat = pt.concatenate([eta, pt.stack([mu, tau])])     # the LogDensity's leaf order
        pm.Potential("likelihood", LogLike(ld)(flat))
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
