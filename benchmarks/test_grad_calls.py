"""What passing data as arguments costs an rt.grad call (issue 11, item 6).

A 569 x 30 logistic regression (synthetic data, the size of the breast-cancer
set), differentiated in w, written two ways:

* closure: X and y are globals, copied into the tape as constants;
* data arguments: loss(w, X, y) -- X and y are tape inputs, re-read on every
  call (what docs/guide/grad.md recommends, since they can change without re-recording).

The data-argument call checks only shapes and dtypes (part of the cache key)
and copies each array into the program's arena (one memcpy); goal: within
1.2x of the closure call.  Plus ctape.value_and_gradient on the closure's tape,
the floor both share.

Run: pytest benchmarks/test_grad_calls.py --benchmark-only
(and python benchmarks/test_grad_calls.py prints the ratio, interleaving the
two so that a noisy machine slows both alike).
"""

import time

import numpy as np
import pytest

import revtape as rt

pytestmark = pytest.mark.benchmark(group="grad-calls")

N, D = 569, 30
_rng = np.random.default_rng(0)
X = _rng.normal(size=(N, D))
Y = (_rng.random(N) < 1.0 / (1.0 + np.exp(-X @ _rng.normal(size=D)))).astype(float)
W = _rng.normal(size=D) * 0.1


def loss_data(w, X, y):
    z = X @ w
    return np.sum(np.logaddexp(0.0, z) - y * z)


def loss_closure(w):
    z = X @ w
    return np.sum(np.logaddexp(0.0, z) - Y * z)


def grad_numpy(w, X, y):
    z = X @ w
    return X.T @ (1.0 / (1.0 + np.exp(-z)) - y)


def _callers():
    vg_data = rt.value_and_grad(loss_data)
    vg_closure = rt.value_and_grad(loss_closure)
    ctape = rt.compile(rt.GradientTape(loss_closure, W))
    for v, g in (vg_data(W, X, Y), vg_closure(W), ctape.value_and_gradient(W)):
        assert v == pytest.approx(loss_data(W, X, Y), rel=1e-12)
        np.testing.assert_allclose(g, grad_numpy(W, X, Y), rtol=1e-10)
    return {"closure": lambda: vg_closure(W), "data-arguments": lambda: vg_data(W, X, Y),
            "ctape": lambda: ctape.value_and_gradient(W)}


@pytest.fixture(scope="module")
def callers():
    return _callers()


@pytest.mark.parametrize("how", ["closure", "data-arguments", "ctape"])
def test_logreg_grad_call(benchmark, callers, how):
    benchmark.extra_info.update({"N": N, "D": D, "how": how})
    benchmark(callers[how])


def main(rounds=80, number=100):
    # CPU time of this thread (time.thread_time_ns): on a shared machine the
    # time spent descheduled is not the call's; best of `rounds`.
    calls = _callers()
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(rounds):
        for name, f in calls.items():
            t = time.thread_time_ns()
            for _ in range(number):
                f()
            best[name] = min(best[name], (time.thread_time_ns() - t) / number / 1000)
    print(f"logreg {N}x{D}: " + ", ".join(f"{k} {v:.1f} us" for k, v in best.items())
          + f"; data-arguments / closure = {best['data-arguments'] / best['closure']:.2f}")


if __name__ == "__main__":
    main()
