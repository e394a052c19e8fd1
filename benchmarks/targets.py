"""The compiled-tape speed targets, side by side in one run:

    python benchmarks/targets.py

For each workload: revtape's checked `value_and_gradient(x, out=g)`, the
`bind` fast path and the hand-written C reference (csrc/reference.c, called
through cffi with from_buffer on each call), as min and median microseconds
of repeated batches (the columns interleaved), and the ratios to C that the
targets are stated in.

"checked" passes the same x every call, as a loop that updates x in place
does; "new x" alternates between two arrays, so the checked entry converts x
to a C pointer on every call (a sampler that builds a new array per step).
"""

import itertools
import time

import numpy as np

import revtape as rt
from revtape import workloads
from revtape._vm import ffi, lib


def timed(fns, n, reps=21):
    """(min, median) microseconds per call of each fn.  The columns take turns
    batch by batch, so a noisy spell on the shared machine hits all of them
    alike instead of one column's whole run."""
    per_call = [[] for _ in fns]
    for _ in range(reps):
        for fn, times in zip(fns, per_call):
            t = time.perf_counter_ns()
            for _ in range(n):
                fn()
            times.append((time.perf_counter_ns() - t) / n / 1000)
    return [(min(t), float(np.median(t))) for t in per_call]


def main():
    cases = [(workloads.eight_schools(), 5000), (workloads.rosenbrock_loop(), 2000),
             (workloads.rosenbrock_vec(), 100), (workloads.logreg(), 200),
             (workloads.chain(1000), 200), (workloads.chain(10000), 20)]
    print(f"{'workload':24s} {'checked us':>18s} {'bind us':>18s} {'C us':>18s}   ratios (min)")
    fmt = lambda t: f"{t[0]:8.2f} /{t[1]:8.2f}"
    for wl, n in cases:
        ct = rt.compile(rt.GradientTape(wl.f, wl.x0))
        x, g = wl.x0.copy(), np.empty_like(wl.x0)
        run, c_vg = ct.bind(x, g), wl.make_c_vg(ffi, lib)
        np.testing.assert_allclose(run(), wl.numpy_vg(x)[0], rtol=1e-10)
        xs = itertools.cycle([x, x.copy()])
        checked, new_x, bound, c = timed([lambda: ct.value_and_gradient(x, out=g),
                                          lambda: ct.value_and_gradient(next(xs), out=g),
                                          run, lambda: c_vg(x, g)], n)
        name = f"{wl.name} {wl.params}"[:24]
        print(f"{name:24s} {fmt(checked):>18s} {fmt(bound):>18s} {fmt(c):>18s}   "
              f"checked/C {checked[0] / c[0]:.2f}  new x/C {new_x[0] / c[0]:.2f}  "
              f"bind/C {bound[0] / c[0]:.2f}")


if __name__ == "__main__":
    main()
