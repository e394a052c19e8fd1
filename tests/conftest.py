"""Shared helpers for the core tests: a seeded RNG and a finite-difference gradient check."""

import atexit
import os
import shutil
import tempfile

import numpy as np
import pytest

# rt.compile's default native="auto" would start C compiler processes in the
# background whenever a test replays a tape often: the suite runs on the VM
# (deterministic, no compiler needed) unless REVTAPE_NATIVE is set, and
# tests/test_native.py turns the native tier on where it tests it.  Any
# native library the suite builds goes to a private cache, not ~/.cache.
os.environ.setdefault("REVTAPE_NATIVE", "0")
if "REVTAPE_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="revtape-test-cache-")
    os.environ["REVTAPE_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)

import revtape as rt


@pytest.fixture(autouse=True)
def _fresh_program_cache():
    """Each test starts with an empty process-wide program cache (rt.grad shares
    programs between transforms of the same function), so that what a test
    counts in cache_info() is its own."""
    from revtape.transforms import progcache
    progcache.clear()
    yield


@pytest.fixture
def rng():
    """A fresh, fixed-seed generator per test: every test sees the same numbers."""
    return np.random.default_rng(20240611)


def _call(f, x):
    return f(*x) if isinstance(x, tuple) else f(x)


def _axpy(x, h, v):
    if isinstance(x, tuple):
        return tuple(xi + h * vi for xi, vi in zip(x, v))
    return x + h * v


def _random_like(x, rng):
    if isinstance(x, tuple):
        return tuple(_random_like(xi, rng) for xi in x)
    if np.ndim(x) == 0:
        return float(rng.standard_normal())
    return rng.standard_normal(np.shape(x))


def _vdot(g, v):
    if isinstance(v, tuple):
        return sum(_vdot(gi, vi) for gi, vi in zip(g, v))
    return float(np.sum(np.asarray(g) * np.asarray(v)))


def directional_fd(f, x, v, h=1e-3):
    """d/dt f(x + t v) at t = 0 by a fourth-order central difference."""
    fp1, fm1 = float(_call(f, _axpy(x, h, v))), float(_call(f, _axpy(x, -h, v)))
    fp2, fm2 = float(_call(f, _axpy(x, 2 * h, v))), float(_call(f, _axpy(x, -2 * h, v)))
    return (8.0 * (fp1 - fm1) - (fp2 - fm2)) / (12.0 * h)


def check_grad(f, x, rtol=1e-6, atol=1e-8, h=1e-3, n_dirs=2, seed=0):
    """autograd-style check_grads: rt.gradient(f, x) projected on random directions
    equals a central finite difference of f (evaluated on plain numpy) along them.

    f is called as f(*x) for a tuple x.  Returns the revtape gradient."""
    g = rt.gradient(f, x)
    if isinstance(x, tuple):
        assert isinstance(g, tuple) and len(g) == len(x)
        for gi, xi in zip(g, x):
            assert np.shape(gi) == np.shape(xi)
    else:
        assert np.shape(g) == np.shape(x)
    rng = np.random.default_rng(seed)
    for _ in range(n_dirs):
        v = _random_like(x, rng)
        ad = _vdot(g, v)
        fd = directional_fd(f, x, v, h)
        assert abs(ad - fd) <= atol + rtol * max(abs(ad), abs(fd)), (
            f"directional derivative: revtape {ad!r}, finite differences {fd!r}")
    return g


def fd_jacobian(f, x, h=1e-4):
    """Full central-difference Jacobian of an array-valued f at array x."""
    x = np.asarray(x, dtype=float)
    y0 = np.asarray(f(x))
    J = np.empty(y0.shape + x.shape)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        J[(...,) + i] = (8 * (np.asarray(f(x + e)) - np.asarray(f(x - e)))
                         - (np.asarray(f(x + 2 * e)) - np.asarray(f(x - 2 * e)))) / (12 * h)
    return J
