"""Native tier vs VM vs hand-written C, in one interleaved run.

    python -m revtape.bench.native [--quick]

Columns, all bound (pointers converted once, value and gradient per call):
``vm-bind`` (ctape.bind on the VM), ``native-bind`` (the same on
rt.compile(tape, native=True)), ``c-ref`` (csrc/reference.c through the
benchmark's c-ref wrapper, which converts its buffers on every call) and
``c-ref-bound`` (the same C function, pointers converted once: the floor a
caller can reach through cffi).  Every column's result is checked bit for bit
(native vs VM) or to 1e-12 (C) before timing.  Compile times are measured
with an empty cache directory (cold) and again from the disk cache (warm,
in-memory cache cleared).
"""
import argparse
import os
import pathlib
import tempfile
import time

import numpy as np

import revtape as rt
from revtape import native, workloads
from revtape.bench import columns as C


def _bound_c(wl, x, g):
    ffi, lib, why = C.vm()
    xp, gp = ffi.from_buffer("double[]", x), ffi.from_buffer("double[]", g)
    if wl.c_name == "ref_eight_schools_vg":
        fn = lib.ref_eight_schools_vg
        return lambda: fn(xp, gp)
    if wl.c_name == "ref_rosenbrock_vg":
        fn, n = lib.ref_rosenbrock_vg, x.size
        return lambda: fn(xp, gp, n)
    raise ValueError(wl.c_name)


def _loop(call):
    def loop(n):
        for _ in range(n):
            call()
    return loop


def run(quick=False):
    cfg = C.TimingConfig.quick() if quick else C.TimingConfig()
    rows = []
    for wl in (workloads.eight_schools(), workloads.rosenbrock_loop(n=100)):
        x = C.timing_point(wl)
        tape = rt.GradientTape(wl.f, np.ascontiguousarray(wl.x0))
        vm = rt.compile(tape, native=False)
        with tempfile.TemporaryDirectory() as d:
            old = os.environ.get("REVTAPE_CACHE_DIR")
            os.environ["REVTAPE_CACHE_DIR"] = d
            try:
                native._loaded.clear()
                native._runtime_objects(*native._compiler(), pathlib.Path(d), time.monotonic() + 600)
                t0 = time.perf_counter()
                nt = rt.compile(tape, native=True)
                cold = time.perf_counter() - t0
                native._loaded.clear()
                t0 = time.perf_counter()
                rt.compile(tape, native=True)
                warm = time.perf_counter() - t0
            finally:
                if old is None:
                    del os.environ["REVTAPE_CACHE_DIR"]
                else:
                    os.environ["REVTAPE_CACHE_DIR"] = old
        bufs = {k: (x.copy(), np.empty_like(x)) for k in ("vm", "nat", "c", "cb")}
        calls = {"vm-bind": vm.bind(*bufs["vm"]), "native-bind": nt.bind(*bufs["nat"])}
        cvg = wl.make_c_vg(*C.vm()[:2])
        xc, gc_ = bufs["c"]
        calls["c-ref"] = lambda: cvg(xc, gc_)
        calls["c-ref-bound"] = _bound_c(wl, *bufs["cb"])
        v_vm, v_nat = calls["vm-bind"](), calls["native-bind"]()
        assert v_vm == v_nat and np.array_equal(bufs["vm"][1], bufs["nat"][1]), "native != VM"
        calls["c-ref"]()
        v_c = calls["c-ref-bound"]()
        assert abs(v_c - v_vm) <= 1e-12 * abs(v_vm)
        assert np.allclose(bufs["cb"][1], bufs["vm"][1], rtol=1e-12, atol=1e-14)
        loops = []
        for name, call in calls.items():
            n, slow = C.calibrate(_loop(call), cfg)
            loops.append((_loop(call), n, slow))
        res = dict(zip(calls, C.measure_together(loops, cfg)))
        rows.append((wl.name, len(vm), cold, warm,
                     {k: (r["median_us"], r["min_us"]) for k, r in res.items()}))
    # Medians and minimums: on a loaded machine the minimum is the meaningful one.
    print(f"{'workload':16s} {'instr':>5s} {'column':12s} {'median us':>10s} {'ratio':>6s} "
          f"{'min us':>8s} {'ratio':>6s}   (ratios to c-ref-bound)")
    for name, n_instr, cold, warm, t in rows:
        fmed, fmin = t["c-ref-bound"]
        for col, (med, mn) in t.items():
            print(f"{name:16s} {n_instr:5d} {col:12s} {med:10.3f} {med / fmed:6.2f} "
                  f"{mn:8.3f} {mn / fmin:6.2f}")
        print(f"{name:16s} native compile cold {cold * 1e3:.0f} ms "
              f"({cold / n_instr * 1e3:.2f} ms/instruction), from the disk cache {warm * 1e3:.1f} ms")
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    run(ap.parse_args().quick)
