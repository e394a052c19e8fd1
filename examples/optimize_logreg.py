"""L-BFGS-B on a logistic regression, with revtape's compiled gradient.

    python examples/optimize_logreg.py

The negative log posterior (Gaussian prior) is recorded once, compiled, and
handed to scipy as ``jac=True`` (value and gradient from one C replay).
"""

import numpy as np
from scipy.optimize import minimize

import revtape as rt


def make_data(n=500, d=10, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    beta_true = rng.standard_normal(d)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-X @ beta_true))).astype(float)
    return X, y


def neg_log_posterior(X, y, prior_scale=2.0):
    def f(beta):
        z = X @ beta
        # log p(y | z) = y z - log(1 + e^z), written stably with logaddexp
        loglik = np.sum(y * z - np.logaddexp(0.0, z))
        logprior = -0.5 * np.sum(beta ** 2) / prior_scale ** 2
        return -(loglik + logprior)
    return f


def fit(n=500, d=10, seed=0):
    X, y = make_data(n, d, seed)
    f = neg_log_posterior(X, y)
    ctape = rt.compile(rt.GradientTape(f, np.zeros(d)))
    res = minimize(ctape.value_and_gradient, np.zeros(d), jac=True, method="L-BFGS-B",
                   options={"gtol": 1e-10, "ftol": 1e-14, "maxiter": 1000})
    return res, X, y


if __name__ == "__main__":
    res, X, y = fit()
    print(res.message)
    print("beta_hat =", np.round(res.x, 4))
    print("|grad| at the optimum =", np.linalg.norm(res.jac))
