"""Benchmark workloads: the hand-written numpy and C references agree with f."""

import importlib
import importlib.util

import numpy as np
import pytest

from revtape.bench import workloads as W

NAMES = sorted(W.ALL)


def _fd_grad(f, x, idx, h=1e-4):
    """Fourth-order central difference of f along coordinates idx."""
    out = np.empty(len(idx))
    for k, i in enumerate(idx):
        hi = h * max(1.0, abs(x[i]))
        xs = []
        for s in (-2, -1, 1, 2):
            xx = x.copy()
            xx[i] += s * hi
            xs.append(float(f(xx)))
        out[k] = (xs[0] - 8.0 * xs[1] + 8.0 * xs[2] - xs[3]) / (12.0 * hi)
    return out


def _ext(name):
    """A compiled extension module; skip only if it is not built."""
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        spec = None
    if spec is None:
        pytest.skip(f"{name} extension not built")
    return importlib.import_module(name)  # a broken build must fail, not skip


def _vm():
    """(ffi, lib) of the benchmark's C references (revtape.bench._ref)."""
    mod = _ext("revtape.bench._ref")
    return mod.ffi, mod.lib


@pytest.fixture(scope="module", params=NAMES)
def wl(request):
    return W.ALL[request.param]()


# ---------------------------------------------------------------- structure


def test_registry():
    assert set(W.ALL) == {"eight-schools", "rosenbrock-loop", "rosenbrock-vec", "logreg", "chain",
                          "radon", "student-t"}
    for name, factory in W.ALL.items():
        w = factory()
        assert w.name == name
        assert isinstance(w.x0, np.ndarray) and w.x0.dtype == np.float64 and w.x0.ndim == 1
        assert w.c_name.startswith("ref_") and w.c_name.endswith("_vg")


def test_one_registry_in_bench_order():
    from revtape.bench import cli, peers
    assert list(W.WORKLOADS) == ["eight-schools", "rosenbrock-loop", "rosenbrock-vec", "logreg",
                                 "chain", "gp", "radon", "mvn", "student-t"]
    assert set(W.EXTRA) == {"gp", "mvn"} and set(W.ALL) | set(W.EXTRA) == set(W.WORKLOADS)
    assert cli.WORKLOADS == list(W.WORKLOADS) + ["hmc", "threads"]
    assert cli.PEER_NAMES is peers.PEERS
    # every workload has a peer implementation, written once for all peers
    assert set(peers._OBJECTIVES) == set(W.WORKLOADS)
    for name, factory in W.EXTRA.items():
        assert factory().c_name is None
        with pytest.raises(ValueError, match="no hand-written C reference"):
            factory().make_c_vg()


def test_old_module_name_is_the_bench_module():
    import revtape.bench.workloads
    import revtape.bench.workloads
    assert revtape.bench.workloads is revtape.bench.workloads


def test_runtime_extension_exports_no_benchmark_reference():
    vm = _ext("revtape._vm")
    _vm()   # the references are built, in their own module
    assert not [n for n in dir(vm.lib) if n.startswith("ref_")]
    with pytest.raises(ValueError, match="revtape.bench._ref"):
        W.eight_schools().make_c_vg(vm.ffi, vm.lib)


@pytest.mark.parametrize("name", NAMES)
def test_c_reference_bound_call_equals_per_call_conversion(name):
    _vm()
    w = W.ALL[name]()
    cref = w.make_c_vg()
    x = w.x0 + 0.25
    v1, g1 = cref(x.copy())
    xb, gb = np.zeros_like(x), np.full(x.size, np.nan)
    run = cref.bind(xb, gb)
    xb[...] = x                     # the bound call reads x where it is, every call
    assert run() == v1
    np.testing.assert_array_equal(gb, g1)
    xb[...] = w.x0
    assert run() == cref(w.x0.copy())[0]


def test_c_reference_refuses_buffers_it_would_overrun():
    _vm()
    w = W.rosenbrock_vec(10)
    cref = w.make_c_vg()
    with pytest.raises(ValueError, match="10 values"):
        cref(np.zeros(9))
    with pytest.raises(ValueError, match="float64"):
        cref.bind(np.zeros(10, dtype=np.float32), np.zeros(10))
    with pytest.raises(ValueError, match="C-contiguous"):
        cref(np.zeros(20)[::2])


def test_defaults_and_shapes():
    assert W.eight_schools().x0.shape == (10,)
    assert W.rosenbrock_loop().x0.shape == (100,)
    assert W.rosenbrock_vec().x0.shape == (10000,)
    lr = W.logreg()
    assert lr.x0.shape == (20,)
    assert lr.data["X"].shape == (1000, 20) and lr.data["X"].flags.c_contiguous
    assert lr.data["X"].dtype == np.float64 and lr.data["y"].dtype == np.float64
    assert set(np.unique(lr.data["y"])) == {0.0, 1.0}
    assert lr.params == {"N": 1000, "D": 20, "seed": 0}
    assert W.chain().x0.shape == (1,) and W.chain().params == {"L": 1000}
    assert np.all(np.abs(W.rosenbrock_vec().x0) <= 1.0)
    np.testing.assert_array_equal(W.eight_schools().x0, np.random.default_rng(0).normal(size=10))


def test_deterministic(wl):
    w2 = W.ALL[wl.name]()
    np.testing.assert_array_equal(wl.x0, w2.x0)
    for k, v in wl.data.items():
        np.testing.assert_array_equal(v, w2.data[k])
    assert float(wl.f(wl.x0)) == float(w2.f(w2.x0))


def test_loop_and_vec_rosenbrock_agree():
    a, b = W.rosenbrock_loop(50), W.rosenbrock_vec(50)
    np.testing.assert_array_equal(a.x0, b.x0)
    assert float(a.f(a.x0)) == pytest.approx(float(b.f(b.x0)), rel=1e-13)
    # the minimum is at x = 1
    assert float(b.f(np.ones(50))) == 0.0


def test_known_values():
    # eight schools at the origin: only the likelihood term is nonzero
    es = W.eight_schools()
    x = np.zeros(10)
    y = np.array([28, 8, -3, 7, -1, 1, 18, 12.0])
    s = np.array([15, 10, 16, 11, 9, 11, 10, 18.0])
    expect = -np.log1p(1 / 25) - 0.5 * np.sum((y / s) ** 2)
    assert float(es.f(x)) == pytest.approx(expect, rel=1e-14)
    # chain with L=0 is the identity
    c0 = W.chain(0)
    v, g = c0.numpy_vg(np.array([0.3]))
    assert v == 0.3 and g[0] == 1.0
    # logreg at beta = 0: -N log 2
    lr = W.logreg(N=50, D=3, seed=1)
    assert float(lr.f(np.zeros(3))) == pytest.approx(-50 * np.log(2.0), rel=1e-14)


# ------------------------------------------------------- numpy vg vs f and FD


def test_numpy_value_matches_f(wl):
    v, g = wl.numpy_vg(wl.x0)
    assert np.isfinite(v)
    assert g.shape == wl.x0.shape and g.dtype == np.float64
    assert v == pytest.approx(float(wl.f(wl.x0)), rel=1e-12, abs=1e-12)


def test_numpy_grad_vs_finite_differences(wl):
    x = wl.x0.copy()
    _, g = wl.numpy_vg(x)
    n = x.size
    if n <= 200:
        idx = np.arange(n)
    else:
        idx = np.unique(np.r_[0, 1, n - 2, n - 1, np.random.default_rng(3).choice(n, 40, replace=False)])
    fd = _fd_grad(wl.f, x, idx)
    scale = max(1.0, np.max(np.abs(g)))
    np.testing.assert_allclose(g[idx], fd, rtol=1e-6, atol=1e-6 * scale)
    assert np.max(np.abs(g)) > 0.0


def test_numpy_grad_directional_derivative(wl):
    x = wl.x0.copy()
    _, g = wl.numpy_vg(x)
    d = np.random.default_rng(7).standard_normal(x.size)
    d /= np.linalg.norm(d)
    phi = lambda t: float(wl.f(x + t[0] * d))  # noqa: E731
    fd = _fd_grad(phi, np.zeros(1), [0])[0]
    exact = float(g @ d)
    assert exact == pytest.approx(fd, rel=1e-6, abs=1e-6 * max(1.0, np.linalg.norm(g)))


@pytest.mark.parametrize("name", NAMES)
def test_numpy_grad_at_other_points(name):
    w = W.ALL[name]()
    rng = np.random.default_rng(11)
    for _ in range(2):
        x = w.x0 + 0.3 * rng.standard_normal(w.x0.size)
        v, g = w.numpy_vg(x)
        assert v == pytest.approx(float(w.f(x)), rel=1e-12, abs=1e-12)
        idx = np.arange(min(x.size, 12))
        fd = _fd_grad(w.f, x, idx)
        np.testing.assert_allclose(g[idx], fd, rtol=1e-6, atol=1e-6 * max(1.0, np.max(np.abs(g))))


def test_logreg_extreme_eta_is_stable():
    # large |eta| must not overflow in the numpy reference
    w = W.logreg(N=30, D=4, seed=2)
    x = np.full(4, 60.0)
    with np.errstate(over="raise", invalid="raise"):
        v, g = w.numpy_vg(x)
    assert np.isfinite(v) and np.all(np.isfinite(g))
    assert v == pytest.approx(float(w.f(x)), rel=1e-12)


# ------------------------------------------------------------- C reference


def _check_c(w, x):
    ffi, lib = _vm()
    c_vg = w.make_c_vg()
    vn, gn = w.numpy_vg(x)
    g = np.full(x.size, np.nan)
    vc, g_out = c_vg(np.ascontiguousarray(x, dtype=np.float64), g)
    assert g_out is g
    assert vc == pytest.approx(vn, rel=1e-12, abs=1e-300)
    np.testing.assert_allclose(g, gn, rtol=1e-10, atol=1e-10 * max(1.0, np.max(np.abs(gn))))


def test_c_reference_matches_numpy(wl):
    _check_c(wl, wl.x0)


@pytest.mark.parametrize("name", NAMES)
def test_c_reference_matches_numpy_other_points(name):
    w = W.ALL[name]()
    rng = np.random.default_rng(5)
    for _ in range(3):
        _check_c(w, w.x0 + 0.5 * rng.standard_normal(w.x0.size))


@pytest.mark.parametrize("n", [1, 2, 3, 17])
def test_c_rosenbrock_small_n(n):
    _check_c(W.rosenbrock_vec(n), W.rosenbrock_vec(n).x0)


def test_c_logreg_extreme_eta():
    w = W.logreg(N=40, D=5, seed=4)
    _check_c(w, np.full(5, 50.0))
    _check_c(w, np.full(5, -50.0))


def test_c_chain_uses_work_buffer_and_lengths():
    ffi, lib = _vm()
    for L in (0, 1, 5, 1000, 5000):
        w = W.chain(L)
        x = np.array([-1.3])
        _check_c(w, x)
    # the forward pass writes the intermediates into work
    L = 10
    work = np.zeros(L)
    g = np.zeros(1)
    x = np.array([0.2])
    lib.ref_chain_vg(ffi.from_buffer("double[]", x), ffi.from_buffer("double[]", g), L,
                     ffi.from_buffer("double[]", work))
    y = 0.2
    for k in range(L):
        assert work[k] == pytest.approx(y, rel=1e-15)
        y = y + 0.001 * np.sin(y + 0.1 * k)


def test_c_eight_schools_raw_call():
    ffi, lib = _vm()
    x = np.zeros(10)
    g = np.zeros(10)
    v = lib.ref_eight_schools_vg(ffi.from_buffer("double[]", x), ffi.from_buffer("double[]", g))
    y = np.array([28, 8, -3, 7, -1, 1, 18, 12.0])
    s = np.array([15, 10, 16, 11, 9, 11, 10, 18.0])
    assert v == pytest.approx(-np.log1p(1 / 25) - 0.5 * np.sum((y / s) ** 2), rel=1e-14)
    assert g[0] == pytest.approx(np.sum(y / s**2), rel=1e-14)
    np.testing.assert_allclose(g[2:], y / s**2, rtol=1e-14)


# ------------------------------------------------------------- radon and mvn


def test_radon_data_shape_and_groups():
    w = W.radon()
    county, y, floor = w.data["county"], w.data["y"], w.data["floor"]
    assert w.params == {"N": 919, "J": 85, "seed": 0}
    assert w.x0.shape == (89,) and y.shape == county.shape == floor.shape == (919,)
    assert set(np.unique(county)) == set(range(85))      # every county has a house
    assert set(np.unique(floor)) == {0.0, 1.0}


def test_radon_compiled_matches_both_references():
    import revtape as rt
    w = W.radon(N=120, J=11, seed=3)
    ct = rt.compile(rt.GradientTape(w.f, w.x0))
    ffi, lib = _vm()
    c_vg = w.make_c_vg()
    rng = np.random.default_rng(2)
    for x in (w.x0, w.x0 + 0.3 * rng.standard_normal(w.x0.size)):
        v, g = ct.value_and_gradient(x)
        vn, gn = w.numpy_vg(x)
        vc, gc = c_vg(x.copy())
        assert v == pytest.approx(vn, rel=1e-13) and vc == pytest.approx(vn, rel=1e-13)
        np.testing.assert_allclose(g, gn, rtol=1e-11, atol=1e-11 * np.abs(gn).max())
        np.testing.assert_allclose(gc, gn, rtol=1e-11, atol=1e-11 * np.abs(gn).max())


def test_mvn_reference_and_compiled():
    import revtape as rt
    w = W.mvn(n=6, m=4, seed=1)
    n = 6
    x = w.x0
    v, g = w.numpy_vg(x)
    # against scipy.stats / a direct formula
    mu, L = x[:n], np.tril(x[n:].reshape(n, n))
    cov = L @ L.T
    Y = w.data["Y"]
    d = Y - mu
    direct = np.sum(-0.5 * np.einsum("ki,ij,kj->k", d, np.linalg.inv(cov), d)
                    - 0.5 * np.linalg.slogdet(2 * np.pi * cov)[1])
    assert v == pytest.approx(direct, rel=1e-12)
    # gradient: zero above the diagonal, finite differences elsewhere
    assert np.all(g[n:].reshape(n, n)[np.triu_indices(n, 1)] == 0.0)
    np.testing.assert_allclose(g, _fd_grad(w.f, x, np.arange(x.size)), rtol=1e-7, atol=1e-8)
    ct = rt.compile(rt.GradientTape(w.f, x))
    for xx in (x, x + 0.05 * np.random.default_rng(0).standard_normal(x.size)):
        vc, gc = ct.value_and_gradient(xx)
        vn, gn = w.numpy_vg(xx)
        assert vc == pytest.approx(vn, rel=1e-12)
        np.testing.assert_allclose(gc, gn, rtol=1e-10, atol=1e-12 * np.abs(gn).max())
    big = W.mvn()
    assert big.x0.shape == (100 + 100 * 100,) and big.data["Y"].shape == (20, 100)


def test_radon_hessian_compiled_vs_reference_vs_fd():
    import revtape as rt
    w = W.radon(N=40, J=5, seed=4)
    tape = rt.GradientTape(w.f, w.x0)
    H = rt.compile(tape).hessian(w.x0)
    np.testing.assert_allclose(H, tape.hessian(w.x0), rtol=1e-11, atol=1e-11 * np.abs(H).max())
    h = 1e-5
    fd = np.stack([(w.numpy_vg(w.x0 + h * e)[1] - w.numpy_vg(w.x0 - h * e)[1]) / (2 * h)
                   for e in np.eye(w.x0.size)], axis=1)
    np.testing.assert_allclose(H, fd, rtol=1e-6, atol=1e-6 * np.abs(H).max())


def test_the_default_tier_is_what_users_get(monkeypatch):
    """The revtape column times rt.compile(tape) as it is (native once hot),
    the revtape-vm column the VM; a native build projected past the set-up
    budget is not started (the VM is timed, and the note says why)."""
    from revtape import config
    from revtape.bench import columns as C
    if C.vm()[2]:
        pytest.skip(C.vm()[2])
    monkeypatch.setenv("REVTAPE_NATIVE", "1")         # the suite's default is the VM
    wl = W.eight_schools()
    x = C.timing_point(wl)
    rec = C.record(wl)
    col = C.build_column("revtape", rec, x, setup_budget=20)
    vm = C.build_column("revtape-vm", rec, x)
    assert rec.ctape.native_state == "off"            # the VM column's tape, pinned
    v, g = col.vg(x)
    v_vm, g_vm = vm.vg(x)
    assert v == v_vm and np.array_equal(g, g_vm)       # native gives the VM's bits
    # hot after its first calls, and native code serving before it is timed
    # -- or, when the build (a cold compiler on a busy machine) outlasts the
    # budget, a VM copy timed and the note saying so: never a switch mid-timing
    if rec.default.native_state == "native":
        assert col.extra["tier"] == "native" and "native (hot" in col.note
    else:
        assert rec.default.native_state == "off" and col.extra["tier"] == "vm"
        assert "still running after the set-up budget 20 s" in col.note
    assert C.build_column("revtape-bind", rec, x).extra["tier"] == col.extra["tier"]
    rec2 = C.record(W.rosenbrock_loop(n=30))            # a program not built yet
    x2 = C.timing_point(rec2.wl)
    col2 = C.build_column("revtape", rec2, x2, setup_budget=0.01)
    assert rec2.default.native_state == "off" and "projected" in col2.note
    assert col2.extra["tier"] == "vm"
    with config.override("REVTAPE_NATIVE", "0"):
        rec3 = C.record(wl)
        col3 = C.build_column("revtape", rec3, x, setup_budget=60)
    assert col3.extra["tier"] == "vm" and "native tier off" in col3.note
