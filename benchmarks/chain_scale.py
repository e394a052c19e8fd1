"""Chain workload at scale: record, compile, memory and replay per tape instruction.

    PYTHONPATH=src python benchmarks/chain_scale.py [L ...]     (default 1e3 1e4 1e5 1e6)

Each length runs in its own fresh process (peak resident memory is a
per-process high-water mark), so the numbers of one length do not leak into
the next.  Printed per L: tape instructions, record us/instr, compile
us/instr, peak RSS growth over the imported baseline in bytes per tape
instruction (record + compile, the tape still alive), and the bound replay
(value + gradient) in ns per tape instruction (minimum of several calls).
Times are this thread's CPU time, not wall time: the machine it was written
on is shared, and CPU time is what a loaded neighbour disturbs least.
Not a pytest file: it is a measurement, run by hand; the bench's chain rows
print the same figures (`python -m revtape bench`).
"""

import json
import os
import subprocess
import sys


def _child(L):
    import resource
    import time

    import numpy as np

    import revtape as rt
    from revtape.bench import workloads as W

    wl = W.chain(L)
    x0 = np.ascontiguousarray(wl.x0, dtype=np.float64)

    def rss_kb():
        # the current resident set (VmRSS); ru_maxrss is the peak
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    # warm: imports, the VM, first-call paths -- not part of the figure
    rt.compile(rt.GradientTape(W.chain(10).f, x0), native=False)
    base_kb = max(rss_kb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    t0 = time.thread_time()
    tape = rt.GradientTape(wl.f, x0)
    t_rec = time.thread_time() - t0
    t0 = time.thread_time()
    ctape = rt.compile(tape, native=False)
    t_comp = time.thread_time() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    n = len(tape.instructions)
    x = x0.copy()
    g = np.empty_like(x)
    run = ctape.bind(x, g)
    run()
    reps = max(3, min(200, int(2e7 // n)))
    best = float("inf")
    flt0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(reps):
        t0 = time.thread_time_ns()
        run()
        best = min(best, time.thread_time_ns() - t0)
    # page faults in the timed replays: the arena is touched by the first
    # (untimed) call, so none are expected -- first touch is not the cost
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - flt0) / reps
    v_ref, g_ref = wl.numpy_vg(x0.copy())
    ok = abs(g[0] - g_ref[0]) <= 1e-9 * abs(g_ref[0])
    return {"L": L, "tape_instructions": n,
            "program_instructions": int(ctape.program.code.shape[0]),
            "record_us_per_instr": t_rec * 1e6 / n, "compile_us_per_instr": t_comp * 1e6 / n,
            "peak_rss_bytes_per_instr": (peak_kb - base_kb) * 1024 / n,
            "replay_ns_per_instr": best / n, "page_faults_per_replay": faults,
            "gradient_ok": bool(ok)}


def main(argv):
    if argv and argv[0] == "--child":
        print(json.dumps(_child(int(float(argv[1])))))
        return
    sizes = [int(float(a)) for a in argv] or [10**3, 10**4, 10**5, 10**6]
    print(f"{'L':>9} {'instrs':>9} {'record us/i':>12} {'compile us/i':>13} "
          f"{'peak B/i':>9} {'replay ns/i':>12} {'faults/replay':>14}")
    for L in sizes:
        out = subprocess.run([sys.executable, __file__, "--child", str(L)],
                             capture_output=True, text=True, env=os.environ)
        if out.returncode:
            print(out.stderr)
            raise SystemExit(out.returncode)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{L:>9} {r['tape_instructions']:>9} {r['record_us_per_instr']:>12.2f} "
              f"{r['compile_us_per_instr']:>13.2f} {r['peak_rss_bytes_per_instr']:>9.0f} "
              f"{r['replay_ns_per_instr']:>12.1f} {r['page_faults_per_replay']:>14.1f}" + ("" if r["gradient_ok"] else "  GRADIENT WRONG"))


if __name__ == "__main__":
    main(sys.argv[1:])
