"""The native tier (rt.compile(tape, native=True)): generated C, bit for bit the VM.

Every comparison here is on the bits (`_same`), not approximate: the native
code evaluates the VM's own expressions (ops_generated.h) and kernels."""

import copy
import os
import pathlib
import pickle
import subprocess
import sys

import numpy as np
import pytest

import revtape as rt
from revtape.runtime import native
from revtape.bench import workloads
from revtape import special as sps


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


def _is_native(ct):
    from revtape._vm import ffi
    return ct.native_state == "native" and ct._p.native != ffi.NULL


def _fused(ct):
    """The program got the scalar generator's fused value_and_grad (C locals)."""
    return "static int rtn_vg" in native.translate(ct._code, ct._ints, native._layout(ct))


def _same(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and np.array_equal(a.view(np.int64), b.view(np.int64))


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
