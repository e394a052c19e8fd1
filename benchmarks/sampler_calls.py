"""What a sampler pays per call through each entry point and bridge, in one
interleaved run (minimums), on the 5-parameter density of test_samplers.py.

    PYTHONPATH=src python benchmarks/sampler_calls.py [seconds]

Rows whose library (pytensor, jax) or the foreign-thread helper is missing
are left out.  docs/guide/logdensity.md ("When to use what") quotes a run.
"""
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "models"))
import revtape as rt  # noqa: E402
from revtape import interop  # noqa: E402

ICOV = np.linspace(0.5, 2.0, 5)


def logp(x):
    return -0.5 * np.sum(ICOV * x * x) - np.sum(np.log1p(x * x))


def numpy_batch(X):
    return -0.5 * np.sum(ICOV * X * X, axis=1) - np.sum(np.log1p(X * X), axis=1)


ld = rt.LogDensity(logp, np.zeros(5))
x = np.linspace(-1, 1, 5)
X = np.random.default_rng(1).normal(size=(32, 5))
np.testing.assert_allclose(ld.batch_logdensity(X), numpy_batch(X), rtol=1e-12)
fns = {"ld.logdensity_and_gradient": lambda: ld.logdensity_and_gradient(x),
       "ld.logdensity": lambda: ld.logdensity(x),
       "ld.batch_logdensity 32x5": lambda: ld.batch_logdensity(X),
       "numpy hand-vectorised 32x5": lambda: numpy_batch(X),
       "ld.batch_logdensity_and_gradient 32x5": lambda: ld.batch_logdensity_and_gradient(X)}
try:
    import pytensor
    import pytensor.tensor as pt
except ImportError:
    pytensor = None
if pytensor is not None:
    op = interop.pytensor_op(ld)
    xv = pt.dvector("x")
    out = op(xv)
    f_v = pytensor.function([xv], out)
    f_vg = pytensor.function([xv], [out, pytensor.grad(out, xv)])
    fns["pytensor function: value (Op perform)"] = lambda: f_v(x)
    fns["pytensor function: value+grad"] = lambda: f_vg(x)
try:
    import jax
except ImportError:
    jax = None
if jax is not None:
    jf = interop.to_jax(ld)
    jvg = jax.jit(jax.value_and_grad(jf))
    xj = jax.numpy.asarray(x)
    fns["jax.jit(value_and_grad(to_jax(ld)))"] = lambda: jvg(xj)[1].block_until_ready()
    jvm = jax.jit(jax.vmap(jax.value_and_grad(jf)))
    Xj = jax.numpy.asarray(X)
    fns["jit(vmap(value_and_grad)) 32x5"] = lambda: jvm(Xj)[1].block_until_ready()
import foreign_threads as FT  # noqa: E402
lib, why = FT.load()
if lib is not None:
    cb = FT.CALLBACK(lambda i: ld.logdensity_and_gradient(x))
    cbn = FT.CALLBACK(lambda i: None)
    fns["C thread, GIL per call: ld.vg"] = lambda: lib.run(cb, 100, 1)
    fns["C thread, GIL per call: no-op"] = lambda: lib.run(cbn, 100, 1)
best = {k: 1e9 for k in fns}
for f in fns.values():
    f()
t_end = time.time() + float(sys.argv[1] if len(sys.argv) > 1 else 20)
while time.time() < t_end:
    for k, f in fns.items():
        n = 1 if "jax" in k or "C thread" in k else 20
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        dt = (time.perf_counter() - t0) / n / (100 if "C thread" in k else 1)
        best[k] = min(best[k], dt)
for k, t in best.items():
    print(f"| {k} | {t * 1e6:.1f} us |")
