"""What guarding the state f reaches costs per call: programs written the way
autograd's examples are, their data in globals and closures (not arguments).

rt.grad guards every array, list and dict such a program reaches (by content)
so that changing one in place re-records instead of replaying a stale
program; this is the per-call price, with rt.grad hoisted.

Run: pytest benchmarks/test_reached_state.py --benchmark-only
(python benchmarks/test_reached_state.py prints each program's per-call
minimum, the replay alone and the guard check alone).
"""

import os
import sys
import time

import numpy as np
import pytest

if __name__ == "__main__":   # run as a script: this checkout's revtape
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "src"))
import revtape as rt  # noqa: E402

_rng = np.random.default_rng(0)

# logistic regression, as autograd's examples/logistic_regression.py keeps it:
# inputs and (bool) targets are globals
INPUTS = _rng.normal(size=(500, 10))
TARGETS = _rng.random(500) > 0.5


def _sigmoid(x):
    return 0.5 * (np.tanh(x / 2.0) + 1.0)


def logreg_loss(w):
    preds = _sigmoid(INPUTS @ w)
    label_probabilities = preds * TARGETS + (1 - preds) * (1 - TARGETS)
    return -np.sum(np.log(label_probabilities))


# a small neural net: two layers of 10 hidden units, weights flattened, data in globals
NN_X = _rng.normal(size=(100, 4))
NN_Y = np.sin(NN_X @ np.arange(1.0, 5.0))
NN_SHAPES = [(4, 10), (10,), (10, 1), (1,)]


def nn_loss(theta):
    params, k = [], 0
    for shape in NN_SHAPES:
        n = int(np.prod(shape))
        params.append(theta[k:k + n].reshape(shape))
        k += n
    W1, b1, W2, b2 = params
    h = np.tanh(NN_X @ W1 + b1)
    out = (h @ W2 + b2)[:, 0]
    return np.sum((out - NN_Y) ** 2) + 0.01 * np.sum(theta ** 2)


NN_SIZE = sum(int(np.prod(s)) for s in NN_SHAPES)


def make_gp(n=50):
    """A GP marginal likelihood with its data in a closure (autograd's gaussian_process.py)."""
    X = np.linspace(-3, 3, n)
    y = np.cos(X) + 0.1 * _rng.normal(size=n)
    D2 = (X[:, None] - X[None, :]) ** 2

    def gp_loss(params):
        log_amp, log_len, log_noise = params[0], params[1], params[2]
        K = np.exp(2 * log_amp) * np.exp(-0.5 * D2 / np.exp(2 * log_len)) \
            + (np.exp(2 * log_noise) + 1e-6) * np.eye(n)
        L = np.linalg.cholesky(K)
        alpha = np.linalg.solve(L, y)
        return 0.5 * np.sum(alpha ** 2) + np.sum(np.log(np.diag(L)))

    return gp_loss


PROGRAMS = {
    "logreg": (logreg_loss, lambda: 0.1 * np.ones(10)),
    "nn": (nn_loss, lambda: 0.1 * np.cos(np.arange(NN_SIZE))),
    "gp": (make_gp(), lambda: np.array([0.1, -0.2, -1.0])),
}


def _min_us(fn, number=500, repeat=15):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter_ns()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter_ns() - t) / number / 1000)
    return best


def _ready(name):
    f, x0 = PROGRAMS[name]
    x = x0()
    g = rt.grad(f)
    g(x)
    np.testing.assert_allclose(g(x), rt.gradient(f, x), rtol=1e-12, atol=1e-12)
    assert g.cache_info().records == 1
    return g, x


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.benchmark(group="reached-state")
def test_rt_grad_hoisted(benchmark, name):
    g, x = _ready(name)
    benchmark(g, x)
    assert g.cache_info().records == 1


def main():
    for name in sorted(PROGRAMS):
        g, x = _ready(name)
        variant = next(iter(g._cache.values())).variants[0]
        ct = variant.ctape
        call, replay = _min_us(lambda: g(x)), _min_us(lambda: ct.value_and_gradient(x))
        check = _min_us(variant.check)
        print(f"{name}: rt.grad {call:.2f} us a call, compiled replay alone {replay:.2f} us, "
              f"{len(variant.guards)} binding guards checked in {check:.2f} us")


if __name__ == "__main__":
    main()
