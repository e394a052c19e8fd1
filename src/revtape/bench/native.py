"""Native tier vs VM vs hand-written C, in one interleaved run.

    python -m revtape.bench.native [--quick] [--only eight-schools rosenbrock-loop chain logreg]

Columns, all bound (pointers converted once, value and gradient per call):
``vm-bind`` (ctape.bind on the VM), ``native-bind`` (the same on
rt.compile(tape, native=True)), and the benchmark's own ``c-ref`` (csrc/bench/
reference.c, converting its buffers on every call) and ``c-ref-bound`` (the
same C function, pointers converted once: the floor a caller can reach
through cffi) columns.  Every column's result is checked bit for bit
(native vs VM) or to the bench's RTOL (C) before timing.  Compile times are measured
with an empty cache directory (cold) and again from the disk cache (warm,
in-memory cache cleared).
"""
import argparse
import pathlib
import tempfile
import time

import numpy as np

import revtape as rt
from .. import config
from ..runtime import native
from . import columns as C
from . import workloads


def _loop(call):
    def loop(n):
        for _ in range(n):
            call()
    return loop


def run(quick=False, only=()):
    cfg = C.TimingConfig.quick() if quick else C.TimingConfig()
    rows = []
    # chain L=1e4: 30000 scalar instructions, 75 generated pieces; its cold
    # compile takes minutes (the disk cache keeps it), --quick runs L=1e3
    wls = (workloads.eight_schools(), workloads.rosenbrock_loop(n=100),
           workloads.chain(L=1000 if quick else 10000), workloads.logreg())
    for wl in wls:
        if only and wl.name not in only:
            continue
        x = C.timing_point(wl)
        tape = rt.GradientTape(wl.f, np.ascontiguousarray(wl.x0))
        vm = rt.compile(tape, native=False)
        with tempfile.TemporaryDirectory() as d, config.override("REVTAPE_CACHE_DIR", d):
            native._loaded.clear()
            native._runtime_objects(*native._compiler(), pathlib.Path(d), time.monotonic() + 600)
            t0 = time.perf_counter()
            nt = rt.compile(tape, native=True)
            cold = time.perf_counter() - t0
            native._loaded.clear()
            t0 = time.perf_counter()
            rt.compile(tape, native=True)
            warm = time.perf_counter() - t0
        bufs = {k: (x.copy(), np.empty_like(x)) for k in ("vm", "nat")}
        calls = {"vm-bind": vm.bind(*bufs["vm"]), "native-bind": nt.bind(*bufs["nat"])}
        v_vm, v_nat = calls["vm-bind"](), calls["native-bind"]()
        assert v_vm == v_nat and np.array_equal(bufs["vm"][1], bufs["nat"][1]), "native != VM"
        for name in ("c-ref", "c-ref-bound"):
            col = C.build_column(name, C.Recorded(wl, tape, 0.0), x)
            v_c, g_c = col.vg(x)
            # the hand-written C sums in its own order (logreg): the bench's tolerance
            assert abs(v_c - v_vm) <= C.RTOL * abs(v_vm)
            assert np.allclose(g_c, bufs["vm"][1], rtol=C.RTOL, atol=1e-12)
            calls[name] = col.call
        loops = []
        for name, call in calls.items():
            n, slow = C.calibrate(_loop(call), cfg)
            loops.append((_loop(call), n, slow))
        res = dict(zip(calls, C.measure_together(loops, cfg)))
        # minimums of the interleaved batches: the least disturbed on a shared machine
        floor = res["c-ref-bound"]["min_us"]
        rows.append((wl.name, len(vm), cold, warm, {k: r["min_us"] for k, r in res.items()},
                     floor))
    print(f"{'workload':16s} {'instr':>5s} {'column':12s} {'min us':>8s} {'/c-ref-bound':>12s}")
    for name, n_instr, cold, warm, t, floor in rows:
        for col, us in t.items():
            print(f"{name:16s} {n_instr:5d} {col:12s} {us:8.3f} {us / floor:12.2f}")
        print(f"{name:16s} native compile cold {cold * 1e3:.0f} ms "
              f"({cold / n_instr * 1e3:.2f} ms/instruction), from the disk cache {warm * 1e3:.1f} ms")
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*", default=(), help="workload names (default: all)")
    args = ap.parse_args()
    run(args.quick, tuple(args.only))
