"""What staleness checking costs (issue "stale tapes").

* rt.grad(f)(x) against ctape.gradient(x) on eight-schools: the difference is
  the cache lookup plus the binding guards (goal: under 1 us on 3.11).
* Branch guards in the VM: the same tape with one guard per 10 instructions,
  compiled with guards on and off.

Run: pytest benchmarks/test_guards.py --benchmark-only
(and python benchmarks/test_guards.py prints the two ratios side by side).
"""

import time

import numpy as np
import pytest

import revtape as rt

Y = [28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0]
SIGMA = [15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0]
X0 = np.random.default_rng(0).normal(size=10)


# A user's model, defined here (user code: its globals and callees are guarded).
def half_cauchy_logp(tau, scale):
    return -np.log1p((tau / scale) ** 2)


def eight_schools(x):
    mu, log_tau = x[0], x[1]
    tau = np.exp(log_tau)
    lp = -0.5 * (mu / 5.0) ** 2 + log_tau + half_cauchy_logp(tau, 5.0)
    for j in range(8):
        eta = x[2 + j]
        lp = lp + (-0.5 * eta ** 2 - 0.5 * ((Y[j] - (mu + tau * eta)) / SIGMA[j]) ** 2)
    return lp


def guarded_chain(x):
    # one data-independent branch per 10 instructions
    y = x[0]
    for k in range(100):
        for _ in range(9):
            y = y * 0.999 + 0.001
        if y > -1e300:
            y = y + 0.0
    return y


def _min_us(fn, number=2000, repeat=15):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter_ns()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter_ns() - t) / number / 1000)
    return best


@pytest.fixture(scope="module")
def model():
    ct = rt.compile(rt.GradientTape(eight_schools, X0))
    g = rt.grad(eight_schools)
    g(X0)
    np.testing.assert_allclose(g(X0), ct.gradient(X0), rtol=1e-14)
    assert g.cache_info().records == 1
    return ct, g


@pytest.mark.benchmark(group="guards-eight-schools")
def test_ctape_gradient(benchmark, model):
    ct, _ = model
    benchmark(ct.gradient, X0)


@pytest.mark.benchmark(group="guards-eight-schools")
def test_rt_grad(benchmark, model):
    _, g = model
    benchmark(g, X0)
    assert g.cache_info().records == 1


@pytest.fixture(scope="module")
def guarded():
    x = np.array([0.5])
    tape = rt.GradientTape(guarded_chain, x)
    on, off = rt.compile(tape), rt.compile(tape, guards=False)
    assert sum(l.strip().startswith("guard") for l in tape.listing()) == 100
    np.testing.assert_array_equal(on.gradient(x), off.gradient(x))
    return on, off, x


@pytest.mark.benchmark(group="guards-vm")
def test_vm_guards_on(benchmark, guarded):
    on, _, x = guarded
    benchmark(on.gradient, x)


@pytest.mark.benchmark(group="guards-vm")
def test_vm_guards_off(benchmark, guarded):
    _, off, x = guarded
    benchmark(off.gradient, x)


def main():
    ct = rt.compile(rt.GradientTape(eight_schools, X0))
    g = rt.grad(eight_schools)
    g(X0)
    variant = next(iter(g._cache.values())).variants[0]
    a, b = _min_us(lambda: ct.gradient(X0)), _min_us(lambda: g(X0))
    c = _min_us(variant.check)
    print(f"eight-schools: ctape.gradient {a:.2f} us, rt.grad {b:.2f} us: "
          f"overhead {b - a:.2f} us (ratio {b / a:.2f}); "
          f"{len(variant.guards)} binding guards checked in {c:.2f} us")
    x = np.array([0.5])
    tape = rt.GradientTape(guarded_chain, x)
    on, off = rt.compile(tape), rt.compile(tape, guards=False)
    n_guards = len(on.program.guards)
    t_on, t_off = _min_us(lambda: on.gradient(x), 500), _min_us(lambda: off.gradient(x), 500)
    print(f"VM branch guards: {len(on)} instructions with {n_guards} guards: "
          f"{t_on:.2f} us on vs {t_off:.2f} us off (ratio {t_on / t_off:.3f}, "
          f"{(t_on - t_off) * 1000 / max(n_guards, 1):.2f} ns per guard)")


if __name__ == "__main__":
    main()
