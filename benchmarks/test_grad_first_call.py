"""The first call of rt.grad(f): record + compile + collect guards (issue 11,
item 6).  It must not grow with the size of the user's heap: until the
watcher found function objects by scanning the heap (gc.get_referrers), a
heap of 10^6 live containers made the first call of eight-schools ~270 ms
instead of ~2 ms.

Run: pytest benchmarks/test_grad_first_call.py --benchmark-only
(python benchmarks/test_grad_first_call.py prints the two numbers).
"""

import time

import numpy as np
import pytest

import revtape as rt

Y = [28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0]
SIGMA = [15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0]
X0 = np.random.default_rng(0).normal(size=10)


# A user's model with a helper and a method: the guard set has code, global,
# attribute and closure entries.
def half_cauchy_logp(tau, scale):
    return -np.log1p((tau / scale) ** 2)


class EightSchools:
    def __init__(self):
        self.y, self.sigma = Y, SIGMA

    def logp(self, x):
        mu, log_tau = x[0], x[1]
        tau = np.exp(log_tau)
        lp = -0.5 * (mu / 5.0) ** 2 + log_tau + half_cauchy_logp(tau, 5.0)
        for j in range(8):
            eta = x[2 + j]
            lp = lp + (-0.5 * eta ** 2 - 0.5 * ((self.y[j] - (mu + tau * eta)) / self.sigma[j]) ** 2)
        return lp


def _reference_grad(x):
    return rt.gradient(EightSchools().logp, x)


@pytest.fixture(scope="module", params=[0, 10 ** 6], ids=["heap+0", "heap+1e6"])
def heap(request):
    # gc-tracked objects, the kind a heap scan has to visit
    junk = [[i] for i in range(request.param)]
    yield junk
    del junk


def _first_call():
    g = rt.grad(EightSchools().logp)
    return g, g(X0)


@pytest.mark.benchmark(group="grad-first-call")
def test_first_call(benchmark, heap):
    _, got = _first_call()
    np.testing.assert_allclose(got, _reference_grad(X0), rtol=1e-12)
    benchmark.extra_info["extra_objects"] = len(heap)
    benchmark.pedantic(_first_call, rounds=30, iterations=1, warmup_rounds=2)


if __name__ == "__main__":
    for n in (0, 10 ** 6):
        junk = [[i] for i in range(n)]
        _first_call()
        best = float("inf")
        for _ in range(30):
            t = time.perf_counter()
            _first_call()
            best = min(best, time.perf_counter() - t)
        print(f"first call, heap + {n:>7} objects: {best * 1e3:.2f} ms")
        del junk
