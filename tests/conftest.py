"""Shared set-up of the test suite: the environment, the fixtures, and the
functions and tables that more than one test file uses (importable as
``from conftest import ...``).

Layout: tests/<stage>/test_<module>.py holds the tests of
src/revtape/<stage>/<module>.py (a large module may add
test_<module>_<topic>.py beside it: test_compiler_c.py, the compiler's C
half); the C VM's own parts are tested in tests/runtime/, each file named
after the part (test_kernels.py: csrc/kernels.c, test_checked.py:
csrc/pyext/checked.c, test_scalar_path.py: the VM's scalar path);
tests/e2e/ holds what crosses the stages (the examples, copy semantics);
the top level holds the package-wide contracts (SPEC, errors, imports,
non-finite values).  There are no __init__.py files, so
every test file's name must be unique across the folders, and this is the
only conftest.py: a second one would replace this module as ``conftest``.

Long soak and stress tests are marked ``@pytest.mark.slow``; the default run
leaves them out (pyproject.toml), ``-m slow`` runs them.
"""

import atexit
import functools
import math
import os
import pathlib
import pickle
import shutil
import tempfile
import threading
import time
import warnings

import numpy as np
import pytest

# rt.compile's default native="auto" would start C compiler processes in the
# background whenever a test replays a tape often: the suite runs on the VM
# (deterministic, no compiler needed) unless REVTAPE_NATIVE is set, and
# the native tests turn the native tier on where they test it.  Any
# native library the suite builds goes to a private cache, not ~/.cache.
os.environ.setdefault("REVTAPE_NATIVE", "0")
if "REVTAPE_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="revtape-test-cache-")
    os.environ["REVTAPE_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
RUN_CACHE = pathlib.Path(os.environ["REVTAPE_CACHE_DIR"])
ROOT = pathlib.Path(__file__).resolve().parents[1]      # the checkout (or unpacked sdist)

import revtape as rt
from revtape.core import ops
from revtape.core.ops import P
from revtape import special as rsp   # revtape's own: works without scipy installed

try:  # scipy is optional: its functions are the references of the special-function rows
    import scipy.special as sps
except ImportError:
    sps = None


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


# ---------------------------------------------------------------- the native tier's cache

_prebuild = {}


def _build_native_objects():
    from revtape.runtime import native
    try:
        native._runtime_objects(*native._compiler(), RUN_CACHE, time.monotonic() + 600)
    except Exception:       # noqa: BLE001 -- native_objects builds again and raises it in a test
        pass


def pytest_collection_finish(session):
    """A run with native tests starts compiling the runtime objects at once, in
    the background: on two cores gcc overlaps the tests before the first
    native one instead of holding it up."""
    if any("native_objects" in getattr(item, "fixturenames", ()) for item in session.items):
        _prebuild["thread"] = threading.Thread(target=_build_native_objects, daemon=True)
        _prebuild["thread"].start()


def pytest_sessionfinish(session, exitstatus):
    # no compiler left running after the run (unless it was interrupted)
    if "thread" in _prebuild and exitstatus != pytest.ExitCode.INTERRUPTED:
        _prebuild["thread"].join()


@pytest.fixture(scope="session")
def native_objects():
    """kernels.c and specfun.c compiled once for the whole run (kernels.c alone
    takes ~25 s of gcc): every native library links them, and a cache
    directory without them would compile them again.  A test that builds
    native code asks for this fixture (or native_cache)."""
    from revtape.runtime import native
    if "thread" in _prebuild:
        _prebuild["thread"].join()
    objs = native._runtime_objects(*native._compiler(), RUN_CACHE, time.monotonic() + 600)
    return [pathlib.Path(p) for p in objs]


@pytest.fixture
def native_cache(tmp_path, monkeypatch, native_objects):
    """An empty native cache for one test (its programs are built, not found),
    holding only the run's runtime objects."""
    seed_native_cache(tmp_path, native_objects)
    monkeypatch.setenv("REVTAPE_CACHE_DIR", str(tmp_path))
    return tmp_path


def seed_native_cache(d, objects):
    for obj in objects:
        shutil.copy(obj, d)


# ---------------------------------------------------------------- gradient checks

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


REL = dict(rtol=1e-12, atol=1e-13)


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
        size = np.size(x)
        H_ref = tape.hessian(x).reshape(size, size)
        H_c = ct.hessian(x).reshape(size, size)
        scale = max(np.abs(H_ref).max(), 1e-300)
        np.testing.assert_allclose(H_c, H_ref, rtol=1e-10, atol=1e-11 * scale)
        np.testing.assert_allclose(H_ref, H_ref.T, rtol=1e-9, atol=1e-10 * scale)
        # Hessian columns against finite differences of the (compiled) gradient
        rng = np.random.default_rng(2)
        v = rng.standard_normal(np.shape(x))
        h = 1e-4
        fd = (ct.gradient(x + h * v) - ct.gradient(x - h * v)).ravel() / (2 * h)
        Hv = H_c @ v.ravel()
        np.testing.assert_allclose(Hv, fd, rtol=1e-5, atol=1e-6 * scale)
        np.testing.assert_allclose(np.ravel(ct.hvp(x, v)), Hv, rtol=1e-10, atol=1e-11 * scale)
    return tape, ct


def opcodes(ct):
    """The instruction names of a compiled tape, from its disassembly."""
    return [line.split("= ")[1].split("(")[0] for line in ct.disassemble().splitlines()[1:]]


# ---------------------------------------------------------------- bits

def bits(a):
    """The float64 bit patterns of a (-0.0 != 0.0; a nan's sign and payload count)."""
    return np.ascontiguousarray(np.asarray(a, dtype=np.float64)).view(np.int64)


def same_bits(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and np.array_equal(bits(a), bits(b))


def same_bits_nan(a, b):
    """Bit for bit, except that any nan matches any nan: C fixes no nan's sign or
    payload where two nans meet (gcc may commute an addition, x86 returns the
    first nan)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or not np.array_equal(np.isnan(a), np.isnan(b)):
        return False
    keep = ~np.isnan(a)
    return np.array_equal(bits(a)[keep], bits(b)[keep])


def single_replays(ctape, X):
    """(values, gradients) of ctape.value_and_gradient row by row: what a batch must give."""
    vals, grads = zip(*(ctape.value_and_gradient(x) for x in X))
    return np.array(vals), np.array(grads)


def all_same(xs, ys, same=same_bits):
    """same() on each of a tuple of results (value, gradient) or on one result."""
    if isinstance(xs, tuple):
        return len(xs) == len(ys) and all(same(a, b) for a, b in zip(xs, ys))
    return same(xs, ys)


# ---------------------------------------------------------------- the elementwise rows as users write them
# Every differentiable unary and binary row of the op table with the spelling
# a user writes, its analytic derivative and a sampler inside its domain.
# tests/core/test_ops.py fails until a new row is added here; it drives finite
# differences, compiled vs reference replay and Hessians there, and the
# array-kernel tests of tests/runtime/test_kernels.py.

def uniform(rng, shape, lo, hi):
    x = rng.uniform(lo, hi, size=shape)
    return float(x) if shape == () else x


def away_from_zero(rng, shape):
    x = rng.uniform(0.3, 2.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    return float(x) if shape == () else x


# name -> (what the user writes, analytic derivative, sampler(rng, shape))
UNARY = {
    "neg": (lambda x: -x, lambda x: -np.ones_like(x), lambda r, s: uniform(r, s, -2, 2)),
    "exp": (np.exp, np.exp, lambda r, s: uniform(r, s, -2, 2)),
    "log": (np.log, lambda x: 1 / x, lambda r, s: uniform(r, s, 0.3, 3)),
    "log1p": (np.log1p, lambda x: 1 / (1 + x), lambda r, s: uniform(r, s, -0.5, 2)),
    "expm1": (np.expm1, np.exp, lambda r, s: uniform(r, s, -2, 2)),
    "sqrt": (np.sqrt, lambda x: 0.5 / np.sqrt(x), lambda r, s: uniform(r, s, 0.3, 3)),
    "cbrt": (np.cbrt, lambda x: 1.0 / (3.0 * np.cbrt(x) ** 2), lambda r, s: uniform(r, s, 0.3, 3)),
    "square": (np.square, lambda x: 2 * x, lambda r, s: uniform(r, s, -2, 2)),
    "reciprocal": (np.reciprocal, lambda x: -1 / x ** 2, away_from_zero),
    "sin": (np.sin, np.cos, lambda r, s: uniform(r, s, -3, 3)),
    "cos": (np.cos, lambda x: -np.sin(x), lambda r, s: uniform(r, s, -3, 3)),
    "tan": (np.tan, lambda x: 1 / np.cos(x) ** 2, lambda r, s: uniform(r, s, -1.2, 1.2)),
    "tanh": (np.tanh, lambda x: 1 / np.cosh(x) ** 2, lambda r, s: uniform(r, s, -2, 2)),
    "sinh": (np.sinh, np.cosh, lambda r, s: uniform(r, s, -2, 2)),
    "cosh": (np.cosh, np.sinh, lambda r, s: uniform(r, s, -2, 2)),
    "arctan": (np.arctan, lambda x: 1 / (1 + x ** 2), lambda r, s: uniform(r, s, -3, 3)),
    "abs": (np.abs, np.sign, away_from_zero),
    "arcsin": (np.arcsin, lambda x: 1 / np.sqrt(1 - x ** 2), lambda r, s: uniform(r, s, -0.9, 0.9)),
    "arccos": (np.arccos, lambda x: -1 / np.sqrt(1 - x ** 2), lambda r, s: uniform(r, s, -0.9, 0.9)),
    "arcsinh": (np.arcsinh, lambda x: 1 / np.sqrt(1 + x ** 2), lambda r, s: uniform(r, s, -3, 3)),
    "arccosh": (np.arccosh, lambda x: 1 / np.sqrt(x ** 2 - 1), lambda r, s: uniform(r, s, 1.1, 4)),
    "arctanh": (np.arctanh, lambda x: 1 / (1 - x ** 2), lambda r, s: uniform(r, s, -0.9, 0.9)),
    "sinc": (np.sinc, lambda x: (np.cos(np.pi * x) - np.sinc(x)) / x,
             lambda r, s: uniform(r, s, 0.3, 3) * np.sign(uniform(r, s, -1, 1))),
}
if sps is not None:
    UNARY.update({
        "erfc": (sps.erfc, lambda x: -2 / math.sqrt(math.pi) * np.exp(-x ** 2),
                 lambda r, s: uniform(r, s, -2, 2)),
        "erfcx": (sps.erfcx, lambda x: 2 * x * sps.erfcx(x) - 2 / math.sqrt(math.pi),
                  lambda r, s: uniform(r, s, -2, 4)),
        "ndtr": (sps.ndtr, lambda x: np.exp(-x ** 2 / 2) / math.sqrt(2 * math.pi),
                 lambda r, s: uniform(r, s, -3, 3)),
        "log_ndtr": (sps.log_ndtr, lambda x: np.exp(-x ** 2 / 2) / math.sqrt(2 * math.pi) / sps.ndtr(x),
                     lambda r, s: uniform(r, s, -5, 3)),
        "ndtri": (sps.ndtri, lambda p: math.sqrt(2 * math.pi) * np.exp(sps.ndtri(p) ** 2 / 2),
                  lambda r, s: uniform(r, s, 0.05, 0.95)),
        "logit": (sps.logit, lambda p: 1 / (p * (1 - p)), lambda r, s: uniform(r, s, 0.05, 0.95)),
        # added as one op-table row (the CONTRIBUTING.md recipe)
        "erfinv": (sps.erfinv, lambda x: math.sqrt(math.pi) / 2 * np.exp(sps.erfinv(x) ** 2),
                   lambda r, s: uniform(r, s, -0.95, 0.95)),
        "i0e": (sps.i0e, lambda x: sps.i1e(x) - np.sign(x) * sps.i0e(x), away_from_zero),
        "i1e": (sps.i1e, lambda x: sps.i0e(x) - sps.i1e(x) / x - np.sign(x) * sps.i1e(x),
                away_from_zero),
    })
if sps is not None:
    UNARY.update({
        "gammaln": (sps.gammaln, sps.digamma, lambda r, s: uniform(r, s, 0.3, 5)),
        "digamma": (sps.digamma, lambda x: sps.polygamma(1, x), lambda r, s: uniform(r, s, 0.3, 5)),
        # scipy.special.polygamma is not a ufunc (it calls np.asarray), so trigamma is
        # reached through the primitive; see test_polygamma_dispatches in test_ops.py.
        "trigamma": (ops.P.trigamma, lambda x: sps.polygamma(2, x), lambda r, s: uniform(r, s, 0.3, 5)),
        "expit": (sps.expit, lambda x: sps.expit(x) * sps.expit(-x), lambda r, s: uniform(r, s, -4, 4)),
        "log_expit": (sps.log_expit, lambda x: sps.expit(-x), lambda r, s: uniform(r, s, -4, 4)),
        "erf": (sps.erf, lambda x: 2 / math.sqrt(math.pi) * np.exp(-x ** 2),
                lambda r, s: uniform(r, s, -2, 2)),
        "gamma": (sps.gamma, lambda x: sps.gamma(x) * sps.digamma(x),
                  lambda r, s: uniform(r, s, 0.3, 4)),
        "rgamma": (sps.rgamma, lambda x: -sps.rgamma(x) * sps.digamma(x),
                   lambda r, s: uniform(r, s, 0.3, 4)),
        "j0": (sps.j0, lambda x: -sps.j1(x), lambda r, s: uniform(r, s, 0.2, 10)),
        "j1": (sps.j1, lambda x: 0.5 * (sps.j0(x) - sps.jv(2, x)), lambda r, s: uniform(r, s, -5, 10)),
        "y0": (sps.y0, lambda x: -sps.y1(x), lambda r, s: uniform(r, s, 0.5, 10)),
        "y1": (sps.y1, lambda x: 0.5 * (sps.y0(x) - sps.yn(2, x)),
               lambda r, s: uniform(r, s, 0.5, 10)),
    })


def _pos(r, s):
    return uniform(r, s, 0.5, 2.0)


def _any(r, s):
    return uniform(r, s, -2.0, 2.0)


def _separated(r, sa, sb):
    """a and b at least 0.1 apart wherever they meet (no ties for maximum/minimum)."""
    while True:
        a, b = _any(r, sa), _any(r, sb)
        if np.min(np.abs(np.subtract(a, b))) > 0.1:
            return a, b


# name -> (user spelling, d/da, d/db, sampler(rng, sa, sb) -> (a, b))
BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: np.ones_like(a + b), lambda a, b: np.ones_like(a + b),
            lambda r, sa, sb: (_any(r, sa), _any(r, sb))),
    "sub": (lambda a, b: a - b, lambda a, b: np.ones_like(a + b), lambda a, b: -np.ones_like(a + b),
            lambda r, sa, sb: (_any(r, sa), _any(r, sb))),
    "mul": (lambda a, b: a * b, lambda a, b: b + 0 * a, lambda a, b: a + 0 * b,
            lambda r, sa, sb: (_any(r, sa), _any(r, sb))),
    "div": (lambda a, b: a / b, lambda a, b: 1 / b + 0 * a, lambda a, b: -a / b ** 2,
            lambda r, sa, sb: (_any(r, sa), away_from_zero(r, sb))),
    "pow": (lambda a, b: a ** b, lambda a, b: b * a ** (b - 1), lambda a, b: np.log(a) * a ** b,
            lambda r, sa, sb: (_pos(r, sa), _any(r, sb))),
    "maximum": (np.maximum, lambda a, b: (a > b) + 0.0, lambda a, b: (b > a) + 0.0, _separated),
    "minimum": (np.minimum, lambda a, b: (a < b) + 0.0, lambda a, b: (b < a) + 0.0, _separated),
    "logaddexp": (np.logaddexp, lambda a, b: np.exp(a - np.logaddexp(a, b)),
                  lambda a, b: np.exp(b - np.logaddexp(a, b)),
                  lambda r, sa, sb: (_any(r, sa), _any(r, sb))),
    "arctan2": (np.arctan2, lambda a, b: b / (a ** 2 + b ** 2), lambda a, b: -a / (a ** 2 + b ** 2),
                lambda r, sa, sb: (_any(r, sa), away_from_zero(r, sb))),
}
def _off_the_jumps(r, sa, sb):
    """a, b with a / b at least 0.05 away from a whole number wherever they meet:
    remainder and fmod jump there (and finite differences with them)."""
    while True:
        a, b = uniform(r, sa, -5.0, 5.0), away_from_zero(r, sb)
        q = np.divide(a, b)
        if np.min(np.abs(q - np.round(q))) > 0.05:
            return a, b


BINARY["remainder"] = (np.remainder, lambda a, b: np.ones_like(a + b),
                       lambda a, b: -np.floor(a / b), _off_the_jumps)
BINARY["fmod"] = (np.fmod, lambda a, b: np.ones_like(a + b), lambda a, b: -np.trunc(a / b),
                  _off_the_jumps)
if sps is not None:
    BINARY["xlogy"] = (sps.xlogy, lambda a, b: np.log(b) + 0 * a, lambda a, b: a / b,
                       lambda r, sa, sb: (_any(r, sa), _pos(r, sb)))
    BINARY["xlog1py"] = (sps.xlog1py, lambda a, b: np.log1p(b) + 0 * a, lambda a, b: a / (1 + b),
                         lambda r, sa, sb: (_any(r, sa), _pos(r, sb)))
    BINARY["betaln"] = (sps.betaln, lambda a, b: sps.digamma(a) - sps.digamma(a + b),
                        lambda a, b: sps.digamma(b) - sps.digamma(a + b),
                        lambda r, sa, sb: (_pos(r, sa), _pos(r, sb)))


def quiet_draws(fn, *a):
    """fn(*a) with rt.RandomDrawWarning silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rt.RandomDrawWarning)
        return fn(*a)


# ---------------------------------------------------------------- a function with a branch

def piecewise(x):
    if x[0] > 0:
        return np.sum(x ** 2)
    return -np.sum(x)


def d_piecewise(x):
    return 2 * x if x[0] > 0 else -np.ones_like(x)


POS = np.array([0.5, 2.0, -1.0])
NEG = np.array([-0.5, 2.0, -1.0])


# ---------------------------------------------------------------- composite programs
# name -> (f, input size): programs mixing the op families, for compiled vs
# reference replays (tests/runtime/test_compiled.py) and for non-finite
# points (tests/test_nonfinite.py).

def _composite_programs():
    W = np.random.default_rng(42).normal(size=(4, 3))
    return {
        "elementwise": (lambda x: np.sum(np.exp(x) * np.sin(x) + np.log1p(x ** 2) / (2 + np.cos(x))), 4),
        "special": (lambda x: np.sum(rsp.gammaln(np.exp(x)) + rsp.digamma(2 + x ** 2)
                                     + rsp.log_expit(x) + rsp.erf(x) + rsp.xlogy(x ** 2, 1 + x ** 2)), 4),
        "broadcast": (lambda x: np.sum(x.reshape(2, 2) * x[:2] + x[2] - x.reshape(2, 2).T), 4),
        "matmul": (lambda x: np.sum(np.tanh(W @ x[:3])) + x[:3] @ x[:3] + np.sum(x[:4] @ W), 4),
        "reduce": (lambda x: np.sum(np.max(x.reshape(2, 3), axis=0) * np.min(x.reshape(2, 3), axis=1,
                                                                             keepdims=True))
                   + rsp.logsumexp(x.reshape(3, 2), axis=0).sum() + np.prod(x.reshape(3, 2), axis=1).sum(), 6),
        "select": (lambda x: np.sum(np.where(x > 0, np.sqrt(np.abs(x)), x ** 3))
                   + np.sum(np.clip(x, -0.5, 0.5)) + np.sum(np.maximum(x, 0.2)), 5),
        "index": (lambda x: np.sum(x[::-1] * x[[0, 0, 2, 4, 4]]) + x[1] * x[-1]
                  + np.sum(np.concatenate([x[:2], x[3:]]) ** 2) + np.sum(np.stack([x, x ** 2], axis=1)[:, 1]), 5),
        "scalar_loop": (lambda x: sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(4)), 5),
        "pow": (lambda x: np.sum(np.abs(x) ** x[0]) + np.sum((1 + x ** 2) ** 1.5) + 2.0 ** x[1], 3),
    }


FNS = _composite_programs()


# ---------------------------------------------------------------- every op family in one program
# Programs that reach every elementwise row, every scalar form and every
# structural family at once: the native tier and the VM's scalar path are
# compared with the VM's general sweeps on them (few programs, many ops:
# compiles are what costs).

ELEMENTWISE_UNARY = [n for n, o in ops.OPS.items() if o.family in ("unary", "unary_nd")]
ELEMENTWISE_BINARY = [n for n, o in ops.OPS.items() if o.family in ("binary", "binary_nd")]


def _unary_arg(name, z):
    return z + 1.5 if name == "arccosh" else z         # the rest take (0.2, 0.8)


def elementwise_families(x):
    """Every unary row on an array and on a scalar; every binary row as _VV,
    _VS, _SV (arrays) and as a scalar _VV."""
    s, s2, y = x[0], x[1], x[::-1]
    tot = 0.0
    for name in ELEMENTWISE_UNARY:
        fn = getattr(P, name)
        tot = tot + np.sum(fn(_unary_arg(name, x))) + fn(_unary_arg(name, s))
    for name in ELEMENTWISE_BINARY:
        fn = getattr(P, name)
        tot = tot + np.sum(fn(x, y)) + np.sum(fn(x, s2)) + np.sum(fn(s, x)) + fn(s, s2)
    return tot


def scalar_families(x, skip=()):
    """Every row on scalars only (plus WHERE, CLIP, a guard): the fused scalar
    generator's program."""
    s, s2, s3 = x[0], x[1], x[2]
    tot = 0.0
    for name in (u for u in ELEMENTWISE_UNARY if u not in skip):
        tot = tot + getattr(P, name)(_unary_arg(name, s)) * s3
    for name in (b for b in ELEMENTWISE_BINARY if b not in skip):
        tot = tot + getattr(P, name)(s, s2) * s3 + getattr(P, name)(s2, 0.35)
    tot = tot + np.where(s > s2, s * s3, s2) + np.where(s3 < 0.5, 0.25, s2 * s3)
    tot = tot + np.where(s3 < 0.5, s * s2, -0.5) + np.clip(s3, 0.3, 0.6) * s
    if s < 0.9:                                                  # a guard
        tot = tot + (s - s2) ** 2
    return tot + 3.0 * s * s2 + s3 - s


_SPD3 = np.array([[2.0, 0.3, 0.1], [0.3, 1.5, 0.2], [0.1, 0.2, 1.8]])


def structure_families(x):
    """Reductions (every kind, with axes), matmul, every linalg row,
    cumulative ops, structure (reshape, take, scatter, concatenation), array
    WHERE/CLIP, fused forms and a guard."""
    m = x.reshape(2, 3)
    t = (np.sum(np.max(m, axis=0)) + np.sum(np.min(m, axis=1) * x[:2]) + np.prod(x[:4])
         + np.sum(rsp.logsumexp(m, axis=1)) + np.max(x) * np.min(x ** 2))
    t = t + np.sum(np.where(np.all(m > 0.1, axis=0), x[:3], 0.0))
    t = t + np.sum(np.where(np.any(m > 0.75, axis=1), x[3:5], x[:2]))
    t = t + np.sum(np.tanh(m @ _SPD3) @ x[:3]) + x[:3] @ x[3:]
    S = _SPD3 + np.outer(x[:3], x[:3])
    L = np.linalg.cholesky(S)
    t = t + np.linalg.slogdet(S)[1] + np.sum(np.linalg.solve(S, x[3:])) + np.sum(np.linalg.inv(S))
    t = t + np.sum(np.linalg.eigh(S)[0] * x[:3]) + np.sum(L * x[3:])
    import revtape.numpy_api.linalg as rla
    t = t + np.sum(rla.solve_triangular(L, x[3:], lower=True))
    t = t + np.sum(np.cumsum(np.exp(x)) * x) + np.sum(np.cumprod(x[:4]))
    w = x[::-1] * x[[0, 0, 2, 4, 4, 5]] + np.concatenate([x[:2], x[3:], x[:1]]) ** 2
    t = t + np.sum(np.sum(w.reshape(2, 3), axis=0) * x[:3])
    t = t + np.sum(np.where(x > 0.5, x ** 2, 1.5)) + np.sum(np.where(x > 0.5, 0.5, x ** 3))
    t = t + np.sum(np.where(x > 0.5, np.sin(x), x[::-1])) + np.sum(np.clip(x, 0.3, 0.6) * x)
    t = t + np.sum((x - x[::-1]) ** 2) + np.sum(x[:3] + x[3] * x[3:]) + (x[0] - x[1]) ** 2
    t = t + np.sum(np.exp(x)[[0, 2, 2, 5]] + x[1] * np.sin(x[2:]))
    if x[0] < 0.9:
        t = t + x[1] * x[2]
    return t


# ---------------------------------------------------------------- recorded programs
# Every benchmark workload and a few tapes with guards and masks: the
# compiler's C and Python halves must build the same programs from them
# (tests/lower/test_compiler_c.py), in tuples or columns
# (tests/trace/test_instrstore.py).

def _guarded(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] > 0:
            s = s + x[i] * x[i]
        else:
            s = s - np.exp(x[i])
    return s + np.sum(np.where(x > 0, x, 2 * x)) + np.max(x) ** 2


def _masked(x):
    return np.sum(x[x > 0.1] ** 2) + np.sum(np.sin(x))


@functools.cache
def recipes():
    """[(name, f, x)]: every benchmark workload, a long chain, guards, a mask."""
    from revtape.bench import workloads as W
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, make in W.WORKLOADS.items():
            wl = make()
            out.append((name, wl.f, np.ascontiguousarray(wl.x0, dtype=np.float64)))
    out.append(("chain300", W.chain(300).f, np.array([0.5])))
    out.append(("guards", _guarded, np.array([0.3, -0.2, 1.5, -2.0])))
    out.append(("masked", _masked, np.array([0.3, -0.2, 1.5, -2.0, 0.05])))
    return out


def record_quietly(f, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rt.GradientTape(f, x)


@functools.cache
def recipe_tapes():
    """[(name, tape)] of recipes(), recorded once for the run."""
    return [(name, record_quietly(f, x)) for name, f, x in recipes()]


def program_bytes(tape, **kw):
    """Everything a compiled program is made of, comparable with ==."""
    from revtape.lower import compiler
    p = compiler._compile_tape(tape, **kw)
    return (p.code.tobytes(), p.ints.tobytes(), p.consts.tobytes(), p.n_in, p.n_grad,
            p.n_fixed, p.n_vals, p.out_off, p.out_shape, repr(p.inputs),
            [(g[1], g[2]) for g in p.guards], p.value_off, repr(p.extras), p.stats)


# ---------------------------------------------------------------- importable by spawned processes
# pickle refers to functions, classes and primitives by qualified name: what a
# test sends to a spawned worker must be defined at module level in a module
# the worker can import (this one: tests/ is on the path pytest passes on).

# Custom primitives (tests/core/test_primitives.py, tests/runtime/test_batch.py).

@rt.primitive
def logsumexp(x):
    """autograd's example primitive: a stable log-sum-exp of a vector."""
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


def _logsumexp_vjp(ans, x):
    return lambda g: g * np.exp(x - ans)


rt.defvjp(logsumexp, _logsumexp_vjp)


@rt.primitive
def logsumexp_fwd(x):
    """The same function with a forward-mode rule as well."""
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


rt.defvjp(logsumexp_fwd, _logsumexp_vjp)
rt.defjvp(logsumexp_fwd, lambda g, ans, x: np.sum(g * np.exp(x - ans)))

MODEL_W = np.array([[1.0, -2.0, 0.5], [0.3, 0.7, -1.1]])


def model(x):
    """logsumexp inside a larger model."""
    return logsumexp(MODEL_W @ x) + logsumexp(2.0 * x) - 0.5 * np.sum(x ** 2)


def model_builtin(x):
    """The same model with revtape's built-in logsumexp op."""
    return rsp.logsumexp(MODEL_W @ x) + rsp.logsumexp(2.0 * x) - 0.5 * np.sum(x ** 2)


def model_fwd(x):
    return logsumexp_fwd(MODEL_W @ x) + logsumexp_fwd(2.0 * x) - 0.5 * np.sum(x ** 2)


def replay_pickled(payload, xs):
    """Run in a spawned process: unpickle a compiled tape, replay it at xs."""
    ctape = pickle.loads(payload)
    return [ctape.value_and_gradient(np.asarray(x)) for x in xs]


# Functions rt.grad objects are built on (tests/transforms/test_grad.py).

def logreg_loss(w, X, y):
    z = X @ w
    return np.sum(np.logaddexp(0.0, z) - y * z)


def logreg_grad(w, X, y):
    z = X @ w
    return X.T @ (1.0 / (1.0 + np.exp(-z)) - y)


class Quadratic:
    def __init__(self, c):
        self.c = c

    def logp(self, x):
        return -0.5 * np.sum((x - self.c) ** 2)


def call(fn, *args):
    """Run in a worker: call a (pickled) gradient function there."""
    return fn(*args)
