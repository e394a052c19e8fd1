"""Linear algebra on tracked values (issue 13): cholesky, solve_triangular,
slogdet/det, solve, inv, cho_factor/cho_solve, trace, diag/diagonal,
tril/triu.  Per op: value against numpy/scipy, gradient against central
finite differences, reference replay against the compiled C replay (1e-12),
Hessians (reference reverse-over-reverse against compiled forward-over-
reverse, and against finite differences of the gradient), edge cases."""

import numpy as np
import pytest
import scipy.linalg as sla

import revtape as rt
from conftest import check_grad

REL = dict(rtol=1e-12, atol=1e-13)


def spd(x, n):
    """An SPD matrix from n*n free parameters: X X^T + n I."""
    X = np.reshape(x, (n, n))
    return X @ X.T + n * np.eye(n)


def lower_tri(x, n):
    """A well-conditioned lower-triangular matrix from n*n parameters."""
    X = np.reshape(x, (n, n))
    return np.tril(X, -1) * 0.3 + np.diag(2.0 + np.exp(np.diagonal(X) * 0.2)) + np.triu(X, 1)


def check_all(f, x, hessian=True, fd_rtol=1e-6):
    """value vs plain numpy; gradient vs FD; reference vs compiled; Hessians."""
    tape = rt.GradientTape(f, x)
    ct = rt.compile(tape)
    v_np = f(x)
    v_ref, g_ref = tape.value_and_gradient(x)
    v_c, g_c = ct.value_and_gradient(x)
    np.testing.assert_allclose(v_ref, v_np, **REL)
    np.testing.assert_allclose(v_c, v_np, **REL)
    np.testing.assert_allclose(g_c, g_ref, rtol=1e-12, atol=1e-12 * np.abs(g_ref).max())
    check_grad(f, x, rtol=fd_rtol, atol=1e-7)
    # a replay at another point agrees with a fresh recording there
    x2 = x + 0.01 * np.random.default_rng(1).standard_normal(np.shape(x))
    np.testing.assert_allclose(ct.gradient(x2), rt.gradient(f, x2), rtol=1e-11, atol=1e-12)
    if hessian:
        H_ref = tape.hessian(x)
        H_c = ct.hessian(x)
        scale = np.abs(H_ref).max()
        np.testing.assert_allclose(H_c, H_ref, rtol=1e-10, atol=1e-11 * scale)
        np.testing.assert_allclose(H_ref, H_ref.T, rtol=1e-9, atol=1e-10 * scale)
        # Hessian columns against finite differences of the (compiled) gradient
        rng = np.random.default_rng(2)
        v = rng.standard_normal(np.shape(x))
        h = 1e-4
        fd = (ct.gradient(x + h * v) - ct.gradient(x - h * v)) / (2 * h)
        np.testing.assert_allclose(H_c @ v, fd, rtol=1e-5, atol=1e-6 * scale)
        np.testing.assert_allclose(ct.hvp(x, v), H_c @ v, rtol=1e-10, atol=1e-11 * scale)
    return tape, ct


def opcodes(ct):
    return [line.split("= ")[1].split("(")[0] for line in ct.disassemble().splitlines()[1:]]


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


def test_cholesky_gradient_is_symmetric_and_matches_murray(rng):
    n = 6
    A = spd(rng.standard_normal(n * n), n)
    G = rng.standard_normal((n, n))
    f = lambda A: np.sum(G * np.linalg.cholesky(A))
    g_ref = rt.gradient(f, A)
    g_c = rt.compile(rt.GradientTape(f, A)).gradient(A)
    np.testing.assert_allclose(g_c, g_ref, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(g_c, g_c.T, rtol=1e-13, atol=1e-14)
    # Murray (2016), written out with numpy/scipy
    L = np.linalg.cholesky(A)
    phi = np.tril(L.T @ np.tril(G))
    phi[np.diag_indices(n)] *= 0.5
    S = sla.solve_triangular(L, sla.solve_triangular(L, phi, lower=True, trans=1).T,
                             lower=True, trans=1)
    np.testing.assert_allclose(g_c, (S + S.T) / 2, rtol=1e-10, atol=1e-12)


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
        assert np.isnan(v) and np.isnan(g).all()
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
    with pytest.raises(rt.UnsupportedError, match="batch"):
        np.linalg.cholesky(t.track(np.ones((2, 3, 3))))


# ---------------------------------------------------------------------------- solve_triangular

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


def test_solve_triangular_refuses_bad_input(rng):
    t = rt.Tape()
    A = t.track(np.eye(3))
    with pytest.raises(rt.linalg.LinAlgShapeError):
        sla.solve_triangular(A, np.ones(4))
    with pytest.raises(ValueError, match="trans"):
        sla.solve_triangular(A, np.ones(3), trans="X")


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
