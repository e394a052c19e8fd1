"""The scripts in examples/ run as tests, at small sizes, and their answers
are checked against values known independently of revtape."""

import importlib.util
import pathlib
import sys

import numpy as np
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def load(name):
    # the eight-schools scripts import their shared model (examples/eight_schools.py)
    # the way they do when run from examples/: as a top-level module
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
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


# Eight schools (non-centred; examples/eight_schools.py).  Reference posterior
# means and their Monte Carlo standard errors, from one long run independent
# of revtape and of the samplers under test except nutpie: nutpie 0.16.8
# (from_pyfunc) on the hand-written numpy gradient of
# revtape.bench.workloads.eight_schools, 8 chains x 25000 draws after 2000 tuning,
# seed 12345; MCSE = sd / sqrt(ess) with ArviZ's ess (234k for mu, 109k for tau).
ES_REF = {"mu": (4.401, 0.007), "tau": (3.575, 0.010)}


def batch_means_se(draws, batch=50):
    """Monte Carlo standard error of the mean of (chains, draws) by batch
    means: NUTS draws of this model decorrelate within a few steps, so means
    of 50 consecutive draws are close to independent."""
    draws = np.asarray(draws)
    n = draws.shape[1] // batch * batch
    means = draws[:, :n].reshape(draws.shape[0], -1, batch).mean(axis=2).ravel()
    return means.std(ddof=1) / np.sqrt(means.size)


def check_eight_schools(mu, tau):
    for name, d in (("mu", mu), ("tau", tau)):
        ref, ref_se = ES_REF[name]
        se = np.hypot(batch_means_se(d), ref_se)
        assert abs(d.mean() - ref) < 4 * se, (name, d.mean(), ref, se)


def test_eight_schools_compiled_gradient_matches_the_hand_written_one():
    from revtape.bench.workloads import eight_schools
    es = load("eight_schools")
    ctape, numpy_vg = es.compiled_logp(), eight_schools().numpy_vg
    for seed in range(5):
        x = np.random.default_rng(seed).normal(size=es.DIM) * 2
        v, g = ctape.value_and_gradient(x)
        v_ref, g_ref = numpy_vg(x)
        assert v == pytest.approx(v_ref, rel=1e-12)
        np.testing.assert_allclose(g, g_ref, rtol=1e-10, atol=1e-12)


def test_eight_schools_littlemcmc_nuts_matches_the_reference_posterior():
    pytest.importorskip("littlemcmc", reason="littlemcmc is not installed")
    es = load("eight_schools")
    draws = load("eight_schools_littlemcmc").sample(draws=500, tune=500, chains=4, seed=1)
    assert draws.shape == (4, 500, es.DIM)
    check_eight_schools(*es.mu_tau(draws))


def test_eight_schools_mici_matches_the_reference_posterior():
    pytest.importorskip("mici", reason="mici is not installed")
    es = load("eight_schools")
    draws = load("eight_schools_mici").sample(draws=400, tune=300, chains=2, seed=1)
    assert draws.shape == (2, 400, es.DIM)
    check_eight_schools(*es.mu_tau(draws))


def test_eight_schools_nutpie_matches_the_reference_posterior():
    pytest.importorskip("nutpie", reason="nutpie is not installed")
    post = load("eight_schools_nutpie").sample(draws=1000, tune=500, chains=4, seed=1).posterior
    assert post["mu"].shape == (4, 1000) and post["eta"].shape == (4, 1000, 8)
    check_eight_schools(post["mu"].values, post["tau"].values)


def test_eight_schools_arviz_summary_and_trace_plot(tmp_path):
    pytest.importorskip("littlemcmc", reason="littlemcmc is not installed")
    pytest.importorskip("arviz", reason="arviz is not installed")
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    png = tmp_path / "trace.png"
    idata, summary = load("eight_schools_arviz").run(str(png), draws=400, tune=400,
                                                     chains=4, seed=2)
    assert set(idata.posterior.data_vars) == {"mu", "tau", "eta"}
    assert (summary["r_hat"] < 1.05).all(), summary
    assert (summary["ess_bulk"] > 200).all(), summary
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
