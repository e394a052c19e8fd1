"""What a custom primitive costs: the VM's call back into Python.

    pytest benchmarks/test_primitives.py --benchmark-only
    python benchmarks/test_primitives.py     # overhead per primitive call

Pairs of compiled tapes that differ only in one operation being a built-in
op or an @rt.primitive with rt.defvjp (checked equal first):

* ``scalar``: ``sum(x**2) + square(x[0])`` -- the primitive does almost no
  work, so the difference is the callback machinery: re-acquiring the GIL,
  building the arguments from the arena, the user's function and VJP maker,
  writing the results back (forward and reverse);
* ``logsumexp``: autograd's logsumexp example on a 100-vector.
"""

import os
import sys
import time

import numpy as np
import pytest

try:
    import revtape as rt
except ImportError:  # running from a checkout without PYTHONPATH=src
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "src"))
    import revtape as rt
from revtape.special import logsumexp as builtin_lse


@rt.primitive
def square(x):
    return x * x


rt.defvjp(square, lambda ans, x: lambda g: 2.0 * g * x)


@rt.primitive
def logsumexp(x):
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


rt.defvjp(logsumexp, lambda ans, x: lambda g: g * np.exp(x - ans))

CASES = {
    "scalar": (np.linspace(-1, 1, 10),
               lambda x: np.sum(x ** 2) + square(x[0]),
               lambda x: np.sum(x ** 2) + x[0] * x[0]),
    "logsumexp": (np.linspace(-3, 3, 100),
                  lambda x: logsumexp(x) - 0.5 * np.sum(x ** 2),
                  lambda x: builtin_lse(x) - 0.5 * np.sum(x ** 2)),
}


def build(case):
    x, f_prim, f_builtin = CASES[case]
    prim = rt.compile(rt.GradientTape(f_prim, x))
    builtin = rt.compile(rt.GradientTape(f_builtin, x))
    assert prim.stats()["callback_instructions"] == 1
    assert builtin.stats()["callback_instructions"] == 0
    x1 = x + 0.1
    v1, g1 = prim.value_and_gradient(x1)
    v2, g2 = builtin.value_and_gradient(x1)
    assert np.isclose(v1, v2, rtol=1e-12) and np.allclose(g1, g2, rtol=1e-12)
    out = np.empty_like(x)
    site = prim.program.callbacks[0]
    fun, vjp = site.prim.fun, site.prim._vjps[0]
    arg = 2.0 * x1 if case == "scalar" else x1
    arg = float(arg[0]) if case == "scalar" else arg

    def python_only():              # the user's function and VJP alone, on plain values
        ans = fun(arg)
        return vjp(ans, arg)(1.0)

    return {"primitive": lambda: prim.value_and_gradient(x1, out=out),
            "python-only": python_only,
            "builtin": lambda: builtin.value_and_gradient(x1, out=out),
            "primitive-forward": lambda: prim.forward(x1),
            "builtin-forward": lambda: builtin.forward(x1)}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("column", ["primitive", "builtin", "primitive-forward", "builtin-forward",
                                    "python-only"])
def test_callback_overhead(benchmark, case, column):
    benchmark.group = f"primitive-{case}"
    benchmark(build(case)[column])


def main(rounds=30, calls=2000):
    for case in sorted(CASES):
        runs = build(case)
        best = {k: float("inf") for k in runs}
        for _ in range(rounds):
            for name, run in runs.items():
                t0 = time.perf_counter()
                for _ in range(calls):
                    run()
                best[name] = min(best[name], (time.perf_counter() - t0) / calls * 1e6)
        extra = best['primitive'] - best['builtin']
        print(f"{case}: value_and_gradient {best['primitive']:.2f} us with the primitive, "
              f"{best['builtin']:.2f} us built in -> {extra:.2f} us per primitive call "
              f"(forward + reverse), of which the user's function and VJP take "
              f"{best['python-only']:.2f} us and the callback machinery "
              f"{extra - best['python-only']:.2f} us; forward only "
              f"{best['primitive-forward'] - best['builtin-forward']:.2f} us")


if __name__ == "__main__":
    main()
