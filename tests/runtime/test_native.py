"""The native tier (rt.compile(tape, native=True), src/revtape/runtime/native.py):
generated C, bit for bit the VM.

Every comparison here is on the bits (`_same`), not approximate: the native
code evaluates the VM's own expressions (ops_generated.h) and kernels.
`_same_nan` is used where inputs are nan/inf: it compares every non-nan bit
pattern and only asks that nans stay nans, because C does not fix a nan's
sign or payload when two nans meet (gcc may commute an addition's operands,
and x86 returns the first nan), so the VM's own kernels and a generated
expression may pick different nans.

The sections: the generated code against the VM on op grids, workloads,
guards, the disk cache, compiler failures and native="auto"; coverage --
every sweep (native tangents: jvp, the Hessian's forward-over-reverse), every
op family, GATHER_IDX and its index checks, WHERE/CLIP in the fused scalar
generator, batches whose extra threads replay native code, every benchmark
workload; and the fused scalar generator's reverse sweep (native._Piece,
_scalar_rev).  Compiles are slow (gcc): each test builds few programs, each
holding many ops, and the runtime objects every library links are compiled
once per run (conftest's native_objects)."""

import copy
import itertools
import os
import pathlib
import pickle
import subprocess
import sys

import numpy as np
import pytest

import revtape as rt
from revtape.lower import compiler
from revtape.runtime import native
from revtape.core import ops
from revtape import special as sps
from revtape._vm import ffi
from revtape.bench import workloads
from revtape.bench import workloads as bench_workloads
from revtape.core.ops import P
from revtape.runtime.compiled import CompiledTape
from conftest import (ELEMENTWISE_BINARY, ELEMENTWISE_UNARY, all_same as _all_same,
                      elementwise_families, same_bits as _same,
                      same_bits_nan as _same_nan, scalar_families, seed_native_cache,
                      structure_families)


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory, native_objects):
    """The module's own native cache, holding the run's runtime objects."""
    d = tmp_path_factory.mktemp("native-cache")
    seed_native_cache(d, native_objects)
    old = os.environ.get("REVTAPE_CACHE_DIR")
    os.environ["REVTAPE_CACHE_DIR"] = str(d)
    yield d
    if old is None:
        del os.environ["REVTAPE_CACHE_DIR"]
    else:
        os.environ["REVTAPE_CACHE_DIR"] = old


def _is_native(ct):
    from revtape._vm import ffi
    return ct.native_state == "native" and ct._p.native != ffi.NULL


def _fused(ct):
    """The program got the scalar generator's fused value_and_grad (C locals)."""
    return "static int rtn_vg" in native.translate(ct._code, ct._ints, native._layout(ct))


def _scalar_grid(x):
    """The scalar forms: every differentiable unary row, the binary rows (scalar
    constants are arena slots, so these are _VV), WHERE, CLIP, guards, and the
    fused AXPY/SQDIFF/CSUM chains."""
    a, b, c = x[0], x[1], x[2]
    p = abs(a) + 0.5                                   # a positive operand
    t = (np.exp(a) + np.log(p) + np.log1p(p) + np.expm1(b) + np.sqrt(p) + np.square(c)
         + np.reciprocal(p) + np.sin(a) + np.cos(b) + np.tan(0.3 * c) + np.tanh(a)
         + np.sinh(b) + np.cosh(c) + np.arctan(a) + abs(b) - a
         + sps.gammaln(p) + sps.digamma(p) + sps.expit(b) + sps.log_expit(c) + sps.erf(a))
    for u, v in ((a, b), (a, 1.7), (-0.4, b)):         # _VV, _VS, _SV
        t = t + (u + v) * (u - v) + u / (v + 3.0) + abs(u) ** v + np.maximum(u, v)
        t = t + np.minimum(u, v) + np.logaddexp(u, v) + np.arctan2(u, v)
        t = t + sps.xlogy(abs(u) + 0.1, abs(v) + 0.2)
    return _guarded_tail(x, t + np.where(a > b, a * c, b * c) + np.clip(c, -0.5, 0.5))


def _scalar_only(x):
    """_scalar_grid without WHERE/CLIP: a program of the scalar generator."""
    a, b, c = x[0], x[1], x[2]
    t = np.exp(a) * np.log1p(abs(b)) + np.tanh(c) / (2.0 + np.cos(a)) + sps.expit(b) * c
    t = t + np.maximum(a, b) * np.arctan2(b, c) + (a - b) ** 2 + sps.gammaln(abs(c) + 0.5)
    return _guarded_tail(x, t)


def _guarded_tail(x, t):
    a, b = x[0], x[1]
    if a > -5.0:                                       # a guard
        t = t + 100.0 * (b - a ** 2) ** 2 + (1 - a) ** 2
    return t + x[3] + x[4] - x[5] + x[3] * x[4]


def _array_grid(x):
    """The array forms: kernels.c loops, reductions, gathers, scatters."""
    y = np.exp(x) * np.sin(x) + np.log1p(x ** 2) / (2 + np.cos(x)) + np.maximum(x, 0.1)
    z = np.where(x > 0, np.sqrt(np.abs(x)), x ** 3) + np.clip(x, -0.5, 0.5)
    w = x[::-1] * x[[0, 0, 2, 4, 4, 5]] + np.concatenate([x[:2], x[3:], x[:1]]) ** 2
    return np.sum(y) + np.sum(z * 2.0) + np.sum(np.sum(w.reshape(2, 3), axis=0) * x[:3])


@pytest.mark.parametrize("f", [_scalar_grid, _array_grid], ids=["scalar", "array"])
def test_native_equals_vm_bit_for_bit_on_a_grid_of_ops(f, rng):
    x0 = rng.normal(size=6) * 0.7
    tape = rt.GradientTape(f, x0)
    vm, nt = rt.compile(tape, native=False), rt.compile(tape, native=True)
    assert _is_native(nt) and not _is_native(vm)          # really the native code
    for k in range(6):
        x = x0 + 0.1 * rng.normal(size=6)
        if k == 5:
            x[2] = np.inf                                 # non-finite values flow the same way
        try:
            v1, g1 = vm.value_and_gradient(x)
        except rt.BranchChanged:                          # then the native code says so too
            with pytest.raises(rt.BranchChanged):
                nt.value_and_gradient(x)
            continue
        v2, g2 = nt.value_and_gradient(x)
        assert _same(v1, v2) and _same(g1, g2)
        assert _same(vm.forward(x), nt.forward(x))
        assert _same(vm.gradient(x), nt.gradient(x))
    # and against the numpy reference replay (within rounding: it is numpy, not C)
    x = x0 * 1.01
    v_ref, g_ref = tape.value_and_gradient(x)
    v, g = nt.value_and_gradient(x)
    assert v == pytest.approx(v_ref, rel=1e-12)
    np.testing.assert_allclose(g, g_ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("make", [workloads.eight_schools, lambda: workloads.rosenbrock_loop(n=100)],
                         ids=["eight-schools", "rosenbrock-loop"])
def test_native_equals_vm_bit_for_bit_on_benchmark_workloads(make, rng):
    wl = make()
    tape = rt.GradientTape(wl.f, wl.x0)
    vm, nt = rt.compile(tape, native=False), rt.compile(tape, native=True)
    assert _fused(nt)
    xb, gb1, gb2 = wl.x0.copy(), np.empty_like(wl.x0), np.empty_like(wl.x0)
    r1, r2 = vm.bind(xb, gb1), nt.bind(xb, gb2)
    for _ in range(4):
        xb[:] = wl.x0 + 0.3 * rng.normal(size=wl.x0.size)
        assert _same(r1(), r2()) and _same(gb1, gb2)
        v1, g1 = vm.value_and_gradient(xb)
        v2, g2 = nt.value_and_gradient(xb, out=np.empty_like(xb))
        assert _same(v1, v2) and _same(g1, g2)
    v_ref, g_ref = wl.numpy_vg(xb)
    assert v2 == pytest.approx(v_ref, rel=1e-12)
    np.testing.assert_allclose(g2, g_ref, rtol=1e-9, atol=1e-12)


def test_a_failed_guard_raises_branch_changed_as_on_the_vm():
    f = lambda x: x[0] * 2.0 if x[0] > 0 else x[0] * 3.0
    tape = rt.GradientTape(f, np.array([1.0, 2.0]))
    nt = rt.compile(tape, native=True)
    assert nt.value_and_gradient(np.array([2.0, 0.0]))[0] == 4.0
    with pytest.raises(rt.BranchChanged):
        nt.value_and_gradient(np.array([-1.0, 0.0]))
    assert nt.value_and_gradient(np.array([3.0, 0.0]))[0] == 6.0   # released, usable again


def test_the_disk_cache_is_reused_without_compiling(cache, rng):
    f = lambda x: np.sin(x[0]) * x[1] + 0.123456
    tape = rt.GradientTape(f, np.array([0.3, 0.4]))
    nt = rt.compile(tape, native=True)
    path = nt._native_path
    assert path.parent == cache and path.name.startswith("revtape_") and path.suffix == ".so"
    stamp, built = path.stat().st_ino, native.compiles      # (its mtime is the LRU's "last used")
    native._loaded.clear()                     # as a new process: only the disk cache remains
    again = rt.compile(rt.GradientTape(f, np.array([0.5, 0.6])), native=True)
    assert again._native_path == path and native.compiles == built
    assert path.stat().st_ino == stamp and again.native_compile_seconds == 0.0
    assert _same(again.value_and_gradient(np.array([0.3, 0.4]))[1],
                 nt.value_and_gradient(np.array([0.3, 0.4]))[1])
    # another process finds the same file and builds nothing
    code = ("import numpy as np, revtape as rt; from revtape.runtime import native\n"
            "t = rt.compile(rt.GradientTape(lambda x: np.sin(x[0]) * x[1] + 0.123456,"
            " np.array([0.3, 0.4])), native=True)\n"
            "print(native.compiles, t._native_path, repr(t.value_and_gradient(np.array([0.3, 0.4]))[0]))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[:2] == ["0", str(path)]
    assert float(out[2]) == nt.value_and_gradient(np.array([0.3, 0.4]))[0]


def test_a_missing_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("REVTAPE_CC", "no-such-cc-revtape")
    tape = rt.GradientTape(lambda x: x[0] * x[1], np.array([1.0, 2.0]))
    with pytest.raises(native.NativeCompileError, match="no-such-cc-revtape.*native=False"):
        rt.compile(tape, native=True)
    assert isinstance(native.NativeCompileError("x"), rt.RevtapeError)
    assert rt.compile(tape).value_and_gradient(np.array([1.0, 2.0]))[0] == 2.0   # VM unaffected


def test_a_compiler_that_fails_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("REVTAPE_CACHE_DIR", str(tmp_path))        # nothing cached here
    monkeypatch.setenv("REVTAPE_CC", "false")                      # exits 1
    tape = rt.GradientTape(lambda x: x[0] * x[1] + 7.5, np.array([1.0, 2.0]))
    with pytest.raises(native.NativeCompileError, match="failed"):
        rt.compile(tape, native=True)


def test_custom_primitives_stay_on_the_vm():
    @rt.primitive
    def twice(x):
        return 2.0 * x
    rt.defvjp(twice, lambda ans, x: lambda g: 2.0 * g)
    tape = rt.GradientTape(lambda x: np.sum(twice(x) * x), np.array([1.0, 2.0]))
    with pytest.raises(rt.UnsupportedError, match="PYCALL.*native=False"):
        rt.compile(tape, native=True)
    assert rt.compile(tape).native_state == "off"          # auto: never armed, no warning


def test_native_argument_values():
    tape = rt.GradientTape(lambda x: x[0] * x[1], np.array([1.0, 2.0]))
    assert rt.compile(tape, native=False).native_state == "off"
    assert rt.compile(tape).native_state == "off"           # conftest: REVTAPE_NATIVE=0
    with pytest.raises(rt.InputError, match="native"):
        rt.compile(tape, native="yes")


def test_deepcopy_and_pickle_of_a_native_tape(rng):
    wl = workloads.eight_schools()
    nt = rt.compile(rt.GradientTape(wl.f, wl.x0), native=True)
    x = wl.x0 + 0.2 * rng.normal(size=wl.x0.size)
    v, g = nt.value_and_gradient(x)
    for other in (copy.deepcopy(nt), pickle.loads(pickle.dumps(nt))):
        assert other._native and other._vals is not nt._vals          # own arenas
        assert other._native_path == nt._native_path                  # one shared library
        v2, g2 = other.value_and_gradient(x)
        assert _same(v, v2) and _same(g, g2)


@pytest.mark.slow     # a race of two processes, each compiling
def test_two_processes_compiling_one_program_at_once_share_the_entry(cache, tmp_path):
    # Both find the program missing from the cache and build it; each
    # publishes by an atomic rename, so both load a whole library and agree
    # bit for bit.  The runtime objects (kernels.c: slow to compile) are
    # copied in from the module's cache: the program is what is raced here.
    import shutil
    import time
    for obj in native._runtime_objects(*native._compiler(), cache, time.monotonic() + 600):
        shutil.copy(obj, tmp_path)
        shutil.copy(pathlib.Path(obj).with_suffix(".sha256"), tmp_path)   # its recorded hash
    code = ("import numpy as np, revtape as rt\n"
            "t = rt.compile(rt.GradientTape(lambda x: np.cos(x[0]) * x[1] - 0.987654,"
            " np.array([0.3, 0.4])), native=True)\n"
            "v, g = t.value_and_gradient(np.array([0.7, -0.2]))\n"
            "print(t._native_path, v.hex(), *[float(e).hex() for e in g])")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), REVTAPE_CACHE_DIR=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    assert outs[0][0] == outs[1][0]
    assert sorted(f.name for f in tmp_path.glob("revtape_*.so")
                  if not f.name.startswith("revtape_kernels_")) == [
        pathlib.Path(outs[0][0].split()[0]).name]


# ---------------------------------------------------------------- the VM's own kernels

def _vm_kernel_programs():
    """Programs of the instructions the native code calls the VM's kernels for
    (reductions other than sum, matmul: csrc/instr/ kernels inlined) or leaves
    to the VM's sweep over their range (linear algebra, cumulative)."""
    A = np.array([[2.0, 0.3, 0.1], [0.3, 1.5, 0.2], [0.1, 0.2, 1.8]])
    yield "reductions", (lambda x: np.max(x) * x[0] + np.min(x ** 2) + np.prod(x[:4])
                         + sps.logsumexp(x) + np.sum(np.max(x.reshape(2, 3), axis=1) * x[3:5])), 6
    yield "matmul", (lambda x: np.sum(np.tanh(x.reshape(2, 3) @ A) @ x[:3]) + x[0] * x[5]), 6
    yield "cumsum", (lambda x: np.sum(np.cumsum(np.exp(x)) * x)), 6
    yield "linalg", (lambda x: np.linalg.slogdet(A + np.outer(x[:3], x[:3]))[1]
                     + np.sum(np.linalg.solve(A + np.diag(x[3:] ** 2), x[:3]))), 6


@pytest.mark.parametrize("name,f,n", list(_vm_kernel_programs()),
                         ids=[t[0] for t in _vm_kernel_programs()])
def test_instructions_left_to_the_vm_give_the_vms_bits(name, f, n, rng):
    x0 = rng.normal(size=n) * 0.5
    tape = rt.GradientTape(f, x0)
    vm, nt = rt.compile(tape, native=False), rt.compile(tape, native=True)
    assert _is_native(nt)
    for _ in range(3):
        x = x0 + 0.1 * rng.normal(size=n)
        v1, g1 = vm.value_and_gradient(x)
        v2, g2 = nt.value_and_gradient(x)
        assert _same(v1, v2) and _same(g1, g2)
    v_ref, g_ref = tape.value_and_gradient(x)
    assert v2 == pytest.approx(v_ref, rel=1e-12)
    np.testing.assert_allclose(g2, g_ref, rtol=1e-9, atol=1e-12)


def test_every_sweep_of_a_native_tape_gives_the_vms_bits(rng):
    """jvp, vjp, jacobian, batches and Hessian programs run native forward,
    reverse and tangent sweeps over the same arenas."""
    f = lambda x: np.stack([np.sin(x[0]) * x[1], np.exp(x[1] - x[2]) + x[0] ** 3, x[2] / 3.0])
    x = rng.normal(size=3)
    v = rng.normal(size=3)
    w = rng.normal(size=3)
    tape = rt.JacobianTape(f, x)
    vm, nt = rt.compile(tape, native=False), rt.compile(tape, native=True)
    assert _is_native(nt)
    assert _same(vm.jacobian(x), nt.jacobian(x))
    assert all(_same(a, b) for a, b in zip(vm.jvp(x, v), nt.jvp(x, v)))
    assert all(_same(a, b) for a, b in zip(vm.vjp(x, w), nt.vjp(x, w)))
    g = lambda x: np.sum(np.sin(x) * x[::-1]) + x[0] * x[1] ** 2
    gvm, gnt = (rt.compile(rt.GradientTape(g, x), native=m) for m in (False, True))
    X = rng.normal(size=(5, 3))
    assert all(_same(a, b) for a, b in zip(gvm.batch_value_and_gradient(X),
                                           gnt.batch_value_and_gradient(X)))
    hvm, hnt = (rt.compile(rt.HessianTape(g, x), native=m) for m in (False, True))
    assert _is_native(hnt)
    assert _same(hvm.hessian(x), hnt.hessian(x)) and _same(hvm.hvp(x, v), hnt.hvp(x, v))
    np.testing.assert_allclose(hnt.hessian(x), rt.HessianTape(g, x).hessian(x), rtol=1e-12)


# ---------------------------------------------------------------- native="auto"

@pytest.fixture
def auto(monkeypatch):
    """native="auto" on (conftest turns it off for the rest of the suite), hot
    after 5 calls, warnings state of this process reset."""
    monkeypatch.setenv("REVTAPE_NATIVE", "1")
    monkeypatch.setenv("REVTAPE_NATIVE_CALLS", "5")
    monkeypatch.delenv("REVTAPE_NATIVE_SECONDS", raising=False)
    monkeypatch.setattr(native, "_warned", set())
    monkeypatch.setattr(native, "_failed", {})
    return monkeypatch


def _fresh(k):
    """A program no other test compiled (its constant differs), so its build is real."""
    c = 0.5 + k / 7919.0 + os.getpid() % 1000 / 1e7
    return lambda x: np.sum(np.sin(x) * x) + c * x[0] * x[1]


def test_auto_serves_the_vm_then_switches_when_hot_bit_for_bit(auto, rng):
    x0 = rng.normal(size=10)
    tape = rt.GradientTape(_fresh(0), x0)
    vm = rt.compile(tape, native=False)
    ct = rt.compile(tape)                                  # the default is "auto"
    xb, gb, gv = x0.copy(), np.empty_like(x0), np.empty_like(x0)
    run, run_vm = ct.bind(xb, gb), vm.bind(xb, gv)         # bound before the switch
    states = []
    for k in range(12):
        xb[:] = x0 + 0.3 * rng.normal(size=xb.size)
        assert _same(run(), run_vm()) and _same(gb, gv)
        states.append(ct.native_state)
        if k == 6:
            assert ct.wait_native(600)
    assert states[:4] == ["vm"] * 4 and states[4] == "compiling"   # hot on the 5th call
    assert states[-1] == "native" and _is_native(ct)
    v1, g1 = vm.value_and_gradient(xb)
    assert all(_same(a, b) for a, b in zip((v1, g1), ct.value_and_gradient(xb)))
    assert _same(vm.forward(xb), ct.forward(xb))
    # a copy of a native tape is native at once (the library is loaded), with its own arenas
    for other in (copy.deepcopy(ct), pickle.loads(pickle.dumps(ct))):
        assert _is_native(other) and other._vals is not ct._vals
        assert all(_same(a, b) for a, b in zip((v1, g1), other.value_and_gradient(xb)))


def test_auto_counts_forward_calls_and_replay_time(auto):
    ct = rt.compile(rt.GradientTape(_fresh(1), np.array([0.1, 0.2, 0.3])))
    for _ in range(5):
        ct.forward(np.array([0.3, 0.2, 0.1]))
    assert ct.native_state == "compiling"
    auto.setenv("REVTAPE_NATIVE_CALLS", str(10 ** 9))
    auto.setenv("REVTAPE_NATIVE_SECONDS", "1e-9")          # the first timed call is enough
    ct2 = rt.compile(rt.GradientTape(_fresh(2), np.array([0.1, 0.2, 0.3])))
    ct2.value_and_gradient(np.array([0.3, 0.2, 0.1]))
    assert ct2.native_state == "compiling"
    assert ct.wait_native(600) and ct2.wait_native(600)


def test_auto_off_by_environment(monkeypatch):
    monkeypatch.setenv("REVTAPE_NATIVE", "0")
    monkeypatch.setenv("REVTAPE_NATIVE_CALLS", "1")
    ct = rt.compile(rt.GradientTape(_fresh(3), np.array([0.1, 0.2])))
    for _ in range(5):
        ct.value_and_gradient(np.array([0.3, 0.2]))
    assert ct.native_state == "off" and ct._p.hot_max_calls == 0


def test_rt_grad_goes_native_when_hot(auto, rng):
    f = _fresh(4)
    g = rt.grad(f)
    ref = rt.compile(rt.GradientTape(f, np.zeros(4)), native=False)
    xs = [rng.normal(size=4) for _ in range(30)]
    for k, x in enumerate(xs):
        assert _same(g(x), ref.gradient(x))
        if k == 10:
            (entry,) = g._cache.values()
            (variant,) = entry.variants
            assert variant.ctape.native_state in ("compiling", "native")
            assert variant.ctape.wait_native(600)


def test_threads_keep_replaying_while_the_switch_happens(auto, rng):
    """Each thread replays its own copy (one CompiledTape serves one thread);
    the builder thread installs the native code while they call.  Every result,
    before, during and after the switch, is the VM's bit for bit."""
    f = _fresh(5)
    x0 = rng.normal(size=8)
    tape = rt.GradientTape(f, x0)
    xs = [x0 + 0.1 * rng.normal(size=8) for _ in range(16)]
    vm = rt.compile(tape, native=False)
    want = [vm.value_and_gradient(x) for x in xs]
    ct = rt.compile(tape)
    copies = [copy.deepcopy(ct) for _ in range(3)]
    errors, seen = [], []

    def work(c):
        try:
            k, native_calls = 0, 0
            while native_calls < 200 and k < 10 ** 6:
                v, g = c.value_and_gradient(xs[k % 16])
                if not (_same(v, want[k % 16][0]) and _same(g, want[k % 16][1])):
                    errors.append((k, c.native_state))
                native_calls += c.native_state == "native"
                k += 1
            seen.append(c.native_state)
        except Exception as e:          # noqa: BLE001 - reported below
            errors.append(e)

    import threading
    threads = [threading.Thread(target=work, args=(c,)) for c in copies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(900)
    assert not errors and seen == ["native"] * 3


def _hot_and_failed(ct, x):
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(6):
            v = ct.value_and_gradient(x)                      # never an exception
        assert not ct.wait_native(600)
    assert ct.native_state == "failed"
    return v, [w for w in caught if issubclass(w.category, native.NativeWarning)]


def test_auto_without_a_compiler_keeps_the_vm_with_one_warning(auto):
    auto.setenv("REVTAPE_CC", "no-such-cc-revtape")
    x = np.array([0.3, 0.4])
    tape = rt.GradientTape(_fresh(6), x)
    v, warned = _hot_and_failed(rt.compile(tape), x)
    assert len(warned) == 1 and "no-such-cc-revtape" in str(warned[0].message)
    assert _same(v[1], rt.compile(tape, native=False).gradient(x))
    _, again = _hot_and_failed(rt.compile(rt.GradientTape(_fresh(7), x)), x)
    assert again == []                                        # one warning per process


def test_auto_with_a_failing_compiler_or_a_timeout_keeps_the_vm(auto, tmp_path):
    auto.setenv("REVTAPE_CACHE_DIR", str(tmp_path))            # nothing cached here
    auto.setenv("REVTAPE_CC", "false")
    x = np.array([0.3, 0.4])
    _, warned = _hot_and_failed(rt.compile(rt.GradientTape(_fresh(8), x)), x)
    assert len(warned) == 1 and "failed" in str(warned[0].message)
    auto.delenv("REVTAPE_CC")
    auto.setenv("REVTAPE_NATIVE_TIMEOUT", "0.001")
    _, warned = _hot_and_failed(rt.compile(rt.GradientTape(_fresh(9), x)), x)
    assert len(warned) == 1 and "REVTAPE_NATIVE_TIMEOUT" in str(warned[0].message)


def test_auxiliary_outputs_of_a_native_scalar_program_are_the_vms(auto, rng):
    """The fused value_and_grad of a scalar program stores only the values a
    caller can see: the output and the has_aux extras (checked here)."""
    c = 0.123 + os.getpid() % 1000 / 1e7                 # a program no other test built

    def f(x):
        u = np.sin(x[0]) * x[1]
        w = x[1] * x[2] - c * x[0]
        return u + w * w, {"u": u, "w": w}

    g = rt.value_and_grad(f, has_aux=True)
    g_vm = rt.value_and_grad(f, has_aux=True)
    for k in range(12):
        x = rng.normal(size=3)
        auto.setenv("REVTAPE_NATIVE", "1")
        (v, aux), gr = g(x)
        if k == 6:
            (entry,) = g._cache.values()
            assert entry.variants[0].ctape.wait_native(600)
        auto.setenv("REVTAPE_NATIVE", "0")
        (v2, aux2), gr2 = g_vm(x)
        assert _same(v, v2) and _same(gr, gr2) and _same(aux["u"], aux2["u"]) and _same(aux["w"], aux2["w"])
    (entry,) = g._cache.values()
    ct = entry.variants[0].ctape
    assert _is_native(ct) and _fused(ct)


@pytest.mark.parametrize("make", [_scalar_only, workloads.eight_schools],
                         ids=["scalar-ops", "eight-schools"])
def test_scalar_programs_cut_into_pieces_give_the_vms_bits(make, monkeypatch, rng):
    """Long scalar programs are cut into pieces (separate C functions); values
    and adjoints crossing a cut go through the arenas.  Tiny pieces here make
    every kind of crossing happen (inputs, the output, guards, adjoints started
    in a later piece)."""
    monkeypatch.setattr(native, "SCALAR_CHUNK", 7)
    if make is _scalar_only:
        f, x0 = _scalar_only, rng.normal(size=6) * 0.7
    else:
        wl = make()
        f, x0 = wl.f, wl.x0
    tape = rt.GradientTape(f, x0)
    vm, nt = rt.compile(tape, native=False), rt.compile(tape, native=True)
    src = native.translate(nt._code, nt._ints, native._layout(nt))
    assert "rtn_vgrev_1(" in src and len(nt) > 14
    for k in range(5):
        x = x0 + 0.1 * rng.normal(size=x0.size)
        try:
            v1, g1 = vm.value_and_gradient(x)
        except rt.BranchChanged:
            with pytest.raises(rt.BranchChanged):
                nt.value_and_gradient(x)
            continue
        v2, g2 = nt.value_and_gradient(x)
        assert _same(v1, v2) and _same(g1, g2) and _same(vm.forward(x), nt.forward(x))
    if make is _scalar_only:                          # the guard fails in a middle piece
        x = x0.copy()
        x[0] = -6.0
        for ct in (vm, nt):
            with pytest.raises(rt.BranchChanged):
                ct.value_and_gradient(x)
        assert _same(vm.value_and_gradient(x0)[1], nt.value_and_gradient(x0)[1])


def test_auto_counts_hessian_and_tangent_calls(auto, rng):
    c = 0.321 + os.getpid() % 1000 / 1e7
    f = lambda x: np.sum(np.sin(x) * x[::-1]) + c * x[0] * x[1] ** 2
    x = rng.normal(size=3)
    ht = rt.compile(rt.HessianTape(f, x))
    hvm = rt.compile(rt.HessianTape(f, x), native=False)
    for k in range(8):
        xk = x + 0.1 * k
        assert _same(ht.hessian(xk), hvm.hessian(xk))
        if k == 5:
            assert ht.native_state == "compiling" and ht.wait_native(600)
    assert _is_native(ht)
    v = rng.normal(size=3)
    assert _same(ht.hvp(x, v), hvm.hvp(x, v))


def test_auto_without_the_c_sources_is_the_vm_without_a_warning(auto, tmp_path):
    import warnings
    auto.setattr(native, "CSRC", tmp_path / "no-csrc")          # as in an installed wheel
    x = np.array([0.3, 0.4])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ct = rt.compile(rt.GradientTape(_fresh(11), x))
        for _ in range(8):
            ct.value_and_gradient(x)
    assert ct.native_state == "off"


# ---------------------------------------------------------------- coverage: every sweep and op family

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
    tape = rt.GradientTape(elementwise_families, x0)
    vm, nt = _pair(tape)
    names = _opnames(nt)
    for name in ELEMENTWISE_UNARY:
        assert name.upper() in names
    for name in ELEMENTWISE_BINARY:
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
    tape = rt.GradientTape(scalar_families, x0)
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
    h = rt.HessianTape(lambda x: scalar_families(x, skip=("gammainc", "gammaincc", "trigamma",
                                                               "jn", "yn", "iv", "ive")),
                       x0)
    hvm, hnt = _pair(h)
    for x in xs[:3]:
        v = rng.normal(size=3)
        assert _same(hvm.hvp(x, v), hnt.hvp(x, v)) and _same(hvm.hessian(x), hnt.hessian(x))


def test_every_structural_family_native_equals_vm(rng):
    x0 = np.array([0.3, 0.55, 0.45, 0.7, 0.2, 0.6])
    tape = rt.GradientTape(structure_families, x0)
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
    np.testing.assert_allclose(nt.hvp(xs[0], v), rt.HessianTape(structure_families, xs[0])
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


def test_auto_builds_a_tangent_sweep_for_the_programs_that_use_one(auto, rng):
    """A gradient-only program's build leaves the tangent sweep out (compile
    time), and its jvp stays the VM's bits; a program that served a jvp before
    it got hot, and a HessianTape's, get native tangents."""
    auto.setenv("REVTAPE_NATIVE_CALLS", "4")
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
    tape = rt.GradientTape(structure_families, x0)
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


# ---------------------------------------------------------------- the fused scalar generator's reverse sweep
# native._Piece, _scalar_rev: known adjoints folded, `g != 0.0` tests dropped
# where a term stays finite, first additions written as assignments.  Each
# rests on an argument about signed zeros, nan and inf; these tests compare
# the bits with the VM's on exactly those values.  They compare with
# _same_nan: gcc folds `g * -1.0` into a negation in both the VM and the
# generated code, and which of the two compiles it as a sign flip of a nan
# differs by context (the generator differed on the same points before the
# folding).  Every other bit, signed zeros included, must agree.

SPECIAL = (0.0, -0.0, np.nan, np.inf, -np.inf, 1e308, -5e-324, 2.5)


def _zeros_and_signs(x):
    """Adjoints that are zero at run time (a product with x[2] = 0), -0.0
    partials (squares and products at -0.0), a negative CSUM term, an
    input reached by several known adjoints (x[0] + x[0] - x[1])."""
    a, b, c, d, e = x[0], x[1], x[2], x[3], x[4]
    t = (a * b) * c + (d - e) ** 2 * a - b * e + np.square(c) * d
    t = t + 100.0 * (e - d ** 2) ** 2 + (1.0 - a) ** 2 + np.exp(c) / (1.0 + d * d)
    return t + a + a - b + np.tanh(e) * 0.0


def _products(x):
    """Products whose adjoint is known (1.0, -1.0): each input's gradient is
    one term, so a -0.0 term must come out as the VM's 0.0 + -0.0 = +0.0."""
    return x[0] * x[1] - x[2] * x[3] + np.square(x[4]) - np.exp(x[3]) * x[4]


def _sum_only(x):
    """The output is a CSUM of inputs: every gradient entry is a known adjoint."""
    return x[0] + x[1] - x[2] + x[0] - x[3] + x[4]


def _points(x0):
    """x0 with each coordinate set to each special value, then pairs of them."""
    pts = [x0.copy()]
    for i, s in itertools.product(range(x0.size), SPECIAL):
        x = x0.copy()
        x[i] = s
        pts.append(x)
    for s, t in itertools.product(SPECIAL[:5], repeat=2):
        x = x0.copy()
        x[0], x[-1] = s, t
        pts.append(x)
    return pts


def _compare(vm, nt, x0):
    for x in _points(x0):
        v1, g1 = vm.value_and_gradient(x)
        v2, g2 = nt.value_and_gradient(x)
        assert _same_nan(v1, v2) and _same_nan(g1, g2), (x, g1, g2)


@pytest.mark.parametrize("f, dim", [(_zeros_and_signs, 5), (_products, 5), (_sum_only, 5),
                                    (workloads.rosenbrock_loop(n=5).f, 5),
                                    (workloads.eight_schools().f, 10)],
                         ids=["zeros-and-signs", "products", "sum-only", "rosenbrock-loop",
                              "eight-schools"])
def test_fused_reverse_equals_vm_on_signed_zeros_nan_inf(f, dim, rng):
    x0 = rng.normal(size=dim)
    tape = rt.GradientTape(f, x0)
    vm, nt = rt.compile(tape, native=False), rt.compile(tape, native=True)
    assert _fused(nt)
    _compare(vm, nt, x0)


def _vg_source(src):
    """The fused value_and_grad code of a generated source: from rtn_vg to the
    tangent sweeps that follow it (they keep the VM's tests)."""
    vg = src[src.index("static int rtn_vg"):]
    return vg[:vg.index("int rtn_tan")] if "int rtn_tan" in vg else vg


def test_a_sum_of_inputs_has_its_gradient_as_literals():
    """Known adjoints: no adjoint local is ever tested, the gradient is stored
    as constants (2.0 for x[0], -1.0 for x[2] ...)."""
    ct = rt.compile(rt.GradientTape(_sum_only, np.ones(5)), native=False)
    src = native.translate(ct._code, ct._ints, native._layout(ct))
    vg = _vg_source(src)
    assert "!= 0.0" not in vg and "d[0] = 2.0;" in vg and "d[2] = (-1.0);" in vg


def test_the_rosenbrock_loop_tests_only_adjoints_it_cannot_know():
    """Before: every reverse statement tested its adjoint (9 tests a term);
    now the CSUM terms, the AXPY addend and the constant-seeded SQDIFF have
    none, leaving two a term."""
    wl = workloads.rosenbrock_loop(n=100)
    ct = rt.compile(rt.GradientTape(wl.f, wl.x0), native=False)
    src = native.translate(ct._code, ct._ints, native._layout(ct))
    vg = _vg_source(src)
    assert vg.count("!= 0.0") == 2 * 99


def _with_variants(ct, variant):
    """The program with every scalar binary _VV instruction rewritten as its
    _VS or _SV form (the same arithmetic when n == 1), so the generator's VS
    and SV paths run; the compiler itself emits _VV for scalars."""
    state = ct.program.to_state()
    code = state["code"].copy()
    changed = 0
    for k in range(code.shape[0]):
        op = int(code[k, 0])
        name = ops.VM_OPCODES[op & 0xFFFF]
        if name.endswith("_VV") and code[k, 1] == 1 and not name.startswith("WHERE"):
            code[k, 0] = (op & ~0xFFFF) | ops.OPCODE[name[:-3] + "_" + variant]
            changed += 1
    assert changed
    state["code"] = code
    return state


@pytest.mark.parametrize("variant", ["VS", "SV"])
@pytest.mark.parametrize("f, dim", [(_zeros_and_signs, 5), (_products, 5),
                                    (workloads.eight_schools().f, 10)],
                         ids=["zeros-and-signs", "products", "eight-schools"])
def test_vs_and_sv_forms_equal_the_vm(f, dim, variant, rng):
    x0 = rng.normal(size=dim)
    tape = rt.GradientTape(f, x0)
    state = _with_variants(rt.compile(tape, native=False), variant)
    vm = CompiledTape(tape, _program=compiler.Program.from_state(state), native=False)
    nt = CompiledTape(tape, _program=compiler.Program.from_state(state), native=True)
    assert _fused(nt)
    _compare(vm, nt, x0)


@pytest.mark.parametrize("f", [_zeros_and_signs, _products, _sum_only],
                         ids=["zeros-and-signs", "products", "sum-only"])
def test_known_adjoints_crossing_pieces_equal_the_vm(f, monkeypatch, rng):
    """Pieces of 3 instructions: known adjoints are written back as literals
    by a later piece and read from the arena (unknown) by an earlier one."""
    monkeypatch.setattr(native, "SCALAR_CHUNK", 3)
    x0 = rng.normal(size=5)
    tape = rt.GradientTape(f, x0)
    vm, nt = rt.compile(tape, native=False), rt.compile(tape, native=True)
    assert "rtn_vgrev_1(" in native.translate(nt._code, nt._ints, native._layout(nt))
    _compare(vm, nt, x0)


# ------------------------------------------------ loops (native._periodic_runs, _roll)
def _array_loop(x):
    y = x
    for k in range(40):
        y = np.sin(y) * 0.5 + x * (0.01 * k) - np.square(y - 0.25) * 0.1
    return np.sum(y)


def _guarded_loop(x):
    y = x[0]
    for k in range(60):
        y = y + 0.01 * np.cos(y) if y > -100.0 else y - 1.0     # a guard each step
        y = y * 0.999 + x[1]
    return y


@pytest.mark.parametrize("f, x0, rolls", [(workloads.chain(L=300).f, np.array([0.5]), True),
                                          (workloads.rosenbrock_loop(n=60).f,
                                           workloads.rosenbrock_loop(n=60).x0, True),
                                          (_array_loop, np.linspace(-1.0, 1.5, 4), True),
                                          (_guarded_loop, np.array([0.3, 0.01]), False)],
                         ids=["chain", "rosenbrock-loop", "array-loop", "guarded-loop"])
def test_rolled_loops_equal_the_vm(f, x0, rolls, monkeypatch):
    """Repeated blocks become C loops (a program of ROLL_MIN instructions or
    more; 50 here): the same statements in the same order, so the VM's bits,
    on every sweep and on signed zeros, nan and inf."""
    monkeypatch.setattr(native, "ROLL_MIN", 50)
    tape = rt.GradientTape(f, x0)
    vm, nt = rt.compile(tape, native=False), rt.compile(tape, native=True)
    src = native.translate(nt._code, nt._ints, native._layout(nt))
    # a guard in every step leaves no block to repeat: straight-line code
    assert ("for (k_ = 0;" in src) == rolls and ("static int rtn_vg" in src) != rolls
    pts = _points(x0) if x0.size > 1 else [np.array([v]) for v in (0.5,) + SPECIAL]
    for x in pts:
        try:
            v1, g1 = vm.value_and_gradient(x)
        except rt.BranchChanged:
            with pytest.raises(rt.BranchChanged):
                nt.value_and_gradient(x)
            continue
        v2, g2 = nt.value_and_gradient(x)
        assert _same_nan(v1, v2) and _same_nan(g1, g2), x
        assert _same_nan(vm.forward(x), nt.forward(x))
        assert _same_nan(vm.vjp(x, -0.5), nt.vjp(x, -0.5))        # the reverse sweep alone


def test_a_long_loop_compiles_to_a_short_library(monkeypatch):
    """chain L=1e4: 30000 instructions; straight-line C was 2.2 MB of machine
    code and minutes of gcc, the loop is one statement per block."""
    wl = workloads.chain(L=10000)
    ct = rt.compile(rt.GradientTape(wl.f, wl.x0), native=False)
    runs = native._periodic_runs(ct._code.tolist())
    assert sum(p * r for _, p, r in runs) >= len(ct) - 10
    src = native.translate(ct._code, ct._ints, native._layout(ct))
    assert src.count("for (k_ =") == 2 and "static int rtn_vg" not in src


def test_code_that_adds_to_an_adjoint_directly_sees_its_known_value():
    """_Piece.a (for generator code that writes `a<slot> += ...` itself):
    an adjoint folded to a known value its local does not hold is assigned
    that value in the lvalue, then treated as unknown."""
    native._FAM = native._FAM or native._families()
    P = native._Piece(set(), started=set(), seed=9)
    assert P.add(3, "g * 1.0", tk=1.0, t_nz=True) == "" and P.known[3] == 1.0
    assert P.a(3) == "*(a3 = 1.0, &a3)" and 3 not in P.known
    assert P.a(3) == "a3"
    assert P.a(4) == "a4" and 4 not in P.known           # still its start, 0.0
    assert P.add(4, "t") == "a4 += t;"


def test_a_final_long_sum_moved_into_the_reverse_sweep_equals_the_vm(rng):
    """_defer_last_sum: the program's closing CSUM is added up between the
    reverse statements; the same additions in the same order."""
    wl = workloads.rosenbrock_loop(n=12)
    tape = rt.GradientTape(wl.f, wl.x0)
    vm, nt = rt.compile(tape, native=False), rt.compile(tape, native=True)
    src = native.translate(nt._code, nt._ints, native._layout(nt))
    vg = src[src.index("static int rtn_vg"):]
    o = int(nt._code[-1, 2])
    assert f"const double c{o}_0 = " in vg and f"v[{o}] = c{o}_10;" in vg
    _compare(vm, nt, wl.x0 + 0.1 * rng.normal(size=12))
    x = wl.x0.copy()
    x[3] = np.nan                                     # the sum goes nan, as the VM's does
    assert _same_nan(vm.value_and_gradient(x)[0], nt.value_and_gradient(x)[0])
    assert _same_nan(vm.forward(x), nt.forward(x))
