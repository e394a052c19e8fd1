"""The scripts in examples/ run as tests, at small sizes, and their answers
are checked against values known independently of revtape."""

import importlib.util
import sys

import numpy as np
import pytest

from conftest import ROOT

EXAMPLES = ROOT / "examples"


def load(name):
    # the eight-schools scripts import their shared model (examples/eight_schools.py)
    # the way they do when run from examples/: as a top-level module
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    # registered under its name, as an import would: its functions then pickle
    # by reference into spawned worker processes
    sys.modules[name] = mod
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


def test_eight_schools_with_the_exp_bijector_is_the_hand_written_log_tau_model():
    """es.log_density() samples log(tau) through bijectors={"tau": exp}; the
    hand-written es.logp adds the same log-Jacobian itself."""
    es = load("eight_schools")
    ld = es.log_density()
    assert ld.names == [f"eta[{j}]" for j in range(8)] + ["mu", "tau__exp"]
    for seed in range(4):
        x = np.random.default_rng(seed).normal(size=es.DIM)      # [mu, log_tau, eta]
        y = np.concatenate([x[2:], x[:2]])                       # [eta, mu, log_tau]
        v, g = ld.logdensity_and_gradient(y)
        v_ref, g_ref = es.compiled_logp().value_and_gradient(x)
        assert v == pytest.approx(v_ref, rel=1e-13)
        np.testing.assert_allclose(g, np.concatenate([g_ref[2:], g_ref[:2]]), rtol=1e-12,
                                   atol=1e-13)
        p = ld.constrain(y)
        assert p["tau"] == pytest.approx(np.exp(x[1]), rel=1e-15) and p["mu"] == x[0]


def test_pymc_samples_a_revtape_black_box_likelihood():
    pytest.importorskip("pymc", reason="pymc is not installed (pip install -e '.[examples-heavy]')")
    from pytensor.gradient import verify_grad
    from revtape import interop
    ex = load("pymc_blackbox")
    # the gradient Op is the derivative of the value Op (PyTensor's finite differences)
    for seed in range(3):
        x = np.random.default_rng(seed).normal(size=10)
        x[-1] = abs(x[-1]) + 0.5
        verify_grad(interop.pytensor_op(ex.LIKELIHOOD), [x], rng=np.random.default_rng(seed))
    post = ex.sample(draws=500, tune=500, chains=4, seed=3).posterior
    assert post["mu"].shape == (4, 500) and post["eta"].shape == (4, 500, 8)
    check_eight_schools(post["mu"].values, post["tau"].values)


def _posterior_mu_tau(post, chains, draws):
    post = getattr(post, "posterior", post)          # InferenceData with ArviZ, else a dict
    mu, tau, eta = (np.asarray(post[k]) for k in ("mu", "tau", "eta"))
    assert mu.shape == tau.shape == (chains, draws) and eta.shape == (chains, draws, 8)
    return mu, tau


def test_dask_chains_on_a_local_cluster_match_the_reference_posterior():
    pytest.importorskip("dask.distributed",
                        reason="dask[distributed] is not installed (pip install -e '.[examples]')")
    pytest.importorskip("littlemcmc", reason="littlemcmc is not installed")
    ex = load("dask_chains")
    post = ex.main(chains=4, draws=400, tune=400, seed=5)      # a real 2-process LocalCluster
    check_eight_schools(*_posterior_mu_tau(post, 4, 400))


def test_ray_chains_match_the_reference_posterior():
    pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[examples-heavy]')")
    pytest.importorskip("littlemcmc", reason="littlemcmc is not installed")
    ex = load("ray_chains")
    post = ex.main(chains=4, draws=400, tune=400, seed=5)
    mu, tau = _posterior_mu_tau(post, 4, 400)
    check_eight_schools(mu, tau)


def test_walltime_script_times_every_installed_sampler_with_every_gradient():
    pytest.importorskip("littlemcmc", reason="littlemcmc is not installed")
    ex = load("eight_schools_walltime")
    grads = ex.gradients()
    assert {"revtape", "numpy (by hand)"} <= set(grads)
    for seed in range(3):                  # the columns time the same function
        x = np.random.default_rng(seed).normal(size=10)
        v0, g0 = grads["revtape"]()(x)
        for make in grads.values():
            v, g = make()(x)
            assert v == pytest.approx(v0, rel=1e-12)
            np.testing.assert_allclose(g, g0, rtol=1e-10, atol=1e-12)
    res = ex.table(chains=1, draws=30, only=["littlemcmc"])
    assert set(res) == {("littlemcmc", g) for g in grads}
    assert all(sec > 0 and np.isfinite(mu) for sec, mu in res.values())


def test_threads_and_spawned_processes_give_the_sequential_chains_bit_for_bit():
    """The scheduling comparison compares like with like: per-thread compiled
    copies and LogDensities pickled into spawned processes replay the same
    numbers as one process running the chains one after another."""
    pytest.importorskip("littlemcmc", reason="littlemcmc is not installed")
    ex = load("threads_or_processes")
    res = ex.table(chains=2, draws=20, calls=5, workers=2)
    for name in ("eight schools, littlemcmc", "logreg 20000x20, gradients"):
        ref = res[name, "one after another"][1]
        assert len(ref) == 2 and not np.array_equal(ref[0], ref[1])    # two different chains
        for how in ("threads", "processes"):
            sec, chains = res[name, how]
            assert sec > 0
            if how == "threads" and "littlemcmc" in name:
                continue        # littlemcmc draws from numpy's global generator, shared by threads
            for a, b in zip(chains, ref):
                np.testing.assert_array_equal(a, b)
