"""``python -m revtape bench``: revtape against its references and the installed peers.

For every workload and column: verify value and gradient against the
hand-written numpy reference (1e-8 relative, at a point other than the
recording point and at the recording point), then time it: calibrated
batches of ~2 ms, warm-up, repeated batches, median / min / max microseconds
per value-and-gradient call (``time.perf_counter_ns``), and the ratios of the
minimums to the ``revtape`` and ``c-ref-bound`` columns.  A workload's columns
take turns, one batch each per round, so a noisy spell on a shared machine hits
them all alike and the fastest batch of each is comparable.  A column that
cannot run is ``skipped`` with its reason; one whose result disagrees is a
``mismatch`` and is not timed.

Progress goes to stderr, the table to stdout, ``--json`` and ``--plot`` to files.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import math
import os
import platform
import sys
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from . import progress as _progress
from . import columns as C
from .hmc import N_LEAPFROG, STEP_SIZE, hmc
from .peers import PEERS as PEER_NAMES
from .peers import VARIANTS as PEER_VARIANTS

# The workloads (one registry: workloads.WORKLOADS) and two runs built on them:
# HMC on eight-schools, and 1- vs 2-thread throughput.
WORKLOADS = list(C.W.WORKLOADS) + ["hmc", "threads"]
DEFAULT_PLOT = "revtape-bench.png"
# L=1e6 (4e6 tape instructions) is in the default run since recording and
# compiling became linear (issue 15): its row shows that they stay so.
CHAIN_SIZES = {"quick": [10**3, 10**4], "default": [10**3, 10**4, 10**5, 10**6],
               "full": [10**3, 10**4, 10**5, 10**6]}


# --------------------------------------------------------------------------
# settings


@dataclass
class Settings:
    mode: str = "default"
    timing: C.TimingConfig = field(default_factory=C.TimingConfig)
    peers: list = field(default_factory=lambda: list(PEER_NAMES))
    call_budget_s: float = 1.0      # a column whose one call takes longer is skipped
    setup_budget_s: float = 60.0    # a peer whose one-time cost would exceed this is skipped
    hmc_iters: int = 1000
    hmc_repeats: int = 5
    hmc_budget_s: float = 15.0      # per column, all repeats; over it the run is truncated
    threads_target_s: float = 0.3   # one single-thread timing run
    threads_repeats: int = 5
    chain_sizes: list = field(default_factory=lambda: list(CHAIN_SIZES["default"]))

    @classmethod
    def from_args(cls, args):
        if args.quick:
            s = cls(mode="quick", timing=C.TimingConfig.quick(), call_budget_s=0.3,
                    setup_budget_s=15.0, hmc_iters=200, hmc_repeats=3, hmc_budget_s=1.5,
                    threads_target_s=0.05, threads_repeats=3,
                    chain_sizes=list(CHAIN_SIZES["quick"]))
        else:
            s = cls()
        if args.full:
            s.mode = "full" if not args.quick else "quick+full"
            s.chain_sizes = list(CHAIN_SIZES["full"])
        s.peers = args.peers
        if args.call_budget is not None:
            s.call_budget_s = args.call_budget
        if args.setup_budget is not None:
            s.setup_budget_s = args.setup_budget
        if args.hmc_iters is not None:
            s.hmc_iters = args.hmc_iters
        if args.chain_sizes:
            s.chain_sizes = args.chain_sizes
        return s


def _parse_peers(text):
    text = text.strip().lower()
    if text in ("all", ""):
        return list(PEER_NAMES)
    if text == "none":
        return []
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in PEER_NAMES + ["jax-scan"]]
    if bad:
        raise argparse.ArgumentTypeError(
            f"unknown peer(s) {', '.join(bad)}; choose from none, all, {', '.join(PEER_NAMES)}")
    return names


def _parse_only(text):
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in WORKLOADS]
    if bad:
        raise argparse.ArgumentTypeError(
            f"unknown workload(s) {', '.join(bad)}; choose from {', '.join(WORKLOADS)}")
    return names


def _parse_sizes(text):
    try:
        return [int(float(t)) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("--chain-sizes takes numbers like 1000,1e4") from None


def add_arguments(p: argparse.ArgumentParser):
    p.add_argument("--quick", action="store_true",
                   help="under a minute: fewer repeats, chain up to 1e4, shorter HMC")
    p.add_argument("--full", action="store_true",
                   help="chain up to L=1e6 also with --quick (the default run has it)")
    p.add_argument("--only", type=_parse_only, default=None, metavar="NAME[,NAME]",
                   help=f"workloads to run ({', '.join(WORKLOADS)}); default all")
    p.add_argument("--peers", type=_parse_peers, default=list(PEER_NAMES),
                   metavar="none|all|jax,torch,...",
                   help="peer AD tools to add when installed (default all)")
    p.add_argument("--json", metavar="PATH", help="write machine-readable results here")
    p.add_argument("--readme", metavar="README.md",
                   help="also write the table into this file's results block")
    p.add_argument("--plot", metavar="PATH.png", nargs="?", const=DEFAULT_PLOT, default=None,
                   help="per-call time vs chain length (log-log) and per-call ratios "
                        f"(needs matplotlib; --plot alone writes ./{DEFAULT_PLOT})")
    p.add_argument("--chain-sizes", type=_parse_sizes, default=None, metavar="L[,L]",
                   help="override the chain lengths")
    p.add_argument("--call-budget", type=float, default=None, metavar="S",
                   help="skip a column whose single call takes longer (default 1 s, quick 0.3 s)")
    p.add_argument("--setup-budget", type=float, default=None, metavar="S",
                   help="skip a peer whose one-time cost would take longer "
                        "(default 60 s, quick 15 s)")
    p.add_argument("--hmc-iters", type=int, default=None, metavar="N",
                   help="HMC iterations (default 1000, quick 200)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")


# --------------------------------------------------------------------------
# results


def _col(status="ok", reason=None, **kw):
    d = {"status": status, "median_us": None, "min_us": None, "max_us": None, "ratio": None,
         "setup_s": None, "max_rel_err": None}
    if reason is not None:
        d["reason"] = reason
    d.update(kw)
    return d


class Progress:
    def __init__(self, quiet=False):
        self.quiet = quiet
        self.t0 = time.perf_counter()

    def __call__(self, msg):
        if not self.quiet:
            _progress.write(f"[{time.perf_counter() - self.t0:6.1f}s] {msg}", sys.stderr)


def _fmt_us(v):
    if v is None:
        return "-"
    if v >= 1e5:
        return f"{v:.3g}"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _fmt_ratio(r):
    if r is None:
        return "-"
    if r >= 100:
        return f"{r:.0f}"
    if r >= 10:
        return f"{r:.1f}"
    if r >= 0.1:
        return f"{r:.2f}"
    return f"{r:.2g}"


# --------------------------------------------------------------------------
# running


class Bench:
    def __init__(self, settings: Settings, progress: Progress):
        self.s = settings
        self.log = progress
        self.recorded = {}        # workload key -> Recorded
        self.history = {}         # column -> (L, call_s, setup_s) of the last chain size
        self.peer_ok = {}
        for p in settings.peers:
            base = "jax" if p == "jax-scan" else p
            if base not in self.peer_ok:
                from . import peers as P
                self.peer_ok[base] = P.available(base)

    # ------------------------------------------------ columns of one workload
    def missing_peers(self):
        """{peer: why} of the selected peers that do not import here: one line
        each at the top of the table, not a skipped cell in every workload."""
        return {p: why for p, (ok, why) in self.peer_ok.items() if not ok}

    def installed_peers(self):
        return [p for p in self.s.peers
                if self.peer_ok["jax" if p == "jax-scan" else p][0]]

    def column_names(self, kind):
        names = list(C.REVTAPE_COLUMNS)
        peers = self.installed_peers()
        for p in peers:
            if p == "jax-scan":
                continue
            names.append(p)
            if p == "jax" and kind == "chain":
                names.append("jax-scan")
        if "jax-scan" in peers and kind == "chain" and "jax-scan" not in names:
            names.append("jax-scan")
        return names

    def _budget_skip(self, name, L):
        """A reason to skip column `name` at chain length L, projected from the last size."""
        h = self.history.get(name)
        if h is None or L is None:
            return None
        L0, call_s, setup_s = h
        r = L / L0
        if call_s is not None and call_s * r > self.s.call_budget_s:
            return (f"one call projected {call_s * r:.2g} s at L={L} (measured "
                    f"{call_s:.2g} s at L={L0}) > per-call budget {self.s.call_budget_s:g} s "
                    f"(--call-budget)")
        if setup_s is not None and setup_s * r > self.s.setup_budget_s:
            return (f"one-time cost projected >= {setup_s * r:.0f} s at L={L} (measured "
                    f"{setup_s:.1f} s at L={L0}, growing at least linearly) > budget "
                    f"{self.s.setup_budget_s:g} s (--setup-budget)")
        return None

    def prepare_column(self, name, rec, x, L=None):
        """Build, verify and calibrate a column: (column, max rel err, calls per
        batch, slow), or the result dict of a column that will not be timed."""
        wl = rec.wl
        budgeted = name not in ("revtape", "revtape-vm", "revtape-bind", "c-ref-bound", "c-ref",
                                "numpy-ref")
        if name in self.peer_ok or name == "jax-scan":
            ok, why = self.peer_ok["jax" if name == "jax-scan" else name]
            if not ok:
                return _col("skipped", why)
        if budgeted:
            why = self._budget_skip(name, L)
            if why:
                return _col("skipped", why)
        if name == "jax" and rec.wl.name == "chain" and self.s.mode.startswith("quick"):
            return _col("skipped", "--quick leaves the unrolled chain's XLA compile (6-10 s at "
                        "L=1000) to the default run; jax-scan is the chain in JAX")
        try:
            col = C.build_column(name, rec, x, setup_budget=self.s.setup_budget_s)
        except C.Skip as exc:
            return _col("skipped", str(exc))
        except Exception as exc:
            return _col("mismatch", f"building the column raised {type(exc).__name__}: {exc}")
        try:
            err, t_call = C.verify(col, wl)
        except C.Mismatch as exc:
            return _col("mismatch", str(exc), setup_s=col.setup_s, max_rel_err=exc.err)
        if L is not None:
            self.history[name] = (L, t_call, col.setup_s if name not in (
                "revtape-ref",) else None)
        if budgeted and t_call > self.s.call_budget_s:
            return _col("skipped", f"one call took {t_call:.2g} s > per-call budget "
                        f"{self.s.call_budget_s:g} s (--call-budget)", setup_s=col.setup_s,
                        max_rel_err=err)
        try:
            n, slow = C.calibrate(col.loop, self.s.timing, t_call)
        except Exception as exc:
            return _col("mismatch", f"raised while timing: {type(exc).__name__}: {exc}",
                        setup_s=col.setup_s, max_rel_err=err)
        return col, err, n, slow

    def measure_columns(self, prepared):
        """Result dicts of prepared columns, timed together (they take turns)."""
        try:
            ms = C.measure_together([(col.loop, n, slow) for col, _, n, slow in prepared],
                                    self.s.timing)
        except Exception as exc:
            return [_col("mismatch", f"raised while timing: {type(exc).__name__}: {exc}",
                         setup_s=col.setup_s, max_rel_err=err) for col, err, _, _ in prepared]
        out = []
        for (col, err, _, _), m in zip(prepared, ms):
            d = _col("ok", setup_s=col.setup_s, max_rel_err=err, **m)
            if col.note:
                d["note"] = col.note
            if "tier" in col.extra:
                d["tier"] = col.extra["tier"]
            out.append(d)
        return out

    def _record(self, key, wl):
        rec = self.recorded.get(key)
        if rec is None:
            self.log(f"{key}: recording and compiling")
            rec = C.record(wl)
            self.recorded[key] = rec
        return rec

    def run_workload(self, kind, L=None):
        if kind == "chain":
            wl = C.W.chain(L)
            key = f"chain L={L}"
            size = {"L": L}
        else:
            wl = C.W.WORKLOADS[kind]()
            key = kind
            size = {k: v for k, v in wl.params.items() if k != "seed"} or {
                "n": int(np.size(wl.x0))}
        rec = self._record(key, wl)
        x = C.timing_point(wl)
        entry = {"name": wl.name, "size": size, "columns": {}, "extra": {}}
        extra = entry["extra"]
        extra["tape"] = {"tape_instructions": rec.tape_instructions, "record_s": rec.record_s,
                         "compile_s": rec.compile_s}
        if rec.ctape is not None:
            extra["tape"]["program_instructions"] = int(rec.ctape.program.code.shape[0])
        cols = entry["columns"]
        # every column is built and checked first, then all are timed together
        names, prepared = self.column_names(kind), {}
        for name in names:
            self.log(f"{key}: {name}: building and checking ...")
            prep = self.prepare_column(name, rec, x, L)
            if isinstance(prep, dict):
                cols[name] = prep
            else:
                prepared[name] = prep
        self.log(f"{key}: timing {', '.join(prepared)} (taking turns) ...")
        for name, d in zip(prepared, self.measure_columns(list(prepared.values()))):
            cols[name] = d
        entry["columns"] = cols = {name: cols[name] for name in names}
        for name, d in cols.items():
            self.log(f"{key}: {name}: " + (f"{_fmt_us(d['median_us'])} us/call"
                                            if d["status"] == "ok" else
                                            f"{d['status']}: {d.get('reason', '')}"))
        _ratios(cols)
        _flag_noise(cols)
        if kind == "chain" and rec.ctape is not None:
            mem = C.program_stats(rec.ctape)
            n_tape = mem["tape_instructions"] or rec.tape_instructions
            extra["memory"] = mem
            extra["record_ns_per_tape_instruction"] = rec.record_s * 1e9 / n_tape
            extra["compile_ns_per_tape_instruction"] = rec.compile_s * 1e9 / n_tape
            for what in ("record", "compile"):
                cpu = getattr(rec, f"{what}_cpu_s")
                if cpu is not None:
                    extra[f"{what}_cpu_ns_per_tape_instruction"] = cpu * 1e9 / n_tape
            if rec.peak_rss_bytes is not None:
                extra["peak_rss_bytes_per_tape_instruction"] = rec.peak_rss_bytes / n_tape
            for name in ("revtape", "revtape-bind"):
                if cols.get(name, {}).get("status") == "ok":
                    extra[f"{name}_replay_ns_per_tape_instruction"] = (
                        cols[name]["median_us"] * 1e3 / n_tape)
        if kind == "chain" and L > 10**4:
            # the threads run reuses L=1e4 only; a million-step tape and its
            # program (~0.5 GB) are not kept for the rest of the run
            self.recorded.pop(key, None)
        return entry

    # ------------------------------------------------ hmc
    def run_hmc(self):
        wl = C.W.eight_schools()
        rec = self._record("eight-schools", wl)
        x = C.timing_point(wl)
        n_iter = self.s.hmc_iters
        entry = {"name": "hmc", "size": {"n_iter": n_iter, "n_leapfrog": N_LEAPFROG,
                                         "model": "eight-schools"},
                 "columns": {}, "extra": {"step_size": STEP_SIZE, "seed": 0,
                                          "unit": "median_us is microseconds per HMC "
                                                  f"iteration ({N_LEAPFROG} gradients + "
                                                  "sampler overhead)"}}
        cols = entry["columns"]
        names = ["revtape-bind", "revtape", "revtape-vm", "c-ref", "numpy-ref"] + [
            p for p in self.installed_peers() if p != "jax-scan"]
        ref_samples = None
        order = ["numpy-ref"] + [n for n in names if n != "numpy-ref"]
        for name in order:
            self.log(f"hmc: {name} ...")
            d = self._hmc_column(name, rec, wl, x, n_iter)
            if isinstance(d, tuple):
                d, samples = d
                if name == "numpy-ref":
                    ref_samples = samples
                    entry["extra"]["posterior_mean"] = samples[n_iter // 5:].mean(0).tolist()
                    entry["extra"]["accept_rate"] = d["accept_rate"]
                elif ref_samples is not None:
                    k = samples.shape[0]
                    diff = float(np.max(np.abs(samples - ref_samples[:k])))
                    d["samples_max_abs_diff_vs_numpy_ref"] = diff
                    if not diff <= 1e-6 * max(1.0, float(np.max(np.abs(ref_samples[:k])))):
                        d = _col("mismatch", f"the chain differs from numpy-ref's (max abs diff "
                                 f"{diff:.3g}) although the same RNG stream was used",
                                 setup_s=d["setup_s"], max_rel_err=d["max_rel_err"])
            cols[name] = d
            self.log(f"hmc: {name}: " + (f"{_fmt_us(d['median_us'])} us/iteration"
                                         if d["status"] == "ok" else
                                         f"{d['status']}: {d.get('reason', '')}"))
        entry["columns"] = {n: cols[n] for n in names if n in cols}
        _ratios(entry["columns"])
        _flag_noise(entry["columns"])
        return entry

    def _hmc_column(self, name, rec, wl, x, n_iter):
        if name in self.peer_ok:
            ok, why = self.peer_ok[name]
            if not ok:
                return _col("skipped", why)
        try:
            col = C.build_column(name, rec, x, setup_budget=self.s.setup_budget_s)
            err, t_call = C.verify(col, wl)
        except C.Skip as exc:
            return _col("skipped", str(exc))
        except C.Mismatch as exc:
            return _col("mismatch", str(exc), max_rel_err=exc.err)
        except Exception as exc:
            return _col("mismatch", f"raised {type(exc).__name__}: {exc}")
        x0 = np.ascontiguousarray(wl.x0, dtype=np.float64)
        vg, kw = C.sampler_callable(name, col)
        pilot = 5
        t0 = time.perf_counter()
        hmc(vg, x0, pilot, **kw)
        per_iter = (time.perf_counter() - t0) / pilot
        budget = self.s.hmc_budget_s
        n_col = n_iter
        note = None
        if per_iter * n_iter > budget and name != "numpy-ref":
            n_col = max(20, min(n_iter, int(budget / per_iter)))
            note = (f"ran the first {n_col} of {n_iter} iterations (same RNG stream): "
                    f"{per_iter * 1e3:.1f} ms per iteration, per-column budget {budget:g} s")
        repeats = max(1, min(self.s.hmc_repeats, int(budget // max(per_iter * n_col, 1e-9))))
        times, samples, acc = [], None, None
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            samples, acc = hmc(vg, x0, n_col, **kw)
            times.append((time.perf_counter_ns() - t0) / n_col / 1e3)
        t = np.array(times)
        d = _col("ok", median_us=float(np.median(t)), min_us=float(t.min()),
                 max_us=float(t.max()), setup_s=col.setup_s, max_rel_err=err,
                 accept_rate=acc, n_iter=n_col, runs=repeats,
                 us_per_gradient=float(np.median(t)) / N_LEAPFROG)
        if note:
            d["note"] = note
        return d, samples

    # ------------------------------------------------ threads
    def run_threads(self, kind, L=None):
        if kind == "chain":
            wl, key = C.W.chain(L), f"chain L={L}"
            size = {"workload": kind, "L": L, "threads": [1, 2]}
        else:
            wl, key = C.W.WORKLOADS[kind](), kind
            size = {"workload": kind, "threads": [1, 2]}
        rec = self._record(key, wl)
        entry = {"name": "threads", "size": size, "columns": {}, "extra": {}}
        cols = entry["columns"]
        names = ["revtape-bind/1t", "revtape-bind/2t", "revtape/1t", "revtape/2t"]
        if rec.ctape is None:
            for n in names:
                cols[n] = _col("skipped", rec.compile_error)
            return entry
        t0 = time.perf_counter()
        copies = [copy.deepcopy(rec.ctape) for _ in range(2)]
        setup = (time.perf_counter() - t0) / 2
        x = C.timing_point(wl)
        work = []
        for c in copies:
            xb, gb = x.copy(), np.empty_like(x)
            run = c.bind(xb, gb)
            v_ref, g_ref = wl.numpy_vg(x.copy())
            err = C.rel_err(run(), gb, v_ref, g_ref)
            v2, g2 = c.value_and_gradient(x, out=np.empty_like(x))
            err = max(err, C.rel_err(v2, g2, v_ref, g_ref))
            work.append((run, c, xb, gb, err))
        max_err = max(w[4] for w in work)
        if not max_err <= C.RTOL:
            for n in names:
                cols[n] = _col("mismatch", f"a deep copy's gradient differs: rel err {max_err:.3g}",
                               max_rel_err=max_err)
            return entry

        def loop_bind(i, n):
            run = work[i][0]
            for _ in range(n):
                run()

        def loop_vg(i, n):
            f, xx, g = work[i][1].value_and_gradient, x.copy(), np.empty_like(x)
            for _ in range(n):
                f(xx, out=g)

        for mode, loop in (("revtape-bind", loop_bind), ("revtape", loop_vg)):
            # calibrate the per-thread count on one thread
            n = 64
            while True:
                t0 = time.perf_counter()
                loop(0, n)
                dt = time.perf_counter() - t0
                if dt >= self.s.threads_target_s / 4 or n >= 1 << 26:
                    break
                n *= 4
            n = max(1, int(n * self.s.threads_target_s / max(dt, 1e-9)))
            per = {}
            for nt in (1, 2):
                self.log(f"threads {key}: {mode}, {nt} thread(s) x {n} calls ...")
                res = [_threaded(loop, nt, n) for _ in range(self.s.threads_repeats)]
                us = np.array([r / (nt * n) / 1e3 for r in res])
                per[nt] = float(np.median(us))
                cols[f"{mode}/{nt}t"] = _col(
                    "ok", median_us=float(np.median(us)), min_us=float(us.min()),
                    max_us=float(us.max()), setup_s=setup, max_rel_err=max_err,
                    grads_per_s=1e6 / float(np.median(us)), calls_per_thread=n,
                    note=f"{nt} thread(s), each its own copy.deepcopy(ctape); "
                         "median_us = wall time / total calls")
            entry["extra"][f"{mode}_speedup_2_vs_1"] = per[1] / per[2]
        base = cols["revtape/1t"]["median_us"]
        for d in cols.values():
            if d["status"] == "ok":
                d["ratio"] = d["median_us"] / base
        entry["extra"]["deepcopy_s"] = setup
        entry["extra"]["cpu_count"] = os.cpu_count()
        _flag_noise(cols)
        return entry


def _threaded(loop, n_threads, n) -> int:
    barrier = threading.Barrier(n_threads + 1)
    errors = []

    def worker(i):
        barrier.wait()
        try:
            loop(i, n)
        except BaseException as exc:  # pragma: no cover
            errors.append(exc)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in ts:
        t.start()
    barrier.wait()
    t0 = time.perf_counter_ns()
    for t in ts:
        t.join()
    dt = time.perf_counter_ns() - t0
    if errors:
        raise errors[0]
    return dt


def _ratios(cols):
    """ratio = min us / revtape's min us; ratio_c_bound = min us / c-ref-bound's.
    Minimums of batches taken in turns: on a shared, loaded machine the
    fastest batch is the one least disturbed, for every column alike."""
    for key, base_name in (("ratio", "revtape"), ("ratio_c_bound", "c-ref-bound")):
        base = cols.get(base_name, {})
        b = base.get("min_us") if base.get("status") == "ok" else None
        for d in cols.values():
            if d["status"] == "ok":
                d[key] = d["min_us"] / b if b else None


# A timed row whose median is more than NOISY_SPREAD times its minimum ran on
# a machine busy enough that its numbers (and ratios) may be off: flagged "!".
NOISY_SPREAD = 2.0
# revtape-bind does less per call than revtape on the same tape: a minimum
# this many times revtape's says the machine, not the code, made the gap.
NOISY_BIND = 1.5


def _flag_noise(cols):
    """spread = median / min of every timed column; noisy = why its numbers
    are not to be trusted (a wide spread, or revtape-bind slower than
    revtape on the same tape)."""
    for d in cols.values():
        if d["status"] == "ok" and d.get("min_us"):
            d["spread"] = d["median_us"] / d["min_us"]
            if d["spread"] > NOISY_SPREAD:
                d["noisy"] = f"median {d['spread']:.1f}x the minimum"
    a, b = cols.get("revtape", {}), cols.get("revtape-bind", {})
    if (a.get("status") == b.get("status") == "ok" and a.get("min_us")
            and b["min_us"] > NOISY_BIND * a["min_us"]):
        why = f"minimum {b['min_us'] / a['min_us']:.1f}x revtape's on the same tape"
        b["noisy"] = f"{b['noisy']}; {why}" if b.get("noisy") else why


def _fmt_spread(d):
    sp = d.get("spread")
    return "-" if sp is None else f"{sp:.1f}{'!' if d.get('noisy') else ''}"


# --------------------------------------------------------------------------
# meta, table, plot


def _cpu():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def meta(settings, argv):
    import importlib.metadata as md

    import revtape

    peers = {}
    for p in PEER_NAMES:
        try:
            peers[p] = md.version(p)
        except md.PackageNotFoundError:
            peers[p] = None
    ffi, lib, why = C.vm()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cpu": _cpu(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "revtape": revtape.__version__,
        "c_vm": why is None,
        "peers": peers,
        "peers_selected": list(settings.peers),
        "mode": settings.mode,
        "argv": list(argv),
        "timing": dict(settings.timing.__dict__),
    }


def _title(e, short=False):
    skip = ("threads", "n_leapfrog", "model") if short else ("threads",)
    size = ", ".join(f"{k}={v}" for k, v in e["size"].items() if k not in skip)
    return f"{e['name']} ({size})" if size else e["name"]


def _cpu_of(extra, what):
    cpu = extra.get(f"{what}_cpu_ns_per_tape_instruction")
    return "" if cpu is None else f" (CPU {cpu / 1e3:.1f})"


def format_table(result) -> str:
    out = []
    m = result["meta"]
    peers = ", ".join(f"{k} {v}" if v else f"{k} (not installed)" for k, v in m["peers"].items())
    out.append(f"revtape {m['revtape']} bench ({m['mode']}) -- {m['date']}")
    out.append(f"python {m['python']}, numpy {m['numpy']}, {m['cpu']} x{m['cpu_count']}; "
               f"C VM {'built' if m['c_vm'] else 'NOT built'}")
    out.append(f"peers: {peers}")
    for p, why in result.get("missing_peers", {}).items():
        out.append(f"{p} not run ({why}): pip install \"revtape[peers]\"")
    out.append("us per value-and-gradient call over batches taken in turns (min, median, "
               "max); ratio = min / revtape's min; /c-bound = min / c-ref-bound's min; "
               f"spread = median / min, '!' past {NOISY_SPREAD:g}x (a busy machine)")
    out.append("revtape = rt.compile(tape) as users get it (native once hot), revtape-vm = "
               "the VM alone (native=False), revtape-bind = ctape.bind on the default tape")
    hdr = f"  {'column':<17} {'status':<8} {'min us':>9} {'median us':>10} {'ratio':>7} " \
          f"{'/c-bound':>8} {'max us':>9} {'spread':>6} {'setup s':>8} {'rel err':>8}"
    for e in result["workloads"]:
        out.append("")
        line = f"== {_title(e)}"
        t = e["extra"].get("tape")
        if t:
            rec = f"record {t['record_s'] * 1e3:.1f} ms"
            if t.get("compile_s") is not None:
                rec += f", compile {t['compile_s'] * 1e3:.1f} ms"
            prog = f" -> program {t['program_instructions']}" if "program_instructions" in t else ""
            line += f"  tape {t['tape_instructions']} instr{prog}; {rec}"
        if e["name"] == "hmc":
            line += f"  [us per HMC iteration; step {e['extra']['step_size']}"
            if "accept_rate" in e["extra"]:
                line += f", accept {e['extra']['accept_rate']:.2f}"
            line += "]"
        if e["name"] == "threads":
            sp = [f"{k.replace('_speedup_2_vs_1', '')} {v:.2f}x" for k, v in e["extra"].items()
                  if k.endswith("_speedup_2_vs_1")]
            line += "  [us = wall time per gradient; 2-vs-1 thread speedup: " + (
                ", ".join(sp) or "-") + "]"
        out.append(line)
        out.append(hdr)
        for name, d in e["columns"].items():
            if d["status"] == "ok":
                setup = "-" if d.get("setup_s") is None else f"{d['setup_s']:.3g}"
                err = "-" if d.get("max_rel_err") is None else f"{d['max_rel_err']:.1e}"
                row = (f"  {name:<17} {'ok':<8} {_fmt_us(d['min_us']):>9} "
                       f"{_fmt_us(d['median_us']):>10} {_fmt_ratio(d['ratio']):>7} "
                       f"{_fmt_ratio(d.get('ratio_c_bound')):>8} {_fmt_us(d['max_us']):>9} "
                       f"{_fmt_spread(d):>6} {setup:>8} {err:>8}")
                if d.get("note") and e["name"] == "hmc":
                    row += f"  ({d['note']})"
                elif d.get("tier") and name in ("revtape", "revtape-bind"):
                    row += f"  [{d['tier']}]"
                out.append(row)
            else:
                out.append(f"  {name:<17} {d['status']:<8} {d.get('reason', '')}")
        noisy = [f"{n} ({d['noisy']})" for n, d in e["columns"].items() if d.get("noisy")]
        if noisy:
            out.append("  ! noisy machine, rerun when it is quieter: " + "; ".join(noisy))
        tier_note = e["columns"].get("revtape", {}).get("note", "")
        if "; " in tier_note and e["name"] not in ("hmc", "threads"):
            out.append(f"  revtape's tier: {tier_note.split('; ', 1)[1]}")
        mem = e["extra"].get("memory")
        if mem:
            ex = e["extra"]
            s = (f"  memory {mem['total_bytes'] / 1e6:.2f} MB = "
                 f"{mem['bytes_per_program_instruction']:.0f} B/program instr, "
                 f"{mem['bytes_per_tape_instruction']:.0f} B/tape instr "
                 f"(words {mem['code_bytes']}, ints {mem['ints_bytes']}, arenas "
                 f"{mem['arena_bytes']}, consts {mem['consts_bytes']}); record "
                 f"{ex['record_ns_per_tape_instruction'] / 1e3:.1f} us"
                 + _cpu_of(ex, "record") + ", compile "
                 f"{ex['compile_ns_per_tape_instruction'] / 1e3:.1f} us" + _cpu_of(ex, "compile"))
            if "peak_rss_bytes_per_tape_instruction" in ex:
                s += (f", peak RSS of record+compile "
                      f"{ex['peak_rss_bytes_per_tape_instruction']:.0f} B")
            if "revtape-bind_replay_ns_per_tape_instruction" in ex:
                s += f", replay {ex['revtape-bind_replay_ns_per_tape_instruction']:.1f} ns"
            out.append(s + " per tape instr")
    # summary of ratios
    names, seen = [], set()
    for e in result["workloads"]:
        if e["name"] in ("threads",):
            continue
        for n, d in e["columns"].items():
            if n not in seen and n != "revtape":
                seen.add(n)
                names.append(n)
    rows = [e for e in result["workloads"] if e["name"] != "threads"]
    names = ["revtape"] + names
    for key, base, title in (
            ("ratio_c_bound", "c-ref-bound",
             "ratio to c-ref-bound (min of interleaved batches; lower is faster; '-' not run, "
             "'x' mismatch; only workloads with a C reference):"),
            ("ratio", "revtape", "ratio to revtape (min of interleaved batches; lower is faster; "
                                 "'-' not run, 'x' mismatch):")):
        sel = [e for e in rows if e["columns"].get(base, {}).get("status") == "ok"]
        cols = [n for n in names if n != base]
        if not sel or not cols:
            continue
        out.append("")
        out.append(title)
        w = max(len(_title(e, True)) for e in sel)
        out.append("  " + " " * w + "".join(f" {n[:12]:>12}" for n in cols))
        for e in sel:
            cells = []
            for n in cols:
                d = e["columns"].get(n)
                if d is None or d["status"] == "skipped":
                    cells.append("-")
                elif d["status"] == "mismatch":
                    cells.append("x")
                else:
                    cells.append(_fmt_ratio(d.get(key)))
            out.append("  " + f"{_title(e, True):<{w}}" + "".join(f" {c:>12}" for c in cells))
    return "\n".join(out)


# Known columns get fixed slots so a column keeps its colour from one run (and
# one figure) to the next whatever subset ran; unknown names hash into the rest.
_COLOUR_ORDER = list(C.REVTAPE_COLUMNS) + list(PEER_NAMES) + list(PEER_VARIANTS)
_PALETTE = ["#d62728", "#ff7f0e", "#e377c2", "#7f7f7f", "#8c564b", "#bcbd22",
            "#1f77b4", "#2ca02c", "#9467bd", "#17becf", "#aec7e8",
            "#98df8a", "#ffbb78", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5"]


def column_colour(name) -> str:
    """The colour of column `name` in every panel of every bench figure."""
    import zlib

    if name in _COLOUR_ORDER:
        return _PALETTE[_COLOUR_ORDER.index(name) % len(_PALETTE)]
    rest = _PALETTE[len(_COLOUR_ORDER):] or _PALETTE
    return rest[zlib.crc32(name.encode()) % len(rest)]


def not_run_columns(result) -> dict:
    """{column: [(workload title, status, reason), ...]} for every column not timed somewhere."""
    out = {}
    for e in result["workloads"]:
        for n, d in e["columns"].items():
            if d.get("status") != "ok":
                out.setdefault(n, []).append((_title(e, True), d.get("status"), d.get("reason", "")))
    return out


def plot_caption(result) -> str:
    """Machine, versions and date, then the columns that were skipped or failed and where."""
    m = result["meta"]
    lines = [f"revtape {m.get('revtape', '?')} bench ({m.get('mode', '?')}), {m.get('date', '?')} -- "
             f"{m.get('platform', '?')}, {m.get('cpu', '?')}, {m.get('cpu_count', '?')} cores, "
             f"python {m.get('python', '?')}, numpy {m.get('numpy', '?')}"]
    peers = m.get("peers") or {}
    sel = m.get("peers_selected", list(peers))
    missing = [p for p in sel if not peers.get(p)]
    lines[0] += "; peers: " + (", ".join(f"{p} {peers[p]}" for p in sel if peers.get(p))
                               or "none run")
    if missing:
        lines.append("peers not installed: " + ", ".join(missing))
    bad = not_run_columns(result)
    if bad:
        parts = []
        for n, where in bad.items():
            statuses = sorted({s for _, s, _ in where})
            total = sum(1 for e in result["workloads"] if n in e["columns"])
            scope = "everywhere" if len(where) == total else f"{len(where)}/{total} workloads"
            parts.append(f"{n} {'/'.join(statuses)} ({scope})")
        lines.append("not timed (hatched, or absent from the lines): " + "; ".join(parts))
    return "\n".join(lines)


def plot(result, path, log):
    """Write the two-panel figure of `result` to `path`; False (one log line) without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed (pip install matplotlib): no plot written")
        return False
    fig = _figure(result, plt)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    log(f"plot written to {os.path.abspath(path)}")
    return True


def _figure(result, plt):
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 6.6))
    chains = [e for e in result["workloads"] if e["name"] == "chain"]
    series = {}
    for e in chains:
        L = e["size"]["L"]
        for n, d in e["columns"].items():
            if d["status"] == "ok":
                # the table's numbers: minimums of the interleaved batches
                series.setdefault(n, []).append((L, d["min_us"]))
    for n, pts in series.items():
        pts.sort()
        ax1.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=n,
                 color=column_colour(n), linewidth=2.5 if n.startswith("revtape") else 1.2)
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.set_xlabel("chain length L (4 tape instructions per step)")
    ax1.set_ylabel("min us per value-and-gradient call (the table's)")
    ax1.set_title("chain: per-call time vs tape length")
    ax1.grid(True, which="both", alpha=0.3)
    if series:
        ax1.legend(fontsize=8)
    rows = [e for e in result["workloads"] if e["name"] != "threads"]
    names = []
    for e in rows:
        for n, d in e["columns"].items():
            if n not in names and (d["status"] != "ok" or d.get("ratio")):
                names.append(n)
    width = 0.8 / max(len(names), 1)
    ok = [d.get("ratio") for e in rows for d in e["columns"].values()
          if d["status"] == "ok" and d.get("ratio")]
    # a skipped/failed cell is an empty hatched bar reaching 1.0 (the revtape line), so
    # "not measured" cannot be mistaken for "fast"
    stub = 1.0 if ok else None
    for k, n in enumerate(names):
        xs, ys, hx = [], [], []
        for i, e in enumerate(rows):
            d = e["columns"].get(n)
            x = i + (k - (len(names) - 1) / 2) * width
            if d and d["status"] == "ok" and d.get("ratio"):
                xs.append(x)
                ys.append(d["ratio"])
            elif d and d["status"] != "ok":
                hx.append(x)
        ax2.bar(xs, ys, width=width, label=n, color=column_colour(n))
        if hx and stub:
            ax2.bar(hx, [stub] * len(hx), width=width, fill=False, hatch="///",
                    edgecolor=column_colour(n), linewidth=0.6,
                    label=None if xs else f"{n} (not timed)")
    if ok:
        ax2.set_yscale("log")
    ax2.axhline(1.0, color="k", linewidth=0.8)
    ax2.set_xticks(range(len(rows)))
    ax2.set_xticklabels([_title(e, True) for e in rows], rotation=30, ha="right", fontsize=8)
    ax2.set_ylabel("per-call time / revtape (log)")
    ax2.set_title("ratio to revtape compiled (lower is faster; hatched = skipped/failed)")
    ax2.grid(True, axis="y", which="both", alpha=0.3)
    if names:
        ax2.legend(fontsize=7, ncol=2)
    caption = plot_caption(result)
    fig.text(0.01, 0.01, caption, fontsize=7, ha="left", va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.03 * (caption.count("\n") + 1), 1, 1))
    return fig


# --------------------------------------------------------------------------
# main


def run(args, argv=()) -> int:
    settings = Settings.from_args(args)
    log = Progress(args.quiet)
    only = args.only or list(WORKLOADS)
    bench = Bench(settings, log)
    result = {"meta": meta(settings, argv), "workloads": [],
              "missing_peers": bench.missing_peers()}
    for p, why in result["missing_peers"].items():
        log(f"{p} not run ({why}): pip install \"revtape[peers]\"")
    ffi, lib, why = C.vm()
    if why:
        log(f"WARNING: {why}; revtape's compiled columns and the C reference are skipped")
    # one flat task list so a progress bar (tqdm on a terminal) knows the total
    tasks = []
    for kind in WORKLOADS:
        if kind not in only:
            continue
        if kind == "chain":
            tasks += [(lambda L=L: bench.run_workload("chain", L)) for L in settings.chain_sizes]
        elif kind == "hmc":
            tasks.append(bench.run_hmc)
        elif kind == "threads":
            # eight-schools and logreg as asked; the chain (L=1e4, ~0.7 ms a call) shows
            # the scaling once a call is long enough for the GIL hand-off not to matter
            tasks += [(lambda k=k: bench.run_threads(k, 10**4 if k == "chain" else None))
                      for k in ("eight-schools", "logreg", "chain")]
        else:
            tasks.append(lambda kind=kind: bench.run_workload(kind))
    for task in _progress.progress(tasks, desc="bench", disable=args.quiet):
        result["workloads"].append(task())
    result["meta"]["elapsed_s"] = time.perf_counter() - log.t0
    print(format_table(result), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(_finite(result), fh, indent=1, default=_json_default, allow_nan=False)
        log(f"JSON written to {args.json}")
    if args.plot:
        plot(result, args.plot, log)
    if args.readme:
        write_readme(args.readme, format_table(result), log)
    return 0


README_START, README_END = "<!-- bench:start -->", "<!-- bench:end -->"


def write_readme(path, table, log):
    """Replace the results block of a README (between the bench markers)."""
    with open(path) as fh:
        text = fh.read()
    i, j = text.find(README_START), text.find(README_END)
    if i < 0 or j < i:
        log(f"{path} has no {README_START} ... {README_END} block; README not updated")
        return
    block = f"{README_START}\n```\n{table}\n```\n"
    with open(path, "w") as fh:
        fh.write(text[:i] + block + text[j:])
    log(f"results written into {path}")


def _finite(o):
    """JSON has no inf/nan: non-finite floats become null."""
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    if isinstance(o, (float, np.floating)):
        return float(o) if math.isfinite(o) else None
    return o


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="revtape bench", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    argv = sys.argv[1:] if argv is None else argv
    return run(p.parse_args(argv), argv)


__all__ = ["main", "run", "add_arguments", "format_table", "plot", "column_colour", "Settings", "Bench", "WORKLOADS"]
