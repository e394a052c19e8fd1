"""More numpy on tracked values (issue 13): lists mixing tracked scalars and
floats in np.concatenate/np.stack/np.hstack/np.vstack and rt.array,
np.polyval, ufunc.reduce (np.logaddexp.reduce and the others), and x[mask]
with a tracked boolean mask (a guarded gather).  Values against numpy,
gradients against central finite differences, reference replay against the
compiled C replay, Hessians where the op is twice differentiable."""

import numpy as np
import pytest

import revtape as rt
from conftest import check_grad

REL = dict(rtol=1e-12, atol=1e-13)


def check_all(f, x, hessian=True):
    tape = rt.GradientTape(f, x)
    ct = rt.compile(tape)
    v_np = f(x)
    v_ref, g_ref = tape.value_and_gradient(x)
    v_c, g_c = ct.value_and_gradient(x)
    np.testing.assert_allclose(v_ref, v_np, **REL)
    np.testing.assert_allclose(v_c, v_np, **REL)
    np.testing.assert_allclose(g_c, g_ref, rtol=1e-12, atol=1e-12 * max(np.abs(g_ref).max(), 1))
    check_grad(f, x, rtol=1e-6, atol=1e-7)
    x2 = x + 0.01 * np.random.default_rng(1).standard_normal(np.shape(x))
    np.testing.assert_allclose(ct.gradient(x2), rt.gradient(f, x2), rtol=1e-11, atol=1e-12)
    if hessian:
        n = np.size(x)
        H_ref, H_c = tape.hessian(x).reshape(n, n), ct.hessian(x).reshape(n, n)
        np.testing.assert_allclose(H_c, H_ref, rtol=1e-10, atol=1e-10)
        h, v = 1e-4, np.random.default_rng(2).standard_normal(np.shape(x))
        fd = (ct.gradient(x + h * v) - ct.gradient(x - h * v)).ravel() / (2 * h)
        np.testing.assert_allclose(H_c @ v.ravel(), fd, rtol=1e-5, atol=1e-6)
    return tape, ct


X0 = np.array([0.3, -0.7, 1.2, 0.9, -1.6])


# ---------------------------------------------------------------- mixed lists

def test_concatenate_with_a_list_holding_a_tracked_scalar():
    # the replacement the immutability error recommends: x[1] = v
    def f(x):
        v = np.sin(x[0]) * x[3]
        y = np.concatenate([x[:1], [v], x[2:]])
        return np.sum(y ** 2 * np.arange(1.0, 6.0))
    tape, _ = check_all(f, X0)
    y = rt.value(tape.inputs[0])
    assert y.shape == (5,)
    with pytest.raises(rt.UnsupportedError, match="np.concatenate"):
        rt.GradientTape(lambda x: x.__setitem__(1, x[0]) or np.sum(x), X0)


def test_concatenate_list_of_floats_and_tracked_and_nested():
    def f(x):
        y = np.concatenate([[x[0], 2.0, x[1] * x[2]], x[3:], (1.5,)])
        z = np.vstack([[x[0], 1.0], x[3:5]])            # a row: a list mixing both
        w = np.hstack([x[1:3], [x[0] ** 2]])
        return np.sum(y * np.linspace(1, 2, 6)) + np.sum(z @ z) + w @ w
    check_all(f, X0)
    v = rt.value(rt.JacobianTape(lambda x: np.concatenate([[x[0], 2.0], x[3:]]), X0).output)
    # numpy dispatches only on a tracked operand: lists alone go to numpy,
    # whose conversion error names the way that works
    with pytest.raises(rt.ConversionError, match="np.stack"):
        rt.GradientTape(lambda x: np.sum(np.vstack([[x[0], 1.0], [x[1], 2.0]])), X0)
    z = rt.JacobianTape(lambda x: np.vstack([rt.array([x[0], 1.0]), [x[1], 2.0]]), X0).output
    np.testing.assert_array_equal(rt.value(z), [[X0[0], 1.0], [X0[1], 2.0]])
    np.testing.assert_array_equal(v, np.concatenate([[X0[0], 2.0], X0[3:]]))


def test_stack_and_rt_array_of_mixed_lists():
    def f(x):
        a = rt.array([x[0], 2.0, x[1] * 3])
        M = rt.array([[x[0], 1.0], [x[2], x[3]], (0.5, np.exp(x[4]))])
        s = np.stack([[x[1], 4.0], x[2:4]], axis=1)
        assert a.shape == (3,) and M.shape == (3, 2) and s.shape == (2, 2)
        return a @ np.array([1.0, 2.0, 3.0]) + np.sum(M ** 2) + np.sum(s * s.T)
    check_all(f, X0)

    def g(x):
        return rt.array([x[0], 2.0])
    out = rt.JacobianTape(g, X0).output
    assert rt.istracked(out)
    np.testing.assert_array_equal(rt.value(out), [X0[0], 2.0])
    # nothing tracked: a plain float array, as np.array
    plain = rt.array([[1, 2], [3, 4]])
    assert type(plain) is np.ndarray and plain.dtype == np.float64
    with pytest.raises(ValueError, match="shapes"):
        rt.GradientTape(lambda x: np.sum(rt.array([x[0], [1.0, 2.0]])), X0)


def test_np_array_of_tracked_values_raises_conversion_error():
    # numpy's np.array always returns a plain ndarray (it cannot hold a
    # gradient); revtape does not replace it: rt.array / np.stack do this
    with pytest.raises(rt.ConversionError, match="np.stack"):
        rt.GradientTape(lambda x: np.sum(np.array([x[0], 2.0])), X0)
    # every way numpy builds a plain array from a list holding a tracked
    # value names the drop-in that records it, never a silent constant
    builds = [lambda x: np.array([x[0], 2.0]), lambda x: np.asarray([2.0, x[1]]),
              lambda x: np.array([[x[0], 1.0], [2.0, x[1]]]),
              lambda x: np.vstack([[x[0], 1.0], [x[1], 2.0]]),
              lambda x: np.array(x[1:3]), lambda x: np.array([x[:2], x[2:4]])]
    for build in builds:
        with pytest.raises(rt.ConversionError, match=r"rt\.array\(\[t1, 2\.0\]\)"):
            rt.GradientTape(lambda x: np.sum(build(x)), X0)
    # and the drop-in gives what np.array would have, tracked
    def f(x):
        return np.sum(rt.array([[x[0], 1.0], [2.0, x[1]]]) ** 2)
    check_all(f, X0)
    np.testing.assert_array_equal(rt.gradient(f, X0), [2 * X0[0], 2 * X0[1], 0.0, 0.0, 0.0])


# ---------------------------------------------------------------- polyval

@pytest.mark.parametrize("which", ["p", "x", "both", "x-array", "p-list"])
def test_polyval(which):
    xs = np.array([0.4, -1.3, 2.0])

    def f(v):
        if which == "p":
            return np.polyval(v, 1.7)
        if which == "x":
            return np.polyval([2.0, -1.0, 0.5, 3.0], v[0])
        if which == "both":
            return np.polyval(v[:4], v[4])
        if which == "x-array":
            return np.sum(np.polyval(np.array([1.5, -2.0, 0.25]), v) * xs[0])
        return np.sum(np.polyval([v[0], 1.0, v[1] * 2.0], v[2:4] * xs[:2]))
    check_all(f, X0)
    # bit for bit numpy's Horner loop
    assert rt.value(rt.GradientTape(f, X0).output) == f(X0)


def test_polyval_nonfinite_as_numpy():
    # numpy starts from 0 * x, so an infinite x gives nan
    p = np.array([1.0, 0.0])
    with np.errstate(invalid="ignore"):
        want = np.polyval(p, np.inf)
    t = rt.GradientTape(lambda x: np.polyval(x, np.inf), p)
    assert np.isnan(want) and np.isnan(rt.value(t.output))
    assert np.isnan(rt.compile(t).forward(p))
    with pytest.raises(rt.UnsupportedError, match="1-d"):
        rt.GradientTape(lambda x: np.polyval(np.reshape(x[:4], (2, 2)), 1.0), X0)


# ---------------------------------------------------------------- ufunc.reduce

@pytest.mark.parametrize("ufunc", [np.logaddexp, np.add, np.multiply, np.maximum, np.minimum])
@pytest.mark.parametrize("axis,keepdims", [(0, False), (1, True), (None, False), ((0, 1), True)])
def test_ufunc_reduce(ufunc, axis, keepdims):
    A0 = np.array([[0.3, -0.7, 1.2], [0.9, -1.6, 0.1]])

    def f(a):
        r = ufunc.reduce(a, axis=axis, keepdims=keepdims)
        return np.sum(r * np.linspace(1.0, 2.0, np.size(r)).reshape(np.shape(r)))
    check_all(f, A0, hessian=ufunc not in (np.maximum, np.minimum))
    t = rt.JacobianTape(lambda a: ufunc.reduce(a, axis=axis, keepdims=keepdims), A0)
    np.testing.assert_allclose(rt.value(t.output), ufunc.reduce(A0, axis=axis, keepdims=keepdims),
                               rtol=1e-15, atol=0)


def test_ufunc_reduce_default_axis_is_zero_and_logaddexp_large_values():
    A0 = np.array([[700.0, -800.0], [705.0, 1.0]])
    t = rt.JacobianTape(lambda a: np.logaddexp.reduce(a), A0)
    want = np.logaddexp.reduce(A0)
    assert rt.value(t.output).shape == (2,)
    np.testing.assert_allclose(rt.value(t.output), want, rtol=1e-15)
    # the gradient of logaddexp.reduce is the softmax along the axis
    g = rt.compile(rt.GradientTape(lambda a: np.sum(np.logaddexp.reduce(a)), A0)).gradient(A0)
    np.testing.assert_allclose(g, np.exp(A0 - want), rtol=1e-14, atol=1e-300)


def test_ufunc_reduce_of_other_binary_ufuncs_is_refused():
    for uf in (np.subtract, np.divide, np.arctan2):
        with pytest.raises(rt.UnsupportedError):
            rt.GradientTape(lambda a: uf.reduce(a), X0)


# ---------------------------------------------------------------- x[mask] by a tracked mask

def test_boolean_mask_indexing_by_a_tracked_comparison():
    def f(x):
        y = x[x > 0.0]
        z = x[np.logical_and(x < 1.0, x > -1.0)]
        return np.sum(y ** 3) + np.sum(np.exp(z))
    tape, ct = check_all(f, X0)
    # mask differs at the new input: compiled and reference replays refuse
    x_new = X0.copy()
    x_new[1] = 0.5
    with pytest.raises(rt.BranchChanged, match="mask"):
        ct.value_and_gradient(x_new)
    with pytest.raises(rt.BranchChanged):
        tape.gradient(x_new)
    # rt.grad re-records there
    np.testing.assert_allclose(rt.grad(f)(x_new), rt.gradient(f, x_new), rtol=1e-15)
    pos = x_new > 0
    np.testing.assert_allclose(rt.grad(f)(x_new)[pos & (x_new >= 1)],
                               3 * x_new[pos & (x_new >= 1)] ** 2, rtol=1e-14)


def test_boolean_mask_rows_of_a_matrix_and_empty_selection():
    A0 = np.arange(12.0).reshape(4, 3) / 7 - 0.5

    def f(a):
        rows = a[a[:, 0] > 0.0]              # a 1-d mask over the rows
        return np.sum(rows ** 2) + np.sum(a[a > 100.0])   # nothing selected: sum 0
    tape, ct = check_all(f, A0)
    assert rt.value(rt.GradientTape(f, A0).output) == pytest.approx(f(A0), rel=1e-15)
    g = ct.gradient(A0)
    np.testing.assert_allclose(g, np.where(A0[:, :1] > 0, 2 * A0, 0.0), rtol=1e-15)


def test_indexing_by_a_tracked_non_mask_is_refused():
    with pytest.raises(rt.UnsupportedError, match="boolean mask"):
        rt.GradientTape(lambda x: np.sum(x[x * 0.0 + 1.0]), X0)
    with pytest.raises(IndexError):
        rt.GradientTape(lambda x: np.sum(x[x[:3] > 0]), X0)


# ---------------------------------------------------------------- np.sum(..., where=)

def _sum_where(x):
    A = np.reshape(x, (2, 3))
    return (np.sum(A ** 2, where=A > 0)
            + np.sum(np.prod(A + 2.0, axis=1, where=[True, False, True]) * np.array([1.0, 0.5]))
            + np.sum(np.sum(np.exp(A), axis=0, where=A < 1.0, keepdims=True) * 0.25)
            + np.sum(A, where=np.array([[True], [False]])))


def test_sum_where_with_tracked_and_plain_masks():
    x0 = np.array([0.3, -0.7, 1.2, 0.9, -1.6, 0.1])
    tape, ct = check_all(_sum_where, x0)
    # a select, not a branch: replays where the mask differs are still right
    x1 = -x0
    np.testing.assert_allclose(ct.value_and_gradient(x1)[0], _sum_where(x1), rtol=1e-14)
    np.testing.assert_allclose(ct.gradient(x1), rt.gradient(_sum_where, x1), rtol=1e-14)
    # masked-out nan/inf (log of the negative elements) do not reach the sum
    # nor the gradient, as in numpy
    f = lambda x: np.sum(np.log(x), where=x > 0)
    ct = rt.compile(rt.GradientTape(f, x0))
    with np.errstate(invalid="ignore"):
        want = f(x0)
    v, g = ct.value_and_gradient(x0)
    assert np.isfinite(want) and v == pytest.approx(want, rel=1e-15)
    np.testing.assert_allclose(g, np.where(x0 > 0, 1 / x0, 0.0), rtol=1e-15)


def test_sum_where_mask_must_broadcast():
    with pytest.raises(ValueError, match="broadcast"):
        rt.GradientTape(lambda x: np.sum(x, where=np.array([True, False])), X0)


@pytest.mark.parametrize("kw", [dict(), dict(axis=1), dict(axis=0, keepdims=True)])
def test_mean_where_with_tracked_and_plain_masks(kw):
    A0 = np.array([[0.3, -0.7, 1.2], [0.9, -1.6, 0.1]])
    plain = np.array([[True, False, True], [False, True, True]])

    def f(a):
        return (np.sum(np.mean(a ** 2, where=a > -1.0, **kw) * 1.5)
                + np.sum(np.mean(np.exp(a), where=plain, **kw)))
    check_all(f, A0)
    # nothing selected in a row: 0/0 = nan, as numpy
    with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning, match="empty slice"):
        want = np.mean(A0, axis=1, where=A0 > 5)
    with np.errstate(invalid="ignore"):
        got = rt.value(rt.JacobianTape(lambda a: np.mean(a, axis=1, where=a > 5), A0).output)
    assert np.all(np.isnan(want)) and np.all(np.isnan(got))


def test_every_reduction_takes_a_tracked_where_mask():
    A0 = np.array([[0.3, -0.7, 1.2], [0.9, -1.6, 0.1], [2.0, 0.4, -0.2]])

    def f(a):
        m = a > -1.0
        return (a.sum(where=m) + np.var(a, axis=1, ddof=1, where=m).sum()
                + np.std(a ** 2, axis=0, where=m).sum() + np.max(a, where=m, initial=-5.0)
                + np.multiply.reduce(a + 2.0, axis=1, where=m).sum() + a.mean(where=m))
    check_all(f, A0)
    # the masks are recomputed at each replay (no guard): a point where they differ
    ct = rt.compile(rt.GradientTape(f, A0))
    A1 = A0 - 0.5
    np.testing.assert_allclose(ct.forward(A1), f(A1), rtol=1e-13)
    np.testing.assert_allclose(ct.gradient(A1), rt.gradient(f, A1), rtol=1e-13)
