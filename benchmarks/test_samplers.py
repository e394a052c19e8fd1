"""What samplers pay per call: from threads C created, value-only, and batches.

    pytest benchmarks/test_samplers.py --benchmark-only

- group "foreign-thread": one log density call from a C thread that takes the
  GIL for each call (as nutpie's Rust threads and numba loops do; each call
  has a new Python thread state) against the same C loop on a Python thread.
  "noop" is the callback floor (CPython making and dropping a thread state):
  the target is the revtape call above that floor within ~1.2x of a Python
  thread's.  Each round is 500 calls.
- group "value-only": ld.logdensity / ctape.forward (the forward sweep
  alone) against ld.logdensity_and_gradient / ctape.value_and_gradient.
- group "batch-emcee": batch_logdensity on 32 x 5 rows (emcee's
  vectorize=True; ctape.batch_forward is the same replay without the
  LogDensity) against the hand-vectorised numpy of the same density (the
  target: ~1x numpy or faster).
"""

import os
import sys

import numpy as np
import pytest

import revtape as rt

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "models"))
import foreign_threads as FT  # noqa: E402

CALLS = 500
ICOV = np.linspace(0.5, 2.0, 5)


def logp(x):
    return -0.5 * np.sum(ICOV * x * x) - np.sum(np.log1p(x * x))


def numpy_batch(X):
    return -0.5 * np.sum(ICOV * X * X, axis=1) - np.sum(np.log1p(X * X), axis=1)


def numpy_vg(x):
    return logp(x), -ICOV * x - 2 * x / (1 + x * x)


X0 = np.linspace(-1.0, 1.0, 5)


@pytest.fixture(scope="module")
def ld():
    d = rt.LogDensity(logp, np.zeros(5))
    v, g = d.logdensity_and_gradient(X0)
    rv, rg = numpy_vg(X0)
    assert v == pytest.approx(rv, rel=1e-12)
    np.testing.assert_allclose(g, rg, rtol=1e-12)
    return d


def _foreign(where, fn):
    lib, why = FT.load()
    if lib is None:
        pytest.skip(why)
    cb = FT.CALLBACK(lambda i: fn(X0))
    if where == "c":
        return lambda: lib.run(cb, CALLS, 1)
    return lambda: lib.run_here(cb, CALLS)


@pytest.mark.benchmark(group="foreign-thread")
@pytest.mark.parametrize("where", ["python", "c"])
@pytest.mark.parametrize("what", ["noop", "logdensity_and_gradient", "logdensity"])
def test_foreign_thread(benchmark, ld, where, what):
    fn = (lambda x: None) if what == "noop" else getattr(ld, what)
    benchmark(_foreign(where, fn))
    assert ld.copies_made == 1          # no copy per call, from either kind of thread


@pytest.mark.benchmark(group="value-only")
@pytest.mark.parametrize("what", ["ld.logdensity", "ld.logdensity_and_gradient",
                                  "ctape.forward", "ctape.value_and_gradient"])
def test_value_only(benchmark, ld, what):
    ct = rt.compile(rt.GradientTape(logp, X0))
    obj, name = (ld, what[3:]) if what.startswith("ld.") else (ct, what[6:])
    fn = getattr(obj, name)
    out = fn(X0)
    assert (out[0] if isinstance(out, tuple) else out) == pytest.approx(logp(X0), rel=1e-12)
    benchmark(fn, X0)


@pytest.mark.benchmark(group="batch-emcee")
@pytest.mark.parametrize("what", ["batch_logdensity", "batch_logdensity_and_gradient",
                                  "ctape.batch_forward", "numpy"])
def test_batch_emcee(benchmark, ld, what):
    X = np.random.default_rng(1).normal(size=(32, 5))
    fn = (numpy_batch if what == "numpy" else
          rt.compile(rt.GradientTape(logp, X0)).batch_forward if what.startswith("ctape.") else
          getattr(ld, what))
    out = fn(X)
    np.testing.assert_allclose(out if what != "batch_logdensity_and_gradient" else out[0],
                               numpy_batch(X), rtol=1e-12)
    benchmark(fn, X)
