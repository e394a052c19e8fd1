"""Peer columns (revtape.bench.peers) agree with analytic gradients.

The peers are optional: each peer's tests skip unless it is installed, so this
file passes (as skips) on a machine with none of them.  Workloads are built
here from the spec, so these tests do not depend on revtape.bench.workloads.
"""

from types import SimpleNamespace

import numpy as np
import pytest

from revtape.bench import peers

Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def eight_schools_analytic(x):
    mu, log_tau, eta = x[0], x[1], x[2:]
    tau = np.exp(log_tau)
    t2 = (tau / 5.0) ** 2
    r = (Y - (mu + tau * eta)) / SIGMA
    value = -0.5 * (mu / 5.0) ** 2 + log_tau - np.log1p(t2) + np.sum(-0.5 * eta**2 - 0.5 * r**2)
    # d/d(mu) of -0.5 r^2 is r/sigma; d/d(log_tau) picks up tau * eta * r/sigma
    # from the likelihood and 1 - 2 t2/(1 + t2) from the prior + Jacobian.
    g = np.empty(10)
    g[0] = -mu / 25.0 + np.sum(r / SIGMA)
    g[1] = 1.0 - 2.0 * t2 / (1.0 + t2) + tau * np.sum(eta * r / SIGMA)
    g[2:] = -eta + tau * r / SIGMA
    return value, g


def rosenbrock_analytic(x):
    a = x[1:] - x[:-1] ** 2
    b = 1.0 - x[:-1]
    value = np.sum(100.0 * a**2 + b**2)
    g = np.zeros_like(x)
    g[:-1] = -400.0 * x[:-1] * a - 2.0 * b
    g[1:] += 200.0 * a
    return value, g


def _wl(name, x0, **data):
    return SimpleNamespace(name=name, x0=x0, data=data, params={"n": len(x0)})


CASES = {
    "eight-schools": (
        _wl("eight-schools", np.random.default_rng(0).normal(size=10), y=Y, sigma=SIGMA),
        eight_schools_analytic,
    ),
    "rosenbrock-loop": (_wl("rosenbrock-loop", np.random.default_rng(1).uniform(-1, 1, 30)), rosenbrock_analytic),
    "rosenbrock-vec": (_wl("rosenbrock-vec", np.random.default_rng(2).uniform(-1, 1, 300)), rosenbrock_analytic),
}

# Module each peer needs; jax-scan is a JAX column variant.
NEEDS = {"jax": "jax", "torch": "torch", "autograd": "autograd.numpy", "casadi": "casadi"}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("peer", peers.PEERS)
def test_column_matches_analytic_gradient(peer, case):
    pytest.importorskip(NEEDS[peer])
    wl, analytic = CASES[case]
    col = peers.build(peer, wl)
    assert col.setup_seconds >= 0.0 and isinstance(col.note, str)
    value, grad = col.vg(wl.x0.copy())
    ref_value, ref_grad = analytic(wl.x0)
    assert isinstance(value, float)
    assert grad.shape == wl.x0.shape
    np.testing.assert_allclose(value, ref_value, rtol=1e-10)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-8, atol=1e-12)
    # A second call at another point must not reuse stale state (buffers, grads).
    x1 = wl.x0 * 0.5
    value, grad = col.vg(x1)
    ref_value, ref_grad = analytic(x1)
    np.testing.assert_allclose(value, ref_value, rtol=1e-10)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-8, atol=1e-12)


def test_jax_scan_chain_matches_unrolled():
    pytest.importorskip("jax")
    L = 50
    wl = SimpleNamespace(name="chain", x0=np.array([0.5]), data={}, params={"L": L})
    y, dy = 0.5, 1.0
    for k in range(L):  # forward-mode by hand: the chain is scalar
        dy *= 1.0 + 0.001 * np.cos(y + 0.1 * k)
        y = y + 0.001 * np.sin(y + 0.1 * k)
    for peer in ("jax", "jax-scan"):
        value, grad = peers.build(peer, wl).vg(wl.x0)
        np.testing.assert_allclose(value, y, rtol=1e-12)
        np.testing.assert_allclose(grad, [dy], rtol=1e-10)


def test_jax_scan_skips_non_chain():
    pytest.importorskip("jax")
    with pytest.raises(peers.Skip):
        peers.build("jax-scan", CASES["eight-schools"][0])


def test_unknown_peer_is_unavailable_and_skips():
    ok, reason = peers.available("no-such-ad-tool")
    assert ok is False and "no-such-ad-tool" in reason
    with pytest.raises(peers.Skip):
        peers.build("no-such-ad-tool", CASES["eight-schools"][0])


def test_uninstalled_peer_skips(monkeypatch):
    # Make one real peer unimportable, whether or not it is installed.
    monkeypatch.setitem(peers._MODULES, "casadi", "revtape_no_such_module_casadi")
    ok, reason = peers.available("casadi")
    assert ok is False and reason
    with pytest.raises(peers.Skip):
        peers.build("casadi", CASES["eight-schools"][0])


def test_available_reports_installed_peers():
    for peer in peers.PEERS:
        ok, reason = peers.available(peer)
        assert isinstance(ok, bool) and isinstance(reason, str) and reason


# The linear-algebra workloads at small sizes, against their hand-written analytic
# value and gradient (checked against finite differences in test_workloads.py).
def _small(name):
    from revtape.bench import workloads as W
    return {"gp": lambda: W.gp(n=12, seed=1), "radon": lambda: W.radon(N=60, J=7, seed=2),
            "mvn": lambda: W.mvn(n=5, m=4, seed=3)}[name]()


@pytest.mark.parametrize("name", ["gp", "radon", "mvn"])
@pytest.mark.parametrize("peer", peers.PEERS)
def test_linear_algebra_workloads_match_analytic_gradient(peer, name):
    pytest.importorskip(NEEDS[peer])
    pytest.importorskip("scipy")      # the workloads' analytic references use scipy.linalg
    wl = _small(name)
    col = peers.build(peer, wl)
    rng = np.random.default_rng(7)
    for x in (wl.x0, wl.x0 + 0.1 * rng.standard_normal(wl.x0.size)):
        value, grad = col.vg(x.copy())
        ref_value, ref_grad = wl.numpy_vg(x.copy())
        assert isinstance(value, float) and grad.shape == x.shape
        np.testing.assert_allclose(value, ref_value, rtol=1e-10)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-8, atol=1e-10 * np.abs(ref_grad).max())


def test_casadi_gp_skips_when_its_scalar_cholesky_would_exceed_the_budget():
    pytest.importorskip("casadi")
    with pytest.raises(peers.Skip, match="Cholesky"):
        peers.build("casadi", _small("gp"), setup_budget=1e-9)


def test_a_build_past_the_setup_budget_is_stopped(monkeypatch):
    import time

    def slow_builder(wl, kind, budget):
        t_end = time.perf_counter() + 30
        while time.perf_counter() < t_end:          # Python lines: the timer stops it
            sum(range(100))
        raise AssertionError("not stopped")

    monkeypatch.setitem(peers._BUILDERS, "jax", slow_builder)
    monkeypatch.setattr(peers, "available", lambda p: (True, "stand-in"))
    wl = SimpleNamespace(name="eight-schools", params={}, data={}, x0=np.zeros(10))
    t0 = time.perf_counter()
    with pytest.raises(peers.Skip, match=r"passed the budget 0.3 s: stopped after 0\.[3-9]"):
        peers.build("jax", wl, setup_budget=0.3)
    assert time.perf_counter() - t0 < 5
    # the timer is off and the handler restored afterwards
    import signal
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is not peers._OverBudget


def test_casadi_student_t_is_projected_before_it_is_built():
    pytest.importorskip("casadi")
    from revtape.bench import workloads
    import time
    t0 = time.perf_counter()
    with pytest.raises(peers.Skip, match="1,000,000 scalar nodes: one-time cost projected"):
        peers.build("casadi", workloads.WORKLOADS["student-t"](), setup_budget=5)
    assert time.perf_counter() - t0 < 3
