"""The JAX-style cached transforms against the compiled tape they replay.

    pytest benchmarks/test_transforms.py --benchmark-only
    python benchmarks/test_transforms.py          # the ratio table, min of batches

Columns: `ctape` (the compiled HessianTape's `hvp`, or a compiled gradient
tape's `value_and_gradient`), `transform` (the cached `rt.hvp(f)(x, v)` /
`rt.value_and_grad(f)(x)`: cache key, binding-guard check, then the same
replay) and `one-shot` (`rt.hvp(f, x, v)`: records and traces the gradient
on every call).  Each is first checked against finite differences of the
numpy reference gradient.  As a script: ctape and transform interleaved
(min of 150 rounds of 200 calls), the one-shot form by itself.
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
from revtape.bench import workloads  # noqa: E402

CASES = {
    "eight-schools": lambda: workloads.eight_schools(),
    "rosenbrock-loop-20": lambda: workloads.rosenbrock_loop(n=20),
    "logreg-200x20": lambda: workloads.logreg(N=200, D=20),
}
_made = {}


def _case(name):
    if name not in _made:
        wl = CASES[name]()
        x = wl.x0 + 0.01
        v = np.linspace(-1.0, 1.0, x.size)
        h = 1e-6
        fd = np.stack([(wl.numpy_vg(x + h * e)[1] - wl.numpy_vg(x - h * e)[1]) / (2 * h)
                       for e in np.eye(x.size)], axis=1)
        ch = rt.compile(rt.HessianTape(wl.f, wl.x0))
        hvp = rt.hvp(wl.f)
        runs = {"ctape": lambda: ch.hvp(x, v), "transform": lambda: hvp(x, v),
                "one-shot": lambda: rt.hvp(wl.f, x, v)}
        for run in runs.values():
            np.testing.assert_allclose(run(), fd @ v, rtol=1e-5, atol=1e-5)
        _made[name] = runs
    return _made[name]


@pytest.mark.benchmark(group="hvp-transform")
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("column", ["ctape", "transform", "one-shot"])
def test_hvp_transform(benchmark, name, column):
    benchmark(_case(name)[column])


def _best(fn, seconds=0.3):
    """Min over ~2 ms batches of the mean call time, in microseconds."""
    fn()
    n = 1
    while True:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - t > 0.002:
            break
        n *= 2
    best, end = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n * 1e6)
    return best


def _interleaved(fns, rounds=150, n=200):
    """Min over rounds of the mean of n calls, in microseconds, the callables
    taking turns (in alternating order) so a noisy spell hits them alike."""
    best = [float("inf")] * len(fns)
    order = list(range(len(fns)))
    for r in range(rounds):
        for i in (order if r % 2 else order[::-1]):
            t = time.perf_counter()
            for _ in range(n):
                fns[i]()
            best[i] = min(best[i], (time.perf_counter() - t) / n * 1e6)
    return best


if __name__ == "__main__":
    print(f"{'workload':22s} {'ctape.hvp us':>13s} {'rt.hvp(f) us':>13s} {'ratio':>6s} "
          f"{'rt.hvp(f,x,v) us':>17s} {'ratio':>7s}")
    for name in sorted(CASES):
        runs = _case(name)
        c, t = _interleaved([runs["ctape"], runs["transform"]])
        o = _best(runs["one-shot"])
        print(f"{name:22s} {c:13.2f} {t:13.2f} {t / c:6.2f} {o:17.1f} {o / c:7.0f}")
