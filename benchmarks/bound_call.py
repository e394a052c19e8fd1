"""Where a bound call's time goes: the call mechanism against the VM.

    python benchmarks/bound_call.py [rounds] [calls] [workload ...]
    # defaults: 60 rounds, 2000 calls a block, eight-schools rosenbrock-loop

Columns, each the minimum over `rounds` interleaved blocks of the per-call
mean in thread CPU time (on a shared machine the minimum is the block that
found a core to itself):

  from Python (a `for` loop calling a no-argument callable, as the bench's loop):
    bind-C      run = ctape.bind(x, g): checked.c's Bound (the default)
    bind-cffi   the cffi partial of rt_bound_value_and_grad (without the module)
    c-ref-bound hand-written C through its cffi partial (the bench's floor)
    noop        float(): the loop and a C call that does nothing but return a float
  from a C loop (no Python, no GIL hand-off: what the replay itself costs):
    vm-C        rt_value_and_grad(p, x, &v, g)
    ref-C       the hand-written C function

The C loop is a small helper compiled here with the system C compiler (a
development tool: the package never compiles at run time except the native
tier).  All columns replay on the VM (native=False), as the main bench does.
"""

import os
import subprocess
import sys
import tempfile
import time

import numpy as np

if __name__ == "__main__":   # run as a script: this checkout's revtape
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "src"))
import cffi  # noqa: E402

import revtape as rt  # noqa: E402
from revtape.runtime import bound, native  # noqa: E402
from revtape._vm import ffi as vm_ffi, lib as vm_lib  # noqa: E402
from revtape.bench import _ref, workloads  # noqa: E402

_HELPER = r"""
#include <stdint.h>
#include <time.h>
typedef int (*vg_fn)(void *p, const double *x, double *value, double *g);
typedef double (*ref0_fn)(const double *x, double *g);
typedef double (*ref1_fn)(const double *x, double *g, int64_t n);
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}
/* ns per call of rt_value_and_grad, n calls; -1 if any call failed */
double loop_vm(uintptr_t f, uintptr_t p, uintptr_t x, uintptr_t g, int64_t n)
{
    double v, t0 = now();
    int st = 0;
    for (int64_t i = 0; i < n; i++)
        st |= ((vg_fn)f)((void *)p, (const double *)x, &v, (double *)g);
    return st ? -1.0 : (now() - t0) / n;
}
/* ns per call of a hand-written reference: (x, g) or (x, g, int64 arg) */
double loop_ref(uintptr_t f, uintptr_t x, uintptr_t g, int nargs, int64_t arg, int64_t n)
{
    volatile double sink = 0.0;
    double t0 = now();
    for (int64_t i = 0; i < n; i++)
        sink += nargs == 2 ? ((ref0_fn)f)((const double *)x, (double *)g)
                           : ((ref1_fn)f)((const double *)x, (double *)g, arg);
    (void)sink;
    return (now() - t0) / n;
}
"""


def _helper():
    d = tempfile.mkdtemp(prefix="revtape-bound-call-")
    src, so = os.path.join(d, "h.c"), os.path.join(d, "h.so")
    with open(src, "w") as f:
        f.write(_HELPER)
    cc = native.compiler()          # the native tier's: $REVTAPE_CC, $CC, ..., with $CFLAGS
    subprocess.run([*cc.argv, "-O2", "-shared", "-fPIC", *cc.cflags, "-o", so, src], check=True)
    ffi = cffi.FFI()
    ffi.cdef("double loop_vm(uintptr_t, uintptr_t, uintptr_t, uintptr_t, int64_t);"
             "double loop_ref(uintptr_t, uintptr_t, uintptr_t, int, int64_t, int64_t);")
    return ffi, ffi.dlopen(so)


def _addr(ffi, obj):
    return int(ffi.cast("uintptr_t", obj))


def measure(name, rounds, calls, hffi, hlib):
    wl = workloads.WORKLOADS[name]()
    ct = rt.compile(rt.GradientTape(wl.f, wl.x0), native=False)
    x0 = np.ascontiguousarray(wl.x0, dtype=np.float64)
    xs = {k: x0.copy() for k in ("c", "cffi", "ref", "vmC", "refC")}
    gs = {k: np.empty_like(x0) for k in xs}
    run_c = ct.bind(xs["c"], gs["c"])
    assert bound._BoundCall is not None and type(run_c) is bound._BoundCall
    run_cffi = ct._bind_one_call(vm_ffi.from_buffer("double[]", xs["cffi"]),
                                 vm_ffi.from_buffer("double[]", gs["cffi"]))
    cref = wl.make_c_vg()
    run_ref = cref.bind(xs["ref"], gs["ref"])
    v = run_c()
    assert v == run_cffi() and np.array_equal(gs["c"], gs["cffi"])
    assert abs(run_ref() - v) <= 1e-12 * abs(v)

    f_vm = _addr(vm_ffi, vm_ffi.addressof(vm_lib, "rt_value_and_grad"))
    p = _addr(vm_ffi, ct._p)
    xa, ga = (_addr(vm_ffi, vm_ffi.from_buffer("double[]", a)) for a in (xs["vmC"], gs["vmC"]))
    f_ref = _addr(_ref.ffi, _ref.ffi.addressof(_ref.lib, wl.c_name))
    extra = wl.c_args(wl) if wl.c_args is not None else ()
    assert len(extra) <= 1 and all(isinstance(a, int) for a in extra), "scalar workloads only"
    rxa, rga = (_addr(vm_ffi, vm_ffi.from_buffer("double[]", a)) for a in (xs["refC"], gs["refC"]))
    nargs, arg = 2 + len(extra), (extra[0] if extra else 0)

    def py(f):
        def block():
            t = time.thread_time_ns()
            for _ in range(calls):
                f()
            return (time.thread_time_ns() - t) / calls
        return block

    cols = {
        "bind-C": py(run_c), "bind-cffi": py(run_cffi), "c-ref-bound": py(run_ref),
        "noop": py(float),
        "vm-C": lambda: hlib.loop_vm(f_vm, p, xa, ga, calls),
        "ref-C": lambda: hlib.loop_ref(f_ref, rxa, rga, nargs, arg, calls),
    }
    best = {k: float("inf") for k in cols}
    for _ in range(rounds):
        for k, block in cols.items():
            t = block()
            assert t >= 0, k
            best[k] = min(best[k], t)
    return best


def main(argv):
    rounds = int(argv[0]) if len(argv) > 0 else 60
    calls = int(argv[1]) if len(argv) > 1 else 2000
    names = argv[2:] or ["eight-schools", "rosenbrock-loop"]
    hffi, hlib = _helper()
    for name in names:
        b = measure(name, rounds, calls, hffi, hlib)
        print(f"{name}: " + "  ".join(f"{k} {v:.1f}" for k, v in b.items()) + "  (ns per call)")
        print(f"  from Python: bind-C/c-ref-bound {b['bind-C'] / b['c-ref-bound']:.2f}x, "
              f"bind-cffi/c-ref-bound {b['bind-cffi'] / b['c-ref-bound']:.2f}x;  "
              f"C loop: vm-C/ref-C {b['vm-C'] / b['ref-C']:.2f}x;  "
              f"call cost (Python minus C loop): bind-C {b['bind-C'] - b['vm-C']:.0f}, "
              f"bind-cffi {b['bind-cffi'] - b['vm-C']:.0f}, "
              f"c-ref-bound {b['c-ref-bound'] - b['ref-C']:.0f} ns")


if __name__ == "__main__":
    main(sys.argv[1:])
