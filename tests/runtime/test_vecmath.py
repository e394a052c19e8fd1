"""csrc/kernels/vecmath.h: the VM's own log1p (branch-free, vectorised by the array
kernels' clones) and MATMUL's matrix-vector reverse in csrc/kernels/kernels.c.

log1p: within 1 ulp of libm (math.log1p) on millions of points over every
binade, numpy's values at every special point, and the same bits on every
path that evaluates it (array kernel, one-element scalar path, tiled block,
native tier).  The matrix-vector reverse: every dB[k] gets its products in
row order, checked bit for bit against a sequential numpy cumsum."""

import math
import os

import numpy as np
import pytest

import revtape as rt
from revtape.lower import blocks
from revtape.core import ops
from conftest import bits as _bits, same_bits_nan as _same

SPECIAL = np.array([0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, -2.2250738585072014e-308,
                    2.0 ** -54, -2.0 ** -54, np.nextafter(2.0 ** -54, 0), 2.0 ** -53, -2.0 ** -53,
                    1e-300, -1e-20, 1e-8, -1e-8, -1.0, np.nextafter(-1.0, 0), np.nextafter(-1.0, -2),
                    -2.0, -1e300, np.inf, -np.inf, np.nan, -np.nan, 1.7976931348623157e308, 1e300,
                    2.0 ** 53, 2.0 ** 53 + 2.0, 2.0 ** 54, 0.41421356237309503, 0.414213562373095,
                    -0.2928932188134525, -0.29289321881345254, -0.5, 0.5, 1.0, 3.0, 1e10])


def _array_log1p(x):
    """The VM's array kernel (one LOG1P instruction over all of x)."""
    ct = rt.compile(rt.JacobianTape(np.log1p, np.full(len(x), 0.5)), native=False)
    assert [ops.VM_OPCODES[w & 0xFFFF] for w in ct.code[:, 0]] == ["LOG1P"]
    with np.errstate(all="ignore"):
        return ct.forward(x)


def _points(n, seed=0):
    rng = np.random.default_rng(seed)
    return np.concatenate([
        np.exp2(rng.uniform(-1080, 1024, n)),            # every positive binade, subnormals too
        -np.exp2(rng.uniform(-1080, 0, n)),              # (-1, 0)
        rng.uniform(-1.0, 3.0, n),
        rng.uniform(-0.35, 0.45, n),                     # around the reduction's seams
        rng.uniform(-1.0, -0.999, n // 4),
        rng.integers(0, 2 ** 64, n, dtype=np.uint64).view(np.float64),   # any bit pattern
        SPECIAL,
    ])


def _libm(x):
    with np.errstate(all="ignore"):
        out = np.full(len(x), np.nan)
        ok = x > -1.0                                     # math.log1p raises at and below -1
        out[ok] = [math.log1p(t) for t in x[ok].tolist()]
        out[x == -1.0] = -np.inf
    return out


def test_log1p_is_within_one_ulp_of_libm_over_every_binade():
    x = _points(150_000)
    got, ref = _array_log1p(x), _libm(x)
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    assert np.array_equal(np.isposinf(got), np.isposinf(ref))
    assert np.array_equal(np.isneginf(got), np.isneginf(ref))
    fin = np.isfinite(ref)
    assert np.array_equal(np.signbit(got[fin]), np.signbit(ref[fin]))
    ulps = np.abs(got[fin] - ref[fin]) / np.spacing(np.abs(ref[fin]))
    assert ulps.max() <= 1.0, (ulps.max(), x[fin][np.argmax(ulps)])
    # two implementations each within an ulp of the truth disagree rarely
    assert np.mean(got[fin] != ref[fin]) < 0.01


def test_log1p_special_values_as_numpy():
    with np.errstate(all="ignore"):
        want = np.log1p(SPECIAL)
    got = _array_log1p(SPECIAL)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    fin = ~np.isnan(want)
    tiny = fin & (np.abs(SPECIAL) < 2.0 ** -53)
    assert np.array_equal(_bits(got[tiny]), _bits(SPECIAL[tiny]))      # -0.0, subnormals: x itself
    inf = fin & np.isinf(want)
    assert np.array_equal(got[inf], want[inf])
    assert np.allclose(got[fin], want[fin], rtol=2.3e-16, atol=0.0)
    assert np.signbit(got[SPECIAL == 0.0]).tolist() == [False, True]


def test_log1p_same_bits_in_the_array_kernel_the_scalar_path_and_a_block(monkeypatch):
    x = _points(600, seed=1)
    arr = _array_log1p(x)
    one = rt.compile(rt.JacobianTape(np.log1p, np.array([0.5])), native=False)
    with np.errstate(all="ignore"):
        scalar = np.array([one.forward(np.array([t]))[0] for t in x])
    assert _same(arr, scalar)
    # in a tiled block, with members before and after it (x * 1.0 and x - 0.0 keep every bit)
    monkeypatch.setattr(blocks, "TILE", 32)
    f = lambda z: np.log1p(z * 1.0) - 0.0
    blk = rt.compile(rt.JacobianTape(f, np.full(len(x), 0.5)), native=False)
    names = [ops.VM_OPCODES[w & 0xFFFF] for w in blk.code[:, 0]]
    assert "BLOCK" in names and "LOG1P" in names
    with np.errstate(all="ignore"):
        assert _same(arr, blk.forward(x))


def test_log1p_gradient_and_native_tier_agree(native_cache):
    x = _points(500, seed=2)
    x = x[np.isfinite(x) & (x > -1.0) & (x < 1e300)]
    f = lambda z: np.sum(np.log1p(z * z) * z) + np.log1p(z[0] * z[1])
    tape = rt.GradientTape(f, np.full(len(x), 0.5))
    vm, nt = rt.compile(tape, native=False), rt.compile(tape, native=True)
    assert nt.native_state == "native"
    xs = np.abs(x) % 7.0
    with np.errstate(all="ignore"):
        v1, g1 = vm.value_and_gradient(xs)
        v2, g2 = nt.value_and_gradient(xs)
        v3, g3 = tape.value_and_gradient(xs)                        # numpy: within an ulp or so
    assert _same(v1, v2) and _same(g1, g2)
    assert np.isclose(v1, v3, rtol=1e-13) and np.allclose(g1, g3, rtol=1e-13, atol=0.0)


# ---------------------------------------------------------------- MATMUL, N == 1: dB

@pytest.mark.parametrize("K", [1, 3, 10, 32, 33, 50])
def test_matvec_reverse_adds_rows_in_order(K):
    rng = np.random.default_rng(K)
    M = 300
    A = rng.standard_normal((M, K)) * np.exp(rng.uniform(-20, 20, (M, K)))   # rounding matters
    w = rng.standard_normal(M)
    f = lambda b: np.sum(w * (A @ b))
    b0 = rng.standard_normal(K)
    tape = rt.GradientTape(f, b0)
    ct = rt.compile(tape, native=False)
    assert "MATMUL" in [ops.VM_OPCODES[wd & 0xFFFF] for wd in ct.code[:, 0]]
    # MATMUL's output adjoint is w exactly (sum's 1.0 times w); then
    # dB[k] = (((0 + A[0,k] w0) + A[1,k] w1) + ...): numpy's cumsum is sequential
    want = np.cumsum(A * w[:, None], axis=0)[-1] + 0.0
    g = ct.gradient(b0)
    assert np.array_equal(_bits(g), _bits(want))
    assert np.allclose(g, tape.gradient(b0), rtol=1e-9, atol=1e-9 * np.abs(A).max())
