"""Whole-function helpers: GradientTape/JacobianTape/HessianTape and
gradient/value_and_gradient/jacobian/hessian/hvp, with x an ndarray, a float
or a tuple of them, in both function and tape forms."""

import numpy as np
import pytest

import revtape as rt
from conftest import check_grad, fd_jacobian


def f_arr(x):
    return np.sum(np.sin(x) * x) + rt.special.logsumexp(x)


def df_arr(x):
    return np.cos(x) * x + np.sin(x) + np.exp(x - rt.special.logsumexp(x))


X = np.array([0.3, -1.2, 2.0, 0.7])


# ---------------------------------------------------------------------------- GradientTape
def test_gradient_tape_records_once_and_replays():
    calls = []

    def f(x):
        calls.append(1)
        return f_arr(x)

    tape = rt.GradientTape(f, X)
    assert isinstance(tape, rt.Tape) and not tape.recording
    assert len(calls) == 1
    for k in range(3):
        x = X + k
        val, g = tape.value_and_gradient(x)
        assert val == pytest.approx(f_arr(x), rel=1e-14)
        np.testing.assert_allclose(g, df_arr(x), rtol=1e-13)
        np.testing.assert_allclose(tape.gradient(x), g, rtol=0)
        assert tape.forward(x) == val
    assert len(calls) == 1                         # replays never call f


def test_gradient_function_form():
    np.testing.assert_allclose(rt.gradient(f_arr, X), df_arr(X), rtol=1e-13)
    check_grad(f_arr, X)


def test_value_and_gradient_function_and_tape_forms():
    v, g = rt.value_and_gradient(f_arr, X)
    assert type(v) is float and v == pytest.approx(f_arr(X), rel=1e-15)
    np.testing.assert_allclose(g, df_arr(X), rtol=1e-13)
    tape = rt.GradientTape(f_arr, np.zeros(4))
    v2, g2 = rt.value_and_gradient(tape, X)
    assert v2 == v
    np.testing.assert_allclose(g2, g, rtol=1e-15)
    np.testing.assert_allclose(rt.gradient(tape, X), g, rtol=1e-15)


def test_out_is_written_and_returned():
    out = np.full(4, np.nan)
    res = rt.gradient(f_arr, X, out=out)
    assert res is out
    np.testing.assert_allclose(out, df_arr(X), rtol=1e-13)
    out2 = np.full(4, np.nan)
    v, res = rt.value_and_gradient(f_arr, X, out=out2)
    assert res is out2 and v == pytest.approx(f_arr(X))
    np.testing.assert_allclose(out2, df_arr(X), rtol=1e-13)
    tape = rt.GradientTape(f_arr, X)
    out3 = np.zeros(4)
    assert tape.gradient(X + 1, out=out3) is out3
    np.testing.assert_allclose(out3, df_arr(X + 1), rtol=1e-13)
    v, res = tape.value_and_gradient(X, out=out3)
    assert res is out3
    np.testing.assert_allclose(out3, df_arr(X), rtol=1e-13)
    # out= may be a view (e.g. a row of a preallocated matrix)
    buf = np.zeros((2, 4))
    tape.gradient(X, out=buf[1])
    np.testing.assert_allclose(buf, [np.zeros(4), df_arr(X)], rtol=1e-13)


def test_gradient_result_is_a_fresh_array():
    tape = rt.GradientTape(lambda x: np.sum(x * x), np.ones(2))
    g1 = tape.gradient(np.ones(2))
    g2 = tape.gradient(np.full(2, 3.0))
    np.testing.assert_array_equal(g1, [2.0, 2.0])
    np.testing.assert_array_equal(g2, [6.0, 6.0])
    g1[0] = 99.0
    np.testing.assert_array_equal(tape.gradient(np.full(2, 3.0)), [6.0, 6.0])


# ---------------------------------------------------------------------------- x kinds
def test_float_input():
    g = rt.gradient(lambda x: x * np.exp(x), 0.5)
    assert type(g) is float
    assert g == pytest.approx(1.5 * np.exp(0.5), rel=1e-15)
    v, g = rt.value_and_gradient(lambda x: x ** 3, 2.0)
    assert (v, g) == (8.0, 12.0)
    tape = rt.GradientTape(lambda x: np.sin(x), 0.0)
    assert tape.gradient(np.pi) == pytest.approx(-1.0, rel=1e-15)


def test_identity_of_a_float_has_gradient_one():
    assert rt.gradient(lambda x: x, 2.0) == 1.0
    assert rt.value_and_gradient(lambda x: x, 2.0) == (2.0, 1.0)
    tape = rt.GradientTape(lambda x: x, 2.0)
    assert len(tape) == 0
    assert tape.value_and_gradient(5.0) == (5.0, 1.0)
    assert rt.value(tape.output) == 5.0


def test_first_element_gives_one_hot_gradient():
    g = rt.gradient(lambda x: x[0], X)
    np.testing.assert_array_equal(g, [1.0, 0.0, 0.0, 0.0])
    tape = rt.GradientTape(lambda x: x[2], X)
    assert tape.value_and_gradient(np.arange(4.0))[0] == 2.0
    np.testing.assert_array_equal(tape.gradient(np.arange(4.0)), [0.0, 0.0, 1.0, 0.0])
    g = rt.gradient(lambda x: x[1, 0], np.ones((2, 2)))
    np.testing.assert_array_equal(g, [[0.0, 0.0], [1.0, 0.0]])


def test_constant_output_gives_zero_gradient():
    g = rt.gradient(lambda x: 3.0, X)
    np.testing.assert_array_equal(g, np.zeros(4))
    v, g = rt.value_and_gradient(lambda x: 3.0, X)
    assert v == 3.0
    np.testing.assert_array_equal(g, np.zeros(4))
    assert rt.gradient(lambda x: 3.0, 1.0) == 0.0
    tape = rt.GradientTape(lambda x: 3.0, X)
    np.testing.assert_array_equal(tape.gradient(X + 1), np.zeros(4))
    assert tape.forward(X + 1) == 3.0
    # and an output that does not depend on the input through differentiable ops
    np.testing.assert_array_equal(rt.gradient(lambda x: np.sum(x > 0), X), np.zeros(4))
    np.testing.assert_array_equal(rt.gradient(lambda x: np.sum(x * 0.0), X), np.zeros(4))


def test_unused_input_in_a_tuple_has_zero_gradient():
    ga, gb = rt.gradient(lambda a, b: np.sum(a * 2.0), (np.ones(2), np.ones(3)))
    np.testing.assert_array_equal(ga, [2.0, 2.0])
    np.testing.assert_array_equal(gb, np.zeros(3))


def loss(w, b):
    return np.sum((w * 2.0 - b) ** 2)


def test_tuple_input_called_as_separate_arguments():
    w, b = np.array([1.0, 2.0]), 0.5
    gw, gb = rt.gradient(loss, (w, b))
    np.testing.assert_allclose(gw, 4 * (2 * w - b))
    assert type(gb) is float and gb == pytest.approx(-2 * np.sum(2 * w - b))
    check_grad(loss, (w, b))


def test_tuple_input_called_as_one_argument():
    w, b = np.array([1.0, 2.0]), 0.5
    g_one = rt.gradient(lambda t: loss(t[0], t[1]), (w, b))
    g_sep = rt.gradient(loss, (w, b))
    assert isinstance(g_one, tuple) and len(g_one) == 2
    np.testing.assert_array_equal(g_one[0], g_sep[0])
    assert g_one[1] == g_sep[1]
    g_star = rt.gradient(lambda *args: loss(*args), (w, b))
    np.testing.assert_array_equal(g_star[0], g_sep[0])


def test_tuple_input_tape_form_and_out():
    tape = rt.GradientTape(loss, (np.zeros(2), 0.0))
    assert len(tape.inputs) == 2
    w, b = np.array([1.0, -1.0]), 2.0
    v, (gw, gb) = tape.value_and_gradient((w, b))
    assert v == loss(w, b)
    np.testing.assert_allclose(gw, 4 * (2 * w - b))
    outs = (np.zeros(2), np.zeros(()))
    res = tape.gradient((w, b), out=outs)
    assert res is outs
    np.testing.assert_allclose(outs[0], gw)
    assert outs[1] == gb
    # lists work as replay inputs too
    np.testing.assert_allclose(tape.gradient([w, b])[0], gw)


def test_tuple_of_three_mixed_shapes():
    def f(a, B, c):
        return c * np.sum(B @ a) + np.sum(a ** 2)

    a, B, c = np.array([1.0, 2.0]), np.arange(6.0).reshape(3, 2), 0.5
    ga, gB, gc = check_grad(f, (a, B, c))
    np.testing.assert_allclose(ga, c * B.sum(0) + 2 * a)
    np.testing.assert_allclose(gB, c * np.outer(np.ones(3), a))
    assert gc == pytest.approx(np.sum(B @ a))


def test_list_and_integer_inputs_are_converted():
    np.testing.assert_array_equal(rt.gradient(lambda x: np.sum(x ** 2), [1.0, 2.0]), [2.0, 4.0])
    np.testing.assert_array_equal(rt.gradient(lambda x: np.sum(x ** 2), np.array([1, 2])),
                                  [2.0, 4.0])


def test_two_dimensional_input():
    A = np.array([[1.0, 2.0], [3.0, 4.0], [0.5, -1.0]])
    g = check_grad(lambda A: np.sum(np.tanh(A) @ np.array([1.0, -1.0])), A)
    assert g.shape == (3, 2)
    np.testing.assert_allclose(g, (1 - np.tanh(A) ** 2) * np.array([1.0, -1.0]), rtol=1e-13)


# ---------------------------------------------------------------------------- Jacobians
def test_jacobian_shape_is_output_shape_plus_input_shape():
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    J = rt.jacobian(lambda x: np.sum(x ** 2, axis=0), x)
    assert J.shape == (3, 2, 3)
    expected = np.zeros((3, 2, 3))
    for j in range(3):
        expected[j, :, j] = 2 * x[:, j]
    np.testing.assert_array_equal(J, expected)
    J = rt.jacobian(lambda x: x.T, x)
    assert J.shape == (3, 2, 2, 3)
    assert rt.jacobian(lambda x: np.exp(x), 1.0) == pytest.approx(np.e)
    J = rt.jacobian(lambda s: np.array([1.0, 2.0]) * s, 3.0)
    assert J.shape == (2,)
    np.testing.assert_array_equal(J, [1.0, 2.0])
    J = rt.jacobian(lambda x: np.sum(x), np.ones(3))      # scalar output: a gradient
    assert J.shape == (3,)


def test_jacobian_vs_finite_differences(rng):
    W = rng.standard_normal((2, 3))

    def f(x):
        return np.tanh(W @ x) * np.sum(x ** 2)

    x = rng.standard_normal(3)
    J = rt.jacobian(f, x)
    np.testing.assert_allclose(J, fd_jacobian(f, x), rtol=1e-8, atol=1e-10)
    tape = rt.JacobianTape(f, x)
    x2 = rng.standard_normal(3)
    np.testing.assert_allclose(tape.jacobian(x2), rt.jacobian(f, x2), rtol=1e-13)
    np.testing.assert_allclose(rt.jacobian(tape, x2), rt.jacobian(f, x2), rtol=1e-13)
    np.testing.assert_allclose(tape.forward(x2), f(x2), rtol=1e-14)


def test_jacobian_identity_and_constant():
    np.testing.assert_array_equal(rt.jacobian(lambda x: x, np.ones(3)), np.eye(3))
    np.testing.assert_array_equal(rt.jacobian(lambda x: np.ones(2), np.ones(3)), np.zeros((2, 3)))
    J = rt.jacobian(lambda x: [x[0], x[0] * x[1]], np.array([2.0, 3.0]))
    np.testing.assert_array_equal(J, [[1.0, 0.0], [3.0, 2.0]])


def test_jacobian_tuple_input_and_out():
    Ja, Jb = rt.jacobian(lambda a, b: a * b, (np.array([1.0, 2.0]), np.array([3.0, 4.0])))
    np.testing.assert_array_equal(Ja, np.diag([3.0, 4.0]))
    np.testing.assert_array_equal(Jb, np.diag([1.0, 2.0]))
    out = np.zeros((2, 2))
    assert rt.jacobian(lambda x: x ** 2, np.array([1.0, 3.0]), out=out) is out
    np.testing.assert_array_equal(out, np.diag([2.0, 6.0]))


# ---------------------------------------------------------------------------- Hessians
def f_hess(x):
    return np.sum(x[:-1] ** 2 * x[1:]) + np.sum(np.exp(0.5 * x))


def hess_f(x):
    n = len(x)
    H = np.diag(0.25 * np.exp(0.5 * x))
    for i in range(n - 1):
        H[i, i] += 2 * x[i + 1]
        H[i, i + 1] += 2 * x[i]
        H[i + 1, i] += 2 * x[i]
    return H


def test_hessian_function_form(rng):
    x = rng.standard_normal(4)
    H = rt.hessian(f_hess, x)
    assert H.shape == (4, 4)
    np.testing.assert_allclose(H, hess_f(x), rtol=1e-13, atol=1e-15)
    v = rng.standard_normal(4)
    np.testing.assert_allclose(rt.hvp(f_hess, x, v), hess_f(x) @ v, rtol=1e-12)


def test_hessian_tape(rng):
    x = rng.standard_normal(4)
    ht = rt.HessianTape(f_hess, x)
    x2 = rng.standard_normal(4)
    np.testing.assert_allclose(ht.hessian(x2), hess_f(x2), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(rt.hessian(ht, x2), hess_f(x2), rtol=1e-13, atol=1e-15)
    v = rng.standard_normal(4)
    np.testing.assert_allclose(ht.hvp(x2, v), hess_f(x2) @ v, rtol=1e-12)
    np.testing.assert_allclose(rt.hvp(ht, x2, v), hess_f(x2) @ v, rtol=1e-12)
    # its gradient and value are f's
    val, g = ht.value_and_gradient(x2)
    assert val == pytest.approx(f_hess(x2), rel=1e-14)
    np.testing.assert_allclose(g, rt.gradient(f_hess, x2), rtol=1e-14)
    np.testing.assert_allclose(ht.gradient(x2), g, rtol=0)
    assert ht.forward(x2) == val
    out = np.zeros((4, 4))
    assert ht.hessian(x2, out=out) is out
    np.testing.assert_allclose(out, hess_f(x2), rtol=1e-13, atol=1e-15)
    gout = np.zeros(4)
    assert ht.gradient(x2, out=gout) is gout
    np.testing.assert_allclose(gout, g, rtol=0)


def test_hessian_of_a_gradient_tape(rng):
    x = rng.standard_normal(4)
    tape = rt.GradientTape(f_hess, x)
    np.testing.assert_allclose(tape.hessian(x), hess_f(x), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(rt.hessian(tape, x + 1), hess_f(x + 1), rtol=1e-13, atol=1e-15)
    v = np.array([1.0, 0.0, 0.0, 2.0])
    np.testing.assert_allclose(rt.hvp(tape, x, v), hess_f(x) @ v, rtol=1e-12)


def test_hessian_of_float_input():
    assert rt.hessian(lambda t: t ** 4, 2.0) == 48.0
    assert rt.hvp(lambda t: t ** 4, 2.0, 0.5) == 24.0
    ht = rt.HessianTape(lambda t: np.exp(2 * t), 0.0)
    assert ht.hessian(1.0) == pytest.approx(4 * np.exp(2.0), rel=1e-15)


def test_hessian_of_linear_and_constant_functions_is_zero():
    np.testing.assert_array_equal(rt.hessian(lambda x: np.sum(x), np.ones(3)), np.zeros((3, 3)))
    np.testing.assert_array_equal(rt.hessian(lambda x: 3.0, np.ones(3)), np.zeros((3, 3)))
    np.testing.assert_array_equal(rt.hessian(lambda x: x[0] * x[1], np.ones(3)),
                                  [[0, 1, 0], [1, 0, 0], [0, 0, 0]])


def test_hessian_with_where_and_kinks():
    x = np.array([0.5, 2.0, -1.0])
    H = rt.hessian(lambda x: np.sum(np.where(x > 1, x ** 3, x ** 2)), x)
    np.testing.assert_array_equal(H, np.diag([2.0, 12.0, 2.0]))
    H = rt.hessian(lambda x: np.sum(np.abs(x) ** 3), x)
    np.testing.assert_allclose(H, np.diag(6 * np.abs(x)), rtol=1e-14)


def test_hessian_and_gradient_of_2d_input():
    A = np.array([[1.0, 2.0], [0.5, -1.0]])
    H = rt.hessian(lambda A: np.sum(A ** 3), A)
    assert H.shape == (2, 2, 2, 2)
    expected = np.zeros((2, 2, 2, 2))
    for i in range(2):
        for j in range(2):
            expected[i, j, i, j] = 6 * A[i, j]
    np.testing.assert_array_equal(H, expected)


def _tuple_f(a, b, c):
    return np.sum(np.sin(a) * b) * c + c ** 3


def _flat_f(z):
    return _tuple_f(z[:2], z[2:4].reshape(1, 2), z[4])


@pytest.mark.parametrize("compiled", [False, True])
def test_hessian_of_a_tuple_input_is_a_tuple_of_blocks(compiled):
    a, b, c = np.array([0.3, 0.7]), np.array([[1.0, 2.0]]), 1.5
    tape = rt.HessianTape(_tuple_f, (a, b, c))
    t = rt.compile(tape) if compiled else tape
    x = (a * 2, b - 1, c + 1)
    z = np.concatenate([x[0], x[1].ravel(), [x[2]]])
    H_flat = rt.hessian(_flat_f, z)
    H = t.hessian(x)
    bounds = [0, 2, 4, 5]
    shapes = [(2,), (1, 2), ()]
    for i in range(3):
        for j in range(3):
            assert np.shape(H[i][j]) == shapes[i] + shapes[j]
            np.testing.assert_allclose(np.reshape(H[i][j], (bounds[i + 1] - bounds[i], -1)),
                                       H_flat[bounds[i]:bounds[i + 1], bounds[j]:bounds[j + 1]],
                                       rtol=1e-12)
    g = t.gradient(x)
    assert isinstance(g, tuple) and np.shape(g[1]) == (1, 2) and isinstance(g[2], float)
    np.testing.assert_allclose(np.concatenate([np.ravel(p) for p in g]), rt.gradient(_flat_f, z),
                               rtol=1e-12)
    v = (np.ones(2), np.full((1, 2), 0.5), -1.0)
    hv = t.hvp(x, v)
    np.testing.assert_allclose(np.concatenate([np.ravel(p) for p in hv]),
                               H_flat @ np.array([1.0, 1.0, 0.5, 0.5, -1.0]), rtol=1e-12)
    assert t.forward(x) == pytest.approx(_tuple_f(*x))
    assert rt.hessian(_tuple_f, (a, b, c))[2][2] == pytest.approx(rt.hessian(_flat_f, np.concatenate(
        [a, b.ravel(), [c]]))[4, 4])
