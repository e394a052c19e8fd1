"""The compiled-tape speed targets, side by side in one run:

    python benchmarks/targets.py [--quick]

For each workload: revtape's checked `value_and_gradient(x, out=g)`, the same
with a new x array every call, the `bind` fast path, and the hand-written C
reference (csrc/bench/reference.c) both converting its pointers every call
(`c-ref`) and with them converted once (`c-ref-bound`, the floor).  Timed by
the benchmark's one harness (revtape.bench.columns: the columns take turns,
batch by batch); printed as min and median microseconds, with the ratios of
the minimums to c-ref-bound that the targets are stated in.

"checked" passes the same x every call, as a loop that updates x in place
does; "new x" alternates between two arrays, so the checked entry converts x
to a C pointer on every call (a sampler that builds a new array per step).
"""

import argparse
import itertools

import numpy as np

from revtape.bench import columns as C
from revtape.bench import workloads

COLUMNS = ["revtape", "revtape-bind", "c-ref", "c-ref-bound"]


def _new_x_column(rec, x):
    """revtape's checked entry fed a different array each call."""
    ct, g = rec.ctape, np.empty_like(x)
    xs = itertools.cycle([x.copy(), x.copy()])
    vg = ct.value_and_gradient

    def loop(n):
        for _ in range(n):
            vg(next(xs), out=g)
    return loop


def main(quick=False):
    cfg = C.TimingConfig.quick() if quick else C.TimingConfig()
    cases = [workloads.eight_schools(), workloads.rosenbrock_loop(), workloads.rosenbrock_vec(),
             workloads.logreg(), workloads.radon(), workloads.chain(1000), workloads.chain(10000)]
    print(f"{'workload':24s}" + "".join(f" {c + ' us':>22s}" for c in COLUMNS + ["new x"])
          + "   ratios of minimums")
    for wl in cases:
        rec = C.record(wl)
        x = C.timing_point(wl)
        loops = []
        for name in COLUMNS:
            col = C.build_column(name, rec, x)
            C.verify(col, wl)
            loops.append(col.loop)
        loops.append(_new_x_column(rec, x))
        res = C.measure_together([(lp, *C.calibrate(lp, cfg)) for lp in loops], cfg)
        t = dict(zip(COLUMNS + ["new x"], res))
        floor = t["c-ref-bound"]["min_us"]
        name = f"{wl.name} {wl.params}"[:24]
        cells = "".join(f" {r['min_us']:9.2f} /{r['median_us']:10.2f}" for r in res)
        print(f"{name:24s}{cells}   " + "  ".join(
            f"{k}/C-bound {t[k]['min_us'] / floor:.2f}" for k in ("revtape", "new x",
                                                                  "revtape-bind", "c-ref")))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    main(ap.parse_args().quick)
