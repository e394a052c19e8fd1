"""Benchmark columns: one value-and-gradient implementation of one workload each.

Used by ``python -m revtape bench`` and by the pytest-benchmark suites in
``benchmarks/``, so both time exactly the same calls.

A :class:`Column` has

* ``vg(x) -> (value, grad)``: used for verification (the gradient may be a
  reused buffer: copy it if you keep it);
* ``loop(n)``: runs ``n`` value-and-gradient calls at the timing point with
  preallocated outputs where the tool allows -- this is what is timed;
* ``call()``: one such call (for pytest-benchmark);
* ``setup_s``: the one-time cost (record + compile, JAX trace + XLA compile,
  CasADi Function build, ...).

Column names: ``revtape`` (``ctape.value_and_gradient(x, out=g)`` on
``rt.compile(tape)`` as users get it: the default native="auto", driven hot
and timed once its native build has replaced the VM, within the set-up
budget), ``revtape-vm`` (the same call on ``rt.compile(tape, native=False)``:
the VM alone), ``revtape-bind`` (``run = ctape.bind(x_buf, g_buf); run()`` on
the default tape), ``revtape-ref``
(the reference Python replay ``tape.value_and_gradient(x, out=g)``),
``c-ref-bound`` (hand-written C, pointers converted once: the floor a caller
reaches through cffi, and the base of the ``/c-ref-bound`` ratios), ``c-ref``
(the same C converting x and g on every call), ``numpy-ref`` (hand-written
numpy), and the peers of :mod:`revtape.bench.peers`.

This module is the benchmark's one timing harness (:func:`calibrate`,
:func:`measure_together`): the CLI, ``benchmarks/targets.py`` and
``revtape.bench.native`` all time through it.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from . import workloads as W

REVTAPE_COLUMNS = ["revtape", "revtape-vm", "revtape-bind", "revtape-ref", "c-ref-bound", "c-ref",
                   "numpy-ref"]

# The reference Python replay is slow: only on tapes up to this many instructions.
REF_REPLAY_MAX_INSTRUCTIONS = 5000

RTOL = 1e-8


class Skip(Exception):
    """This column cannot be built here; str(exc) says why."""


@dataclass
class Column:
    name: str
    vg: Callable[[np.ndarray], tuple[float, np.ndarray]]
    loop: Callable[[int], None]
    call: Callable[[], Any]
    setup_s: float = 0.0
    note: str = ""
    extra: dict = field(default_factory=dict)
    keep: Any = field(default=None, repr=False)


def _loop_of(f, *args, **kwargs):
    """loop(n) calling f(*args, **kwargs) n times, and a one-call callable."""
    if kwargs:
        def loop(n):
            for _ in range(n):
                f(*args, **kwargs)

        def call():
            return f(*args, **kwargs)
    elif args:
        def loop(n):
            for _ in range(n):
                f(*args)

        def call():
            return f(*args)
    else:
        def loop(n):
            for _ in range(n):
                f()
        call = f
    return loop, call


# --------------------------------------------------------------------------
# the C extension, if built

_VM = None


def vm():
    """(ffi, lib, None) of revtape._vm, or (None, None, reason)."""
    global _VM
    if _VM is None:
        try:
            from .. import _vm
            from ..runtime import compiled  # noqa: F401  (checks the op table hash)
            _VM = (_vm.ffi, _vm.lib, None)
        except Exception as exc:  # ImportError, BuildMismatchError
            _VM = (None, None, f"revtape's C extension is not usable: {type(exc).__name__}: {exc}")
    return _VM


_REF = None


def ref():
    """(ffi, lib, None) of the benchmark's C references (revtape.bench._ref),
    or (None, None, reason)."""
    global _REF
    if _REF is None:
        try:
            from . import _ref
            _REF = (_ref.ffi, _ref.lib, None)
        except Exception as exc:  # ImportError: the extension was not built
            _REF = (None, None, f"the benchmark's C extension revtape.bench._ref is not "
                    f"usable: {type(exc).__name__}: {exc}")
    return _REF


# --------------------------------------------------------------------------
# points

def timing_point(wl) -> np.ndarray:
    """A point other than the recording point x0 (so replays really replay)."""
    rng = np.random.default_rng(12345)
    x0 = np.asarray(wl.x0, dtype=np.float64)
    return np.ascontiguousarray(x0 + 0.1 * rng.standard_normal(x0.shape))


def check_points(wl) -> list[np.ndarray]:
    return [timing_point(wl), np.ascontiguousarray(wl.x0, dtype=np.float64)]


def rel_err(v, g, v_ref, g_ref) -> float:
    """max(|v - v_ref| / |v_ref|, max|g - g_ref| / max|g_ref|), NaN-safe (NaN -> inf)."""
    v = float(v)
    g = np.asarray(g, dtype=np.float64)
    g_ref = np.asarray(g_ref, dtype=np.float64)
    if g.shape != g_ref.shape:
        g = g.reshape(g_ref.shape) if g.size == g_ref.size else None
    if g is None:
        return float("inf")
    ev = abs(v - v_ref) / max(abs(v_ref), 1e-300)
    eg = float(np.max(np.abs(g - g_ref))) / max(float(np.max(np.abs(g_ref))), 1e-300) if g.size else 0.0
    e = max(ev, eg)
    return float("inf") if not np.isfinite(e) else e


# --------------------------------------------------------------------------
# revtape's own columns


@dataclass
class Recorded:
    """A workload recorded (and compiled, if the VM is built) once, shared by columns."""
    wl: Any
    tape: Any
    record_s: float
    ctape: Any = None
    compile_s: float | None = None
    compile_error: str | None = None
    # growth of the peak resident set over record + compile (Linux; else None)
    peak_rss_bytes: int | None = None
    # this thread's CPU time (on a loaded machine the wall time above is not
    # what recording and compiling cost)
    record_cpu_s: float | None = None
    compile_cpu_s: float | None = None

    # the default tier (default_tier): its CompiledTape, which code serves it,
    # and what driving it hot and waiting for its native build cost
    default: Any = None
    default_note: str = ""
    default_setup_s: float = 0.0

    @property
    def tape_instructions(self) -> int:
        return len(self.tape)


def _high_water_mark(reset=False):
    """The process's peak resident set in bytes (VmHWM), optionally reset to
    the current one first (Linux's clear_refs); None where /proc lacks them."""
    try:
        if reset:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def record(wl, compile_=True) -> Recorded:
    import revtape as rt

    hwm0 = _high_water_mark(reset=True)
    c0, t0 = time.thread_time(), time.perf_counter()
    tape = rt.GradientTape(wl.f, np.ascontiguousarray(wl.x0, dtype=np.float64))
    rec = Recorded(wl, tape, time.perf_counter() - t0)
    rec.record_cpu_s = time.thread_time() - c0
    if compile_:
        ffi, lib, why = vm()
        if why is not None:
            rec.compile_error = why
        else:
            c0, t0 = time.thread_time(), time.perf_counter()
            try:
                # the VM, pinned (the revtape-vm column, and what the other
                # revtape columns are checked against): under native="auto" a
                # tape switches to native code part-way through its timing;
                # the default tier is default_tier's own tape
                rec.ctape = rt.compile(tape, native=False)
            except Exception as exc:
                rec.compile_error = f"rt.compile raised {type(exc).__name__}: {exc}"
            rec.compile_s = time.perf_counter() - t0
            rec.compile_cpu_s = time.thread_time() - c0
    hwm1 = _high_water_mark()
    if hwm0 is not None and hwm1 is not None:
        rec.peak_rss_bytes = hwm1 - hwm0
    return rec


def program_stats(ctape) -> dict:
    """Sizes of a compiled tape: words, side table, two arenas, constants."""
    prog = ctape.program
    code_b = int(np.asarray(prog.code).nbytes)
    ints_b = int(np.asarray(prog.ints).nbytes)
    arenas_b = 2 * int(prog.n_vals) * 8
    consts_b = int(np.asarray(prog.consts).nbytes)
    total = code_b + ints_b + arenas_b + consts_b
    n_prog = int(np.asarray(prog.code).shape[0])
    n_tape = int(prog.stats.get("tape_instructions", 0)) or None
    return {
        "program_instructions": n_prog,
        "tape_instructions": n_tape,
        "code_bytes": code_b, "ints_bytes": ints_b, "arena_bytes": arenas_b,
        "consts_bytes": consts_b, "total_bytes": total,
        "bytes_per_program_instruction": total / n_prog if n_prog else None,
        "bytes_per_tape_instruction": total / n_tape if n_tape else None,
    }


def _need_ctape(rec):
    if rec.ctape is None:
        raise Skip(rec.compile_error or "not compiled")
    return rec.ctape


# A cold native build: ~0.3 s for the compiler, then ~6-9 ms per program
# instruction (`python -m revtape.bench.native --quick` on a shared 2-core
# machine: eight-schools 0.4 s, rosenbrock-loop 3.7 s, chain L=1e3 19 s); the
# generous end, so that a build projected past the set-up budget is not started
NATIVE_BUILD_S = 0.3
NATIVE_BUILD_S_PER_INSTRUCTION = 1e-2


def default_tier(rec, x, setup_budget=None):
    """rt.compile(tape) with the default native="auto", as a user's loop gets
    it: called until hot, then its native build waited for (at most the set-up
    budget).  Sets rec.default (the tape to time), rec.default_note (which code
    serves it, and why) and rec.default_setup_s (compile + warm-up + build)."""
    import revtape as rt

    if rec.default is not None:
        return rec.default
    _need_ctape(rec)
    budget = 60.0 if setup_budget is None else setup_budget
    t0 = time.perf_counter()
    ct = rt.compile(rec.tape)
    state = ct.native_state
    g = np.empty_like(x)
    n_prog = int(ct.program.code.shape[0])
    projected = NATIVE_BUILD_S + n_prog * NATIVE_BUILD_S_PER_INSTRUCTION
    if state == "vm" and projected > budget:
        # the build would outlast the budget (and load a core during the other
        # columns' timing): time the VM, which is what serves meanwhile
        ct = rt.compile(rec.tape, native=False)
        note = (f"VM: a cold native build of {n_prog} instructions is projected at "
                f"{projected:.0f} s > set-up budget {budget:g} s (the VM serves meanwhile)")
    else:
        deadline = t0 + budget
        while ct.native_state == "vm" and time.perf_counter() < deadline:
            ct.value_and_gradient(x, out=g)          # the calls that make it hot
        ct.wait_native(timeout=max(0.0, deadline - time.perf_counter()))
        state = ct.native_state
        if state == "native":
            note = "native (hot after its first calls; built in the background)"
        elif state == "compiling":
            # not switching part-way through the timing: a VM copy is timed
            ct = rt.compile(rec.tape, native=False)
            note = (f"VM: the native build was still running after the set-up budget "
                    f"{budget:g} s (the VM serves meanwhile)")
        elif state == "failed":
            note = f"VM: the native build failed ({getattr(ct, '_native_error', '?')})"
        elif state == "off":
            note = "VM: native tier off here (REVTAPE_NATIVE=0, no C sources, or a program it does not take)"
        else:
            note = f"VM: not hot within the set-up budget {budget:g} s"
    rec.default, rec.default_note = ct, note
    rec.default_setup_s = time.perf_counter() - t0
    return ct


def build_revtape(rec, x, setup_budget=None) -> Column:
    ctape = default_tier(rec, x, setup_budget)
    col = _value_and_gradient_column("revtape", ctape, x,
                                     rec.record_s + rec.default_setup_s,
                                     f"ctape.value_and_gradient(x, out=g); {rec.default_note}")
    col.extra["tier"] = "native" if ctape.native_state == "native" else "vm"
    return col


def build_revtape_vm(rec, x) -> Column:
    return _value_and_gradient_column("revtape-vm", _need_ctape(rec), x,
                                      rec.record_s + rec.compile_s,
                                      "ctape.value_and_gradient(x, out=g), native=False")


def _value_and_gradient_column(name, ctape, x, setup_s, note) -> Column:
    g = np.empty_like(x)
    xt = x.copy()
    vgm = ctape.value_and_gradient

    def vg(xx):
        return vgm(xx, out=g)

    # the call written out, as a user writes it: _loop_of's f(*args, **kwargs)
    # would add a tuple and a dict per call that the bind column does not pay
    def loop(n, vgm=vgm, xt=xt, g=g):
        for _ in range(n):
            vgm(xt, out=g)

    def call():
        return vgm(xt, out=g)
    return Column(name, vg, loop, call, setup_s, note)


def build_revtape_bind(rec, x, setup_budget=None) -> Column:
    ctape = default_tier(rec, x, setup_budget)
    xb = x.copy()
    gb = np.empty_like(x)
    run = ctape.bind(xb, gb)

    def vg(xx):
        xb[...] = xx
        v = run()
        return v, gb

    # restore the timing point after verification
    def loop(n, run=run):
        for _ in range(n):
            run()

    col = Column("revtape-bind", vg, loop, run, rec.record_s + rec.default_setup_s,
                 f"run = ctape.bind(x_buf, g_buf); run(); {rec.default_note}", keep=(xb, gb))
    col.extra["tier"] = "native" if ctape.native_state == "native" else "vm"
    col.extra["reset"] = lambda: xb.__setitem__(Ellipsis, x)
    return col


def build_revtape_ref(rec, x, max_instructions=REF_REPLAY_MAX_INSTRUCTIONS) -> Column:
    if rec.tape_instructions > max_instructions:
        raise Skip(f"reference Python replay runs only on tapes up to {max_instructions} "
                   f"instructions (this one has {rec.tape_instructions})")
    tape = rec.tape
    g = np.empty_like(x)
    xt = x.copy()

    def vg(xx):
        return tape.value_and_gradient(xx, out=g)

    loop, call = _loop_of(tape.value_and_gradient, xt, out=g)
    return Column("revtape-ref", vg, loop, call, rec.record_s,
                  "tape.value_and_gradient(x, out=g), Python/numpy replay")


def _c_reference(wl):
    ffi, lib, why = ref()
    if why is not None:
        raise Skip(why)
    if wl.c_name is None:
        raise Skip(f"no hand-written C reference for {wl.name}")
    t0 = time.perf_counter()
    cref = wl.make_c_vg(ffi, lib)
    return cref, time.perf_counter() - t0


def build_c_ref(wl, x) -> Column:
    cref, setup = _c_reference(wl)
    g = np.empty_like(x)
    xt = x.copy()

    def vg(xx):
        return cref(np.ascontiguousarray(xx, dtype=np.float64), g)

    loop, call = _loop_of(cref, xt, g)
    return Column("c-ref", vg, loop, call, setup,
                  f"hand-written C ({wl.c_name}), x and g converted every call", keep=cref)


def build_c_ref_bound(wl, x) -> Column:
    cref, setup = _c_reference(wl)
    xb, gb = x.copy(), np.empty_like(x)
    run = cref.bind(xb, gb)

    def vg(xx):
        xb[...] = xx
        return run(), gb

    loop, call = _loop_of(run)
    col = Column("c-ref-bound", vg, loop, run, setup,
                 f"hand-written C ({wl.c_name}), pointers converted once", keep=(xb, gb))
    col.extra["reset"] = lambda: xb.__setitem__(Ellipsis, x)
    return col


def build_numpy_ref(wl, x) -> Column:
    xt = x.copy()
    loop, call = _loop_of(wl.numpy_vg, xt)
    return Column("numpy-ref", wl.numpy_vg, loop, call, 0.0, "hand-written numpy")


def build_peer(peer, wl, x, setup_budget=None) -> Column:
    from . import peers as P

    try:
        pc = P.build(peer, wl, setup_budget=setup_budget)
    except P.Skip as exc:
        raise Skip(str(exc)) from None
    xt = x.copy()
    loop, call = _loop_of(pc.vg, xt)
    return Column(peer, pc.vg, loop, call, pc.setup_seconds, pc.note, keep=pc)


def build_column(name, rec, x, setup_budget=None) -> Column:
    wl = rec.wl
    if name == "revtape":
        return build_revtape(rec, x, setup_budget)
    if name == "revtape-vm":
        return build_revtape_vm(rec, x)
    if name == "revtape-bind":
        return build_revtape_bind(rec, x, setup_budget)
    if name == "revtape-ref":
        return build_revtape_ref(rec, x)
    if name == "c-ref":
        return build_c_ref(wl, x)
    if name == "c-ref-bound":
        return build_c_ref_bound(wl, x)
    if name == "numpy-ref":
        return build_numpy_ref(wl, x)
    return build_peer(name, wl, x, setup_budget)


# --------------------------------------------------------------------------
# verification


class Mismatch(Exception):
    def __init__(self, msg, err=None):
        super().__init__(msg)
        self.err = err


def verify(col: Column, wl, points=None, rtol=RTOL, max_points=None) -> tuple[float, float]:
    """Check col.vg against wl.numpy_vg at each point; returns (max rel err, seconds of
    the slowest call).  Raises Mismatch (with the error) if they disagree."""
    pts = check_points(wl) if points is None else points
    if max_points is not None:
        pts = pts[:max_points]
    worst, slowest = 0.0, 0.0
    for x in pts:
        v_ref, g_ref = wl.numpy_vg(x.copy())
        t0 = time.perf_counter()
        try:
            v, g = col.vg(x.copy())
        except Exception as exc:
            raise Mismatch(f"raised {type(exc).__name__}: {exc}", float("inf")) from None
        slowest = max(slowest, time.perf_counter() - t0)
        e = rel_err(v, g, v_ref, g_ref)
        worst = max(worst, e)
        if not e <= rtol:
            raise Mismatch(f"value/gradient differ from the numpy reference: max rel err "
                           f"{e:.3g} > {rtol:g}", e)
    reset = col.extra.get("reset")
    if reset is not None:
        reset()
    return worst, slowest


# --------------------------------------------------------------------------
# timing


@dataclass
class TimingConfig:
    batch_ms: float = 2.0        # a batch takes about this long (1-5 ms)
    measure_s: float = 1.0       # time spent measuring one column
    warmup_s: float = 0.1
    min_batches: int = 7
    max_batches: int = 200
    max_slow_batches: int = 15   # when one call is longer than a batch

    @classmethod
    def quick(cls):
        return cls(batch_ms=2.0, measure_s=0.15, warmup_s=0.02, min_batches=3,
                   max_batches=40, max_slow_batches=3)


def _time_batch(loop, n) -> int:
    t0 = time.perf_counter_ns()
    loop(n)
    return time.perf_counter_ns() - t0


def calibrate(loop, cfg: TimingConfig, t_call_s: float | None = None):
    """(calls per batch, slow): doubling from 1 until a batch takes at least half
    of cfg.batch_ms; `slow` when even one call takes longer than two batches."""
    target_ns = cfg.batch_ms * 1e6
    n = 1
    if t_call_s is not None and t_call_s * 1e9 < target_ns / 4:
        n = max(1, int(target_ns / 4 / max(t_call_s * 1e9, 1.0)))
    while True:
        dt = _time_batch(loop, n)
        if dt >= target_ns / 2 or n >= 1 << 24:
            break
        n = max(n * 2, int(n * target_ns / max(dt, 1)))
    return n, dt > 2 * target_ns and n == 1


def measure_together(loops, cfg: TimingConfig) -> list:
    """Median/min/max microseconds per call of each (loop, batch size, slow).

    The loops take turns, one batch each per round, so a noisy spell on a
    shared machine lands on every column alike rather than on one column's
    whole measurement.  After cfg.warmup_s of rounds, rounds are timed until
    every loop has cfg.min_batches and cfg.measure_s per loop has passed; a
    loop stops at its cap (cfg.max_slow_batches for slow ones)."""
    if not loops:
        return []
    gc.collect()
    gc_was = gc.isenabled()
    gc.disable()
    batches = [[] for _ in loops]
    try:
        t_end = time.perf_counter_ns() + cfg.warmup_s * 1e9
        while time.perf_counter_ns() < t_end:
            for loop, n, slow in loops:
                if not slow:
                    _time_batch(loop, n)
        t_end = time.perf_counter_ns() + cfg.measure_s * 1e9 * len(loops)
        caps = [cfg.max_slow_batches if slow else cfg.max_batches for _, _, slow in loops]
        rounds = 0
        while True:
            active = [k for k, b in enumerate(batches) if len(b) < caps[k]]
            if not active:
                break
            for k in active:
                loop, n, _ = loops[k]
                batches[k].append(_time_batch(loop, n))
            rounds += 1
            if (time.perf_counter_ns() >= t_end
                    and all(len(b) >= min(cfg.min_batches, c) for b, c in zip(batches, caps))):
                break
            if rounds % 8 == 0 and gc_was:
                gc.enable()
                gc.collect(0)
                gc.disable()
    finally:
        if gc_was:
            gc.enable()
    out = []
    for (loop, n, _), b in zip(loops, batches):
        per_call = np.array(b, dtype=np.float64) / n / 1e3
        out.append({"median_us": float(np.median(per_call)), "min_us": float(per_call.min()),
                    "max_us": float(per_call.max()), "batch_size": n, "batches": len(b)})
    return out


def measure(loop, cfg: TimingConfig, t_call_s: float | None = None) -> dict:
    """measure_together for one loop."""
    n, slow = calibrate(loop, cfg, t_call_s)
    return measure_together([(loop, n, slow)], cfg)[0]


__all__ = ["Column", "Skip", "Mismatch", "Recorded", "TimingConfig", "record", "build_column", "sampler_callable",
           "verify", "calibrate", "measure", "measure_together", "program_stats", "timing_point", "check_points", "rel_err",
           "vm", "ref", "REVTAPE_COLUMNS", "W"]


def sampler_callable(name, col):
    """(vg, hmc keyword arguments) that drive bench.hmc.hmc with this column.
    The bound column replays in place: the sampler writes its proposals into
    the bound x buffer and reads the bound gradient buffer."""
    if name == "revtape-bind":
        xb, gb = col.keep
        run = col.call

        def vg(_q):
            return run(), gb

        return vg, {"proposal_buf": xb}
    return col.vg, {}

