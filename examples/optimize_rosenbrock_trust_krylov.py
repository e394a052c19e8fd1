"""scipy's trust-krylov on the n-dimensional Rosenbrock function, with the
gradient and Hessian-vector products from one compiled HessianTape.

    python examples/optimize_rosenbrock_trust_krylov.py

trust-krylov probes points it then rejects, and near convergence it may hand
``hessp`` a vector of nans; revtape returns what numpy would (nans), so the
solver carries on exactly as with a numpy Hessian.
"""

import numpy as np
from scipy.optimize import minimize

import revtape as rt


def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def solve(n=20):
    x0 = np.full(n, -1.2)
    x0[1::2] = 1.0
    ctape = rt.compile(rt.HessianTape(rosenbrock, x0))
    res = minimize(ctape.forward, x0, jac=ctape.gradient, hessp=ctape.hvp,
                   method="trust-krylov", options={"gtol": 1e-8})
    return res


if __name__ == "__main__":
    res = solve()
    print(res.message, "after", res.nit, "iterations")
    print("f(x*) =", res.fun, " max|x* - 1| =", np.abs(res.x - 1).max())
