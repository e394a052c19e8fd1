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
from revtape import native, workloads
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
    t = t + np.where(a > b, a * c, b * c) + np.clip(c, -0.5, 0.5)
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
    vm, nt = rt.compile(tape), rt.compile(tape, native=True)
    assert nt._vgf is not vm._vgf                         # really the native code
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
    vm, nt = rt.compile(tape), rt.compile(tape, native=True)
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
    stamp, built = path.stat().st_mtime_ns, native.compiles
    native._loaded.clear()                     # as a new process: only the disk cache remains
    again = rt.compile(rt.GradientTape(f, np.array([0.5, 0.6])), native=True)
    assert again._native_path == path and native.compiles == built
    assert path.stat().st_mtime_ns == stamp and again.native_compile_seconds == 0.0
    assert _same(again.value_and_gradient(np.array([0.3, 0.4]))[1],
                 nt.value_and_gradient(np.array([0.3, 0.4]))[1])
    # another process finds the same file and builds nothing
    code = ("import numpy as np, revtape as rt; from revtape import native\n"
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


def test_untranslated_opcodes_are_refused_by_name():
    tape = rt.GradientTape(lambda x: np.max(x) * x[0], np.array([1.0, 2.0, 3.0]))
    with pytest.raises(rt.UnsupportedError, match="REDUCE_MAX"):
        rt.compile(tape, native=True)
    tape = rt.GradientTape(lambda x: np.sum(x.reshape(2, 2) @ x.reshape(2, 2)), np.ones(4))
    with pytest.raises(rt.UnsupportedError, match="MATMUL"):
        rt.compile(tape, native=True)


def test_native_argument_values():
    tape = rt.GradientTape(lambda x: x[0] * x[1], np.array([1.0, 2.0]))
    auto = rt.compile(tape, native="auto")          # for now: the VM (README, Native tier)
    assert auto._vgf is rt.compile(tape)._vgf
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


def test_two_processes_compiling_one_program_at_once_share_the_entry(tmp_path):
    # Both find the cache empty and build; each publishes by an atomic rename,
    # so both load a whole library and agree bit for bit.
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
    assert sorted(f.name for f in tmp_path.glob("revtape_*.so")) == [
        pathlib.Path(outs[0][0].split()[0]).name]
