"""Peer AD tools (JAX, PyTorch, HIPS autograd, CasADi) on the benchmark workloads.

Each peer computes the value and gradient of the same workload as revtape, in
float64, written the way a user of that tool would write *this* code: scalar
loops stay Python loops (the point of the scalar workloads is to measure what
each tool does with them), vectorized code stays vectorized.

    col = build("jax", workload)      # may raise Skip(reason)
    value, grad = col.vg(x)           # the per-call entry that gets timed
    col.setup_seconds, col.note

Every workload is written once below, against a tiny per-peer namespace of
primitives (``_Ops``), so that all four peers evaluate the same expression in
the same order.  The peers are optional dependencies: nothing here imports
them at module import time.

The gradient array returned by ``vg`` may be a buffer reused by the next call
(CasADi writes into a preallocated one); copy it if you keep it.
"""

from __future__ import annotations

import functools
import math
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from .. import config

PEERS = ["jax", "torch", "autograd", "casadi"]

# Column variants that are not peers of their own; they need the named peer.
VARIANTS = {"jax-scan": "jax"}

# A module each peer must import: autograd's submodule, because any directory
# called autograd/ on sys.path (a test tree's, say) imports as an empty namespace.
_MODULES = {"jax": "jax", "torch": "torch", "autograd": "autograd.numpy", "casadi": "casadi"}

# One-time cost (seconds) above which a column is skipped instead of built.
# Overridable because a patient user may want e.g. the plain-JAX chain L=1e4
# column (about 4 minutes of XLA compile on a 2-core machine).
DEFAULT_SETUP_BUDGET = config.get("REVTAPE_PEER_SETUP_BUDGET")


class Skip(Exception):
    """This peer cannot (or should not) produce this column; str(exc) says why."""


@dataclass
class PeerColumn:
    peer: str
    workload: str
    setup_seconds: float
    note: str
    vg: Callable[[np.ndarray], tuple[float, np.ndarray]]
    # Objects the compiled call refers to by raw pointer (CasADi buffers) or
    # that must simply outlive it; held here so they are not collected.
    _keep: Any = field(default=None, repr=False)


def available(peer: str) -> tuple[bool, str]:
    """(True, version string) if ``peer`` imports, else (False, reason).  Never raises."""
    base = VARIANTS.get(peer, peer)
    if base not in _MODULES:
        return False, f"unknown peer {peer!r} (known: {', '.join(PEERS + list(VARIANTS))})"
    try:
        mod = __import__(_MODULES[base])
    except Exception as exc:  # ImportError, but also broken installs (OSError from torch's .so, ...)
        return False, f"{base} not importable: {type(exc).__name__}: {exc}"
    return True, f"{base} {getattr(mod, '__version__', '?')}"


def build(peer: str, workload, *, setup_budget: float | None = None) -> PeerColumn:
    """Prepare ``peer``'s value-and-gradient column for ``workload``, or raise Skip."""
    ok, why = available(peer)
    if not ok:
        raise Skip(why)
    budget = DEFAULT_SETUP_BUDGET if setup_budget is None else setup_budget
    kind = _kind(workload)
    return _within(budget, _BUILDERS[peer], workload, kind, budget)


class _OverBudget(BaseException):
    """Raised into a peer's build by _within's timer (BaseException: a peer's
    own `except Exception` does not swallow it)."""


def _within(budget, build, *args):
    """build(*args), interrupted once it has run `budget` seconds: a SIGALRM
    handler raises _OverBudget at the next Python line the build runs (a long
    call into C++ -- an XLA compile, one CasADi operation -- ends first; the
    cost models below keep those from starting), and the build is a Skip.
    Only in the main thread of a platform with setitimer; elsewhere the build
    runs to its end.  The timer is one-shot, re-armed 0.2 s later only when
    the exception landed where Python ignores it (a gc callback), so that no
    second alarm can cut short the clean-up."""
    if not (math.isfinite(budget) and budget > 0 and hasattr(signal, "setitimer")
            and threading.current_thread() is threading.main_thread()):
        return build(*args)
    old, old_hook = signal.getsignal(signal.SIGALRM), sys.unraisablehook

    def fire(signum, frame):
        raise _OverBudget()

    def unraisable(u):
        if isinstance(u.exc_value, _OverBudget):
            signal.setitimer(signal.ITIMER_REAL, 0.2)
        else:
            old_hook(u)

    t0 = time.perf_counter()
    try:
        signal.signal(signal.SIGALRM, fire)
        sys.unraisablehook = unraisable
        # (not before 0.1 s: a build whose cost model refuses it says why first)
        signal.setitimer(signal.ITIMER_REAL, max(budget, 0.1))
        try:
            return build(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _OverBudget:
        raise Skip(f"one-time cost passed the budget {budget:g} s: stopped after "
                   f"{time.perf_counter() - t0:.1f} s (--setup-budget)") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)      # again: the first may have been cut short
        signal.signal(signal.SIGALRM, old)
        sys.unraisablehook = old_hook


# --------------------------------------------------------------------------
# The workloads, written once.  ``ns`` supplies the primitives; data come in
# already converted by ``ns`` (Python floats for scalar code, so that no numpy
# scalar meets a torch tensor or CasADi SX and changes the result's type).

def _kind(wl) -> str:
    name = wl.name
    if name in _OBJECTIVES:
        return name
    if name.startswith("chain"):  # tolerate "chain-1000"-style names; L comes from params
        return "chain"
    raise Skip(f"no peer implementation of workload {name!r}")


def _eight_schools(x, ns, y, sigma):
    mu, log_tau = x[0], x[1]
    tau = ns.exp(log_tau)
    lp = -0.5 * (mu / 5.0) ** 2 + log_tau - ns.log1p((tau / 5.0) ** 2)
    for j in range(8):
        eta = x[2 + j]
        r = (y[j] - (mu + tau * eta)) / sigma[j]
        lp = lp + (-0.5 * eta ** 2 - 0.5 * r ** 2)
    return lp


def _rosenbrock_loop(x, ns, n):
    f = 0.0
    for i in range(n - 1):
        xi = x[i]
        f = f + (100.0 * (x[i + 1] - xi ** 2) ** 2 + (1.0 - xi) ** 2)
    return f


def _rosenbrock_vec(x, ns):
    a, b = x[:-1], x[1:]
    return ns.sum(100.0 * (b - a ** 2) ** 2 + (1.0 - a) ** 2)


def _logreg(beta, ns, X, y):
    eta = ns.matvec(X, beta)
    return ns.sum(y * eta - ns.logaddexp0(eta)) - 0.5 * ns.sum(beta ** 2)


def _chain(x, ns, L):
    y = x[0]
    for k in range(L):
        y = y + 0.001 * ns.sin(y + 0.1 * k)
    return y


_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _gp(x, ns, D2, Y1, eye, half_log_2pi):
    # Y1 is y as an n x 1 column: every peer's triangular solve takes a matrix
    amp2, inv_ls2, noise2 = ns.exp(2.0 * x[0]), ns.exp(-2.0 * x[1]), ns.exp(2.0 * x[2])
    K = amp2 * ns.exp(-0.5 * inv_ls2 * D2) + noise2 * eye
    L = ns.cholesky(K)
    alpha = ns.solve_lower(L, Y1)
    return -0.5 * ns.sum(alpha ** 2) - ns.sum(ns.log(ns.diag(L))) - half_log_2pi


def _radon(x, ns, y, county, floor, N, J, const):
    mu_a, beta, log_sa, log_sy = x[0], x[1], x[2], x[3]
    a = x[4:]
    sigma_a, sigma_y = ns.exp(log_sa), ns.exp(log_sy)
    r = y - (ns.gather(a, county) + beta * floor)
    z = (a - mu_a) / sigma_a
    lp = -0.5 * ns.sum(r ** 2) / sigma_y ** 2 - N * log_sy
    lp = lp - 0.5 * ns.sum(z ** 2) - J * log_sa
    lp = lp - 0.5 * (mu_a / 10.0) ** 2 - 0.5 * (beta / 10.0) ** 2
    lp = lp - 0.5 * (sigma_a / 5.0) ** 2 + log_sa
    lp = lp - 0.5 * (sigma_y / 5.0) ** 2 + log_sy
    return lp + const


def _mvn(x, ns, Y, n, m, half_log_2pi):
    mu = x[:n]
    L = ns.tril(ns.square_rows(x[n:], n))          # row-major n x n, lower triangle read
    Z = ns.solve_lower(L, ns.centred_columns(Y, mu))
    return -0.5 * ns.sum(Z ** 2) - m * ns.sum(ns.log(ns.diag(L))) - half_log_2pi


def _student_t(x, ns, X, y, N, D, nu):
    beta, sigma = x[:D], x[D]
    z = (y - ns.matvec(X, beta)) / sigma
    return (ns.sum(-0.5 * (nu + 1.0) * ns.log1p(z * z / nu)) - N * ns.log(sigma)
            - 0.5 * ns.sum(beta ** 2) / 25.0 - 0.5 * sigma ** 2)


def _objective_student_t(wl, ns):
    X = ns.const(np.asarray(wl.data["X"], dtype=np.float64))
    y = ns.const(np.asarray(wl.data["y"], dtype=np.float64))
    N, D = wl.data["X"].shape
    return lambda x: _student_t(x, ns, X, y, N, D, 4.0)


def _objective_eight_schools(wl, ns):
    y = [float(v) for v in wl.data["y"]]
    sigma = [float(v) for v in wl.data["sigma"]]
    return lambda x: _eight_schools(x, ns, y, sigma)


def _objective_logreg(wl, ns):
    X = ns.const(np.asarray(wl.data["X"], dtype=np.float64))
    y = ns.const(np.asarray(wl.data["y"], dtype=np.float64))
    return lambda b: _logreg(b, ns, X, y)


def _objective_gp(wl, ns):
    t, y = (np.asarray(wl.data[k], dtype=np.float64) for k in ("t", "y"))
    n = t.size
    D2, Y1, eye = (ns.const(a) for a in ((t[:, None] - t[None, :]) ** 2, y[:, None], np.eye(n)))
    half = n * _HALF_LOG_2PI
    return lambda x: _gp(x, ns, D2, Y1, eye, half)


def _objective_radon(wl, ns):
    d, p = wl.data, wl.params
    y, floor = (ns.const(np.asarray(d[k], dtype=np.float64)) for k in ("y", "floor"))
    county = ns.index(np.asarray(d["county"], dtype=np.int64))
    N, J, const = int(p["N"]), int(p["J"]), float(d["const"])
    return lambda x: _radon(x, ns, y, county, floor, N, J, const)


def _objective_mvn(wl, ns):
    Y = np.asarray(wl.data["Y"], dtype=np.float64)
    m, n = Y.shape
    half = m * n * _HALF_LOG_2PI
    Yc = ns.const(Y)
    return lambda x: _mvn(x, ns, Yc, n, m, half)


# Every workload a peer can run: name -> (wl, ns) -> one-argument objective.
_OBJECTIVES = {
    "eight-schools": _objective_eight_schools,
    "rosenbrock-loop": lambda wl, ns: (lambda x, n=len(wl.x0): _rosenbrock_loop(x, ns, n)),
    "rosenbrock-vec": lambda wl, ns: (lambda x: _rosenbrock_vec(x, ns)),
    "logreg": _objective_logreg,
    "chain": lambda wl, ns: (lambda x, L=_chain_length(wl): _chain(x, ns, L)),
    "gp": _objective_gp,
    "radon": _objective_radon,
    "mvn": _objective_mvn,
    "student-t": _objective_student_t,
}


def _objective(wl, kind, ns) -> Callable:
    """The workload as a one-argument function over ``ns``'s array type."""
    return _OBJECTIVES[kind](wl, ns)


def _chain_length(wl) -> int:
    return int(wl.params["L"])


def _x0(wl) -> np.ndarray:
    return np.ascontiguousarray(wl.x0, dtype=np.float64)


class _Ops:
    """The primitives a workload needs, bound to one peer's array library."""

    def __init__(self, **fns):
        self.__dict__.update(fns)


def _array_linalg(cholesky, solve_lower, tril, diagonal):
    """The linear-algebra primitives of an array library with numpy's indexing."""
    return dict(cholesky=cholesky, solve_lower=solve_lower, tril=tril, diag=diagonal,
                gather=lambda a, idx: a[idx], square_rows=lambda v, n: v.reshape(n, n),
                centred_columns=lambda Y, mu: (Y - mu).T)


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


# --------------------------------------------------------------------------
# JAX

@functools.lru_cache(maxsize=None)
def _jax_ops():
    import jax

    # float64 is a process-wide switch in JAX and must be on before any array
    # is made; every column here is float64, so set it once, on first use.
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    from jax.scipy.linalg import solve_triangular

    return _Ops(
        exp=jnp.exp, log1p=jnp.log1p, sin=jnp.sin, sum=jnp.sum, log=jnp.log,
        const=jnp.asarray, index=jnp.asarray, matvec=lambda X, b: X @ b,
        logaddexp0=lambda e: jnp.logaddexp(0.0, e),
        **_array_linalg(jnp.linalg.cholesky, lambda L, B: solve_triangular(L, B, lower=True),
                        jnp.tril, jnp.diagonal),
    )


def _jax_column(peer, wl, f, note) -> PeerColumn:
    import jax

    vg_jit = jax.jit(jax.value_and_grad(f))
    x0 = _x0(wl)

    def vg(x):
        v, g = vg_jit(x)
        # .item() blocks on the async dispatch, so timing covers the compute.
        # Measured on eight-schools: float(v) costs ~20 us more per call than
        # v.item().  Packing value and gradient into one output array saves a
        # few us there but made XLA compile the unrolled chain 4x slower.
        return v.item(), np.asarray(g)

    # jit traces and compiles on the first call; that is JAX's one-time cost.
    _, setup = _timed(lambda: vg(x0))
    return PeerColumn(peer, wl.name, setup, note, vg)


def _build_jax(wl, kind, budget) -> PeerColumn:
    if kind == "chain":
        _chain_setup_guard("jax", _chain_length(wl), budget)
    f = _objective(wl, kind, _jax_ops())
    return _note_chain_cost("jax", wl, kind,
                            _jax_column("jax", wl, f, "jit(value_and_grad), loop unrolled at trace"))


def _build_jax_scan(wl, kind, budget) -> PeerColumn:
    if kind != "chain":
        raise Skip("lax.scan variant exists only for the chain workload")
    ns = _jax_ops()
    from jax import lax
    import jax.numpy as jnp

    L = _chain_length(wl)
    # Same arithmetic as _chain: 0.1*k with k an exact float64 integer.
    ks = jnp.arange(L, dtype=jnp.float64)

    def step(y, k):
        return y + 0.001 * ns.sin(y + 0.1 * k), None

    def f(x):
        y, _ = lax.scan(step, x[0], ks)
        return y

    return _jax_column("jax-scan", wl, f, "jit(value_and_grad), lax.scan")


# --------------------------------------------------------------------------
# PyTorch (eager): the graph is rebuilt on every call, so there is no setup.

@functools.lru_cache(maxsize=None)
def _torch_ops():
    import torch

    # One thread: the machine has 2 cores and revtape is single-threaded;
    # intra-op threading only adds sync overhead on these small ops anyway.
    torch.set_num_threads(1)
    zero = torch.zeros((), dtype=torch.float64)
    return _Ops(
        exp=torch.exp, log1p=torch.log1p, sin=torch.sin, sum=torch.sum, log=torch.log,
        const=torch.from_numpy, index=torch.from_numpy, matvec=lambda X, b: X @ b,
        logaddexp0=lambda e: torch.logaddexp(zero, e),
        **_array_linalg(torch.linalg.cholesky,
                        lambda L, B: torch.linalg.solve_triangular(L, B, upper=False),
                        torch.tril, torch.diagonal),
    )


def _build_torch(wl, kind, budget) -> PeerColumn:
    import torch

    ns = _torch_ops()
    f = _objective(wl, kind, ns)
    # One leaf reused across calls: the per-call cost is then the tool's
    # forward + backward, not tensor allocation.
    xt = torch.zeros(len(wl.x0), dtype=torch.float64, requires_grad=True)

    def vg(x):
        with torch.no_grad():
            xt.copy_(torch.from_numpy(np.asarray(x, dtype=np.float64)))
        xt.grad = None  # else backward accumulates into the last call's grad
        out = f(xt)
        out.backward()
        return out.item(), xt.grad.numpy()

    return PeerColumn("torch", wl.name, 0.0, "eager autograd, .backward()", vg)


# --------------------------------------------------------------------------
# HIPS autograd: traces on every call, like torch eager.

@functools.lru_cache(maxsize=None)
def _autograd_ops():
    import autograd.numpy as anp
    from autograd.scipy.linalg import solve_triangular

    return _Ops(
        exp=anp.exp, log1p=anp.log1p, sin=anp.sin, sum=anp.sum, log=anp.log,
        const=np.asarray, index=np.asarray, matvec=anp.dot,
        logaddexp0=lambda e: anp.logaddexp(0.0, e),
        # autograd's diagonal has a gradient only for axis1=-1, axis2=-2 (the
        # same diagonal of a square matrix)
        **_array_linalg(anp.linalg.cholesky, lambda L, B: solve_triangular(L, B, lower=True),
                        anp.tril, lambda A: anp.diagonal(A, axis1=-1, axis2=-2)),
    )


def _build_autograd(wl, kind, budget) -> PeerColumn:
    import autograd

    f = _objective(wl, kind, _autograd_ops())
    vg_ag = autograd.value_and_grad(f)

    def vg(x):
        v, g = vg_ag(x)
        return float(v), g

    return PeerColumn("autograd", wl.name, 0.0, "value_and_grad", vg)


# --------------------------------------------------------------------------
# CasADi: an SX expression graph built once, differentiated symbolically and
# turned into a Function (a flat instruction list run by CasADi's VM).

@functools.lru_cache(maxsize=None)
def _casadi_ops():
    import casadi as ca

    return _Ops(
        exp=ca.exp, log1p=ca.log1p, sin=ca.sin, log=ca.log,
        # sum of every entry: sum1 alone sums the columns of a matrix
        sum=lambda a: ca.sum1(ca.sum2(a)),
        const=ca.DM, matvec=ca.mtimes,
        # CasADi has no logaddexp; the overflow-safe form every peer's
        # logaddexp(0, e) uses.
        logaddexp0=lambda e: ca.fmax(e, 0) + ca.log1p(ca.exp(-ca.fabs(e))),
        # a gather is indexing an SX column by a list of positions
        index=lambda a: [int(i) for i in a], gather=lambda a, idx: a[idx],
        # chol gives the upper factor R (K = R^T R); solve() on a structurally
        # lower-triangular SX is forward substitution
        cholesky=lambda K: ca.chol(K).T, solve_lower=ca.solve, tril=ca.tril, diag=ca.diag,
        # x is a column and CasADi reshapes column-major: the transpose is row-major
        square_rows=lambda v, n: ca.reshape(v, n, n).T,
        centred_columns=lambda Y, mu: Y.T - ca.repmat(mu, 1, Y.shape[0]),
    )


def _casadi_function(f, n):
    import casadi as ca

    x = ca.SX.sym("x", n)
    fx = f(x)
    return ca.Function("f", [x], [fx, ca.gradient(fx, x)])


def _build_casadi(wl, kind, budget) -> PeerColumn:
    if kind == "chain":
        _chain_setup_guard("casadi", _chain_length(wl), budget)
    if kind == "gp":
        # SX has no Cholesky node: chol() expands into ~n^3/3 scalar operations
        # and the gradient graph doubles them, so the build grows as n^3 (the
        # results in benchmarks/results/ have the measured cost at n=200).
        n = int(np.size(wl.data["t"]))
        projected = _CASADI_GP_S_PER_N3 * n ** 3
        if projected > budget:
            raise Skip(f"SX expands the n={n} Cholesky into ~{n ** 3 // 3:,} scalar nodes: "
                       f"one-time cost projected at {projected:.0f} s > budget {budget:.0f} s "
                       "(--setup-budget)")
    if kind in ("student-t", "logreg"):
        # SX expands the N x D matrix-vector product into N*D scalar nodes
        # (one CasADi call: _stopped_past cannot cut it short)
        N, D = np.shape(wl.data["X"])
        projected = _CASADI_S_PER_MATVEC_ENTRY * N * D
        if projected > budget:
            raise Skip(f"SX expands the {N} x {D} matrix-vector product into {N * D:,} scalar "
                       f"nodes: one-time cost projected at {projected:.0f} s > budget "
                       f"{budget:.0f} s (--setup-budget)")
    x0 = _x0(wl)
    n = len(x0)
    f = _objective(wl, kind, _casadi_ops())

    def setup():
        F = _casadi_function(f, n)
        # Function.buffer() binds raw input/output pointers once; evaluating it
        # then skips all argument conversion.  Measured per call (10-param
        # function): F(numpy) 45 us, F(DM) 13 us (+ DM->numpy on the way out),
        # F.call([DM]) 16 us, buffer eval 0.5 us (+ ~2 us to copy x in and box
        # the value).
        buf, ev = F.buffer()
        xin, val, grad = np.zeros(n), np.zeros(1), np.zeros(n)
        buf.set_arg(0, memoryview(xin))
        buf.set_res(0, memoryview(val))
        buf.set_res(1, memoryview(grad))
        return F, buf, ev, xin, val, grad

    (F, buf, ev, xin, val, grad), t_setup = _timed(setup)

    def vg(x):
        xin[:] = x
        ev()
        return float(val[0]), grad

    col = PeerColumn("casadi", wl.name, t_setup, "SX Function, buffer() call",
                     vg, _keep=(F, buf, xin, val, grad))
    return _note_chain_cost("casadi", wl, kind, col)


# --------------------------------------------------------------------------
# Guard against columns whose one-time cost would swamp a bench run.  Only the
# chain grows without bound (its length L is the graph size).  Its cost is
# projected from the cost at a probe length -- a column already built at that
# length in this process, else a probe build made now -- as
# cost(L) = cost(probe_L) * (L / probe_L) ** exponent.
#
# Measured here (2 cores):
#   jax, unrolled: tracing is linear in L but XLA's compile of the straight-
#     line program is not: L=1e3 1.8 s trace + 4.1 s compile, 2e3 3.2 + 10.8 s,
#     1e4 15 + 207 s, i.e. ~L**1.7.  Probing at 1e3 costs seconds, whereas
#     just tracing 1e4 steps to decide would cost 15 s.
#   casadi: building SX from Python is ~12-15 us per step and linear
#     (1e4: 1.5 s, 1e5: 13 s); the probe at 1e4 is cheap and accurate.
# seconds per n^3 of building CasADi's gp Function (measured at n=200)
_CASADI_GP_S_PER_N3 = 34.0 / 200 ** 3
# seconds per entry of X in CasADi's student-t/logreg Function (16.7 s for the
# 100000 x 10 student-t, 0.35 s for the 1000 x 20 logreg, on a loaded 2-core machine)
_CASADI_S_PER_MATVEC_ENTRY = 1.7e-5
_CHAIN_COST_MODEL = {"jax": (1_000, 1.7), "casadi": (10_000, 1.0)}
_chain_setup_seen: dict[tuple[str, int], float] = {}


def _chain_setup_guard(peer: str, L: int, budget: float) -> None:
    probe_L, exponent = _CHAIN_COST_MODEL[peer]
    if L <= probe_L:
        return
    cost = _chain_setup_seen.get((peer, probe_L))
    if cost is None:
        probe = SimpleNamespace(name="chain", params={"L": probe_L}, data={}, x0=np.array([0.5]))
        cost = _BUILDERS[peer](probe, "chain", math.inf).setup_seconds
    projected = cost * (L / probe_L) ** exponent
    if projected > budget:
        raise Skip(
            f"one-time cost for L={L} projected at {projected:.0f} s "
            f"({cost:.1f} s at L={probe_L}, scaling ~L**{exponent:g}) > budget {budget:.0f} s"
            + ("; see jax-scan" if peer == "jax" else "")
        )


def _note_chain_cost(peer: str, wl, kind: str, col: PeerColumn) -> PeerColumn:
    if kind == "chain":
        _chain_setup_seen[(peer, _chain_length(wl))] = col.setup_seconds
    return col


_BUILDERS = {
    "jax": _build_jax,
    "jax-scan": _build_jax_scan,
    "torch": _build_torch,
    "autograd": _build_autograd,
    "casadi": _build_casadi,
}
