"""Eight schools, non-centred: the model the sampler examples share.

    x = [mu, log_tau, eta_1..eta_8],  theta_j = mu + tau * eta_j
    mu ~ N(0, 5),  tau ~ half-Cauchy(0, 5),  eta_j ~ N(0, 1),  y_j ~ N(theta_j, sigma_j)

tau is sampled as log_tau, so the log density carries the log-Jacobian
(+ log_tau).  Written in plain numpy; revtape records it once and compiles it.
"""

import numpy as np

import revtape as rt

Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
NAMES = ["mu", "log_tau"] + [f"eta[{j}]" for j in range(8)]
DIM = len(NAMES)


def logp(x):
    mu, log_tau, eta = x[0], x[1], x[2:]
    tau = np.exp(log_tau)
    theta = mu + tau * eta
    return (-0.5 * (mu / 5.0) ** 2 + log_tau - np.log1p((tau / 5.0) ** 2)
            - 0.5 * np.sum(eta ** 2) - 0.5 * np.sum(((Y - theta) / SIGMA) ** 2))


def logp_constrained(p):
    """The same model on its own scale, p = {"mu", "tau", "eta"}: with
    bijectors={"tau": exp}, rt.LogDensity samples log(tau) and adds the
    log-Jacobian itself (see log_density below)."""
    theta = p["mu"] + p["tau"] * p["eta"]
    return (-0.5 * (p["mu"] / 5.0) ** 2 - np.log1p((p["tau"] / 5.0) ** 2)
            - 0.5 * np.sum(p["eta"] ** 2) - 0.5 * np.sum(((Y - theta) / SIGMA) ** 2))


def log_density():
    """rt.LogDensity on the unconstrained space: flat order eta[0..7], mu,
    tau__exp (sorted keys); ld.constrain(draws) gives mu, tau, eta back."""
    return rt.LogDensity(logp_constrained, {"mu": 0.0, "tau": 1.0, "eta": np.zeros(8)},
                         bijectors={"tau": rt.bijectors.exp})


def compiled_logp():
    """The compiled tape: .value_and_gradient(x) -> (logp, gradient), one C call."""
    return rt.compile(rt.GradientTape(logp, np.zeros(DIM)))


def mu_tau(draws):
    """Posterior draws (..., DIM) on the sampling space -> (mu, tau) draws."""
    draws = np.asarray(draws)
    return draws[..., 0], np.exp(draws[..., 1])
