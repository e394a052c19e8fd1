"""The native tier's coverage (issue 17): every sweep, every op family, every
benchmark workload, bit for bit against the VM.

Native tangent sweeps (jvp, the Hessian's forward-over-reverse), GATHER_IDX
and its index checks, WHERE/CLIP in the fused scalar generator, batches whose
extra threads replay native code.  Compiles are slow (gcc): each test builds
few programs, each holding many ops.

Bits: `_same` compares the float64 bit patterns.  `_same_nan` is used where
inputs are nan/inf: it compares every non-nan bit pattern and only asks that
nans stay nans, because C does not fix a nan's sign or payload when two nans
meet (gcc may commute an addition's operands, and x86 returns the first nan),
so the VM's own kernels and a generated expression may pick different nans."""

import os

import numpy as np
import pytest

import revtape as rt
from revtape.runtime import native
from revtape.core import ops
from revtape import special as sps
from revtape._vm import ffi
from revtape.bench import workloads as bench_workloads
from revtape.core.ops import P


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory):
    d = tmp_path_factory.mktemp("native-cache")
    old = os.environ.get("REVTAPE_CACHE_DIR")
    os.environ["REVTAPE_CACHE_DIR"] = str(d)
    yield d
    if old is None:
        del os.environ["REVTAPE_CACHE_DIR"]
    else:
        os.environ["REVTAPE_CACHE_DIR"] = old


def _bits(a):
    return np.ascontiguousarray(np.asarray(a, dtype=np.float64)).view(np.int64)


def _same(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and np.array_equal(_bits(a), _bits(b))


def _same_nan(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or not np.array_equal(np.isnan(a), np.isnan(b)):
        return False
    keep = ~np.isnan(a)
    return np.array_equal(_bits(a)[keep], _bits(b)[keep])


def _all_same(xs, ys, same=_same):
    if isinstance(xs, tuple):
        return len(xs) == len(ys) and all(same(a, b) for a, b in zip(xs, ys))
    return same(xs, ys)


def _native_sweeps(ct):
    """The installed native table: (forward, reverse, value_and_grad, tangent) present."""
    nat = ct._p.native
    assert ct.native_state == "native" and nat != ffi.NULL
    return tuple(getattr(nat, m) != ffi.NULL
                 for m in ("forward", "reverse", "value_and_grad", "tangent"))


def _source(ct):
    return native.translate(ct._code, ct._ints, native._layout(ct))


def _opnames(ct):
    return {ops.VM_OPCODES[w & 0xFFFF] for w in ct.code[:, 0]}


def _pair(tape):
    vm, nt = rt.compile(tape, native=False), rt.compile(tape, native=True)
    assert vm._p.native == ffi.NULL and _native_sweeps(nt)[3]     # native tangents too
    return vm, nt


# ---------------------------------------------------------------- every op family

_UNARY = [n for n, o in ops.OPS.items() if o.family in ("unary", "unary_nd")]
_BINARY = [n for n, o in ops.OPS.items() if o.family in ("binary", "binary_nd")]


def _unary_arg(name, z):
    return z + 1.5 if name == "arccosh" else z         # the rest take (0.2, 0.8)


def _elementwise_families(x):
    """Every unary row on an array and on a scalar; every binary row as _VV,
    _VS, _SV (arrays) and as a scalar _VV."""
    s, s2, y = x[0], x[1], x[::-1]
    tot = 0.0
    for name in _UNARY:
        fn = getattr(P, name)
        tot = tot + np.sum(fn(_unary_arg(name, x))) + fn(_unary_arg(name, s))
    for name in _BINARY:
        fn = getattr(P, name)
        tot = tot + np.sum(fn(x, y)) + np.sum(fn(x, s2)) + np.sum(fn(s, x)) + fn(s, s2)
    return tot


def _scalar_families(x, skip=()):
    """Every row on scalars only (plus WHERE, CLIP, a guard): the fused scalar
    generator's program."""
    s, s2, s3 = x[0], x[1], x[2]
    tot = 0.0
    for name in (u for u in _UNARY if u not in skip):
        tot = tot + getattr(P, name)(_unary_arg(name, s)) * s3
    for name in (b for b in _BINARY if b not in skip):
        tot = tot + getattr(P, name)(s, s2) * s3 + getattr(P, name)(s2, 0.35)
    tot = tot + np.where(s > s2, s * s3, s2) + np.where(s3 < 0.5, 0.25, s2 * s3)
    tot = tot + np.where(s3 < 0.5, s * s2, -0.5) + np.clip(s3, 0.3, 0.6) * s
    if s < 0.9:                                                  # a guard
        tot = tot + (s - s2) ** 2
    return tot + 3.0 * s * s2 + s3 - s


_A = np.array([[2.0, 0.3, 0.1], [0.3, 1.5, 0.2], [0.1, 0.2, 1.8]])


def _structure_families(x):
    """Reductions (every kind, with axes), matmul, every linalg row,
    cumulative ops, structure (reshape, take, scatter, concatenation), array
    WHERE/CLIP, fused forms and a guard."""
    m = x.reshape(2, 3)
    t = (np.sum(np.max(m, axis=0)) + np.sum(np.min(m, axis=1) * x[:2]) + np.prod(x[:4])
         + np.sum(sps.logsumexp(m, axis=1)) + np.max(x) * np.min(x ** 2))
    t = t + np.sum(np.where(np.all(m > 0.1, axis=0), x[:3], 0.0))
    t = t + np.sum(np.where(np.any(m > 0.75, axis=1), x[3:5], x[:2]))
    t = t + np.sum(np.tanh(m @ _A) @ x[:3]) + x[:3] @ x[3:]
    S = _A + np.outer(x[:3], x[:3])
    L = np.linalg.cholesky(S)
    t = t + np.linalg.slogdet(S)[1] + np.sum(np.linalg.solve(S, x[3:])) + np.sum(np.linalg.inv(S))
    t = t + np.sum(np.linalg.eigh(S)[0] * x[:3]) + np.sum(L * x[3:])
    import revtape.numpy_api.linalg as rla
    t = t + np.sum(rla.solve_triangular(L, x[3:], lower=True))
    t = t + np.sum(np.cumsum(np.exp(x)) * x) + np.sum(np.cumprod(x[:4]))
    w = x[::-1] * x[[0, 0, 2, 4, 4, 5]] + np.concatenate([x[:2], x[3:], x[:1]]) ** 2
    t = t + np.sum(np.sum(w.reshape(2, 3), axis=0) * x[:3])
    t = t + np.sum(np.where(x > 0.5, x ** 2, 1.5)) + np.sum(np.where(x > 0.5, 0.5, x ** 3))
    t = t + np.sum(np.where(x > 0.5, np.sin(x), x[::-1])) + np.sum(np.clip(x, 0.3, 0.6) * x)
    t = t + np.sum((x - x[::-1]) ** 2) + np.sum(x[:3] + x[3] * x[3:]) + (x[0] - x[1]) ** 2
    t = t + np.sum(np.exp(x)[[0, 2, 2, 5]] + x[1] * np.sin(x[2:]))
    if x[0] < 0.9:
        t = t + x[1] * x[2]
    return t


def _check_sweeps(tape, vm, nt, xs, rng, same=_same):
    n = xs[0].size
    for x in xs:
        try:
            want = vm.value_and_gradient(x)
        except rt.BranchChanged:
            with pytest.raises(rt.BranchChanged):
                nt.value_and_gradient(x)
            continue
        assert _all_same(want, nt.value_and_gradient(x), same)
        assert same(vm.forward(x), nt.forward(x))
        v = rng.normal(size=n)
        assert same(vm.jvp(x, v), nt.jvp(x, v))


def test_every_elementwise_family_native_equals_vm(rng):
    x0 = np.linspace(0.2, 0.8, 6)
    tape = rt.GradientTape(_elementwise_families, x0)
    vm, nt = _pair(tape)
    names = _opnames(nt)
    for name in _UNARY:
        assert name.upper() in names
    for name in _BINARY:
        assert {f"{name.upper()}_{v}" for v in ("VV", "VS", "SV")} <= names
    xs = [x0 + 0.04 * rng.normal(size=6) for _ in range(3)]
    _check_sweeps(tape, vm, nt, xs, rng)
    # non-finite inputs flow the same way (nan's sign aside, see the module doc)
    bad = [x0.copy() for _ in range(3)]
    bad[0][1], bad[1][3], bad[2][0] = np.nan, np.inf, -np.inf
    _check_sweeps(tape, vm, nt, bad, rng, same=_same_nan)
    X = np.array(xs + xs)
    assert _all_same(vm.batch_value_and_gradient(X, threads=2),
                     nt.batch_value_and_gradient(X, threads=2))


def test_every_scalar_family_in_the_fused_generator_equals_vm(rng):
    """Scalar programs, WHERE and CLIP included, get the fused value_and_grad;
    its bits, and those of the native tangent and Hessian sweeps, are the VM's,
    at the select's corners: ties at the clip bounds, signed zeros, nan."""
    x0 = np.array([0.3, 0.55, 0.45])
    tape = rt.GradientTape(_scalar_families, x0)
    vm, nt = _pair(tape)
    assert "static int rtn_vg" in _source(nt)                    # the fused generator took it
    assert {"WHERE_VV", "CLIP"} <= _opnames(nt)          # scalar constants are slots: _VV
    xs = [x0 + 0.05 * rng.normal(size=3) for _ in range(4)]
    xs += [np.array([0.3, 0.55, 0.3]), np.array([0.3, 0.55, 0.6]),     # at the bounds
           np.array([0.3, 0.3, 0.5]), np.array([0.3, 0.55, 0.0]),      # a tie, signed zeros
           np.array([0.3, 0.55, -0.0])]
    _check_sweeps(tape, vm, nt, xs, rng)
    bad = [np.array([0.0, -0.0, 0.45]), np.array([-0.0, 0.0, 0.5]),     # log(0) and friends
           np.array([np.nan, 0.5, 0.4]), np.array([0.3, np.nan, 0.4]),
           np.array([0.3, 0.5, np.nan]), np.array([0.3, np.inf, 0.4]),
           np.array([0.3, 0.5, -np.inf])]
    _check_sweeps(tape, vm, nt, bad, rng, same=_same_nan)
    # forward-over-reverse: the Hessian program's tangent sweeps are native too
    # (rows whose second derivative revtape refuses left out)
    h = rt.HessianTape(lambda x: _scalar_families(x, skip=("gammainc", "gammaincc", "trigamma")),
                       x0)
    hvm, hnt = _pair(h)
    for x in xs[:3]:
        v = rng.normal(size=3)
        assert _same(hvm.hvp(x, v), hnt.hvp(x, v)) and _same(hvm.hessian(x), hnt.hessian(x))


def test_every_structural_family_native_equals_vm(rng):
    x0 = np.array([0.3, 0.55, 0.45, 0.7, 0.2, 0.6])
    tape = rt.GradientTape(_structure_families, x0)
    vm, nt = _pair(tape)
    names = _opnames(nt)
    want = {"REDUCE_SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_LOGSUMEXP",
            "REDUCE_ALL", "REDUCE_ANY", "MATMUL", "CHOLESKY", "TRISOLVE", "SOLVE", "INV",
            "SLOGDET", "EIGH", "CUMSUM", "CUMPROD", "GATHER", "WHERE_VV", "WHERE_VS",
            "WHERE_SV", "CLIP", "SQDIFF", "SSD", "AXPY", "CSUM", "SCATTER", "GUARD_LT", "GAXPY"}
    assert want <= names, want - names
    src = _source(nt)
    assert "rtn_vm_tan(p," in src and "rt_tan_MATMUL(" in src      # linalg left to the VM
    xs = [x0 + 0.03 * rng.normal(size=6) for _ in range(3)]
    _check_sweeps(tape, vm, nt, xs, rng)
    X = np.array(xs * 3)
    for threads in (1, 3):
        assert _all_same(vm.batch_value_and_gradient(X, threads=threads),
                         nt.batch_value_and_gradient(X, threads=threads))
    # a GradientTape's Hessian program is built native when the tape is
    hv, hn = vm._hessian_program(), nt._hessian_program()
    assert hv._p.native == ffi.NULL and _native_sweeps(hn)[3]
    v = rng.normal(size=6)
    assert _same(vm.hvp(xs[0], v), nt.hvp(xs[0], v))
    assert _same(vm.hessian(xs[1]), nt.hessian(xs[1]))
    np.testing.assert_allclose(nt.hvp(xs[0], v), rt.HessianTape(_structure_families, xs[0])
                               .hvp(xs[0], v), rtol=1e-9, atol=1e-10)


def test_jacobian_tape_tangents_and_jacobians_are_native(rng):
    """jvp and the Jacobian by tangent sweeps (rt_jacobian_fwd, via the
    Hessian) on a vector output, arrays and scalars mixed."""
    f = lambda x: np.concatenate([np.sin(x) * x[::-1], [np.sum(np.exp(x[:2])) * x[2]],
                                  np.clip(x, -0.2, 0.3) + np.where(x > 0, x, 0.5 * x)])
    x = rng.normal(size=4)
    vm, nt = _pair(rt.JacobianTape(f, x))
    for _ in range(3):
        x = rng.normal(size=4)
        v = rng.normal(size=4)
        assert _same(vm.jvp(x, v), nt.jvp(x, v)) and _same(vm.jacobian(x), nt.jacobian(x))
    np.testing.assert_allclose(nt.jvp(x, v), nt.jacobian(x) @ v, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------- GATHER_IDX

def test_gather_idx_is_translated_and_checks_every_index(rng):
    t = rt.Tape()
    x = t.track(np.arange(6.0) ** 2)
    ix = t.track(np.array([5.0, 0.0, 2.0, 2.0]))
    t.finish(np.sum(P.take_idx(x, ix) ** 2) + np.sum(np.sin(P.take_idx(x, ix))))
    vm, nt = (rt.CompiledTape(t, n_grad=1, native=m) for m in (False, True))
    assert _native_sweeps(nt)[3]
    src = _source(nt)
    assert "rt_fwd_GATHER_IDX(" in src and "rt_rev_GATHER_IDX(" in src
    assert "rt_tan_GATHER_IDX(" in src                # each sweep checks the indices
    xs = np.arange(6.0) ** 2 * 0.1
    for idx in ([1.0, 1, 3, 5], [0.0, 5, 5, 2], [4.0, 3, 2, 1]):
        arg = (xs + 0.01 * rng.normal(size=6), np.array(idx))
        assert _all_same(vm.value_and_gradient(arg), nt.value_and_gradient(arg))
        assert _same(vm.forward(arg), nt.forward(arg))
        v = rng.normal(size=6)
        assert _same(vm.jvp(arg, (v,)), nt.jvp(arg, (v,)))
    for bad in (6.0, -1.0, 2.5, np.nan, np.inf, -np.inf, 1e300, 2.0 ** 63):
        arg = (xs, np.array([1.0, bad, 3, 5]))
        for ct in (vm, nt):
            with pytest.raises(rt.IndexInputError, match="not a whole number"):
                ct.value_and_gradient(arg)
            with pytest.raises(rt.IndexInputError):
                ct.forward(arg)
            with pytest.raises(rt.IndexInputError):
                ct.jvp(arg, (np.ones(6),))
    arg = (xs, np.array([0.0, 1, 3, 5]))                            # still usable
    assert _all_same(vm.value_and_gradient(arg), nt.value_and_gradient(arg))


def test_gather_idx_status_codes_from_each_native_sweep():
    """The generated sweeps return RT_BAD_INDEX themselves: forward, and the
    reverse and tangent sweeps when the indices were rewritten after the
    forward (they check again, as the VM's do)."""
    from revtape._vm import lib
    t = rt.Tape()
    x = t.track(np.arange(6.0))
    ix = t.track(np.array([5.0, 0.0, 2.0]))
    t.finish(np.sum(np.exp(P.take_idx(x, ix))))
    nt = rt.CompiledTape(t, n_grad=1, native=True)
    nat, p = nt._p.native, nt._p
    nt.value_and_gradient((np.arange(6.0), np.array([1.0, 2.0, 3.0])))
    ioff = 6                                                        # ix follows x
    assert list(nt._vals[ioff:ioff + 3]) == [1.0, 2.0, 3.0]
    for bad in (6.0, -1.0, 2.5, np.nan, np.inf, 2.0 ** 63):
        nt._vals[ioff + 1] = bad
        assert nat.forward(p) == lib.RT_BAD_INDEX
        nt._adj[:] = 0.0
        nt._adj[nt._program.out_off] = 1.0
        rev = nat.reverse if nat.reverse != ffi.NULL else None
        if rev is not None:
            assert rev(p) == lib.RT_BAD_INDEX
        nt._adj[:] = 0.0
        nt._adj[0] = 1.0
        assert nat.tangent(p) == lib.RT_BAD_INDEX
    nt._vals[ioff + 1] = 2.0
    assert nat.forward(p) == lib.RT_OK and nat.tangent(p) == lib.RT_OK


# ---------------------------------------------------------------- batch arenas

def test_every_batch_thread_replays_native_code(monkeypatch, rng):
    """Extra batch threads replay on their own arenas with the native sweeps,
    including arenas built before the native code was installed."""
    f = lambda x: np.sum(np.sin(x) * x[::-1]) + x[0] * x[1] ** 2 + np.max(x)
    x = rng.normal(size=5)
    tape = rt.GradientTape(f, x)
    vm = rt.compile(tape, native=False)
    ct = rt.compile(tape, native=False)                 # built on the VM ...
    X = rng.normal(size=(9, 5))
    want = vm.batch_value_and_gradient(X, threads=3)
    assert _all_same(want, ct.batch_value_and_gradient(X, threads=3))
    assert all(ws.p.native == ffi.NULL for ws in ct._workspaces) and len(ct._workspaces) == 2
    native.attach(ct)                                   # ... then switched, as "auto" does
    got = ct.batch_value_and_gradient(X, threads=3)
    assert all(ws.p.native == ct._p.native != ffi.NULL for ws in ct._workspaces)
    assert _all_same(want, got)
    assert _all_same(vm.batch_forward(X, threads=3), ct.batch_forward(X, threads=3))


def test_batches_of_a_fused_scalar_program_use_its_value_and_grad(rng):
    """Row batches (too few rows for the wide form) of a scalar program run the
    fused value_and_grad on every thread's arena; a guard failing mid-batch
    reports its row as on the VM."""
    wl = bench_workloads.eight_schools()
    tape = rt.GradientTape(wl.f, wl.x0)
    vm, nt = _pair(tape)
    assert _native_sweeps(nt)[2]                        # fused value_and_grad
    X = wl.x0 + 0.2 * rng.normal(size=(10, wl.x0.size))
    for threads in (1, 2, 4):
        assert _all_same(vm.batch_value_and_gradient(X, threads=threads),
                         nt.batch_value_and_gradient(X, threads=threads))
    f = lambda x: x[0] * 2.0 + x[1] if x[0] > 0 else x[0] * 3.0
    gvm, gnt = _pair(rt.GradientTape(f, np.array([1.0, 2.0])))
    X = np.array([[1.0, 2.0], [2.0, 1.0], [-1.0, 0.5], [3.0, 3.0]])
    errs = []
    for ct in (gvm, gnt):
        with pytest.raises(rt.BranchChanged) as e:
            ct.batch_value_and_gradient(X, threads=2)
        errs.append(e.value.row)
    assert errs == [2, 2]


# ---------------------------------------------------------------- every workload

_SMALL = {"rosenbrock-loop": dict(n=12), "rosenbrock-vec": dict(n=50), "logreg": dict(N=40, D=5),
          "chain": dict(L=40), "gp": dict(n=12), "radon": dict(N=60, J=6), "mvn": dict(n=12, m=4)}


def _workload(name):
    make = bench_workloads.WORKLOADS[name]
    try:
        return make(**_SMALL.get(name, {}))
    except TypeError:                       # a workload added later, with other parameters
        return make()


@pytest.mark.parametrize("name", list(bench_workloads.WORKLOADS))
def test_every_benchmark_workload_native_equals_vm(name, rng):
    """Every registered workload (small sizes: the code paths, not the size,
    matter here): value and gradient, bound replay, forward, jvp and a
    two-thread batch, native bit for bit against the VM."""
    wl = _workload(name)
    tape = rt.GradientTape(wl.f, wl.x0)
    vm, nt = _pair(tape)
    n = wl.x0.size
    xs = [wl.x0 + 0.05 * rng.normal(size=n) for _ in range(3)]
    _check_sweeps(tape, vm, nt, xs, rng)
    xb, g1, g2 = xs[0].copy(), np.empty(n), np.empty(n)
    r1, r2 = vm.bind(xb, g1), nt.bind(xb, g2)
    assert _same(r1(), r2()) and _same(g1, g2)
    X = np.array(xs * 2)
    assert _all_same(vm.batch_value_and_gradient(X, threads=2),
                     nt.batch_value_and_gradient(X, threads=2))
    v_ref, g_ref = wl.numpy_vg(xs[1])
    v, g = nt.value_and_gradient(xs[1])
    assert v == pytest.approx(v_ref, rel=1e-10)
    np.testing.assert_allclose(g, g_ref, rtol=1e-8, atol=1e-10)


# ---------------------------------------------------------------- native="auto"

@pytest.fixture
def auto(monkeypatch):
    """native="auto" on (conftest turns it off), hot after 4 calls."""
    monkeypatch.setenv("REVTAPE_NATIVE", "1")
    monkeypatch.setenv("REVTAPE_NATIVE_CALLS", "4")
    monkeypatch.delenv("REVTAPE_NATIVE_SECONDS", raising=False)
    monkeypatch.setattr(native, "_warned", set())
    monkeypatch.setattr(native, "_failed", {})
    return monkeypatch


def test_auto_builds_a_tangent_sweep_for_the_programs_that_use_one(auto, rng):
    """A gradient-only program's build leaves the tangent sweep out (compile
    time), and its jvp stays the VM's bits; a program that served a jvp before
    it got hot, and a HessianTape's, get native tangents."""
    c = 0.4321 + os.getpid() % 1000 / 1e7                  # programs no other test built
    f = lambda x: np.sum(np.sin(x) * x[::-1]) + c * x[0] * x[1] ** 2
    x = rng.normal(size=4)
    v = rng.normal(size=4)
    vm = rt.compile(rt.GradientTape(f, x), native=False)
    grad_only, with_jvp = rt.compile(rt.GradientTape(f, x)), rt.compile(rt.GradientTape(f, x * 2))
    hess = rt.compile(rt.HessianTape(f, x))
    hvm = rt.compile(rt.HessianTape(f, x), native=False)
    for k in range(6):
        xk = x + 0.1 * k
        assert _all_same(grad_only.value_and_gradient(xk), vm.value_and_gradient(xk))
        assert _same(with_jvp.jvp(xk, v), vm.jvp(xk, v))
        assert _same(hess.hvp(xk, v), hvm.hvp(xk, v))
    for ct in (grad_only, with_jvp, hess):
        assert ct.wait_native(600)
    assert _native_sweeps(grad_only)[3] is False and _native_sweeps(with_jvp)[3]
    assert _native_sweeps(hess)[3]
    assert "rtn_tan" not in native.translate(grad_only._code, grad_only._ints,
                                             native._layout(grad_only, False))
    assert _same(with_jvp.jvp(x, v), vm.jvp(x, v)) and _same(hess.hvp(x, v), hvm.hvp(x, v))
    # the gradient-only program's first jvp rebuilds it with a tangent sweep
    assert _same(grad_only.jvp(x, v), vm.jvp(x, v))         # the VM's tangent sweep, meanwhile
    assert grad_only.native_state in ("compiling", "native") and grad_only.wait_native(600)
    assert _native_sweeps(grad_only)[3]
    for k in range(3):
        xk = x - 0.2 * k
        assert _same(grad_only.jvp(xk, v), vm.jvp(xk, v))
        assert _all_same(grad_only.value_and_gradient(xk), vm.value_and_gradient(xk))


def test_tangent_sweeps_cut_into_pieces_give_the_vms_bits(monkeypatch, rng):
    """Array programs and their tangent sweeps cut into 5-instruction
    functions: runs left to the VM (linalg) and checked kernels cross the
    cuts, and a guard fails inside a piece."""
    monkeypatch.setattr(native, "CHUNK", 5)
    x0 = np.array([0.3, 0.55, 0.45, 0.7, 0.2, 0.6])
    tape = rt.GradientTape(_structure_families, x0)
    vm, nt = _pair(tape)
    src = _source(nt)
    assert "rtn_tan_3(" in src and "rtn_vm_tan(p," in src and len(nt) > 20
    xs = [x0 + 0.03 * rng.normal(size=6) for _ in range(3)] + [np.r_[0.95, x0[1:]]]
    _check_sweeps(tape, vm, nt, xs, rng)                # the last one: the guard fails
    for ct in (vm, nt):
        with pytest.raises(rt.BranchChanged):
            ct.jvp(xs[-1], np.ones(6))


def test_tiled_blocks_keep_their_vm_sweeps_in_native_tangents(monkeypatch, rng):
    """A tiled block (csrc/instr/block.h) runs whole on the VM in every native
    sweep, tangents included; pieces of 3 instructions never cut one (the
    VM's range entry points refuse such a range); the Hessian of a blocked
    program is the VM's."""
    from revtape.lower import blocks
    monkeypatch.setattr(blocks, "TILE", 32)
    monkeypatch.setattr(native, "CHUNK", 3)
    n = 150
    W = rng.normal(size=n - 1)
    f = lambda x: (np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)
                   + np.sum(np.where(x > 0, x * x, -x) * 0.5) + np.dot(W, np.sin(x[1:]))
                   + np.sum(np.take(x, [3, 1, 4]) ** 2))
    x0 = rng.uniform(-1, 1, n)
    tape = rt.GradientTape(f, x0)
    vm, nt = _pair(tape)
    assert "BLOCK" in _opnames(nt)
    bad = x0.copy()
    bad[[3, 40, 97]] = [np.inf, np.nan, -np.inf]
    with np.errstate(all="ignore"):
        _check_sweeps(tape, vm, nt, [x0, 1.3 * x0 - 0.2, np.zeros(n)], rng)
        _check_sweeps(tape, vm, nt, [bad], rng, same=_same_nan)
    v = rng.normal(size=n)
    assert _same(vm.hvp(x0, v), nt.hvp(x0, v))
