"""The scripts in examples/ run as tests, at small sizes, and their answers
are checked against values known independently of revtape."""

import importlib.util
import pathlib

import numpy as np
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_lbfgs_logistic_regression_reaches_the_numpy_gradients_optimum():
    pytest.importorskip("scipy")
    from scipy.optimize import minimize
    ex = load("optimize_logreg")
    res, X, y = ex.fit(n=300, d=6, seed=3)
    assert res.success

    def numpy_vg(beta):                 # the same objective, gradient by hand
        z = X @ beta
        p = 1.0 / (1.0 + np.exp(-z))
        f = -(np.sum(y * z - np.logaddexp(0.0, z)) - 0.5 * beta @ beta / 4.0)
        return f, -(X.T @ (y - p) - beta / 4.0)
    ref = minimize(numpy_vg, np.zeros(6), jac=True, method="L-BFGS-B",
                   options={"gtol": 1e-10, "ftol": 1e-14, "maxiter": 1000})
    np.testing.assert_allclose(res.x, ref.x, rtol=1e-5, atol=1e-6)
    assert np.linalg.norm(numpy_vg(res.x)[1]) < 1e-4


def test_trust_krylov_with_compiled_hvp_solves_rosenbrock():
    pytest.importorskip("scipy")
    ex = load("optimize_rosenbrock_trust_krylov")
    res = ex.solve(n=20)
    assert res.success, res.message
    np.testing.assert_allclose(res.x, np.ones(20), atol=1e-6)
    assert res.fun < 1e-10


def test_emcee_vectorized_walkers_find_the_known_mean():
    pytest.importorskip("emcee", reason="emcee is in the examples extra")
    ex = load("emcee_vectorized")
    draws, mean, cov = ex.sample(d=3, walkers=24, steps=3000, seed=2)
    # Monte Carlo error of the mean: sd / sqrt(effective draws); emcee's
    # autocorrelation is tens of steps, so 20x inflation of the naive error is generous
    se = np.sqrt(np.diag(cov) / len(draws)) * 20
    assert np.all(np.abs(draws.mean(axis=0) - mean) < 4 * se)
    np.testing.assert_allclose(np.cov(draws.T), cov, rtol=0.25, atol=0.1)
