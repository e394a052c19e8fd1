"""Native vs VM tangent sweeps: jvp and hvp (forward-over-reverse).

    python -m revtape.bench.native_tangents [--quick]

For each workload, the C entry points are called directly (pointers
converted once: no Python in the timing) on a VM-only program and on a
native one, alternating VM and native rounds and keeping each column's
minimum (a shared, loaded machine: minimums of interleaved runs, not
medians).  Columns: rt_jvp on the gradient program (a forward sweep, the
tangent arena zeroed, a tangent sweep) and rt_jvp on the HessianTape's
program (H v).  Every native result is first checked bit for bit against
the VM's.  The native libraries go to a temporary cache directory unless
$REVTAPE_CACHE_DIR is set.
"""
import sys
import tempfile
import time

import numpy as np

from .. import config


def _min_us(call, reps, rounds=3):
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            call()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best * 1e6


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    cache = config.get("REVTAPE_CACHE_DIR") or tempfile.mkdtemp(prefix="revtape-tan-")
    with config.override("REVTAPE_CACHE_DIR", cache):
        _run("--quick" in argv)


def _run(quick):
    import revtape as rt
    from .._vm import ffi, lib
    from . import workloads as W

    cases = [("eight-schools", W.eight_schools()),
             ("rosenbrock-loop", W.rosenbrock_loop(n=20 if quick else 100))]
    rounds = 2 if quick else 5
    print(f"{'workload':16s} {'column':10s} {'VM us':>9s} {'native us':>10s} {'VM/native':>10s}")
    for name, wl in cases:
        x = wl.x0 + 0.01
        v = np.linspace(-1.0, 1.0, x.size)
        xp, vp = ffi.from_buffer("double[]", x), ffi.from_buffer("double[]", v)
        progs = {}
        for label, native in (("vm", False), ("native", True)):
            g = rt.compile(rt.GradientTape(wl.f, wl.x0), native=native)
            h = rt.compile(rt.HessianTape(wl.f, wl.x0), native=native)
            progs[label] = (g, h)
        for a, b in zip(*(progs[k] for k in ("vm", "native"))):
            ya, yb = np.empty(a._program.out_len), np.empty(b._program.out_len)
            for ct, y in ((a, ya), (b, yb)):
                st = lib.rt_jvp(ct._p, xp, vp, ffi.NULL, ffi.from_buffer("double[]", y))
                assert st == lib.RT_OK
            assert np.array_equal(ya.view(np.int64), yb.view(np.int64)), name
        best = {}
        for _ in range(rounds):
            for label in ("vm", "native"):
                for col, ct in zip(("jvp", "hvp"), progs[label]):
                    y = np.empty(ct._program.out_len)
                    yp = ffi.from_buffer("double[]", y)
                    p = ct._p
                    t = _min_us(lambda: lib.rt_jvp(p, xp, vp, ffi.NULL, yp),
                                200 if quick else 2000)
                    key = (col, label)
                    best[key] = min(best.get(key, float("inf")), t)
        for col in ("jvp", "hvp"):
            a, b = best[(col, "vm")], best[(col, "native")]
            print(f"{name:16s} {col:10s} {a:9.2f} {b:10.2f} {a / b:9.2f}x")


if __name__ == "__main__":
    main()
