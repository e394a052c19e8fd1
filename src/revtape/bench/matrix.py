"""Matrix products and factorisations: revtape's compiled gradient on its own
kernels (REVTAPE_BLAS=off, the kernels every program ran before BLAS) and
through BLAS/LAPACK (REVTAPE_BLAS=auto), side by side with numpy's analytic
gradient and, for the MLP, JAX when installed.

    OPENBLAS_NUM_THREADS=1 python -m revtape.bench.matrix [--quick] [--only mlp,matmul,linalg,gp]

Workloads:

* ``mlp``: JAX's ``examples/mnist_classifier_fromscratch.py`` model and loss
  (tanh layers, log-softmax, mean negative log-likelihood of one-hot
  targets) written for revtape, parameters as one flat vector, at a small
  size (784-128-128-10, batch 32) and at the example's own (784-1024-1024-10,
  batch 128); random inputs stand in for MNIST;
* ``matmul``: ``np.sum(X @ W)`` with respect to W, X m x k, W k x n, for
  sizes from 32 to 1000 (numpy: ``X @ W`` and ``X.T @ G``);
* ``cholesky``, ``solve``, ``eigh`` at n = 50, 100, 200 (numpy/scipy: the
  factorisation and the textbook gradient from it);
* ``gp``: the benchmark's Gaussian-process marginal likelihood (gp, n = 200).

Every column is verified against numpy's gradient before it is timed; the
times are minimums over interleaved rounds (a column's rounds alternate with
the others', so load hits all alike).  BLAS threads are the user's:
set OPENBLAS_NUM_THREADS=1 to compare one thread with one thread.
"""

import argparse
import math
import time

import numpy as np

import revtape as rt
from .. import config
from . import workloads

RTOL = 1e-8


class Case:
    """One timed problem: f on x (revtape), numpy's value and gradient, and
    optionally a JAX value-and-gradient builder."""

    def __init__(self, group, label, f, x, numpy_vg, jax_vg=None):
        self.group, self.label, self.f, self.x = group, label, f, x
        self.numpy_vg, self.jax_vg = numpy_vg, jax_vg


# ------------------------------------------------------------------ the MNIST MLP

def mlp(layers=(784, 128, 128, 10), batch=32, seed=0):
    """JAX's from-scratch MNIST classifier: init_random_params(0.1, layers),
    predict (tanh hidden layers, log-softmax output), loss = -mean(sum(preds
    * targets, 1)); x holds every (W, b) flattened in order."""
    rng = np.random.default_rng(seed)
    shapes = list(zip(layers[:-1], layers[1:]))
    parts = []
    for m, n in shapes:
        parts += [0.1 * rng.standard_normal((m, n)).ravel(), 0.1 * rng.standard_normal(n)]
    x0 = np.concatenate(parts)
    inputs = rng.standard_normal((batch, layers[0]))
    targets = np.eye(layers[-1])[rng.integers(0, layers[-1], batch)]
    slices, at = [], 0
    for m, n in shapes:
        slices.append(((at, at + m * n, (m, n)), (at + m * n, at + m * n + n)))
        at += m * n + n

    def unpack(x):
        return [(x[w0:w1].reshape(shape), x[b0:b1]) for (w0, w1, shape), (b0, b1) in slices]

    def logsumexp_rows(z):
        m = np.max(rt.value(z), axis=1, keepdims=True)    # a constant shift: exact gradient
        return np.log(np.sum(np.exp(z - m), axis=1, keepdims=True)) + m

    def f(x):
        params = unpack(x)
        act = inputs
        for w, b in params[:-1]:
            act = np.tanh(act @ w + b)
        w, b = params[-1]
        logits = act @ w + b
        preds = logits - logsumexp_rows(logits)
        return -np.sum(preds * targets) / batch

    def numpy_vg(x):
        params = unpack(x)
        acts = [inputs]
        for w, b in params[:-1]:
            acts.append(np.tanh(acts[-1] @ w + b))
        w, b = params[-1]
        logits = acts[-1] @ w + b
        m = logits.max(axis=1, keepdims=True)
        e = np.exp(logits - m)
        s = e.sum(axis=1, keepdims=True)
        preds = logits - (np.log(s) + m)
        value = -np.sum(preds * targets) / batch
        # backprop: d/dlogits = (softmax * rowsum(targets) - targets) / batch
        dz = (e / s * targets.sum(axis=1, keepdims=True) - targets) / batch
        grads = []
        for k in range(len(params) - 1, -1, -1):
            w, _ = params[k]
            grads.append((acts[k].T @ dz, dz.sum(axis=0)))
            if k:
                dz = (dz @ w.T) * (1.0 - acts[k] ** 2)
        g = np.concatenate([p.ravel() for gw, gb in reversed(grads) for p in (gw, gb)])
        return float(value), g

    def jax_vg():
        import jax
        import jax.numpy as jnp
        from jax.scipy.special import logsumexp
        jax.config.update("jax_enable_x64", True)
        xs, ts = jnp.asarray(inputs), jnp.asarray(targets)

        def loss(x):
            params = [(x[w0:w1].reshape(shape), x[b0:b1]) for (w0, w1, shape), (b0, b1) in slices]
            act = xs
            for w, b in params[:-1]:
                act = jnp.tanh(jnp.dot(act, w) + b)
            w, b = params[-1]
            logits = jnp.dot(act, w) + b
            preds = logits - logsumexp(logits, axis=1, keepdims=True)
            return -jnp.mean(jnp.sum(preds * ts, axis=1))

        vg = jax.jit(jax.value_and_grad(loss))

        def call(x):
            v, g = vg(x)
            return float(v), np.asarray(g)
        return call

    label = "-".join(map(str, layers)) + f" batch {batch}"
    return Case("mlp", label, f, x0, numpy_vg, jax_vg)


# ------------------------------------------------------------------ products and factorisations

def matmul(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((m, k))
    G = np.ones((m, n))

    def f(w):
        return np.sum(X @ w.reshape(k, n))

    def numpy_vg(w):
        return float(np.sum(X @ w.reshape(k, n))), (X.T @ G).ravel()

    return Case("matmul", f"{m}x{k} @ {k}x{n}", f, rng.standard_normal(k * n), numpy_vg)


def _spd(n, seed):
    a = np.random.default_rng(seed).standard_normal((n, n))
    return a @ a.T + n * np.eye(n)


def cholesky(n, seed=0):
    """f(A) = sum(C * cholesky(A)); numpy: Murray's gradient, S = L^-T
    Phi(L^T C) L^-1, on the lower triangle (S + S^T below, S on the diagonal)."""
    from scipy.linalg import solve_triangular
    C = np.random.default_rng(seed + 1).standard_normal((n, n))
    tC = np.tril(C)

    def f(A):
        return np.sum(C * np.linalg.cholesky(A.reshape(n, n)))

    def numpy_vg(a):
        L = np.linalg.cholesky(a.reshape(n, n))
        P = np.tril(L.T @ tC)
        P[np.diag_indices(n)] *= 0.5
        S = solve_triangular(L, solve_triangular(L, P, trans="T", lower=True,
                                                  check_finite=False).T,
                             trans="T", lower=True, check_finite=False).T
        g = np.tril(S + S.T)
        g[np.diag_indices(n)] = np.diag(S)
        return float(np.sum(C * L)), g.ravel()

    return Case("cholesky", f"n={n}", f, _spd(n, seed).ravel(), numpy_vg)


def solve(n, seed=0):
    """f(A) = b . solve(A, b); numpy: one LU, x = A^-1 b, y = A^-T b, g = -y x^T."""
    from scipy.linalg import lu_factor, lu_solve
    b = np.random.default_rng(seed + 1).standard_normal(n)

    def f(A):
        return b @ np.linalg.solve(A.reshape(n, n), b)

    def numpy_vg(a):
        lu = lu_factor(a.reshape(n, n), check_finite=False)
        x = lu_solve(lu, b, check_finite=False)
        y = lu_solve(lu, b, trans=1, check_finite=False)
        return float(b @ x), -np.outer(y, x).ravel()

    return Case("solve", f"n={n}", f, (_spd(n, seed) - 0.5 * n * np.eye(n)).ravel(), numpy_vg)


def eigh(n, seed=0):
    """f(A) = sum(d * w) + sum(C * V**2) (sign-free); numpy: one eigh and the
    gradient V (diag(w-bar) + F o (V^T V-bar)) V^T folded on the lower triangle."""
    rng = np.random.default_rng(seed + 1)
    d, C = rng.standard_normal(n), rng.standard_normal((n, n))

    def f(A):
        w, V = np.linalg.eigh(A.reshape(n, n))
        return np.sum(d * w) + np.sum(C * V ** 2)

    def numpy_vg(a):
        w, V = np.linalg.eigh(a.reshape(n, n))
        Vbar = 2.0 * C * V
        with np.errstate(divide="ignore"):
            F = 1.0 / (w[None, :] - w[:, None])
        np.fill_diagonal(F, 0.0)
        M = F * (V.T @ Vbar)
        M[np.diag_indices(n)] = d
        S = V @ M @ V.T
        g = np.tril(S + S.T)
        g[np.diag_indices(n)] = np.diag(S)
        return float(np.sum(d * w) + np.sum(C * V ** 2)), g.ravel()

    return Case("eigh", f"n={n}", f, _spd(n, seed).ravel(), numpy_vg)


def gp(n=200):
    wl = workloads.gp(n=n)
    return Case("gp", f"n={n}", wl.f, wl.x0, wl.numpy_vg)


def cases(quick=False, only=None):
    out = []
    groups = only or ("mlp", "matmul", "linalg", "gp")
    if "mlp" in groups:
        out += [mlp()] + ([] if quick else [mlp((784, 1024, 1024, 10), 128)])
    if "matmul" in groups:
        sizes = [(32, 50, 32), (128, 50, 32), (256, 50, 32), (100, 100, 100), (300, 300, 300)]
        out += [matmul(*s) for s in sizes + ([] if quick else [(1000, 1000, 1000)])]
    if "linalg" in groups:
        for n in (50, 100, 200):
            out += [cholesky(n), solve(n), eigh(n)]
    if "gp" in groups:
        out.append(gp())
    return out


# ------------------------------------------------------------------ timing

def _revtape_column(case, mode):
    with config.override("REVTAPE_BLAS", mode):
        tape = rt.GradientTape(case.f, case.x)
        ct = rt.compile(tape, native=False)
    xb, g = case.x.copy(), np.empty_like(case.x)
    run = ct.bind(xb, g)

    def vg(x):
        xb[...] = x
        return run(), g.copy()
    return run, vg


def _columns(case):
    cols = {}
    x = case.x
    cols["numpy"] = (lambda: case.numpy_vg(x)), case.numpy_vg
    for mode, name in (("off", "revtape-own"), ("auto", "revtape-blas")):
        cols[name] = _revtape_column(case, mode)
    if case.jax_vg is not None:
        try:
            vg = case.jax_vg()
        except ImportError:
            vg = None
        if vg is not None:
            cols["jax"] = (lambda: vg(x)), vg
    return cols


def _verify(name, vg, case, ref):
    v, g = vg(case.x)
    v0, g0 = ref
    scale = max(1.0, float(np.abs(g0).max()))
    err = max(abs(v - v0) / max(1.0, abs(v0)), float(np.abs(g - g0).max()) / scale)
    if not err <= RTOL:
        raise AssertionError(f"{case.group} {case.label}: {name} differs from numpy by {err:.2g}")


def time_case(case, rounds=5, budget=0.05):
    """{column: seconds per call}, minimum over interleaved rounds."""
    cols = _columns(case)
    ref = case.numpy_vg(case.x)
    for name, (_, vg) in cols.items():
        _verify(name, vg, case, ref)
    inner = {}
    for name, (call, _) in cols.items():
        call()
        t0 = time.perf_counter()
        call()
        inner[name] = max(1, int(budget / max(time.perf_counter() - t0, 1e-7)))
    best = {name: math.inf for name in cols}
    for _ in range(rounds):
        for name, (call, _) in cols.items():
            t0 = time.perf_counter()
            for _ in range(inner[name]):
                call()
            best[name] = min(best[name], (time.perf_counter() - t0) / inner[name])
    return best


def _fmt(t):
    return f"{t * 1e6:10.1f} us" if t < 1e-1 else f"{t * 1e3:10.1f} ms"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m revtape.bench.matrix", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds, no 1000-size product, small MLP only")
    ap.add_argument("--only", type=lambda s: s.split(","), default=None,
                    help="groups: mlp, matmul, linalg, gp")
    args = ap.parse_args(argv)
    rounds = 3 if args.quick else 5
    head = f"{'workload':10s} {'size':28s} {'numpy':>13s} {'own (off)':>13s} {'BLAS (auto)':>13s} " \
           f"{'jax':>13s}  own/numpy  BLAS/numpy  BLAS/jax"
    print(head)
    for case in cases(args.quick, args.only):
        t = time_case(case, rounds)
        jax = t.get("jax")
        print(f"{case.group:10s} {case.label:28s} {_fmt(t['numpy'])} {_fmt(t['revtape-own'])} "
              f"{_fmt(t['revtape-blas'])} {_fmt(jax) if jax else ' ' * 13}  "
              f"{t['revtape-own'] / t['numpy']:9.2f}  {t['revtape-blas'] / t['numpy']:10.2f}  "
              + (f"{t['revtape-blas'] / jax:8.2f}" if jax else ""), flush=True)


if __name__ == "__main__":
    main()
