"""The checked call against the bound call (issue 15: checked <= 1.3x bound).

    python benchmarks/checked_call.py [rounds] [calls] [workload]
    # defaults: 60 rounds, 5000 calls a block, eight-schools

Blocks of ``calls`` calls of ``ctape.value_and_gradient(x, out=g)`` (the
checked call: x and out looked at on every call) and of ``run()`` with
``run = ctape.bind(xb, gb)`` (checked once, at bind) take turns for
``rounds`` rounds; each column's time is the minimum over its blocks of the
per-call mean in thread CPU time (on a shared machine the minimum is the
block that found a core to itself; time spent descheduled is not counted).  Both columns replay on the VM (native=False), as the main bench
does; their results are compared bit for bit first.
"""

import os
import sys
import time

import numpy as np

if __name__ == "__main__":   # run as a script: this checkout's revtape
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "src"))
import revtape as rt  # noqa: E402
from revtape.bench import workloads  # noqa: E402


def main(rounds=60, calls=5000, name="eight-schools"):
    wl = workloads.WORKLOADS[name]()
    ct = rt.compile(rt.GradientTape(wl.f, wl.x0), native=False)
    x = np.ascontiguousarray(wl.x0, dtype=np.float64).copy()
    g = np.empty_like(x)
    xb, gb = x.copy(), np.empty_like(x)
    run = ct.bind(xb, gb)
    vgm = ct.value_and_gradient
    v1, _ = vgm(x, out=g)
    v2 = run()
    assert v1 == v2 and np.array_equal(g, gb)          # bit for bit

    def checked(n, vgm=vgm, x=x, g=g):
        for _ in range(n):
            vgm(x, out=g)

    def bound(n, run=run):
        for _ in range(n):
            run()

    def plain(n, vgm=vgm, x=x):
        for _ in range(n):
            vgm(x)

    cols = {"checked": checked, "bind": bound, "no out=": plain}
    best = dict.fromkeys(cols, float("inf"))
    clock = time.thread_time
    for _ in range(rounds):
        for col, loop in cols.items():
            t0 = clock()
            loop(calls)
            best[col] = min(best[col], (clock() - t0) / calls)
    for col, t in best.items():
        print(f"{col:>9}: {t * 1e6:6.3f} us  ({t / best['bind']:.2f}x bind)")
    return best


if __name__ == "__main__":
    a = sys.argv[1:]
    main(int(a[0]) if a else 60, int(a[1]) if len(a) > 1 else 5000,
         a[2] if len(a) > 2 else "eight-schools")
