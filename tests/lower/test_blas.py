"""Matrix products and factorisations through scipy's BLAS/LAPACK
(src/revtape/lower/blas.py, csrc/kernels/blas.h, csrc/instr/linalg/lapack.h)
and through the hand kernels (REVTAPE_BLAS=off): both paths against the
analytic gradients numpy gives, finite differences, the reference replay,
second derivatives, each other, and the native tier; which path a program
takes; the verifier on the new record words; a VM without the routines."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import revtape as rt
from revtape import config
from revtape.lower import blas, compiler
from revtape.runtime.compiled import CompiledTape

scipy = pytest.importorskip("scipy", reason="the BLAS path needs scipy's cython_blas")
import scipy.linalg as sl  # noqa: E402

MODES = ("off", "all", "auto")


def _compile(f, x, mode, **kw):
    with config.override("REVTAPE_BLAS", mode):
        tape = rt.GradientTape(f, x)
        return tape, rt.compile(tape, native=False, **kw)


def _fd(f, x, h=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


def _spd(n, seed=0):
    a = np.random.default_rng(seed).standard_normal((n, n))
    return a @ a.T + n * np.eye(n)


def test_routines_are_held_with_scipy():
    assert set(blas.SLOTS) <= blas.held()


# ------------------------------------------------------------------ matmul

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("m,k,n", [(3, 4, 5), (40, 30, 20), (1, 50, 30), (64, 1, 17)])
def test_matmul_both_products_against_numpys_gradient(mode, m, k, n):
    rng = np.random.default_rng(m * k + n)
    X, W, C = rng.standard_normal((m, k)), rng.standard_normal((k, n)), rng.standard_normal((m, n))

    def f(xw):
        x, w = xw[:m * k].reshape(m, k), xw[m * k:].reshape(k, n)
        return np.sum(C * (x @ w))

    xw = np.concatenate([X.ravel(), W.ravel()])
    tape, ct = _compile(f, xw, mode)
    marked = "BLAS" in ct.disassemble()
    assert marked == (mode == "all" or (mode == "auto" and m * k * n >= blas.MATMUL_MIN_FLOPS))
    v, g = ct.value_and_gradient(xw)
    # numpy's analytic gradient: G W^T and X^T G
    want = np.concatenate([(C @ W.T).ravel(), (X.T @ C).ravel()])
    assert v == pytest.approx(np.sum(C * (X @ W)), rel=1e-12)
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-12)
    vr, gr = tape.value_and_gradient(xw)
    np.testing.assert_allclose(g, gr, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ("off", "all"))
def test_matmul_second_derivatives(mode):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((20, 10))

    def f(w):
        return np.sum(np.tanh(X @ w.reshape(10, 6)) ** 2)

    w = rng.standard_normal(60) * 0.3
    with config.override("REVTAPE_BLAS", mode):
        H = rt.hessian(f, w)
    gfun = lambda z: rt.gradient(f, z)
    Hfd = np.array([(gfun(w + 1e-6 * e) - gfun(w - 1e-6 * e)) / 2e-6 for e in np.eye(60)])
    np.testing.assert_allclose(H, Hfd, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(H, H.T, rtol=1e-10, atol=1e-12)


def test_matmul_nan_and_inf_flow_like_numpy():
    X = np.full((20, 20), 1.0)
    X[3, 4] = np.inf
    X[7, 1] = np.nan
    W = np.random.default_rng(0).standard_normal(400)
    for mode in ("off", "all"):
        _, ct = _compile(lambda w: np.sum(X @ w.reshape(20, 20)), W, mode)
        v, g = ct.value_and_gradient(W)
        assert np.isnan(v)
        with np.errstate(invalid="ignore"):
            want = (X.T @ np.ones((20, 20))).ravel()
        np.testing.assert_array_equal(np.isnan(g), np.isnan(want))


# ------------------------------------------------------------------ linear algebra

N = 24
_rng = np.random.default_rng(7)
_C = _rng.standard_normal((N, N))
_B = _rng.standard_normal((N, 3))
_b = _rng.standard_normal(N)
_G = _rng.standard_normal((N, N)) + N * np.eye(N)


def _sym(a):
    return np.tril(a) + np.tril(a, -1).T


CASES = {
    # name: (f on a matrix, the point, the numpy analytic gradient w.r.t. the
    #        entries the function reads)
    "cholesky": (lambda A: np.sum(_C * np.linalg.cholesky(A)), _spd(N), None),
    "solve": (lambda A: np.sum(_C[:, :3] * np.linalg.solve(A, _B)), _G,
              lambda A: -np.linalg.solve(A.T, _C[:, :3]) @ np.linalg.solve(A, _B).T),
    "solve-vector": (lambda A: _b @ np.linalg.solve(A, _b), _G,
                     lambda A: -np.outer(np.linalg.solve(A.T, _b), np.linalg.solve(A, _b))),
    "inv": (lambda A: np.sum(_C * np.linalg.inv(A)), _G,
            lambda A: -np.linalg.inv(A).T @ _C @ np.linalg.inv(A).T),
    "slogdet": (lambda A: np.linalg.slogdet(A)[1], _G, lambda A: np.linalg.inv(A).T),
    "eigh": (lambda A: np.sum(np.linalg.eigh(A)[0] ** 3) + np.sum(_C * np.linalg.eigh(A)[1] ** 2),
             _spd(N, 1), None),
    "eigvals": (lambda A: np.sum(np.sin(np.linalg.eigh(A)[0])), _spd(N, 2),
                lambda A: (lambda w, V: np.tril(2 * (V * np.cos(w)) @ V.T, -1)
                           + np.diag(np.diag((V * np.cos(w)) @ V.T)))(*np.linalg.eigh(A))),
    "trisolve-lower": (lambda A: np.sum(_C[:, :3] * sl.solve_triangular(A, _B, lower=True)),
                       np.tril(_G), None),
    "trisolve-upper-T": (lambda A: np.sum(_C[:, :3] * sl.solve_triangular(A, _B, trans="T")),
                         np.triu(_G), None),
    "trisolve-unit-vector": (lambda A: _b @ sl.solve_triangular(A, _b, lower=True,
                                                                unit_diagonal=True),
                             np.tril(_G) / N, None),
}
_OP = {"cholesky": "CHOLESKY", "solve": "SOLVE", "solve-vector": "SOLVE", "inv": "INV",
       "slogdet": "SLOGDET", "eigh": "EIGH", "eigvals": "EIGH", "trisolve-lower": "TRISOLVE",
       "trisolve-upper-T": "TRISOLVE", "trisolve-unit-vector": "TRISOLVE"}


def _reads(name, x):
    """The entries the function reads: a mask (lower triangle for cholesky/eigh)."""
    if name in ("cholesky", "eigh", "eigvals", "trisolve-lower", "trisolve-unit-vector"):
        return np.tril(np.ones_like(x), -1 if name == "trisolve-unit-vector" else 0) > 0
    if name == "trisolve-upper-T":
        return np.triu(np.ones_like(x)) > 0
    return np.ones_like(x) > 0


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("mode", MODES)
def test_linalg_gradients_on_both_paths(name, mode):
    f, x, analytic = CASES[name]
    tape, ct = _compile(f, x, mode)
    marked = "BLAS" in ct.disassemble()
    assert marked == (mode == "all" or (mode == "auto" and N >= blas.LINALG_MIN_N[_OP[name]]))
    v, g = ct.value_and_gradient(x)
    vr, gr = tape.value_and_gradient(x)
    assert v == pytest.approx(float(f(x)), rel=1e-11, abs=1e-11)
    assert v == pytest.approx(vr, rel=1e-11, abs=1e-11)
    scale = np.abs(gr).max()
    np.testing.assert_allclose(g, gr, rtol=1e-9, atol=1e-11 * scale)
    reads = _reads(name, x)
    # central differences along the entries read (the rest has zero gradient)
    # (atol: the differences' rounding, eps |f| / h, besides their truncation)
    fd = _fd(lambda z: float(f(z)), x, h=1e-5) if name != "eigh" else None
    if fd is not None:
        np.testing.assert_allclose(g[reads], fd[reads], rtol=1e-5,
                                   atol=1e-7 * scale + 1e-9 * max(1.0, abs(v)))
    assert not np.any(g[~reads])
    if analytic is not None:
        want = analytic(x)
        np.testing.assert_allclose(g[reads], want[reads], rtol=1e-9, atol=1e-11 * scale)


def test_cholesky_level3_reverse_at_large_order():
    """From n = 512 Cholesky's reverse is dtrmm + dsygst on reversed buffers:
    against the hand reverse and Murray's formula in numpy."""
    n = 520
    A = _spd(n, 9)
    C = np.random.default_rng(9).standard_normal((n, n))
    f = lambda a: np.sum(C * np.linalg.cholesky(a))
    got = {mode: _compile(f, A, mode)[1].value_and_gradient(A) for mode in ("off", "auto")}
    L = np.linalg.cholesky(A)
    P = np.tril(L.T @ np.tril(C))
    P[np.diag_indices(n)] *= 0.5
    S = sl.solve_triangular(L, sl.solve_triangular(L, P, trans="T", lower=True).T,
                            trans="T", lower=True).T
    want = np.tril(S + S.T)
    want[np.diag_indices(n)] = np.diag(S)
    for mode, (v, g) in got.items():
        assert v == pytest.approx(np.sum(C * L), rel=1e-11)
        np.testing.assert_allclose(g, want, rtol=1e-8, atol=1e-10 * np.abs(want).max())


@pytest.mark.parametrize("name", ["cholesky", "solve", "inv", "slogdet", "eigvals",
                                  "trisolve-lower"])
def test_linalg_second_derivatives_both_paths(name):
    f, x, _ = CASES[name]
    rng = np.random.default_rng(11)
    d = rng.standard_normal(x.shape) * _reads(name, x)
    hv = {}
    for mode in ("off", "all"):
        with config.override("REVTAPE_BLAS", mode):
            hv[mode] = rt.hvp(f, x, d)
    g = lambda z: rt.gradient(f, z)
    fd = (g(x + 1e-6 * d) - g(x - 1e-6 * d)) / 2e-6
    scale = np.abs(fd).max()
    for mode in hv:
        np.testing.assert_allclose(hv[mode], fd, rtol=1e-5, atol=1e-6 * scale)
    np.testing.assert_allclose(hv["all"], hv["off"], rtol=1e-8, atol=1e-10 * scale)


@pytest.mark.parametrize("mode", ("off", "all"))
def test_failures_give_nan_on_both_paths(mode):
    n = 20
    not_pd = _spd(n) - 100 * n * np.eye(n)
    _, ct = _compile(lambda A: np.sum(np.linalg.cholesky(A)), _spd(n), mode)
    v, g = ct.value_and_gradient(not_pd)
    lower = np.tril(np.ones((n, n))) > 0                 # what cholesky reads
    assert np.isnan(v) and np.isnan(g[lower]).all() and not g[~lower].any()
    bad = _spd(n)
    bad[5, 2] = np.nan
    v, g = ct.value_and_gradient(bad)
    assert np.isnan(v)
    _, ct = _compile(lambda A: _b[:n] @ np.linalg.solve(A, _b[:n]), _G[:n, :n], mode)
    singular = np.ones((n, n))
    assert np.isnan(ct.value_and_gradient(singular)[0])
    _, ct = _compile(lambda A: np.sum(np.linalg.eigh(A)[0]), _spd(n), mode)
    v, g = ct.value_and_gradient(bad)
    assert np.isnan(v) and np.isnan(g[lower]).all()
    # and the compiled tape still replays a good point afterwards
    v, g = ct.value_and_gradient(_spd(n))
    assert v == pytest.approx(np.trace(_spd(n)), rel=1e-12)


def test_eigenvector_signs_follow_the_convention_on_both_paths():
    A = _spd(N, 5)
    outs = []
    for mode in ("off", "all"):
        _, ct = _compile(lambda a: np.sum(_C * np.linalg.eigh(a)[1]), A, mode)
        outs.append(ct.value_and_gradient(A))
    assert outs[0][0] == pytest.approx(outs[1][0], rel=1e-9)
    np.testing.assert_allclose(outs[0][1], outs[1][1], rtol=1e-7, atol=1e-9)


# ------------------------------------------------------------------ the tiers

def test_native_tier_gives_the_vms_bits_on_blas_programs():
    from revtape.runtime import native
    if native._compiler() is None:
        pytest.skip("no C compiler for the native tier")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((64, 30))

    def f(w):
        W1, W2 = w[:30 * 20].reshape(30, 20), w[30 * 20:].reshape(20, 20)
        h = np.tanh(X @ W1) @ W2
        S = h.T @ h + 20 * np.eye(20)
        L = np.linalg.cholesky(S)
        return np.sum(np.log(np.diagonal(L))) + np.sum(np.linalg.eigh(S)[0] ** 0.5)

    w = rng.standard_normal(30 * 20 + 400) * 0.2
    with config.override("REVTAPE_BLAS", "auto"):
        tape = rt.GradientTape(f, w)
        vm = rt.compile(tape, native=False)
        nt = rt.compile(tape, native=True)
    assert vm.disassemble().count("BLAS") >= 4
    for z in (w, w * 1.1):
        v1, g1 = vm.value_and_gradient(z)
        v2, g2 = nt.value_and_gradient(z)
        assert v1 == v2
        np.testing.assert_array_equal(g1, g2)


def test_batches_threads_and_pickles_give_the_same_bits_on_blas_programs():
    import pickle
    rng = np.random.default_rng(4)
    X = rng.standard_normal((40, 20))

    def f(w):
        S = (X @ w.reshape(20, 20)).T @ X + 50 * np.eye(20)
        return np.sum(np.linalg.solve(S + S.T, np.ones(20))) + np.sum(np.log(np.diagonal(
            np.linalg.cholesky(S @ S.T))))

    w = rng.standard_normal(400) * 0.1
    _, ct = _compile(f, w, "all")
    assert ct.disassemble().count("BLAS") >= 4
    W = np.stack([w, 1.1 * w, 0.9 * w, -w])
    one = [ct.value_and_gradient(z) for z in W]
    for threads in (1, 2):
        vals, grads = ct.batch_value_and_gradient(W, threads=threads)
        for k, (v, g) in enumerate(one):
            assert vals[k] == v
            np.testing.assert_array_equal(grads[k], g)
    back = pickle.loads(pickle.dumps(ct))
    assert back.disassemble() == ct.disassemble()
    v, g = back.value_and_gradient(w)
    assert v == one[0][0]
    np.testing.assert_array_equal(g, one[0][1])


# ------------------------------------------------------------------ verifier, settings, fallback

def _program_with_ints(ct, at, values):
    state = ct.program.to_state()
    ints = state["ints"].copy()
    ints[at:at + len(values)] = values
    state["ints"] = ints
    return CompiledTape(ct.tape, _program=compiler.Program.from_state(state))


def _record(ct, opname):
    lines = ct.disassemble().splitlines()[1:]
    row = [i for i, line in enumerate(lines) if opname in line][0]
    return int(ct.program.code[row, 5])


def test_verifier_checks_the_blas_words():
    W = np.ones(400)
    _, ct = _compile(lambda w: np.sum(np.ones((30, 20)) @ w.reshape(20, 20)), W, "all")
    c = _record(ct, "MATMUL")
    with pytest.raises(rt.VerificationError, match="BLAS word"):
        _program_with_ints(ct, c + 3, [2])
    A = np.eye(4) * 2
    _, ct = _compile(lambda a: np.sum(np.cumsum(a, axis=1) ** 2), A, "all")
    c = _record(ct, "CUMSUM")
    with pytest.raises(rt.VerificationError, match="bad flags"):
        _program_with_ints(ct, c + 2, [8])
    _, ct = _compile(lambda a: np.sum(np.linalg.cholesky(a)), A, "off")
    c = _record(ct, "CHOLESKY")
    with pytest.raises(rt.VerificationError, match="bad flags"):
        _program_with_ints(ct, c + 2, [16])


def test_setting_is_checked():
    with config.override("REVTAPE_BLAS", "fast"):
        with pytest.raises(rt.ConfigError, match="REVTAPE_BLAS"):
            rt.compile(rt.GradientTape(lambda w: np.sum(np.ones((30, 20)) @ w.reshape(20, 20)),
                                       np.ones(400)))


def test_without_scipy_the_hand_kernels_run_even_for_marked_words(tmp_path):
    """A process whose scipy cannot be imported marks nothing, and a program
    whose words ask for BLAS (a crafted pickle) runs the hand kernels: the
    VM's slots are empty."""
    script = textwrap.dedent("""
        import sys
        sys.modules["scipy"] = None                 # import scipy fails
        import numpy as np, revtape as rt
        from revtape.lower import blas, compiler
        from revtape.runtime.compiled import CompiledTape
        assert blas.held() == frozenset()
        X = np.random.default_rng(0).standard_normal((40, 30))
        f = lambda w: np.sum(np.tanh(X @ w.reshape(30, 20)))
        w = np.random.default_rng(1).standard_normal(600)
        ct = rt.compile(rt.GradientTape(f, w), native=False)
        assert "BLAS" not in ct.disassemble()
        state = ct.program.to_state()
        c = int(ct.program.code[0, 5])
        ints = state["ints"].copy(); ints[c + 3] = 1; state["ints"] = ints
        crafted = CompiledTape(ct.tape, _program=compiler.Program.from_state(state))
        assert "BLAS" in crafted.disassemble()
        v1, g1 = ct.value_and_gradient(w)
        v2, g2 = crafted.value_and_gradient(w)
        assert v1 == v2 and (g1 == g2).all()
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_a_pickled_blas_program_loads_the_routines_before_it_runs(tmp_path):
    """A process that unpickles a program marked for BLAS, before it compiled
    anything of its own, has the routines in the VM before the first replay
    (so no later compile changes that program's path between two replays)."""
    import pickle
    rng = np.random.default_rng(2)
    X = rng.standard_normal((40, 30))
    w = rng.standard_normal(600)
    _, ct = _compile(lambda z: np.sum(np.tanh(X @ z.reshape(30, 20))), w, "auto")
    assert "BLAS" in ct.disassemble()
    path = tmp_path / "ct.pkl"
    path.write_bytes(pickle.dumps(ct))
    v, g = ct.value_and_gradient(w)
    np.save(tmp_path / "w.npy", w)
    np.save(tmp_path / "g.npy", g)
    script = textwrap.dedent(f"""
        import pickle, numpy as np
        from revtape.lower import blas
        ct = pickle.loads(open({str(path)!r}, "rb").read())
        assert blas._held is not None and "dgemm" in blas.held()
        v, g = ct.value_and_gradient(np.load({str(tmp_path / "w.npy")!r}))
        assert v == {v!r}, v
        assert (g == np.load({str(tmp_path / "g.npy")!r})).all()
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
