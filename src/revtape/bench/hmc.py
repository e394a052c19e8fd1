"""A plain HMC sampler, written once and parameterised by a value-and-gradient callable.

    samples, accept_rate = hmc(vg, x0, n_iter=1000)

``vg(q) -> (logp, grad)``; the gradient may be a buffer that the next call
overwrites (it is copied when kept).  Identity mass matrix, fixed step size,
fixed number of leapfrog steps, Metropolis correction; all randomness comes
from ``np.random.default_rng(seed)``, so every tool with the same gradients
produces the same chain.

With ``proposal_buf`` the proposal's position is kept in that array and ``vg``
is called with it, so a bound compiled tape (``ctape.bind(proposal_buf, g)``)
needs no copy: ``hmc(lambda q: (run(), g), x0, proposal_buf=x_buf)``.
"""

from __future__ import annotations

import math

import numpy as np

# On non-centred eight schools (from its x0), 10 leapfrog steps of 0.2 accept about 98%
# of 1000 proposals (0.1: 99.5%, 0.3: 97%); the posterior means match longer runs.
STEP_SIZE = 0.2
N_LEAPFROG = 10


def hmc(vg, x0, n_iter=1000, n_leapfrog=N_LEAPFROG, step_size=STEP_SIZE, seed=0,
        proposal_buf=None):
    """Run n_iter HMC iterations from x0; returns (samples (n_iter, d), acceptance rate)."""
    rng = np.random.default_rng(seed)
    eps = float(step_size)
    half = 0.5 * eps
    q = np.array(x0, dtype=np.float64)
    d = q.size
    qn = np.empty(d) if proposal_buf is None else proposal_buf
    qn[...] = q
    lp, g = vg(qn)
    lp, g = float(lp), np.array(g, dtype=np.float64)
    samples = np.empty((n_iter, d))
    pn = np.empty(d)
    tmp = np.empty(d)
    accepted = 0
    for it in range(n_iter):
        p = rng.standard_normal(d)
        log_u = math.log(rng.uniform())
        h0 = lp - 0.5 * float(p @ p)
        qn[...] = q
        np.multiply(g, half, out=tmp)
        np.add(p, tmp, out=pn)
        for k in range(n_leapfrog):
            np.multiply(pn, eps, out=tmp)
            qn += tmp
            lpn, gn = vg(qn)
            np.multiply(gn, eps if k < n_leapfrog - 1 else half, out=tmp)
            pn += tmp
        h1 = float(lpn) - 0.5 * float(pn @ pn)
        if h1 - h0 > log_u:          # False for NaN: a divergent proposal is rejected
            q[...] = qn
            lp = float(lpn)
            g[...] = gn
            accepted += 1
        samples[it] = q
    return samples, accepted / n_iter if n_iter else 0.0


__all__ = ["hmc", "STEP_SIZE", "N_LEAPFROG"]
