"""numpy calls on tracked values (src/revtape/numpy_api/functions.py) compute
what numpy computes, or refuse.

Every keyword of every numpy function and ufunc revtape handles is either
honoured (values and gradients checked against numpy and finite
differences) or refused with rt.UnsupportedError naming the keyword --
never silently ignored; functions are named by their real public names.
Then more numpy: lists mixing tracked scalars and floats in
np.concatenate/np.stack/np.hstack/np.vstack and rt.array, np.polyval,
ufunc.reduce (np.logaddexp.reduce and the others), x[mask] with a tracked
boolean mask (a guarded gather) and reductions' where= masks: values against
numpy, gradients against central finite differences, reference replay
against the compiled C replay, Hessians where the op is twice
differentiable.
"""

import math

import numpy as np
import pytest

import revtape as rt
from conftest import check_grad

RNG = np.random.default_rng(7)
# entries away from 0 (abs kinks) and from each other (max/min ties), so that
# finite differences see one smooth piece
M = RNG.uniform(0.2, 2.0, size=(3, 4)) * RNG.choice([-1.0, 1.0], size=(3, 4))
V = RNG.uniform(0.2, 2.0, size=5) * np.array([1.0, -1.0, 1.0, -1.0, -1.0])


def check_same_as_numpy(f, x, rtol=1e-12):
    """f on a tracked x equals f on the plain x; its gradient passes the FD check."""
    want = f(x)
    got = rt.value(rt.GradientTape(lambda t: np.sum(f(t)), x).output)
    np.testing.assert_allclose(got, np.sum(want), rtol=rtol)
    tape = rt.JacobianTape(lambda t: f(t) * 1.0, x) if np.ndim(want) else None
    if tape is not None:
        np.testing.assert_allclose(rt.value(tape.output), want, rtol=rtol)
    check_grad(lambda t: np.sum(f(t)), x)


# ---------------------------------------------------------------- np.linalg.norm

@pytest.mark.parametrize("ord_", [None, 1, 2, 3, 0.5, np.inf, -np.inf])
def test_vector_norms_follow_numpy(ord_):
    check_same_as_numpy(lambda x: np.linalg.norm(x, ord_), V)
    check_same_as_numpy(lambda x: np.linalg.norm(x, ord_, axis=1), M)
    check_same_as_numpy(lambda x: np.linalg.norm(x, ord_, axis=0, keepdims=True), M)


def test_zero_norm_counts_and_has_no_gradient():
    x = np.array([0.0, 2.0, -1.0])
    assert rt.value(rt.GradientTape(lambda t: np.linalg.norm(t, 0), x).output) == 2.0
    np.testing.assert_array_equal(rt.gradient(lambda t: np.linalg.norm(t, 0) + t[0], x), [1, 0, 0])


@pytest.mark.parametrize("ord_", [None, "fro", 1, -1, np.inf, -np.inf])
def test_matrix_norms_follow_numpy(ord_):
    check_same_as_numpy(lambda x: np.linalg.norm(x, ord_), M)
    check_same_as_numpy(lambda x: np.linalg.norm(x, ord_, axis=(1, 0)), M)
    check_same_as_numpy(lambda x: np.linalg.norm(x, ord_, keepdims=True), M)
    T = RNG.normal(size=(2, 3, 4))
    check_same_as_numpy(lambda x: np.linalg.norm(x, ord_, axis=(0, 2)), T)


@pytest.mark.parametrize("ord_", [2, -2, "nuc"])
def test_spectral_and_nuclear_norms_are_numpys_not_replaced(ord_):
    # np.linalg.norm(M, 2) once returned the Frobenius norm of a tracked matrix;
    # now the singular values (numpy_api/linalg.py; gradients in test_linalg.py)
    assert rt.value(rt.GradientTape(lambda x: np.linalg.norm(x, ord_), M).output) == \
        pytest.approx(np.linalg.norm(M, ord_), rel=1e-13)
    X = np.arange(8.0).reshape(2, 2, 2) ** 1.5
    got = rt.GradientTape(lambda x: np.sum(np.linalg.norm(x, ord_, axis=(1, 2))), X).output
    assert rt.value(got) == pytest.approx(np.sum(np.linalg.norm(X, ord_, axis=(1, 2))), rel=1e-13)


def test_norm_errors_match_numpy():
    for bad in (lambda x: np.linalg.norm(x, "fro", axis=0), lambda x: np.linalg.norm(x, 3),
                lambda x: np.linalg.norm(x, "nucx")):
        with pytest.raises(ValueError):
            bad(M)
        with pytest.raises(ValueError):
            rt.GradientTape(bad, M)
    with pytest.raises(ValueError):
        rt.GradientTape(lambda x: np.linalg.norm(x, 1), np.ones((2, 2, 2)))


# ---------------------------------------------------------------- var / std / mean

MASK = np.array([[True, False, True, True], [True, True, False, True], [False, True, True, True]])


@pytest.mark.parametrize("fn", [np.var, np.std])
@pytest.mark.parametrize("kw", [dict(ddof=1), dict(correction=1), dict(ddof=2, axis=1),
                                dict(where=MASK), dict(where=MASK, axis=0, ddof=1),
                                dict(where=MASK[0], axis=1, keepdims=True),
                                dict(axis=1, keepdims=True, correction=0.5)])
def test_var_and_std_honour_every_keyword(fn, kw):
    check_same_as_numpy(lambda x: fn(x, **kw), M)


@pytest.mark.parametrize("fn", [np.var, np.std])
def test_var_with_a_precomputed_mean(fn):
    # mean= is used as given (numpy does not check it), and differentiated through
    mean = np.mean(M, axis=1, keepdims=True)
    check_same_as_numpy(lambda x: fn(x, axis=1, mean=mean), M)
    check_same_as_numpy(lambda x: fn(x, axis=1, mean=np.mean(x, axis=1, keepdims=True)), M)
    shifted = mean + 0.5
    check_same_as_numpy(lambda x: fn(x, axis=1, mean=shifted), M)


def test_var_methods_and_positional_arguments():
    check_same_as_numpy(lambda x: x.var(1, None, None, 1), M)          # ddof positional
    check_same_as_numpy(lambda x: x.std(axis=0, ddof=1), M)
    check_same_as_numpy(lambda x: np.var(x, 0, None, None, 0, True), M)


def test_var_ddof_and_correction_together_is_numpys_error():
    with pytest.raises(ValueError):
        np.var(M, ddof=1, correction=1)
    with pytest.raises(ValueError):
        rt.GradientTape(lambda x: np.var(x, ddof=1, correction=1), M)


@pytest.mark.parametrize("fn", [np.sum, np.prod, np.mean, np.max, np.min])
def test_reductions_honour_where_and_initial(fn):
    kws = [dict(where=MASK), dict(where=MASK, axis=1), dict(where=MASK[0], axis=1, keepdims=True)]
    if fn in (np.max, np.min):
        kws = [dict(k, initial=0.1 if fn is np.max else -0.1) for k in kws]
    if fn in (np.sum, np.prod):
        kws += [dict(initial=2.0), dict(axis=0, initial=0.5)]
    for kw in kws:
        check_same_as_numpy(lambda x: fn(x, **kw), M)
    if fn in (np.max, np.min):
        check_same_as_numpy(lambda x: fn(x, axis=1, initial=0.3), M)
    if fn is not np.mean:
        check_same_as_numpy(lambda x: fn(x[1, 2], initial=0.25), M)      # a 0-d reduction


def test_reduction_positional_arguments_keep_numpys_order():
    # np.sum(a, axis, dtype, out, keepdims): the 5th argument is keepdims, not the 3rd
    got = rt.value(rt.JacobianTape(lambda x: np.sum(x, 0, None, None, True), M).output)
    np.testing.assert_array_equal(got, np.sum(M, 0, None, None, True))
    got = rt.value(rt.JacobianTape(lambda x: np.max(x, 1, None, True), M).output)
    np.testing.assert_array_equal(got, np.max(M, 1, None, True))
    got = rt.value(rt.JacobianTape(lambda x: np.mean(x, 1, np.float64, None, True), M).output)
    np.testing.assert_allclose(got, np.mean(M, 1, np.float64, None, True), rtol=1e-15)


@pytest.mark.parametrize("call, key", [
    (lambda x: np.sum(x, dtype=np.float32), "dtype"),
    (lambda x: np.sum(x, out=np.empty(())), "out"),
    (lambda x: np.mean(x, out=np.empty(())), "out"),
    (lambda x: np.var(x, dtype=np.float32), "dtype"),
    (lambda x: np.std(x, out=np.empty(())), "out"),
    (lambda x: np.dot(x[0], x[1], out=np.empty(())), "out"),
    (lambda x: np.sum(np.outer(x[0], x[1], out=np.empty((4, 4)))), "out"),
    (lambda x: np.sum(np.concatenate([x, x], out=np.empty((6, 4)))), "out"),
    (lambda x: np.sum(np.concatenate([x, x], dtype=np.float32)), "dtype"),
    (lambda x: np.sum(np.stack([x, x], dtype=np.int64)), "dtype"),
    (lambda x: np.sum(np.clip(x, 0, 1, where=MASK)), "where"),
    (lambda x: np.sum(np.clip(x, 0, 1, dtype=np.float32)), "dtype"),
    (lambda x: np.sum(np.take(x, [0, 1], out=np.empty(2))), "out"),
    (lambda x: np.sum(np.exp(x, where=MASK)), "where"),
    (lambda x: np.sum(np.add(x, 1.0, where=MASK)), "where"),
    (lambda x: np.sum(np.exp(x, dtype=np.float32)), "dtype"),
    (lambda x: np.sum(np.add(x, x, signature="dd->d")), "signature"),
    (lambda x: np.add.reduce(x, dtype=np.float32), "dtype"),
    (lambda x: np.all(x > 0, out=np.empty((), dtype=bool)) * x[0, 0], "out"),
])
def test_keywords_that_would_change_the_result_are_refused_by_name(call, key):
    with pytest.raises(rt.RevtapeError, match=key):
        rt.GradientTape(call, M)


def test_harmless_ufunc_keywords_are_honoured():
    f = lambda x: np.sum(np.exp(x, dtype=np.float64, casting="same_kind", order="C")
                         + np.multiply(x, x, casting="unsafe", subok=True))
    check_same_as_numpy(f, M)
    check_same_as_numpy(lambda x: np.add.reduce(x, axis=1, keepdims=True, initial=1.0), M)
    check_same_as_numpy(lambda x: np.multiply.reduce(x, axis=None, where=MASK), M)
    check_same_as_numpy(lambda x: np.sum(np.clip(x, -0.5, 0.5, casting="same_kind")), M)
    check_same_as_numpy(lambda x: np.concatenate([x, 2 * x], axis=1, dtype=np.float64), M)
    check_same_as_numpy(lambda x: np.stack([x, 2 * x], 1, casting="same_kind"), M)


def test_other_array_functions_honour_their_keywords():
    check_same_as_numpy(lambda x: np.diff(x, prepend=0.5), V)
    check_same_as_numpy(lambda x: np.diff(x, n=2, append=[1.0, 2.0]), V)
    check_same_as_numpy(lambda x: np.diff(x, axis=0, prepend=x[:1]), M)
    check_same_as_numpy(lambda x: np.take(x, [0, 7, -9], mode="wrap"), V)
    check_same_as_numpy(lambda x: np.take(x, [0, 7, -9], mode="clip"), V)
    check_same_as_numpy(lambda x: np.take(x, [5, 0], axis=1, mode="wrap"), M)
    check_same_as_numpy(lambda x: np.reshape(x, shape=(4, 3), copy=False), M)
    check_same_as_numpy(lambda x: np.ravel(x, order="K"), M)
    check_same_as_numpy(lambda x: np.atleast_2d(x[0], x)[0] * x[1], M)
    check_same_as_numpy(lambda x: x[0] * np.full_like(x, 2.0, shape=(2, 4)), M)
    assert np.full_like(rt.Tape().track(M), 3, dtype=np.int64).dtype == np.int64
    check_same_as_numpy(lambda x: np.ravel(x, order="F") * np.arange(12.0), M)
    check_same_as_numpy(lambda x: np.reshape(x, (2, 6), order=None) * np.arange(12.0).reshape(2, 6), M)


# ---------------------------------------------------------------- np.fmax / np.fmin / np.hypot

def test_fmax_and_fmin_ignore_nan_like_numpy():
    pts = np.array([[np.nan, 1.0], [1.0, np.nan], [np.nan, np.nan], [2.0, 1.0], [1.0, 1.0]])
    for fn in (np.fmax, np.fmin):
        f = lambda x: fn(x[0], x[1])
        tape = rt.GradientTape(f, np.array([0.5, 0.2]))
        ct = rt.compile(tape)
        for p in pts:
            want = fn(p[0], p[1])
            for replay in (tape.forward, ct.forward, lambda x: rt.value(
                    rt.GradientTape(f, x).output)):
                got = replay(p)
                assert (math.isnan(got) and math.isnan(want)) or got == want, (fn, p, got)
        # the adjoint goes to the operand that was taken
        np.testing.assert_array_equal(ct.gradient(np.array([np.nan, 1.0])), [0.0, 1.0])
        np.testing.assert_array_equal(ct.gradient(np.array([3.0, np.nan])), [1.0, 0.0])
        np.testing.assert_array_equal(tape.gradient(np.array([3.0, np.nan])), [1.0, 0.0])
    arr = np.array([np.nan, 1.0, 3.0, np.nan])
    got = rt.value(rt.JacobianTape(lambda x: np.fmax(x, 2.0), arr).output)
    np.testing.assert_array_equal(got, np.fmax(arr, 2.0))


def test_hypot_does_not_overflow_and_is_inf_at_inf():
    x = np.array([1e200, 3e200, np.inf, np.nan, 3.0])
    f = lambda t: np.hypot(t[:2], t[1:3])
    tape = rt.JacobianTape(lambda t: np.hypot(t, t[::-1]), x)
    np.testing.assert_allclose(rt.value(tape.output), np.hypot(x, x[::-1]), rtol=1e-15)
    check_grad(lambda t: np.sum(np.hypot(t[:2], t[2:])), np.array([3.0, -1.0, 4.0, 0.5]))
    assert np.isinf(rt.compile(rt.GradientTape(lambda t: np.hypot(t[0], t[1]), np.ones(2))).forward(
        np.array([np.nan, -np.inf])))


# ---------------------------------------------------------------- names and errors

@pytest.mark.parametrize("call, name", [
    (lambda x: np.median(x), "np.median"),
    (lambda x: np.spacing(x), "np.spacing"),
    (lambda x: np.add.accumulate(x), "np.add.accumulate"),
    (lambda x: np.fft.fft(x), "np.fft.fft"),
])
def test_unsupported_functions_are_named_by_their_public_names(call, name):
    with pytest.raises(rt.UnsupportedError, match=name.replace(".", r"\.")):
        rt.GradientTape(lambda x: np.sum(call(x)), np.eye(2))


# ---------------------------------------------------------------- mixed lists, polyval, ufunc.reduce, masks

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


@pytest.mark.parametrize("fn,k", [(np.rad2deg, 180 / np.pi), (np.degrees, 180 / np.pi),
                                  (np.deg2rad, np.pi / 180), (np.radians, np.pi / 180)])
def test_angle_unit_conversions_are_numpys_product(fn, k):
    x = np.concatenate([RNG.standard_normal(50) * 1e3, [0.0, -0.0, np.inf, -np.inf, np.nan]])
    got = rt.value(fn(rt.Tape().track(x)))
    np.testing.assert_array_equal(got.view(np.int64)[:-1], fn(x).view(np.int64)[:-1])
    assert np.isnan(got[-1])
    np.testing.assert_allclose(rt.gradient(lambda v: np.sum(fn(v) ** 2), x[:50]),
                               2 * k * fn(x[:50]), rtol=1e-14)
