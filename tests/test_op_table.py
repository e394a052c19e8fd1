"""The op table is the single source of every dispatch list (issue 12): the
ufuncs, comparisons, reductions, constant powers, scalar forwards, guards and
rt.special names are derived from the rows' fields, so a row added to ops.py
is reachable from numpy/scipy with no other edit.  erfinv was added that way
(one row + codegen) and is checked here like any special function."""

import math
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import revtape as rt
from revtape.core import ops
from conftest import check_grad

try:
    import scipy.special as sps
except ImportError:
    sps = None
needs_scipy = pytest.mark.skipif(sps is None, reason="scipy.special's ufuncs are what users call")


def recorded_ops(tape):
    return [m.group(1) for m in re.finditer(r"^\s+%\d+ = (\w+)\(", repr(tape), re.M)]


def record(f, x):
    tape = rt.Tape()
    t = tape.track(x)
    tape.finish(f(t))
    return tape


# ---------------------------------------------------------------- derived lists

def test_every_row_ufunc_records_its_row():
    x = np.array([0.3, 0.6])
    seen = 0
    for op in ops.OPS.values():
        for u in op.ufuncs:
            if op.guard is not None:
                continue
            f = (lambda t, u=u: u(t)) if u.nin == 1 else (lambda t, u=u: u(t, t))
            assert recorded_ops(record(f, x)) == [op.name], (u, op)
            seen += 1
    assert seen >= 30     # the numpy ufuncs alone are more than that (scipy adds ~20)


def test_comparison_rows_branch_on_scalars_and_mask_arrays():
    assert list(ops.GUARD_PREDICATES) == ["lt", "le", "gt", "ge", "eq", "ne"]
    for u, name in ops.UFUNC_COMPARE.items():
        sym, pred = ops.GUARD_PREDICATES[name]
        for a, b in [(0.5, 0.7), (0.7, 0.5), (0.5, 0.5)]:
            tape = rt.Tape()
            r = u(tape.track(a), b)
            assert r is pred(a, b) and type(r) is bool
            assert "guard" in repr(tape) and sym in repr(tape)
        tape = record(lambda t, u=u: u(t, 0.5), np.array([0.3, 0.5, 0.8]))
        assert recorded_ops(tape) == [name]
        np.testing.assert_array_equal(tape.forward(np.array([0.3, 0.5, 0.8])),
                                      u(np.array([0.3, 0.5, 0.8]), 0.5).astype(float))


def test_reduce_and_power_rows():
    x = np.array([0.3, 0.6, 0.2])
    for u, name in ops.REDUCE_UFUNCS.items():
        assert recorded_ops(record(lambda t, u=u: u.reduce(t), x)) == [name]
    for c, op in ops.POWER_SPECIAL.items():
        assert recorded_ops(record(lambda t, c=c: t ** c, x)) == [op.name]
    assert set(ops.POWER_SPECIAL) == {2.0, 0.5, -1.0}
    assert recorded_ops(record(lambda t: t ** 3.0, x)) == ["pow"]


def test_scalar_forwards_agree_with_numpy():
    rng = np.random.default_rng(3)
    n = 0
    for op in ops.OPS.values():
        if op.sfwd is None:
            continue
        n += 1
        for _ in range(20):
            args = [float(rng.uniform(-1.9, 1.9)) for _ in op.partials]
            try:
                v = op.sfwd(*args)
            except (ArithmeticError, ValueError):
                # the recorder falls back to numpy, which returns nan/inf there
                assert not np.isfinite(op.fwd(*args)), (op.name, args)
                continue
            np.testing.assert_allclose(v, op.fwd(*args), rtol=1e-15, err_msg=op.name)
    assert n >= 31      # every row with a Python-float forward is checked (31 when this was written)


def test_rt_special_is_the_rows_with_a_scipy_name():
    for name, op in ops.SPECIAL_ROWS.items():
        assert name in rt.special.__all__
        if name not in ("gammainc", "gammaincc"):    # these refuse a tracked shape first
            assert getattr(rt.special, name) is getattr(ops.P, op.name)
    assert "erfinv" in ops.SPECIAL_ROWS


def test_changing_a_row_bumps_the_epoch_and_rt_grad_rerecords():
    op = ops.OPS["sin"]
    g = rt.grad(lambda x: np.sin(x) * 2.0)
    assert g(0.3) == pytest.approx(2 * math.cos(0.3))
    before = ops.EPOCH[0]
    old = op.partials
    try:
        op.partials = (lambda f, x: ops.P.mul(3.0, ops.P.cos(x)),)
        assert ops.EPOCH[0] == before + 1
        # the program compiled from the old rule is not reused: the traced
        # reverse pass now runs the patched Python rule
        assert rt.gradient(lambda x: np.sin(x) * 2.0, 0.3) == pytest.approx(6 * math.cos(0.3))
        # rt.grad's cached program guards on EPOCH: the next call records again
        # (the C partial is generated code: a Python patch does not reach it)
        records = g.cache_info().records
        g(0.3)
        assert g.cache_info().records == records + 1
    finally:
        op.partials = old
    assert g(0.3) == pytest.approx(2 * math.cos(0.3))


# ---------------------------------------------------------------- erfinv: one row

X = np.array([-0.97, -0.6, -0.2, -1e-3, 0.0, 0.1, 0.24, 0.26, 0.7, 0.99])


def erfinv_ref(x):
    if sps is not None:
        return sps.erfinv(x)
    return ops.c_elementwise("erfinv", x)


@needs_scipy
def test_erfinv_forward_matches_scipy_over_its_domain():
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.uniform(-1, 1, 20000), rng.uniform(-1e-6, 1e-6, 2000),
                        1 - np.exp(rng.uniform(-36, -1, 2000))])
    mine = ops.c_elementwise("erfinv", x)
    ref = sps.erfinv(x)
    assert np.max(np.abs(mine - ref) / np.abs(ref)) < 2e-15
    edge = np.array([-1.0, 1.0, 0.0, -0.0, np.nan, 1.5, -1.5, np.inf, -np.inf, 5e-324])
    np.testing.assert_array_equal(ops.c_elementwise("erfinv", edge), sps.erfinv(edge))
    assert np.signbit(ops.c_elementwise("erfinv", np.array([-0.0]))[0])


def test_erfinv_gradient_against_finite_differences_and_formula():
    f = lambda x: np.sum(rt.special.erfinv(x) ** 3)
    g = check_grad(f, X[1:-1], rtol=1e-6)
    y = erfinv_ref(X[1:-1])
    np.testing.assert_allclose(g, 3 * y ** 2 * math.sqrt(math.pi) / 2 * np.exp(y ** 2),
                               rtol=1e-12)


def test_erfinv_compiled_equals_reference_replay_and_second_derivative():
    f = lambda x: np.sum(np.exp(rt.special.erfinv(x)))
    tape = rt.GradientTape(f, X)
    ctape = rt.compile(tape)
    x2 = X[::-1] * 0.9
    v, g = ctape.value_and_gradient(x2)
    v_ref, g_ref = tape.value_and_gradient(x2)
    assert v == pytest.approx(v_ref, rel=1e-14)
    np.testing.assert_allclose(g, g_ref, rtol=1e-13)
    # erfinv'' = 2 y y'^2: the diagonal Hessian of sum(erfinv) in C and in Python
    h = lambda x: np.sum(rt.special.erfinv(x))
    y = erfinv_ref(x2)
    d1 = math.sqrt(math.pi) / 2 * np.exp(y ** 2)
    H = rt.compile(rt.HessianTape(h, X)).hessian(x2)
    np.testing.assert_allclose(H, np.diag(2 * y * d1 ** 2), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(rt.HessianTape(h, X).hessian(x2), H, rtol=1e-12, atol=1e-14)


def test_erfinv_scalar_path_nonfinite_and_rt_grad():
    assert float(rt.gradient(lambda x: rt.special.erfinv(x), 0.0)) == pytest.approx(
        math.sqrt(math.pi) / 2, rel=1e-15)
    ctape = rt.compile(rt.GradientTape(lambda x: np.sum(rt.special.erfinv(x)), X))
    v, g = ctape.value_and_gradient(np.array([1.0, -1.0, 2.0] + [0.0] * 7))
    assert math.isnan(v) and g[0] == np.inf and g[1] == np.inf and math.isnan(g[2])
    dg = rt.grad(lambda x: rt.special.erfinv(x) * x)
    np.testing.assert_allclose(dg(0.5), erfinv_ref(0.5) + 0.5 * math.sqrt(math.pi) / 2
                               * math.exp(erfinv_ref(0.5) ** 2), rtol=1e-14)


@needs_scipy
def test_scipy_erfinv_dispatches_on_tracked_values():
    tape = record(lambda t: sps.erfinv(t), np.array([0.1, 0.5]))
    assert recorded_ops(tape) == ["erfinv"]
    assert sps.erfinv(0.5) == rt.special.erfinv(0.5)     # plain values: scipy's own


def test_erfinv_without_scipy():
    code = textwrap.dedent("""
        import sys
        sys.modules["scipy"] = None
        import math
        import numpy as np
        import revtape as rt
        x = np.array([-0.9, -0.1, 0.0, 0.3, 0.95])
        f = lambda x: np.sum(rt.special.erfinv(x) ** 2)
        tape = rt.GradientTape(f, x)
        v, g = rt.compile(tape).value_and_gradient(x * 0.5)
        v2, g2 = tape.value_and_gradient(x * 0.5)
        y = rt.special.erfinv(x * 0.5)
        assert abs(v - v2) <= 1e-14 * abs(v), (v, v2)
        assert np.allclose(g, 2 * y * math.sqrt(math.pi) / 2 * np.exp(y ** 2), rtol=1e-13)
        assert np.allclose(g, g2, rtol=1e-13)
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "ok"
