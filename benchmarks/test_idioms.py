"""The calling idioms of programs written for autograd, against autograd when
installed: rt.grad(f)(x) written inline vs hoisted, an optimiser loop passing
the iteration number (grad(params, i), as autograd's adam does), and the
first call of a program that asks for one gradient.

Run: pytest benchmarks/test_idioms.py --benchmark-only
(python benchmarks/test_idioms.py prints the medians).
"""

import itertools
import statistics
import time

import numpy as np
import pytest

import revtape as rt

try:
    import autograd
    import autograd.numpy as anp
except ImportError:          # an optional peer
    autograd = anp = None

RNG = np.random.default_rng(0)
X = RNG.normal(size=(100, 8))
Y = (RNG.random(100) > 0.5).astype(float)
W = np.linspace(-0.3, 0.3, 8)
_fresh = itertools.count()


def make_loss(np_, c=0.1):
    """Logistic regression with an L2 term, written against a numpy module."""
    def loss(w):
        p = 1.0 / (1.0 + np_.exp(-np_.dot(X, w)))
        return -np_.sum(Y * np_.log(p) + (1 - Y) * np_.log(1 - p)) + c * np_.sum(w ** 2)
    return loss


def make_step_loss(np_):
    def loss(w, i):
        p = 1.0 / (1.0 + np_.exp(-np_.dot(X, w)))
        nll = -np_.sum(Y * np_.log(p) + (1 - Y) * np_.log(1 - p))
        return nll / (1.0 + 0.01 * i) + 0.1 * np_.sum(w ** 2)
    return loss


def reference_grad(w, c=0.1):
    p = 1.0 / (1.0 + np.exp(-X @ w))
    return X.T @ (p - Y) + 2 * c * w


LOSS = make_loss(np)
STEP = make_step_loss(np)
_HOISTED = rt.grad(LOSS)
_AG_LOSS = make_loss(anp) if anp else None
_AG_STEP = make_step_loss(anp) if anp else None


def inline():
    return rt.grad(LOSS)(W)


def hoisted():
    return _HOISTED(W)


def autograd_inline():
    return autograd.grad(_AG_LOSS)(W)


def int_loop(n=50):
    g = rt.grad(STEP)
    w = W.copy()
    for i in range(n):
        w = w - 0.01 * g(w, i)
    return w


def autograd_int_loop(n=50):
    g = autograd.grad(_AG_STEP)
    w = W.copy()
    for i in range(n):
        w = w - 0.01 * g(w, i)
    return w


def first_call():
    # a program never seen before (its closure constant differs), asked once
    c = 0.1 + next(_fresh) * 1e-9
    return rt.grad(make_loss(np, c))(W)


def autograd_first_call():
    c = 0.1 + next(_fresh) * 1e-9
    return autograd.grad(make_loss(anp, c))(W)


CASES = {
    "inline-vs-hoisted": [("revtape-inline", inline), ("revtape-hoisted", hoisted),
                          ("autograd", autograd_inline)],
    "int-argument-loop": [("revtape", int_loop), ("autograd", autograd_int_loop)],
    "first-call": [("revtape", first_call), ("autograd", autograd_first_call)],
}


def _params():
    for group, cases in CASES.items():
        for name, fn in cases:
            yield pytest.param(group, name, fn, id=f"{group}-{name}")


@pytest.mark.parametrize("group,name,fn", list(_params()))
def test_idiom(benchmark, group, name, fn):
    if name.startswith("autograd") and autograd is None:
        pytest.skip("autograd is not installed (pip install autograd)")
    benchmark.group = f"idioms-{group}"
    got = fn()
    if group == "int-argument-loop":
        ref = W.copy()
        for i in range(50):
            p = 1.0 / (1.0 + np.exp(-X @ ref))
            ref = ref - 0.01 * (X.T @ (p - Y) / (1.0 + 0.01 * i) + 0.2 * ref)
        np.testing.assert_allclose(got, ref, rtol=1e-10)
    else:
        np.testing.assert_allclose(got, reference_grad(W, 0.1), rtol=1e-6)
    if group == "first-call":
        benchmark.pedantic(fn, rounds=30, iterations=1, warmup_rounds=2)
    else:
        benchmark(fn)


def _median(fn, n):
    fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


if __name__ == "__main__":
    for group, cases in CASES.items():
        for name, fn in cases:
            if name.startswith("autograd") and autograd is None:
                continue
            n = 30 if group != "inline-vs-hoisted" else 2000
            print(f"{group:20s} {name:16s} {_median(fn, n) * 1e6:10.1f} us")
