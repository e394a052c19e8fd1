"""Tracked types (src/revtape/trace/tracked.py): Python operators in both
orders, indexing loops, comparisons, constants."""

import numpy as np
import pytest

import revtape as rt
from conftest import check_grad


# ---------------------------------------------------------------------------- operators
def _scalar_case():
    tape = rt.Tape()
    return tape, tape.track(2.0)


OPERATORS = [
    ("+", lambda t, c: t + c, lambda t, c: c + t, 1.0, 1.0),
    ("-", lambda t, c: t - c, lambda t, c: c - t, 1.0, -1.0),
    ("*", lambda t, c: t * c, lambda t, c: c * t, "c", "c"),
    ("/", lambda t, c: t / c, lambda t, c: c / t, "1/c", "-c/t2"),
    ("**", lambda t, c: t ** c, lambda t, c: c ** t, "c t^(c-1)", "log(c) c^t"),
]


def _expected(rule, t, c):
    return {1.0: 1.0, -1.0: -1.0, "c": c, "1/c": 1 / c, "-c/t2": -c / t ** 2,
            "c t^(c-1)": c * t ** (c - 1), "log(c) c^t": np.log(c) * c ** t}[rule]


@pytest.mark.parametrize("const", [3.0, 3, np.float64(3.0), np.float32(3.0), np.int64(3),
                                   np.array(3.0)],
                         ids=["float", "int", "np.float64", "np.float32", "np.int64", "0-d"])
@pytest.mark.parametrize("name,fwd,rev,dfwd,drev", OPERATORS, ids=[o[0] for o in OPERATORS])
def test_operators_with_python_and_numpy_scalars(name, fwd, rev, dfwd, drev, const):
    t0 = 2.0
    for f, rule in ((fwd, dfwd), (rev, drev)):
        tape = rt.Tape()
        t = tape.track(t0)
        y = f(t, const)
        assert isinstance(y, rt.TrackedReal), type(y)
        assert rt.tape_of(y) is tape
        assert rt.value(y) == pytest.approx(float(f(t0, float(const))), rel=1e-15)
        tape.finish(y)
        assert tape.gradient(t0) == pytest.approx(_expected(rule, t0, float(const)), rel=1e-14)


@pytest.mark.parametrize("name,fwd,rev,dfwd,drev", OPERATORS, ids=[o[0] for o in OPERATORS])
def test_operators_with_arrays_both_orders(name, fwd, rev, dfwd, drev):
    c = np.array([1.5, 2.0, 3.0])
    t0 = 2.0
    for f, rule in ((fwd, dfwd), (rev, drev)):
        # tracked scalar with a plain array: a tracked array results
        tape = rt.Tape()
        t = tape.track(t0)
        y = f(t, c)
        assert isinstance(y, rt.TrackedArray) and rt.tape_of(y) is tape
        np.testing.assert_allclose(rt.value(y), f(t0, c), rtol=1e-15)
        tape.finish(np.sum(y))
        expected = np.sum(_expected(rule, t0, c) * np.ones_like(c))
        assert tape.gradient(t0) == pytest.approx(expected, rel=1e-14)
        # tracked array with a plain array
        x0 = np.array([1.0, 2.0, 0.5])
        g = rt.gradient(lambda x: np.sum(f(x, c)), x0)
        np.testing.assert_allclose(g, _expected(rule, x0, c) * np.ones_like(c), rtol=1e-14)


def test_unary_operators():
    tape = rt.Tape()
    t = tape.track(-2.0)
    assert rt.value(-t) == 2.0
    assert +t is t
    assert rt.value(abs(t)) == 2.0
    tape.finish(abs(t) + -t)
    assert tape.gradient(-3.0) == -2.0


def test_tracked_real_with_tracked_array():
    tape = rt.Tape()
    s = tape.track(2.0)
    x = tape.track(np.array([1.0, 2.0, 3.0]))
    y = s * x + x / s - s ** x
    assert isinstance(y, rt.TrackedArray)
    tape.finish(np.sum(y))
    gs, gx = tape.gradient((2.0, np.array([1.0, 2.0, 3.0])))
    xv = np.array([1.0, 2.0, 3.0])
    assert gs == pytest.approx(np.sum(xv - xv / 4 - xv * 2.0 ** (xv - 1)), rel=1e-14)
    np.testing.assert_allclose(gx, 2.0 + 0.5 - np.log(2.0) * 2.0 ** xv, rtol=1e-14)


def test_numpy_scalar_on_the_left_keeps_tracking():
    # np.float64.__mul__ must defer to the tracked value, not turn it into a float
    g = rt.gradient(lambda x: np.float64(3.0) * x + np.float64(1.0) - np.float64(2.0) / x, 2.0)
    assert g == pytest.approx(3.0 + 0.5)
    g = rt.gradient(lambda x: np.sum(np.arange(3.0) * x), 2.0)
    assert g == 3.0


def test_mixing_tracked_array_shapes():
    g = check_grad(lambda a, b: np.sum(a * b + a @ b), (np.array([[1.0, 2.0], [3.0, 4.0]]),
                                                       np.array([0.5, -1.0])))
    # a @ b has shape (2,) and broadcasts over both rows of a * b: it counts twice
    np.testing.assert_allclose(g[0], [[0.5 + 2 * 0.5, -1.0 - 2 * 1.0]] * 2)
    np.testing.assert_allclose(g[1], [4.0 + 2 * 4.0, 6.0 + 2 * 6.0])


def test_constant_output_records_nothing_extra():
    tape = rt.Tape()
    x = tape.track(np.ones(3))
    _ = x * 2.0
    tape.finish(1.0)
    np.testing.assert_array_equal(tape.gradient(np.zeros(3)), np.zeros(3))
    assert tape.forward(np.zeros(3)) == 1.0


# ---------------------------------------------------------------------------- indexing loops
def rosenbrock_loop(x):
    s = 0.0
    for i in range(len(x) - 1):
        s = s + 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


def rosenbrock_grad(x):
    g = np.zeros_like(x)
    g[:-1] = -400.0 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2.0 * (1.0 - x[:-1])
    g[1:] += 200.0 * (x[1:] - x[:-1] ** 2)
    return g


def test_scalar_indexing_loop_rosenbrock_100(rng):
    x = rng.uniform(-1.5, 1.5, size=100)
    tape = rt.GradientTape(rosenbrock_loop, x)
    # scalar code records scalar instructions: item, square, sub, mul, ...
    assert 99 * 5 <= len(tape) <= 99 * 12
    names = [ln.split("= ")[1].split("(")[0] for ln in tape.listing()]
    assert set(names) >= {"item", "square", "sub", "mul", "add"}
    np.testing.assert_allclose(rt.gradient(rosenbrock_loop, x), rosenbrock_grad(x), rtol=1e-12)
    x2 = rng.uniform(-1.5, 1.5, size=100)
    val, g = tape.value_and_gradient(x2)
    assert val == pytest.approx(rosenbrock_loop(x2), rel=1e-13)
    np.testing.assert_allclose(g, rosenbrock_grad(x2), rtol=1e-12, atol=1e-12)
    assert rt.value(tape.output) == val


def test_iterating_over_a_tracked_array():
    x = np.array([1.0, 2.0, 3.0])
    g = rt.gradient(lambda x: sum(xi * xi for xi in x), x)
    np.testing.assert_array_equal(g, [2.0, 4.0, 6.0])
    tape = rt.Tape()
    t = tape.track(np.zeros((2, 3)))
    assert len(t) == 2
    rows = list(t)
    assert all(isinstance(r, rt.TrackedArray) and r.shape == (3,) for r in rows)
    assert isinstance(t[0, 0], rt.TrackedReal)
    assert isinstance(tape.track(np.zeros(2))[1], rt.TrackedReal)


def test_negative_and_out_of_range_scalar_index():
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(rt.gradient(lambda x: x[-1] * x[0], x), [3.0, 0.0, 1.0])
    with pytest.raises(IndexError):
        rt.gradient(lambda x: x[3], x)


# ---------------------------------------------------------------------------- comparisons
def test_scalar_comparisons_return_plain_bool():
    tape = rt.Tape()
    t = tape.track(2.0)
    u = tape.track(3.0)
    results = [t < 3.0, t <= 2.0, t > 1, t >= 2.5, t == 2.0, t != 2.0, t < u, 1.0 < t,
               np.float64(5.0) > t, t > np.float64(1.0)]
    assert all(type(r) is bool for r in results)
    assert results == [True, True, True, False, True, False, True, True, True, True]


def test_python_branch_on_tracked_scalar_records_a_guard():
    def f(x):
        return x * x if x > 0 else -x

    tape = rt.GradientTape(f, 3.0)
    assert tape.gradient(2.0) == 4.0
    assert "guard" in repr(tape)
    with pytest.raises(rt.BranchChanged):
        tape.gradient(-1.0)
    assert tape.gradient(1.5) == 3.0                      # still usable
    assert rt.gradient(f, -1.0) == -1.0                   # a fresh recording takes the branch


def test_max_of_python_builtins_on_tracked_scalars():
    g = rt.gradient(lambda a, b: max(a, b) * 2.0, (1.0, 3.0))
    assert g == (0.0, 2.0)


def test_array_comparisons_return_tracked_mask_usable_in_where():
    tape = rt.Tape()
    x = tape.track(np.array([-1.0, 0.5, 2.0]))
    m = x > 0
    assert isinstance(m, rt.TrackedArray) and rt.tape_of(m) is tape
    np.testing.assert_array_equal(rt.value(m), [0.0, 1.0, 1.0])
    for mask in (x < 1.0, x <= 0.5, x >= 0.5, x == 2.0, x != 2.0, np.greater(x, 0.0),
                 0.0 < x, np.logical_and(x > 0, x < 1), np.logical_not(x > 0)):
        assert isinstance(mask, rt.TrackedArray)
    y = np.where(m, x ** 2, -x)
    tape.finish(np.sum(y))
    np.testing.assert_array_equal(tape.gradient(np.array([-1.0, 0.5, 2.0])), [-1.0, 1.0, 4.0])
    # the mask is recomputed on replay: no guard, no BranchChanged
    np.testing.assert_array_equal(tape.gradient(np.array([1.0, -0.5, 2.0])), [2.0, -1.0, 4.0])


def test_mask_arithmetic_has_zero_gradient():
    g = rt.gradient(lambda x: np.sum(x * (x > 0)), np.array([-1.0, 2.0]))
    np.testing.assert_array_equal(g, [0.0, 1.0])


def test_bool_of_array_reduction_is_guarded():
    def f(x):
        return np.sum(x) if np.all(x > 0) else -np.sum(x)

    tape = rt.GradientTape(f, np.array([1.0, 2.0]))
    np.testing.assert_array_equal(tape.gradient(np.array([3.0, 4.0])), [1.0, 1.0])
    with pytest.raises(rt.BranchChanged):
        tape.gradient(np.array([-3.0, 4.0]))


# ---------------------------------------------------------------------------- constants
def test_closure_constants_are_captured_by_value():
    w = np.array([1.0, 2.0])
    tape = rt.GradientTape(lambda x: np.sum(w * x), np.zeros(2))
    w[0] = 100.0
    np.testing.assert_array_equal(tape.gradient(np.ones(2)), [1.0, 2.0])


def test_values_of_a_finished_tape_used_as_constants_via_value():
    t1 = rt.GradientTape(lambda x: np.sum(x ** 2), np.array([1.0, 2.0]))
    c = rt.value(t1.output)
    g = rt.gradient(lambda y: c * y, 2.0)
    assert g == 5.0


def test_null_tape_track_gives_an_untracked_constant():
    c = rt.NULL_TAPE.track(2.0)
    assert rt.tape_of(c) is rt.NULL_TAPE
    assert rt.value(c * 3.0) == 6.0
    g = rt.gradient(lambda x: x * c, 4.0)
    assert g == 2.0
