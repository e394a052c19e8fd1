"""Benchmark workloads and their hand-written reference implementations.

Each :class:`Workload` bundles

* ``f``: the user's function in ordinary numpy / Python, traceable by an
  operator-overloading AD tool (only ``+ - * / **``, ``x[i]``, slices,
  ``np.sum``, ``np.exp``, ``np.log1p``, ``np.sin``, ``np.logaddexp``, ``@``
  and plain Python loops);
* ``x0``: the float64 evaluation point;
* ``numpy_vg(x) -> (value, grad)``: a hand-written numpy value and gradient;
* ``c_name``: the hand-written C value-and-gradient in ``csrc/bench/reference.c``
  (compiled into the benchmark's own extension ``revtape.bench._ref``, not the
  runtime's), or None; :meth:`Workload.make_c_vg` wraps it.

:data:`WORKLOADS` is the one list of workloads (in the benchmark's order) that
the CLI, the peers and ``benchmarks/`` read; a factory joins it by its
``@_workload`` line.

Everything is deterministic (``np.random.default_rng(seed)``).  This module
imports numpy only.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

__all__ = [
    "Workload",
    "eight_schools",
    "rosenbrock_loop",
    "rosenbrock_vec",
    "logreg",
    "chain",
    "gp",
    "radon",
    "mvn",
    "student_t",
    "ALL",
    "EXTRA",
    "WORKLOADS",
    "CReference",
]


@dataclass
class Workload:
    name: str
    f: Callable[[np.ndarray], Any]
    x0: np.ndarray
    numpy_vg: Callable[[np.ndarray], tuple[float, np.ndarray]]
    c_name: str | None
    data: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    # The C reference's arguments after (x, g), in its signature's order:
    # float64 / int64 arrays (passed as pointers) and Python ints/floats.
    c_args: Callable[["Workload"], tuple] | None = None

    def make_c_vg(self, ffi=None, lib=None) -> "CReference":
        """The hand-written C reference (``csrc/bench/reference.c``) as
        ``vg(x, g=None) -> (value, g)``; ``.bind(x, g)`` gives the call with its
        pointers converted once.  ``ffi``/``lib`` default to the benchmark's
        own extension ``revtape.bench._ref``."""
        if self.c_name is None:
            raise ValueError(f"workload {self.name!r} has no hand-written C reference")
        if lib is None:
            from . import _ref
            ffi, lib = _ref.ffi, _ref.lib
        return CReference(self, ffi, lib)


class CReference:
    """One workload's C reference, its data arrays converted to pointers once.

    ``self(x, g=None)`` converts x and g on every call (``ffi.from_buffer``,
    ~0.25 us each: what a caller handing new arrays pays); ``bind(x, g)``
    converts them once and returns a no-argument call, the floor a caller can
    reach through cffi (the benchmark's ``c-ref-bound``)."""

    def __init__(self, wl, ffi, lib):
        try:
            self._fn = getattr(lib, wl.c_name)
        except AttributeError:
            raise ValueError(f"{lib!r} does not export {wl.c_name}: the C references are in "
                             "revtape.bench._ref (call make_c_vg() without arguments)") from None
        self._ffi = ffi
        self.n = int(np.size(wl.x0))
        self._keep, args = [], []
        for a in (wl.c_args(wl) if wl.c_args is not None else ()):
            if isinstance(a, np.ndarray):
                a = np.ascontiguousarray(a)
                kind = {np.dtype(np.float64): "double[]", np.dtype(np.int64): "int64_t[]"}[a.dtype]
                self._keep.append(a)
                a = ffi.from_buffer(kind, a)
            args.append(a)
        self._args = tuple(args)

    def _check(self, x, g):
        # the C function trusts its lengths: a short buffer would be read past its end
        for name, a in (("x", x), ("g", g)):
            if a.dtype != np.float64 or a.size != self.n or not a.flags.c_contiguous:
                raise ValueError(f"{name} must be a C-contiguous float64 array of {self.n} "
                                 f"values, got {a.dtype} {a.shape}")

    def __call__(self, x, g=None):
        if g is None:
            g = np.empty(self.n)
        self._check(x, g)
        fb = self._ffi.from_buffer
        return self._fn(fb("double[]", x), fb("double[]", g), *self._args), g

    def bind(self, x, g):
        """A no-argument call computing the value into its return and the
        gradient into g, at whatever x holds: pointers converted once."""
        self._check(x, g)
        fb = self._ffi.from_buffer
        call = functools.partial(self._fn, fb("double[]", x), fb("double[]", g), *self._args)
        call.keep = (self, x, g)    # the buffers the pointers point into
        return call


WORKLOADS: dict[str, Callable[..., Workload]] = {}


def _workload(name, c_reference=True):
    """Declare a workload factory under its benchmark name (the one registry)."""
    def register(factory):
        factory.has_c_reference = c_reference
        WORKLOADS[name] = factory
        return factory
    return register


# --------------------------------------------------------------------------
# eight schools (non-centred)

_ES_Y = (28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0)
_ES_SIGMA = (15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0)


@_workload("eight-schools")
def eight_schools() -> Workload:
    """Non-centred eight schools; x = [mu, log_tau, eta_1..eta_8].

    logp = -0.5*(mu/5)**2 + log_tau - log1p((tau/5)**2)
           + sum_j [-0.5*eta_j**2 - 0.5*((y_j - (mu + tau*eta_j))/sigma_j)**2],
    tau = exp(log_tau)   (half-Cauchy(0, 5) prior on tau, N(0, 5) on mu).
    """
    y_data = _ES_Y
    s_data = _ES_SIGMA

    def f(x):
        mu = x[0]
        log_tau = x[1]
        tau = np.exp(log_tau)
        lp = -0.5 * (mu / 5.0) ** 2 + log_tau - np.log1p((tau / 5.0) ** 2)
        for j in range(8):
            eta = x[2 + j]
            yj = y_data[j]
            sj = s_data[j]
            lp = lp + (-0.5 * eta ** 2 - 0.5 * ((yj - (mu + tau * eta)) / sj) ** 2)
        return lp

    y = np.array(y_data)
    sigma = np.array(s_data)

    def numpy_vg(x):
        x = np.asarray(x, dtype=np.float64)
        mu, log_tau, eta = x[0], x[1], x[2:]
        tau = math.exp(log_tau)
        t52 = (tau / 5.0) ** 2
        r = (y - (mu + tau * eta)) / sigma
        rs = r / sigma
        lp = -0.5 * (mu / 5.0) ** 2 + log_tau - math.log1p(t52) + np.sum(-0.5 * eta**2 - 0.5 * r**2)
        g = np.empty(10)
        g[0] = -mu / 25.0 + np.sum(rs)
        g[1] = 1.0 - 2.0 * t52 / (1.0 + t52) + tau * np.sum(rs * eta)
        g[2:] = -eta + tau * rs
        return float(lp), g

    x0 = np.random.default_rng(0).normal(size=10)
    return Workload(
        name="eight-schools",
        f=f,
        x0=x0,
        numpy_vg=numpy_vg,
        c_name="ref_eight_schools_vg",
        data={"y": y, "sigma": sigma},
        params={},
    )


# --------------------------------------------------------------------------
# Rosenbrock (extended, chained form)


def _rosenbrock_numpy_vg(x):
    x = np.asarray(x, dtype=np.float64)
    xl, xr = x[:-1], x[1:]
    a = xr - xl * xl
    b = 1.0 - xl
    v = np.sum(100.0 * a * a + b * b)
    g = np.zeros_like(x)
    g[:-1] = -400.0 * xl * a - 2.0 * b
    g[1:] += 200.0 * a
    return float(v), g


def _rosenbrock_x0(n):
    # deterministic, in [-1, 1]
    return np.random.default_rng(1).uniform(-1.0, 1.0, size=n)


@_workload("rosenbrock-loop")
def rosenbrock_loop(n: int = 100) -> Workload:
    """f = sum_{i<n-1} 100*(x[i+1]-x[i]**2)**2 + (1-x[i])**2, as a scalar Python loop."""

    def f(x):
        s = 0.0
        for i in range(n - 1):
            s = s + (100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2)
        return s

    return Workload(
        name="rosenbrock-loop",
        f=f,
        x0=_rosenbrock_x0(n),
        numpy_vg=_rosenbrock_numpy_vg,
        c_name="ref_rosenbrock_vg",
        c_args=lambda w: (w.x0.size,),
        data={},
        params={"n": n},
    )


@_workload("rosenbrock-vec")
def rosenbrock_vec(n: int = 10000) -> Workload:
    """Same function as rosenbrock_loop, vectorized with x[1:], x[:-1] and np.sum."""

    def f(x):
        return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)

    return Workload(
        name="rosenbrock-vec",
        f=f,
        x0=_rosenbrock_x0(n),
        numpy_vg=_rosenbrock_numpy_vg,
        c_name="ref_rosenbrock_vg",
        c_args=lambda w: (w.x0.size,),
        data={},
        params={"n": n},
    )


# --------------------------------------------------------------------------
# Bayesian logistic regression


def _expit(z):
    e = np.exp(-np.abs(z))
    return np.where(z >= 0.0, 1.0 / (1.0 + e), e / (1.0 + e))


@_workload("logreg")
def logreg(N: int = 1000, D: int = 20, seed: int = 0) -> Workload:
    """logp(beta) = sum(y*eta - logaddexp(0, eta)) - 0.5*sum(beta**2), eta = X @ beta.

    X ~ N(0, 1) of shape (N, D), beta_true ~ N(0, 1), y ~ Bernoulli(expit(X @ beta_true)),
    x0 = 0.5 * N(0, 1) of length D; all from default_rng(seed) in that order.
    """
    rng = np.random.default_rng(seed)
    X = np.ascontiguousarray(rng.standard_normal((N, D)), dtype=np.float64)
    beta_true = rng.standard_normal(D)
    y = (rng.uniform(size=N) < _expit(X @ beta_true)).astype(np.float64)
    x0 = 0.5 * rng.standard_normal(D)

    def f(beta):
        eta = X @ beta
        return np.sum(y * eta - np.logaddexp(0.0, eta)) - 0.5 * np.sum(beta ** 2)

    def numpy_vg(beta):
        beta = np.asarray(beta, dtype=np.float64)
        eta = X @ beta
        lp = np.sum(y * eta - np.logaddexp(0.0, eta)) - 0.5 * np.dot(beta, beta)
        g = X.T @ (y - _expit(eta)) - beta
        return float(lp), g

    return Workload(
        name="logreg",
        f=f,
        x0=x0,
        numpy_vg=numpy_vg,
        c_name="ref_logreg_vg",
        c_args=lambda w: (np.asarray(w.data["X"], dtype=np.float64),
                          np.asarray(w.data["y"], dtype=np.float64), *w.data["X"].shape),
        data={"X": X, "y": y},
        params={"N": N, "D": D, "seed": seed},
    )


# --------------------------------------------------------------------------
# long scalar chain


@_workload("chain")
def chain(L: int = 1000) -> Workload:
    """y = x[0]; repeat for k < L: y = y + 0.001*sin(y + 0.1*k); return y.

    4 recorded instructions per step (add const, sin, mul const, add).
    """

    def f(x):
        y = x[0]
        for k in range(L):
            y = y + 0.001 * np.sin(y + 0.1 * k)
        return y

    def numpy_vg(x):
        # forward pass storing the intermediates, then the reverse sweep, vectorized
        y = float(x[0])
        ys = np.empty(L)
        sin = math.sin
        for k in range(L):
            ys[k] = y
            y = y + 0.001 * sin(y + 0.1 * k)
        d = 1.0 + 0.001 * np.cos(ys + 0.1 * np.arange(L))
        return y, np.array([np.prod(d)])

    x0 = np.array([0.5])
    return Workload(
        name="chain",
        f=f,
        x0=x0,
        numpy_vg=numpy_vg,
        c_name="ref_chain_vg",
        # the forward pass keeps its L intermediates in a work array
        c_args=lambda w: (w.params["L"], np.empty(max(w.params["L"], 1))),
        data={},
        params={"L": L},
    )


# --------------------------------------------------------------------------
# Gaussian-process marginal likelihood (Cholesky-based)


@_workload("gp", c_reference=False)
def gp(n: int = 200, seed: int = 0) -> Workload:
    """GP regression log marginal likelihood, squared-exponential kernel;
    x = [log amplitude, log lengthscale, log noise sd].

    K = a^2 exp(-(t_i - t_j)^2 / (2 l^2)) + s^2 I,  L = cholesky(K),
    logp = -0.5 |L^-1 y|^2 - sum(log diag L) - n/2 log(2 pi).
    t ~ U(-3, 3) sorted, y = sin(t) + 0.1 N(0, 1), from default_rng(seed).
    ``f`` uses np.linalg.cholesky and scipy.linalg.solve_triangular (scipy
    optional: revtape.numpy_api.linalg's own when scipy is missing); no hand-written
    C reference (``c_name`` is None).
    """
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(-3.0, 3.0, n))
    y = np.sin(t) + 0.1 * rng.standard_normal(n)
    D2 = (t[:, None] - t[None, :]) ** 2
    eye = np.eye(n)
    half_log_2pi = 0.5 * n * math.log(2.0 * math.pi)
    try:
        from scipy.linalg import solve_triangular
    except ImportError:  # pragma: no cover
        from ..numpy_api.linalg import solve_triangular

    def f(x):
        amp2, inv_ls2, noise2 = np.exp(2.0 * x[0]), np.exp(-2.0 * x[1]), np.exp(2.0 * x[2])
        K = amp2 * np.exp(-0.5 * inv_ls2 * D2) + noise2 * eye
        L = np.linalg.cholesky(K)
        alpha = solve_triangular(L, y, lower=True)
        return -0.5 * (alpha @ alpha) - np.sum(np.log(np.diagonal(L))) - half_log_2pi

    def numpy_vg(x):
        # the textbook analytic gradient (Rasmussen & Williams eq. 5.9):
        # d logp / d theta = 0.5 tr((alpha alpha^T - K^-1) dK/dtheta)
        try:
            from scipy.linalg import cho_factor, cho_solve
            c = cho_factor(K_of(x)[0], lower=True, check_finite=False)
            solve = lambda b: cho_solve(c, b, check_finite=False)
            L = c[0]
        except ImportError:  # pragma: no cover
            L = np.linalg.cholesky(K_of(x)[0])
            solve = lambda b: np.linalg.solve(L.T, np.linalg.solve(L, b))
        K, Kf, inv_ls2, noise2 = K_of(x)
        alpha = solve(y)
        v = -0.5 * (y @ alpha) - np.sum(np.log(np.diagonal(L))) - half_log_2pi
        W = np.outer(alpha, alpha) - solve(eye)
        g = np.array([np.sum(W * Kf), 0.5 * inv_ls2 * np.sum(W * Kf * D2),
                      noise2 * np.trace(W)])
        return float(v), g

    def K_of(x):
        amp2, inv_ls2, noise2 = math.exp(2.0 * x[0]), math.exp(-2.0 * x[1]), math.exp(2.0 * x[2])
        Kf = amp2 * np.exp(-0.5 * inv_ls2 * D2)
        return Kf + noise2 * eye, Kf, inv_ls2, noise2

    return Workload(
        name="gp",
        f=f,
        x0=np.array([0.1, -0.2, -1.0]),
        numpy_vg=numpy_vg,
        c_name=None,
        data={"t": t, "y": y},
        params={"n": n, "seed": seed},
    )


# --------------------------------------------------------------------------
# radon: hierarchical linear regression (varying intercepts)


_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


@_workload("radon")
def radon(N: int = 919, J: int = 85, seed: int = 0) -> Workload:
    """Gelman & Hill's radon model with varying county intercepts, on
    synthetic data of the real data set's size (919 houses, 85 counties):

        y_i ~ N(a[county_i] + beta * floor_i, sigma_y),   a_j ~ N(mu_a, sigma_a),
        mu_a, beta ~ N(0, 10),   sigma_a, sigma_y ~ HalfNormal(5).

    x = [mu_a, beta, log sigma_a, log sigma_y, a_1..a_J]: the scales go
    through the log bijector (sigma = exp(s), plus the log-Jacobian s), as an
    HMC sampler sees them.  ``f`` gathers the intercepts by the county index
    (an integer array).  Data from default_rng(seed): every county has at
    least one house; floor ~ Bernoulli(0.3); mu_a = 1.5, sigma_a = 0.3,
    beta = -0.7, sigma_y = 0.8.
    """
    rng = np.random.default_rng(seed)
    county = np.concatenate([np.arange(J), rng.integers(0, J, N - J)])
    rng.shuffle(county)
    county = county.astype(np.int64)
    floor = (rng.random(N) < 0.3).astype(np.float64)
    a_true = 1.5 + 0.3 * rng.standard_normal(J)
    y = a_true[county] - 0.7 * floor + 0.8 * rng.standard_normal(N)
    x0 = np.concatenate([[1.4, -0.6, math.log(0.35), math.log(0.75)],
                         a_true + 0.05 * rng.standard_normal(J)])
    # normal and half-normal normalising constants, all in one number
    const = (-(N + J + 2) * _HALF_LOG_2PI - 2.0 * math.log(10.0)
             + 2.0 * (0.5 * math.log(2.0 / math.pi) - math.log(5.0)))

    def f(x):
        mu_a, beta, log_sa, log_sy = x[0], x[1], x[2], x[3]
        a = x[4:]
        sigma_a, sigma_y = np.exp(log_sa), np.exp(log_sy)
        r = y - (a[county] + beta * floor)
        z = (a - mu_a) / sigma_a
        lp = -0.5 * np.sum(r ** 2) / sigma_y ** 2 - N * log_sy     # likelihood
        lp = lp - 0.5 * np.sum(z ** 2) - J * log_sa               # a_j ~ N(mu_a, sigma_a)
        lp = lp - 0.5 * (mu_a / 10.0) ** 2 - 0.5 * (beta / 10.0) ** 2
        lp = lp - 0.5 * (sigma_a / 5.0) ** 2 + log_sa             # half-normal + log-Jacobian
        lp = lp - 0.5 * (sigma_y / 5.0) ** 2 + log_sy
        return lp + const

    def numpy_vg(x):
        mu_a, beta, log_sa, log_sy = x[0], x[1], x[2], x[3]
        a = x[4:]
        sa, sy = math.exp(log_sa), math.exp(log_sy)
        r = y - a[county] - beta * floor
        d = a - mu_a
        rr, dd = r @ r, d @ d
        v = (-0.5 * rr / sy ** 2 - N * log_sy - 0.5 * dd / sa ** 2 - J * log_sa
             - 0.5 * (mu_a / 10.0) ** 2 - 0.5 * (beta / 10.0) ** 2
             - 0.5 * (sa / 5.0) ** 2 + log_sa - 0.5 * (sy / 5.0) ** 2 + log_sy + const)
        gr = r / sy ** 2                                  # d lp / d prediction_i
        g = np.empty(J + 4)
        g[0] = d.sum() / sa ** 2 - mu_a / 100.0
        g[1] = gr @ floor - beta / 100.0
        g[2] = dd / sa ** 2 - J - (sa / 5.0) ** 2 + 1.0
        g[3] = rr / sy ** 2 - N - (sy / 5.0) ** 2 + 1.0
        g[4:] = np.bincount(county, weights=gr, minlength=J) - d / sa ** 2
        return float(v), g

    return Workload(
        name="radon",
        f=f,
        x0=x0,
        numpy_vg=numpy_vg,
        c_name="ref_radon_vg",
        c_args=lambda w: (np.asarray(w.data["y"], dtype=np.float64),
                          np.asarray(w.data["county"], dtype=np.int64),
                          np.asarray(w.data["floor"], dtype=np.float64),
                          w.params["N"], w.params["J"], float(w.data["const"])),
        data={"y": y, "county": county, "floor": floor, "const": const},
        params={"N": N, "J": J, "seed": seed},
    )


# --------------------------------------------------------------------------
# mvn: multivariate normal log density, gradient w.r.t. mean and Cholesky factor


@_workload("mvn", c_reference=False)
def mvn(n: int = 100, m: int = 20, seed: int = 0) -> Workload:
    """The log density of m observations y_k ~ N(mu, L L^T) in n dimensions,
    as a function of the mean and the Cholesky factor:

        x = [mu (n), L (n*n, row-major; only its lower triangle is read)],
        logp = -0.5 sum_k |L^-1 (y_k - mu)|^2 - m sum_i log L_ii - m n/2 log(2 pi).

    ``f`` takes np.tril of the reshaped factor and solves with
    scipy.linalg.solve_triangular (revtape.numpy_api.linalg's without scipy).  The
    gradient w.r.t. the entries above the diagonal is 0.  Data and the
    evaluation point (a well-conditioned factor) from default_rng(seed).
    """
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, n)) / math.sqrt(n)
    L0 = np.tril(A, -1) * 0.5 + np.diag(1.0 + rng.random(n))
    mu0 = rng.standard_normal(n)
    Y = mu0 + rng.standard_normal((m, n)) @ L0.T
    x0 = np.concatenate([mu0 + 0.1 * rng.standard_normal(n),
                         (L0 + 0.05 * np.tril(rng.standard_normal((n, n)))).ravel()])
    half_log_2pi = m * n * _HALF_LOG_2PI
    try:
        from scipy.linalg import solve_triangular
    except ImportError:  # pragma: no cover
        from ..numpy_api.linalg import solve_triangular

    def f(x):
        mu = x[:n]
        L = np.tril(np.reshape(x[n:], (n, n)))
        Z = solve_triangular(L, (Y - mu).T, lower=True)
        return -0.5 * np.sum(Z ** 2) - m * np.sum(np.log(np.diagonal(L))) - half_log_2pi

    def numpy_vg(x):
        # Z = L^-1 D, W = L^-T Z = Sigma^-1 D (D = (Y - mu)^T):
        # d/dmu = sum_k W[:, k],  d/dL = tril(W Z^T) - m diag(1 / L_ii)
        mu = x[:n]
        L = np.tril(x[n:].reshape(n, n))
        Z = solve_triangular(L, (Y - mu).T, lower=True, check_finite=False)
        W = solve_triangular(L, Z, lower=True, trans="T", check_finite=False)
        diag = np.diagonal(L)
        v = -0.5 * np.sum(Z * Z) - m * np.sum(np.log(diag)) - half_log_2pi
        gL = np.tril(W @ Z.T)
        gL[np.diag_indices(n)] -= m / diag
        return float(v), np.concatenate([W.sum(axis=1), gL.ravel()])

    return Workload(
        name="mvn",
        f=f,
        x0=x0,
        numpy_vg=numpy_vg,
        c_name=None,
        data={"Y": Y},
        params={"n": n, "m": m, "seed": seed},
    )


# The workloads with a hand-written C reference, and those without (derived).
# --------------------------------------------------------------------------
# robust (Student-t) regression: elementwise-heavy over many observations

_ST_NU = 4.0


@_workload("student-t")
def student_t(N: int = 100000, D: int = 10, seed: int = 0) -> Workload:
    """Robust regression: y_i ~ Student-t(nu = 4, X_i @ beta, sigma), beta ~ N(0, 5^2),
    sigma ~ half-N(0, 1); x = [beta (D), sigma], the log density up to a constant:

        sum_i -(nu+1)/2 * log1p(((y_i - X_i @ beta) / sigma)^2 / nu) - N*log(sigma)
        - 0.5*sum(beta^2)/25 - 0.5*sigma^2

    X ~ N(0, 1) of shape (N, D), beta_true ~ N(0, 1), y = X @ beta_true +
    0.7 * t_4 noise; x0 = [0.5 * N(0, 1) (D), 1.5]; all from default_rng(seed)
    in that order.  One matmul, then elementwise work over N: a division by
    the tracked scale, a square, a log1p, and their reverses.
    """
    rng = np.random.default_rng(seed)
    X = np.ascontiguousarray(rng.standard_normal((N, D)), dtype=np.float64)
    beta_true = rng.standard_normal(D)
    y = X @ beta_true + 0.7 * rng.standard_t(_ST_NU, size=N)
    x0 = np.concatenate([0.5 * rng.standard_normal(D), [1.5]])
    nu, c = _ST_NU, -0.5 * (_ST_NU + 1.0)

    def f(x):
        beta, sigma = x[:D], x[D]
        z = (y - X @ beta) / sigma
        return (np.sum(c * np.log1p(z * z / nu)) - N * np.log(sigma)
                - 0.5 * np.sum(beta ** 2) / 25.0 - 0.5 * sigma ** 2)

    def numpy_vg(x):
        x = np.asarray(x, dtype=np.float64)
        beta, sigma = x[:D], x[D]
        z = (y - X @ beta) / sigma
        u = z * z / nu
        lp = (c * np.sum(np.log1p(u)) - N * np.log(sigma) - 0.5 * np.dot(beta, beta) / 25.0
              - 0.5 * sigma * sigma)
        w = (2.0 * c / nu) * z / (1.0 + u)            # d lp / d z
        g = np.empty(D + 1)
        g[:D] = -(X.T @ w) / sigma - beta / 25.0
        g[D] = -np.dot(w, z) / sigma - N / sigma - sigma
        return float(lp), g

    return Workload(
        name="student-t",
        f=f,
        x0=x0,
        numpy_vg=numpy_vg,
        c_name="ref_student_t_vg",
        c_args=lambda w: (np.asarray(w.data["X"], dtype=np.float64),
                          np.asarray(w.data["y"], dtype=np.float64), *w.data["X"].shape, _ST_NU),
        data={"X": X, "y": y},
        params={"N": N, "D": D, "seed": seed},
    )


ALL = {k: f for k, f in WORKLOADS.items() if f.has_c_reference}
EXTRA = {k: f for k, f in WORKLOADS.items() if not f.has_c_reference}
