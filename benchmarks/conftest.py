"""pytest-benchmark suites for revtape: the same workloads and columns as
``python -m revtape bench``, one benchmark group per workload so that
``--benchmark-compare`` lines up across commits.

    pytest benchmarks/ --benchmark-only
    pytest benchmarks/ --benchmark-only --benchmark-autosave      # then, later:
    pytest benchmarks/ --benchmark-only --benchmark-compare

No timing assertions (shared, noisy machines); every benchmark first asserts
that its value and gradient match the hand-written numpy reference.

Peers (jax, torch, autograd, casadi) are skipped when not installed.  A column
whose single call takes longer than REVTAPE_BENCH_CALL_BUDGET seconds (default
1) is skipped with the measured time.
"""

import os
import sys

import pytest

try:
    import revtape  # noqa: F401
except ImportError:  # running from a checkout without PYTHONPATH=src
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "src"))

from revtape import config  # noqa: E402
from revtape.bench import columns as C  # noqa: E402
from revtape.bench import peers as P  # noqa: E402

CALL_BUDGET_S = config.get("REVTAPE_BENCH_CALL_BUDGET")
PEERS = P.PEERS
COLUMNS = C.REVTAPE_COLUMNS + PEERS
_VM_COLUMNS = {"revtape", "revtape-vm", "revtape-bind"}

_recorded = {}


def recorded(name, **params):
    """The workload recorded (and compiled) once per session."""
    key = (name, tuple(sorted(params.items())))
    if key not in _recorded:
        wl = C.W.WORKLOADS[name](**params)
        _recorded[key] = C.record(wl)
    return _recorded[key]


def ready_column(column, name, **params):
    """A built, verified column (skips when it cannot be built here)."""
    base = "jax" if column == "jax-scan" else column
    if base in PEERS:
        pytest.importorskip(base)
    if column in _VM_COLUMNS:
        ffi, lib, why = C.vm()
        if why:
            pytest.skip(why)
    rec = recorded(name, **params)
    x = C.timing_point(rec.wl)
    try:
        col = C.build_column(column, rec, x)
    except C.Skip as exc:
        pytest.skip(str(exc))
    err, t_call = C.verify(col, rec.wl)   # raises Mismatch on a wrong value or gradient
    assert err <= C.RTOL, f"{column} on {name}: rel err {err:.3g}"
    if t_call > CALL_BUDGET_S:
        pytest.skip(f"one call took {t_call:.2g} s > REVTAPE_BENCH_CALL_BUDGET "
                    f"{CALL_BUDGET_S:g} s")
    return col, rec


def run_column(benchmark, column, name, **params):
    col, rec = ready_column(column, name, **params)
    benchmark.extra_info.update({"column": column, "workload": name, **params,
                                 "setup_s": col.setup_s,
                                 "tape_instructions": rec.tape_instructions})
    benchmark(col.call)
    # the timed calls ran at the timing point: check the last result too
    v, g = col.vg(C.timing_point(rec.wl))
    v_ref, g_ref = rec.wl.numpy_vg(C.timing_point(rec.wl))
    assert C.rel_err(v, g, v_ref, g_ref) <= C.RTOL


@pytest.fixture
def bench_column(benchmark):
    def run(column, name, **params):
        run_column(benchmark, column, name, **params)
    return run
