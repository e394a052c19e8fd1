"""Linear algebra on tracked values: cholesky, solve_triangular,
slogdet/det, solve, inv, cho_factor/cho_solve, trace, diag/diagonal,
tril/triu.  Per op: value against numpy/scipy, gradient against central
finite differences, reference replay against the compiled C replay (1e-12),
Hessians (reference reverse-over-reverse against compiled forward-over-
reverse, and against finite differences of the gradient), edge cases."""

import numpy as np
import pytest

try:  # scipy is optional: the tests of scipy.linalg's names skip without it
    import scipy.linalg as sla
except ImportError:  # the scipy-free CI job
    sla = None
needs_scipy = pytest.mark.skipif(sla is None, reason="scipy.linalg's names need scipy")

import revtape as rt
from conftest import REL, check_all, check_grad, opcodes


def spd(x, n):
    """An SPD matrix from n*n free parameters: X X^T + n I."""
    X = np.reshape(x, (n, n))
    return X @ X.T + n * np.eye(n)


def lower_tri(x, n):
    """A well-conditioned lower-triangular matrix from n*n parameters."""
    X = np.reshape(x, (n, n))
    return np.tril(X, -1) * 0.3 + np.diag(2.0 + np.exp(np.diagonal(X) * 0.2)) + np.triu(X, 1)


# ---------------------------------------------------------------------------- cholesky

@pytest.mark.parametrize("n", [1, 2, 5, 17])
def test_cholesky(n, rng):
    W = rng.standard_normal((n, n))

    def f(x):
        L = np.linalg.cholesky(spd(x, n))
        return np.sum(np.log(np.diagonal(L))) + np.sum(W * L)

    x = rng.standard_normal(n * n) * 0.5
    L = np.linalg.cholesky(spd(x, n))
    np.testing.assert_allclose(rt.value(np.linalg.cholesky(rt.Tape().track(spd(x, n)))), L)
    tape, ct = check_all(f, x, hessian=n <= 5)
    assert "CHOLESKY" in opcodes(ct)


@needs_scipy
def test_cholesky_gradient_is_exact_on_the_lower_triangle_and_matches_murray(rng):
    n = 6
    A = spd(rng.standard_normal(n * n), n)
    G = rng.standard_normal((n, n))
    f = lambda A: np.sum(G * np.linalg.cholesky(A))
    g_ref = rt.gradient(f, A)
    g_c = rt.compile(rt.GradientTape(f, A)).gradient(A)
    np.testing.assert_allclose(g_c, g_ref, rtol=1e-12, atol=1e-13)
    assert np.all(g_c[np.triu_indices(n, 1)] == 0.0)     # numpy never reads them
    check_grad(f, A)                                        # any direction, not only symmetric
    # Murray (2016), written out with numpy/scipy
    L = np.linalg.cholesky(A)
    phi = np.tril(L.T @ np.tril(G))
    phi[np.diag_indices(n)] *= 0.5
    S = sla.solve_triangular(L, sla.solve_triangular(L, phi, lower=True, trans=1).T,
                             lower=True, trans=1)
    np.testing.assert_allclose(g_c, np.tril(S + S.T) - np.diag(np.diag(S)), rtol=1e-10,
                               atol=1e-12)


@needs_scipy
def test_cholesky_reads_the_lower_triangle_and_upper_option(rng):
    A = spd(rng.standard_normal(9), 3)
    B = A.copy()
    B[0, 2] = 100.0                         # upper triangle is not read (numpy too)
    t = rt.Tape()
    a = t.track(B)
    np.testing.assert_allclose(rt.value(np.linalg.cholesky(a)), np.linalg.cholesky(B), **REL)
    np.testing.assert_allclose(rt.value(sla.cholesky(a, lower=True)),
                               sla.cholesky(B, lower=True), **REL)
    B = A.copy()
    B[2, 0] = 100.0                         # upper=True reads the upper triangle only
    a = rt.Tape().track(B)
    np.testing.assert_allclose(rt.value(np.linalg.cholesky(a, upper=True)),
                               np.linalg.cholesky(B, upper=True), **REL)
    np.testing.assert_allclose(rt.value(sla.cholesky(a)), sla.cholesky(B), **REL)


def test_cholesky_not_positive_definite_is_nan_in_both_replays(rng):
    n = 4
    f = lambda A: np.sum(np.log(np.diagonal(np.linalg.cholesky(A))))
    A = spd(rng.standard_normal(n * n), n)
    tape = rt.GradientTape(f, A)
    ct = rt.compile(tape)
    bad = A.copy()
    bad[2, 2] = -5.0
    for replay in (tape, ct):
        v, g = replay.value_and_gradient(bad)
        assert np.isnan(v) and np.isnan(g[np.tril_indices(n)]).all()
        assert np.all(g[np.triu_indices(n, 1)] == 0.0)      # never read
    # the factor itself is all nan, as recorded directly
    t = rt.Tape()
    L = np.linalg.cholesky(t.track(bad))
    assert np.isnan(rt.value(L)).all()
    jt = rt.JacobianTape(np.linalg.cholesky, A)
    assert np.isnan(rt.compile(jt).forward(bad)).all()
    assert np.isnan(jt.forward(bad)).all()
    # and the replay recovers at a good point
    np.testing.assert_allclose(ct.value_and_gradient(A)[0], f(A), **REL)


def test_cholesky_refuses_bad_shapes(rng):
    t = rt.Tape()
    with pytest.raises(rt.linalg.LinAlgShapeError, match="square"):
        np.linalg.cholesky(t.track(np.ones((2, 3))))
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.cholesky(t.track(np.ones(3)))
    with pytest.raises(rt.linalg.LinAlgShapeError, match="square"):
        np.linalg.cholesky(t.track(np.ones((2, 3, 4))))
    # a batch of square matrices is factored matrix by matrix (test_linalg_more below)
    B = np.eye(3) + 0.1 * rng.normal(size=(2, 3, 3))
    B = B @ np.swapaxes(B, -1, -2)
    np.testing.assert_allclose(rt.value(np.linalg.cholesky(t.track(B))), np.linalg.cholesky(B),
                               rtol=1e-13, atol=1e-15)


# ---------------------------------------------------------------------------- solve_triangular

@needs_scipy
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("trans", ["N", 1])
@pytest.mark.parametrize("rhs", [(), (2,)])
def test_solve_triangular(lower, trans, rhs, rng):
    n = 5
    W = rng.standard_normal((n,) + rhs)

    def f(x):
        L = lower_tri(x[:n * n], n)
        L = L if lower else L.T
        b = np.reshape(x[n * n:], (n,) + rhs)
        return np.sum(W * sla.solve_triangular(L, b, lower=lower, trans=trans))

    x = rng.standard_normal(n * n + n * int(np.prod(rhs, dtype=int))) * 0.5
    tape, ct = check_all(f, x)
    assert "TRISOLVE" in opcodes(ct)


@needs_scipy
def test_solve_triangular_reads_one_triangle_and_unit_diagonal(rng):
    n = 4
    A = rng.standard_normal((n, n)) + 4 * np.eye(n)
    b = rng.standard_normal(n)
    for lower in (True, False):
        for unit in (True, False):
            for trans in (0, 1):
                exp = sla.solve_triangular(A, b, lower=lower, trans=trans, unit_diagonal=unit)
                t = rt.Tape()
                got = sla.solve_triangular(t.track(A), b, lower=lower, trans=trans,
                                           unit_diagonal=unit)
                np.testing.assert_allclose(rt.value(got), exp, **REL)
                f = lambda A, b: np.sum(np.sin(sla.solve_triangular(
                    A, b, lower=lower, trans=trans, unit_diagonal=unit)))
                tape = rt.GradientTape(f, (A, b))
                gr = tape.gradient((A, b))
                gc = rt.compile(tape).gradient((A, b))
                for u, w in zip(gr, gc):
                    np.testing.assert_allclose(w, u, rtol=1e-12, atol=1e-13)
                # entries outside the triangle (and the diagonal if unit) get zero gradient
                keep = np.tril(np.ones((n, n)), -1 if unit else 0) if lower else \
                    np.triu(np.ones((n, n)), 1 if unit else 0)
                assert np.all(gc[0][keep == 0] == 0.0)
                check_grad(f, (A, b))


@needs_scipy
def test_solve_triangular_zero_diagonal_is_nan(rng):
    A = np.tril(rng.standard_normal((3, 3))) + 3 * np.eye(3)
    b = rng.standard_normal(3)
    f = lambda A: np.sum(sla.solve_triangular(A, b, lower=True))
    tape = rt.GradientTape(f, A)
    bad = A.copy()
    bad[1, 1] = 0.0
    for replay in (tape, rt.compile(tape)):
        v, g = replay.value_and_gradient(bad)
        assert np.isnan(v)


@needs_scipy
def test_solve_triangular_refuses_bad_input(rng):
    t = rt.Tape()
    A = t.track(np.eye(3))
    with pytest.raises(rt.linalg.LinAlgShapeError):
        sla.solve_triangular(A, np.ones(4))
    with pytest.raises(ValueError, match="trans"):
        sla.solve_triangular(A, np.ones(3), trans="X")


@needs_scipy
def test_revtape_linalg_names_work_without_the_scipy_wrapper(rng):
    A = np.tril(rng.standard_normal((3, 3))) + 3 * np.eye(3)
    b = rng.standard_normal(3)
    g1 = rt.gradient(lambda A: np.sum(rt.linalg.solve_triangular(A, b, lower=True)), A)
    g2 = rt.gradient(lambda A: np.sum(sla.solve_triangular(A, b, lower=True)), A)
    np.testing.assert_array_equal(g1, g2)


# ---------------------------------------------------------------------------- slogdet / det

@pytest.mark.parametrize("n", [1, 3, 8])
def test_slogdet_and_det(n, rng):
    def f(x):
        A = np.reshape(x, (n, n)) + 2 * np.eye(n)
        sign, logdet = np.linalg.slogdet(A)
        return logdet * 1.5 + sign * 0.25 + np.linalg.det(A) * 0.1

    x = rng.standard_normal(n * n) * 0.4
    check_all(f, x)
    t = rt.Tape()
    A = rng.standard_normal((n, n))
    r = np.linalg.slogdet(t.track(A))
    e = np.linalg.slogdet(A)
    assert type(r) is type(e)
    np.testing.assert_allclose([rt.value(r.sign), rt.value(r.logabsdet)], [e.sign, e.logabsdet],
                               **REL)


def test_slogdet_negative_determinant_and_singular(rng):
    A = np.diag([1.0, -2.0, 3.0])
    f = lambda A: np.linalg.slogdet(A)[0] * 10 + np.linalg.slogdet(A)[1]
    tape = rt.GradientTape(f, A)
    ct = rt.compile(tape)
    for replay in (tape, ct):
        v, g = replay.value_and_gradient(A)
        np.testing.assert_allclose(v, -10 + np.log(6.0), **REL)
        np.testing.assert_allclose(g, np.linalg.inv(A).T, **REL)
        v = replay.forward(np.zeros((3, 3)))
        assert v == -np.inf


# ---------------------------------------------------------------------------- solve / inv

@pytest.mark.parametrize("rhs", [(), (2,)])
def test_solve(rhs, rng):
    n = 5
    W = rng.standard_normal((n,) + rhs)

    def f(x):
        A = np.reshape(x[:n * n], (n, n)) + 3 * np.eye(n)
        b = np.reshape(x[n * n:], (n,) + rhs)
        return np.sum(W * np.linalg.solve(A, b))

    x = rng.standard_normal(n * n + n * int(np.prod(rhs, dtype=int))) * 0.5
    tape, ct = check_all(f, x)
    assert "SOLVE" in opcodes(ct)


@pytest.mark.parametrize("n", [1, 4])
def test_inv(n, rng):
    W = rng.standard_normal((n, n))

    def f(x):
        return np.sum(W * np.linalg.inv(np.reshape(x, (n, n)) + 3 * np.eye(n)))

    check_all(f, rng.standard_normal(n * n) * 0.5)


def test_singular_solve_and_inv_are_nan(rng):
    A = np.eye(3) * 2
    b = np.ones(3)
    for f in (lambda A: np.sum(np.linalg.solve(A, b)), lambda A: np.sum(np.linalg.inv(A))):
        tape = rt.GradientTape(f, A)
        for replay in (tape, rt.compile(tape)):
            v, g = replay.value_and_gradient(np.zeros((3, 3)))
            assert np.isnan(v) and np.isnan(g).all()
            np.testing.assert_allclose(replay.forward(A), f(A), **REL)


# ---------------------------------------------------------------------------- cho_factor / cho_solve

@needs_scipy
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("rhs", [(), (2,)])
def test_cho_factor_cho_solve(lower, rhs, rng):
    n = 4
    W = rng.standard_normal((n,) + rhs)

    def f(x):
        A = spd(x[:n * n], n)
        b = np.reshape(x[n * n:], (n,) + rhs)
        return np.sum(W * sla.cho_solve(sla.cho_factor(A, lower=lower), b))

    x = rng.standard_normal(n * n + n * int(np.prod(rhs, dtype=int))) * 0.5
    check_all(f, x)
    # a tracked factor with a plain right-hand side, and a plain factor with a tracked one
    A = spd(x[:n * n], n)
    b = rng.standard_normal((n,) + rhs)
    t = rt.Tape()
    c, low = sla.cho_factor(t.track(A), lower=lower)
    assert low is lower
    np.testing.assert_allclose(rt.value(sla.cho_solve((c, low), b)), np.linalg.solve(A, b), **REL)
    t = rt.Tape()
    np.testing.assert_allclose(rt.value(sla.cho_solve(sla.cho_factor(A, lower=lower),
                                                      t.track(b))),
                               np.linalg.solve(A, b), **REL)


# ---------------------------------------------------------------------------- structure

def test_trace_diag_diagonal_tril_triu(rng):
    n = 4
    W = rng.standard_normal((n + 1, n + 1))

    def f(x):
        A = np.reshape(x, (n, n))
        return (np.trace(A) + np.trace(A, offset=1) * 2 + np.sum(np.diag(A, -1) ** 2)
                + np.sum(W * np.diag(np.diagonal(A) ** 3, k=1)) + np.sum(W[:n, :n] * np.tril(A))
                + np.sum(np.triu(A, 1) ** 2) + np.sum(np.tril(A, -1) * W[1:, 1:])
                + np.sum(np.sin(np.diag(np.diag(A), -2))))

    x = rng.standard_normal(n * n)
    tape, ct = check_all(f, x)
    assert not any(op in ("CHOLESKY", "SOLVE") for op in opcodes(ct))
    t = rt.Tape()
    A = rng.standard_normal((n, n))
    a = t.track(A)
    for got, exp in [(np.trace(a), np.trace(A)), (np.diag(a, 2), np.diag(A, 2)),
                     (np.diag(np.diag(a)), np.diag(np.diag(A))), (np.tril(a, 1), np.tril(A, 1)),
                     (np.triu(a, -1), np.triu(A, -1)), (np.diagonal(a, -1), np.diagonal(A, -1))]:
        np.testing.assert_array_equal(rt.value(got), exp)


def test_tril_triu_keep_inf_out_of_the_zeroed_triangle():
    A = np.array([[1.0, np.inf], [2.0, 3.0]])
    t = rt.Tape()
    np.testing.assert_array_equal(rt.value(np.tril(t.track(A))), np.tril(A))


# ---------------------------------------------------------------------------- a model

@needs_scipy
def test_mvn_logpdf_through_cholesky_matches_scipy(rng):
    from scipy.stats import multivariate_normal
    n = 4
    y = rng.standard_normal(n)

    def logp(x):
        mu, X = x[:n], np.reshape(x[n:], (n, n))
        S = X @ X.T + np.eye(n)
        L = np.linalg.cholesky(S)
        z = sla.solve_triangular(L, y - mu, lower=True)
        return -0.5 * z @ z - np.sum(np.log(np.diag(L))) - 0.5 * n * np.log(2 * np.pi)

    x = rng.standard_normal(n + n * n) * 0.5
    X = np.reshape(x[n:], (n, n))
    np.testing.assert_allclose(logp(x), multivariate_normal(x[:n], X @ X.T + np.eye(n)).logpdf(y),
                               rtol=1e-12)
    check_all(logp, x)


# ---------------------------------------------------------------------------- eigh

@pytest.mark.parametrize("n", [1, 2, 5, 12])
def test_eigh(n, rng):
    u = rng.standard_normal(n)
    W = rng.standard_normal((n, n))
    b = rng.standard_normal(n)

    def f(x):
        X = np.reshape(x, (n, n))
        w, V = np.linalg.eigh(X + X.T)
        # sign-invariant in the eigenvectors, so plain numpy evaluates it too
        return np.sum(u * w) + np.sum(W * V * V) + np.sum((b @ V) ** 2 * u)

    tape, ct = check_all(f, rng.standard_normal(n * n), hessian=n <= 5)
    assert "EIGH" in opcodes(ct)


def test_eigh_values_vectors_and_sign_convention(rng):
    from revtape.core import ops
    n = 6
    X = rng.standard_normal((n, n))
    A = X + X.T
    B = A.copy()
    B[0, 3] = 50.0                          # the upper triangle is not read (UPLO='L')
    t = rt.Tape()
    w, V = np.linalg.eigh(t.track(B))
    we, Ve = np.linalg.eigh(A)
    np.testing.assert_allclose(rt.value(w), we, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(rt.value(V), ops.eigh_signs(Ve), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rt.value(np.linalg.eigvalsh(t.track(A))), we, rtol=1e-12,
                               atol=1e-13)
    wu, Vu = np.linalg.eigh(t.track(A.T.copy()), UPLO="U")
    np.testing.assert_allclose(rt.value(wu), we, rtol=1e-12, atol=1e-13)
    # a function of the raw eigenvectors: reference and compiled replays agree
    Wt = rng.standard_normal((n, n))
    f = lambda A: np.sum(Wt * np.linalg.eigh(A)[1])
    tape = rt.GradientTape(f, A)
    ct = rt.compile(tape)
    np.testing.assert_allclose(ct.forward(A), tape.forward(A), rtol=1e-11)
    g = ct.gradient(A)
    np.testing.assert_allclose(g, tape.gradient(A), rtol=1e-10, atol=1e-11)
    D = rng.standard_normal((n, n))
    D = D + D.T
    h = 1e-6
    fs = lambda A: np.sum(Wt * ops.eigh_signs(np.linalg.eigh(A)[1]))
    np.testing.assert_allclose(np.sum(g * D), (fs(A + h * D) - fs(A - h * D)) / (2 * h),
                               rtol=1e-6)


def test_eigh_gradient_is_exact_on_the_lower_triangle(rng):
    n = 4
    X = rng.standard_normal((n, n))
    A = X + X.T
    u = rng.standard_normal(n)
    f = lambda A: np.sum(u * np.linalg.eigh(A)[0]) + np.sum(np.linalg.eigh(A)[1][0] ** 2)
    g = check_grad(f, A)
    assert np.all(g[np.triu_indices(n, 1)] == 0.0)
    gu = check_grad(lambda A: np.sum(u * np.linalg.eigh(A, UPLO="U")[0]), A)
    assert np.all(gu[np.tril_indices(n, -1)] == 0.0)


def test_eigh_gradient_of_eigenvalues_at_a_degenerate_point():
    f = lambda A: np.sum(np.linalg.eigh(A)[0] ** 2)    # = sum(A**2) for symmetric A
    A = np.eye(3) * 2.0
    tape = rt.GradientTape(f, A)
    for replay in (tape, rt.compile(tape)):
        np.testing.assert_allclose(replay.gradient(A), 2 * A, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------- verifier

def _tampered(ct, **ints_at):
    from revtape.lower import compiler
    from revtape.runtime.compiled import CompiledTape
    state = ct.program.to_state()
    ints = state["ints"].copy()
    for k, v in ints_at.items():
        ints[int(k[1:])] = v
    state["ints"] = ints
    return lambda: CompiledTape(ct.tape, _program=compiler.Program.from_state(state))


@pytest.mark.parametrize("field,value,message", [
    (0, 7, "must equal"),             # N no longer matches M
    (0, -1, "negative shape"),
    (2, 3, "flags"),                  # flags on a cholesky
    (3, 0, "scratch"),                # scratch over the inputs
    (3, 10 ** 7, "scratch"),          # scratch outside the arena
])
def test_verifier_checks_linalg_records(field, value, message, rng):
    A = spd(rng.standard_normal(9), 3)
    ct = rt.compile(rt.GradientTape(lambda A: np.sum(np.linalg.cholesky(A)), A))
    code = ct.program.code
    row = [i for i in range(code.shape[0]) if "CHOLESKY" in ct.disassemble().splitlines()[i + 1]][0]
    c = int(code[row, 5])
    make = _tampered(ct, **{f"i{c + field}": value})
    with pytest.raises(rt.VerificationError, match=message):
        make()
    # the scratch may not overlap the instruction's own output
    out = int(code[row, 2])
    with pytest.raises(rt.VerificationError, match="scratch"):
        _tampered(ct, **{f"i{c + 3}": out})()


def test_array_methods_dispatch(rng):
    x = rng.standard_normal((3, 3))
    t = rt.Tape()
    tx = t.track(x)
    np.testing.assert_array_equal(rt.value(tx.cumsum(axis=0)), x.cumsum(axis=0))
    np.testing.assert_array_equal(rt.value(tx.cumprod()), x.cumprod())
    assert tx.argmax() == x.argmax() and tx.argmin(axis=0).tolist() == x.argmin(axis=0).tolist()
    np.testing.assert_array_equal(tx.argsort(axis=1), x.argsort(axis=1))
    np.testing.assert_array_equal(rt.value(tx.diagonal(1)), x.diagonal(1))
    assert rt.value(tx.trace()) == x.trace()


@pytest.mark.parametrize("kw", [{}, {"assume_a": "gen", "transposed": True},
                                {"assume_a": "sym"}, {"assume_a": "sym", "lower": True},
                                {"assume_a": "pos"}, {"assume_a": "pos", "lower": True},
                                {"assume_a": "lower triangular"}])
@needs_scipy
def test_scipy_solve_inv_det(kw, rng):
    n = 4
    A = spd(rng.standard_normal(n * n), n)
    A[0, 3] += 0.5                          # not symmetric: each kind reads its part
    b = rng.standard_normal(n)
    exp = sla.solve(A, b, **kw)
    t = rt.Tape()
    np.testing.assert_allclose(rt.value(sla.solve(t.track(A), b, **kw)), exp, rtol=1e-11)
    f = lambda A: np.sum(np.sin(sla.solve(A, b, **kw)))
    check_grad(f, A)
    tape = rt.GradientTape(f, A)
    np.testing.assert_allclose(rt.compile(tape).gradient(A), tape.gradient(A), rtol=1e-11,
                               atol=1e-13)
    np.testing.assert_allclose(rt.value(sla.inv(t.track(A))), sla.inv(A), rtol=1e-11)
    np.testing.assert_allclose(rt.value(sla.det(t.track(A))), sla.det(A), rtol=1e-11)


def test_cholesky_of_overflowing_matrices_is_nan_in_both_replays():
    # exp overflows to inf inside the function: on the diagonal, off it
    for where in ((0, 0), (1, 0)):
        def f(x):
            E = np.zeros((2, 2))
            E[where] = 1.0
            A = np.eye(2) * 3.0 + np.exp(x[0]) * (E + E.T) / (1.0 + (where[0] == where[1]))
            return np.sum(np.linalg.cholesky(A))
        tape = rt.GradientTape(f, np.array([0.0]))
        for replay in (tape, rt.compile(tape)):
            assert np.isnan(replay.forward(np.array([800.0])))
            assert np.isfinite(replay.forward(np.array([0.0])))


@needs_scipy
def test_empty_matrices_replay():
    x = np.ones(2)

    def f(x):
        E = x[1] * np.ones((0, 0))
        return (x[0] + np.sum(np.linalg.cholesky(E)) + np.linalg.slogdet(E)[1]
                + np.sum(np.linalg.eigh(E)[0]) + np.sum(np.linalg.solve(E, np.ones(0)))
                + np.sum(np.linalg.inv(E)) + np.sum(sla.solve_triangular(E, np.ones(0))))

    tape = rt.GradientTape(f, x)
    for replay in (tape, rt.compile(tape)):
        v, g = replay.value_and_gradient(x)
        assert v == 1.0 and g.tolist() == [1.0, 0.0]


# ---------------------------------------------------------------------------- Jacobians
# Every kernel's three sweeps against each other: the reference replay's
# Jacobian (numpy reverse rules), the compiled reverse sweeps (rt_jacobian)
# and the compiled tangent sweeps (jvp, one column at a time).

def _sym_in(n):
    return lambda x: np.reshape(x, (n, n)) + np.reshape(x, (n, n)).T


JACOBIAN_CASES = {
    "cholesky": (9, lambda x: np.linalg.cholesky(_sym_in(3)(x) + 6 * np.eye(3))),
    "solve": (12, lambda x: np.linalg.solve(np.reshape(x[:9], (3, 3)) + 4 * np.eye(3), x[9:])),
    "inv": (9, lambda x: np.linalg.inv(np.reshape(x, (3, 3)) + 4 * np.eye(3))),
    "slogdet": (9, lambda x: np.linalg.slogdet(np.reshape(x, (3, 3)) + 4 * np.eye(3))[1]
                * np.ones(1)),
    "eigh": (9, lambda x: np.linalg.eigh(_sym_in(3)(x) + np.diag([0.0, 3.0, 6.0]))[1]),
    "eigvals": (9, lambda x: np.linalg.eigh(_sym_in(3)(x) + np.diag([0.0, 3.0, 6.0]))[0]),
    "cumsum": (6, lambda x: np.cumsum(np.reshape(x, (2, 3)), axis=1)),
    "cumprod": (6, lambda x: np.cumprod(np.reshape(x, (2, 3)), axis=0)),
}
if sla is not None:
    JACOBIAN_CASES.update({
        "trisolve": (12, lambda x: sla.solve_triangular(
            np.reshape(x[:9], (3, 3)) + 4 * np.eye(3), x[9:], lower=True)),
        "trisolve_T_upper": (15, lambda x: sla.solve_triangular(
            np.reshape(x[:9], (3, 3)) + 4 * np.eye(3), np.reshape(x[9:], (3, 2)), trans="T")),
    })


@pytest.mark.parametrize("name", sorted(JACOBIAN_CASES))
def test_reverse_and_tangent_sweeps_agree(name, rng):
    size, f = JACOBIAN_CASES[name]
    x = rng.standard_normal(size) * 0.3
    tape = rt.JacobianTape(f, x)
    ct = rt.compile(tape)
    J_ref = tape.jacobian(x)
    J_rev = ct.jacobian(x)
    scale = np.abs(J_ref).max()
    np.testing.assert_allclose(J_rev, J_ref, rtol=1e-11, atol=1e-12 * scale)
    J_fwd = np.stack([ct.jvp(x, e) for e in np.eye(size)], axis=-1)
    np.testing.assert_allclose(J_fwd, J_ref, rtol=1e-11, atol=1e-12 * scale)
    h = 1e-6
    fd = np.stack([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(size)], axis=-1)
    if name.startswith("eigh"):
        from revtape.core import ops
        g = lambda x: ops.eigh_signs(f(x))
        fd = np.stack([(g(x + h * e) - g(x - h * e)) / (2 * h) for e in np.eye(size)], axis=-1)
    np.testing.assert_allclose(J_ref, fd, rtol=1e-5, atol=1e-6 * scale)


def test_gp_workload_gradient_and_hessian():
    from revtape.bench import workloads as W
    wl = W.gp(n=20)
    tape = rt.GradientTape(wl.f, wl.x0)
    ct = rt.compile(tape)
    v, g = ct.value_and_gradient(wl.x0)
    v_ref, g_ref = wl.numpy_vg(wl.x0)
    np.testing.assert_allclose(v, v_ref, rtol=1e-12)
    np.testing.assert_allclose(g, g_ref, rtol=1e-10)
    H = ct.hessian(wl.x0)
    np.testing.assert_allclose(H, tape.hessian(wl.x0), rtol=1e-10, atol=1e-12 * np.abs(H).max())
    h = 1e-5
    fd = np.stack([(wl.numpy_vg(wl.x0 + h * e)[1] - wl.numpy_vg(wl.x0 - h * e)[1]) / (2 * h)
                   for e in np.eye(3)], axis=1)
    np.testing.assert_allclose(H, fd, rtol=1e-6, atol=1e-8 * np.abs(H).max())


def test_linalg_programs_pickle_and_deepcopy(rng):
    import copy
    import pickle
    n = 4
    f = lambda x: (np.linalg.slogdet(spd(x, n))[1] + np.sum(np.linalg.inv(spd(x, n)))
                   + np.sum(np.linalg.eigh(spd(x, n))[0] ** 2)
                   + np.sum(np.cumprod(np.linalg.cholesky(spd(x, n)), axis=0)))
    x = rng.standard_normal(n * n) * 0.3
    ct = rt.compile(rt.GradientTape(f, x))
    v, g = ct.value_and_gradient(x)
    for other in (pickle.loads(pickle.dumps(ct)), copy.deepcopy(ct)):
        v2, g2 = other.value_and_gradient(x)
        assert v2 == v
        np.testing.assert_array_equal(g2, g)


@needs_scipy
def test_scipy_function_saved_before_revtape_names_the_drop_in(rng):
    # a reference taken before revtape wrapped scipy.linalg converts with np.asarray
    original = sla.solve_triangular.__wrapped__
    t = rt.Tape()
    with pytest.raises(rt.ConversionError, match="revtape.numpy_api.linalg"):
        original(t.track(np.eye(2)), np.ones(2))


# ---------------------------------------------------------------------------- batches, svd, eig
# Batched (3-D and more) matmul/solve/inv/det/slogdet/cholesky/eigh, the SVD,
# eig of a real spectrum, pinv, matrix_power and the spectral/nuclear norms:
# values against numpy, gradients against analytic formulas and finite
# differences, Hessians, the reference replay against the compiled one.

def _spd_batch(rng, lead, n):
    B = np.eye(n) + 0.3 * rng.normal(size=lead + (n, n))
    return B @ np.swapaxes(B, -1, -2) + 0.5 * np.eye(n)


@pytest.mark.parametrize("sa,sb", [((2, 3, 4), (4, 2)), ((3, 4), (2, 4, 2)),
                                   ((2, 1, 3, 4), (3, 4, 2)), ((2, 3, 4), (4,)),
                                   ((4,), (2, 4, 3))], ids=str)
def test_batched_matmul(sa, sb, rng):
    a, b = rng.normal(size=sa), rng.normal(size=sb)
    W = rng.normal(size=np.matmul(a, b).shape)
    x = np.concatenate([a.ravel(), b.ravel()])
    split = lambda v: (np.reshape(v[:a.size], sa), np.reshape(v[a.size:], sb))
    for f in (lambda v: np.sum(W * (split(v)[0] @ split(v)[1])),
              lambda v: np.sum(W * np.matmul(*split(v)))):
        check_all(f, x)
    g = rt.gradient(lambda a: np.sum(W * (a @ b)), a)
    # d/da sum(W * (a @ b)) = W @ b^T, summed over the axes a was broadcast along
    a2 = a if a.ndim > 1 else a[None, :]
    b2 = b if b.ndim > 1 else b[:, None]
    W2 = W.reshape(np.matmul(a2, b2).shape)
    ref = W2 @ np.swapaxes(b2, -1, -2)
    while ref.ndim > a2.ndim:
        ref = ref.sum(axis=0)
    ref = np.sum(ref, axis=tuple(i for i, n in enumerate(a2.shape) if n == 1 and ref.shape[i] != 1),
                 keepdims=True)
    np.testing.assert_allclose(g, ref.reshape(a.shape), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["solve_vec", "solve_mat", "solve_bcast", "inv", "det",
                                  "slogdet", "cholesky", "eigh"])
def test_batched_square_ops(name, rng):
    lead, n = (2, 3), 3
    A = _spd_batch(rng, lead, n)
    b = rng.normal(size=(n,))
    Bm = rng.normal(size=lead + (n, 2))
    Bc = rng.normal(size=(n, 2))
    W = rng.normal(size=lead + (n, n))
    fs = {
        "solve_vec": lambda a: np.sum(W[..., 0] * np.linalg.solve(a, b)),
        "solve_mat": lambda a: np.sum(W[..., :2] * np.linalg.solve(a, Bm)),
        "solve_bcast": lambda a: np.sum(W[..., :2] * np.linalg.solve(a, Bc[None, None])),
        "inv": lambda a: np.sum(W * np.linalg.inv(a)),
        "det": lambda a: np.sum(W[..., 0, 0] * np.linalg.det(a)),
        "slogdet": lambda a: np.sum(W[..., 0, 0] * np.linalg.slogdet(a)[1]),
        "cholesky": lambda a: np.sum(W * np.linalg.cholesky(a)),
        "eigh": lambda a: np.sum(W[..., 0] * np.linalg.eigh(a)[0])
        + np.sum(W * np.linalg.eigh(a)[1] ** 2),
    }
    f = fs[name]
    # (the Hessians of the 2-D kernels are checked above; here one batched one suffices)
    check_all(f, A, hessian=name in ("solve_mat", "inv", "slogdet"), fd_rtol=1e-5)
    # per matrix, the batched result is the 2-D one
    for idx in np.ndindex(*lead):
        t = rt.Tape()
        x = t.track(A)
        one = {"inv": np.linalg.inv, "det": np.linalg.det, "cholesky": np.linalg.cholesky}.get(name)
        if one is not None:
            np.testing.assert_array_equal(rt.value(one(x))[idx], rt.value(one(t.track(A[idx]))))
    if name == "slogdet":
        sign, logdet = np.linalg.slogdet(rt.Tape().track(A))
        ref = np.linalg.slogdet(A)
        np.testing.assert_array_equal(rt.value(sign), ref[0])
        np.testing.assert_allclose(rt.value(logdet), ref[1], rtol=1e-13)
        # d log|det A| / dA = A^-T
        g = rt.gradient(lambda a: np.sum(np.linalg.slogdet(a)[1]), A)
        np.testing.assert_allclose(g, np.swapaxes(np.linalg.inv(A), -1, -2), rtol=1e-11)


def test_batched_ops_native_equals_vm_bit_for_bit(rng, native_cache):
    from revtape._vm import ffi
    A = _spd_batch(rng, (2,), 3)
    B = rng.normal(size=(2, 3, 2))
    f = lambda a: (np.sum(np.linalg.solve(a, B) * (a @ B)) + np.sum(np.linalg.inv(a))
                   + np.sum(np.linalg.slogdet(a)[1]) + np.sum(np.linalg.cholesky(a)))
    tape = rt.GradientTape(f, A)
    vm, nt = rt.compile(tape, native=False), rt.compile(tape, native=True)
    assert nt.native_state == "native" and nt._p.native != ffi.NULL
    for k in range(3):
        x = A + 0.05 * k * np.eye(3)
        v1, g1 = vm.value_and_gradient(x)
        v2, g2 = nt.value_and_gradient(x)
        assert np.asarray(v1).tobytes() == np.asarray(v2).tobytes()
        assert g1.tobytes() == g2.tobytes()


def _svd_f(W, c, d):
    """A function of the SVD that does not depend on the singular vectors'
    signs: sum(W * U diag(c) V^T) + sum(d * s)."""
    def f(a):
        u, s, vt = np.linalg.svd(a, full_matrices=False)
        return np.sum(W * ((u * c[..., None, :]) @ vt)) + np.sum(d * s)
    return f


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (4, 4), (2, 3, 4), (2, 4, 3)], ids=str)
def test_svd_values_gradients_hessians(shape, rng):
    A = rng.normal(size=shape)
    k = min(shape[-2:])
    t = rt.Tape()
    for full in (False, True):
        u, s, vt = np.linalg.svd(t.track(A), full_matrices=full)
        ru, rs, rvt = np.linalg.svd(A, full_matrices=full)
        np.testing.assert_allclose(rt.value(u), ru, rtol=1e-12, atol=1e-13)   # numpy's signs
        np.testing.assert_allclose(rt.value(s), rs, rtol=1e-13)
        np.testing.assert_allclose(rt.value(vt), rvt, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(rt.value(np.linalg.svd(t.track(A), compute_uv=False)),
                               np.linalg.svd(A, compute_uv=False), rtol=1e-13)
    # d s_i / dA = u_i v_i^T
    d = rng.normal(size=shape[:-2] + (k,))
    g = rt.gradient(lambda a: np.sum(d * np.linalg.svd(a, compute_uv=False)), A)
    ru, rs, rvt = np.linalg.svd(A, full_matrices=False)
    np.testing.assert_allclose(g, (ru * d[..., None, :]) @ rvt, rtol=1e-10, atol=1e-12)
    f = _svd_f(rng.normal(size=shape), rng.normal(size=shape[:-2] + (k,)), d)
    check_all(f, A, hessian=len(shape) == 2, fd_rtol=1e-5)


def test_svd_refusals(rng):
    A = rng.normal(size=(4, 3))
    with pytest.raises(rt.UnsupportedError, match="full_matrices=False"):
        rt.gradient(lambda a: np.sum(np.linalg.svd(a)[0]), A)
    # square: the full SVD is the reduced one, and differentiable
    S = rng.normal(size=(3, 3))
    check_grad(_svd_f(rng.normal(size=(3, 3)), rng.normal(size=3), rng.normal(size=3)), S)
    with pytest.raises(rt.UnsupportedError, match="eigh"):
        np.linalg.svd(rt.Tape().track(S), hermitian=True)


def test_eig_of_a_real_spectrum(rng):
    n = 4
    Pm = rng.normal(size=(n, n)) + 2 * np.eye(n)
    lam = np.array([1.0, -2.0, 3.5, 0.5])
    A = Pm @ np.diag(lam) @ np.linalg.inv(Pm)
    w, v = np.linalg.eig(rt.Tape().track(A))
    rw, rv = np.linalg.eig(A)
    np.testing.assert_allclose(rt.value(w), rw, rtol=1e-12)
    np.testing.assert_allclose(rt.value(v), rv, rtol=1e-10, atol=1e-12)
    # d sum(w^2) / dA = V^-T diag(2 w) V^T
    g = rt.gradient(lambda a: np.sum(np.linalg.eig(a)[0] ** 2), A)
    np.testing.assert_allclose(g, np.linalg.inv(rv).T @ np.diag(2 * rw) @ rv.T, rtol=1e-9,
                               atol=1e-10)
    W = rng.normal(size=(n, n))
    # sign-free in the eigenvectors: v_i v_i^T
    f = lambda a: np.sum(W * (np.linalg.eig(a)[1] * np.linalg.eig(a)[0]) @ np.linalg.eig(a)[1].T)
    check_grad(f, A, h=1e-5)          # (h=1e-3 leaves a truncation error of 1e-5 here)
    tape = rt.GradientTape(f, A)
    ct = rt.compile(tape)
    np.testing.assert_allclose(ct.gradient(A + 0.01), tape.gradient(A + 0.01), rtol=1e-12)
    H = ct.hessian(A).reshape(n * n, n * n)
    np.testing.assert_allclose(H, tape.hessian(A).reshape(n * n, n * n), rtol=1e-9, atol=1e-11)
    V = rng.normal(size=(n, n))
    h = 1e-6
    fd = (ct.gradient(A + h * V) - ct.gradient(A - h * V)).ravel() / (2 * h)
    np.testing.assert_allclose(H @ V.ravel(), fd, rtol=1e-5, atol=1e-6 * np.abs(H).max())
    with pytest.raises(rt.UnsupportedError, match="complex"):
        np.linalg.eig(rt.Tape().track(np.array([[0.0, 1.0], [-1.0, 0.0]])))
    # a batch
    B = np.stack([A, A.T + 0.1 * np.eye(n)])
    np.testing.assert_allclose(rt.value(np.linalg.eigvals(rt.Tape().track(B))),
                               np.linalg.eigvals(B), rtol=1e-12)


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (2, 4, 3)], ids=str)
def test_pinv(shape, rng):
    A = rng.normal(size=shape)
    np.testing.assert_allclose(rt.value(np.linalg.pinv(rt.Tape().track(A))), np.linalg.pinv(A),
                               rtol=1e-12, atol=1e-13)
    W = rng.normal(size=np.linalg.pinv(A).shape)
    check_all(lambda a: np.sum(W * np.linalg.pinv(a)), A, hessian=len(shape) == 2, fd_rtol=1e-5)
    # rank-deficient: the cutoff drops the zero singular value, as numpy's
    R = np.outer(rng.normal(size=4), rng.normal(size=3))
    np.testing.assert_allclose(rt.value(np.linalg.pinv(rt.Tape().track(R))), np.linalg.pinv(R),
                               rtol=1e-10, atol=1e-12)
    # the cutoff is evaluated at each replay: a program recorded at a full-rank
    # matrix gives numpy's pinv at a rank-deficient one
    jt = rt.JacobianTape(np.linalg.pinv, rng.normal(size=(4, 3)))
    np.testing.assert_allclose(rt.compile(jt).forward(R), np.linalg.pinv(R), rtol=1e-10,
                               atol=1e-12)
    np.testing.assert_allclose(jt.forward(R), np.linalg.pinv(R), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n", [-3, -1, 0, 1, 2, 5])
def test_matrix_power(n, rng):
    A = np.eye(3) + 0.3 * rng.normal(size=(3, 3))
    np.testing.assert_allclose(rt.value(np.linalg.matrix_power(rt.Tape().track(A), n)),
                               np.linalg.matrix_power(A, n), rtol=1e-12, atol=1e-14)
    W = rng.normal(size=(3, 3))
    f = lambda a: np.sum(W * np.linalg.matrix_power(a, n))
    if n != 0:
        check_all(f, A, fd_rtol=1e-5)
    else:
        assert np.all(rt.gradient(f, A) == 0)
    if n == 2:   # d sum(W * A A) = W A^T + A^T W
        np.testing.assert_allclose(rt.gradient(f, A), W @ A.T + A.T @ W, rtol=1e-12)


@pytest.mark.parametrize("ord", [2, -2, "nuc"])
def test_spectral_and_nuclear_norms(ord, rng):
    A = rng.normal(size=(4, 3))
    assert rt.value(np.linalg.norm(rt.Tape().track(A), ord)) == pytest.approx(
        np.linalg.norm(A, ord), rel=1e-13)
    u, s, vt = np.linalg.svd(A, full_matrices=False)
    ref = {2: np.outer(u[:, 0], vt[0]), -2: np.outer(u[:, -1], vt[-1]), "nuc": u @ vt}[ord]
    np.testing.assert_allclose(rt.gradient(lambda a: np.linalg.norm(a, ord), A), ref,
                               rtol=1e-10, atol=1e-12)
    check_all(lambda a: np.linalg.norm(a, ord), A, fd_rtol=1e-5)
    # over two axes of a 3-D array, keepdims
    X = rng.normal(size=(3, 2, 4))
    got = np.linalg.norm(rt.Tape().track(X), ord, axis=(2, 0), keepdims=True)
    np.testing.assert_allclose(rt.value(got), np.linalg.norm(X, ord, axis=(2, 0), keepdims=True),
                               rtol=1e-13)
