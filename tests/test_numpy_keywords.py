"""numpy calls on tracked values compute what numpy computes, or refuse.

Every keyword of every numpy function and ufunc revtape handles is either
honoured (values and gradients checked against numpy and finite
differences) or refused with rt.UnsupportedError naming the keyword --
never silently ignored.  Also: functions named by their real public names,
scipy optional, and clear errors for misuse of the API.
"""

import math
import os
import subprocess
import sys
import textwrap

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
def test_spectral_and_nuclear_norms_are_refused_not_replaced(ord_):
    # np.linalg.norm(M, 2) once returned the Frobenius norm of a tracked matrix
    with pytest.raises(rt.UnsupportedError, match="singular value"):
        rt.GradientTape(lambda x: np.linalg.norm(x, ord_), M)
    with pytest.raises(rt.UnsupportedError, match="singular value"):
        rt.GradientTape(lambda x: np.sum(np.linalg.norm(x, ord_, axis=(1, 2))), np.ones((2, 2, 2)))


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
    with pytest.raises(rt.UnsupportedError, match="order"):
        rt.GradientTape(lambda x: np.sum(np.ravel(x, order="F")), M)


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
    (lambda x: np.linalg.svd(x)[1], "np.linalg.svd"),
    (lambda x: np.linalg.pinv(x), "np.linalg.pinv"),
    (lambda x: np.median(x), "np.median"),
    (lambda x: np.spacing(x), "np.spacing"),
    (lambda x: np.add.accumulate(x), "np.add.accumulate"),
    (lambda x: np.fft.fft(x), "np.fft.fft"),
])
def test_unsupported_functions_are_named_by_their_public_names(call, name):
    with pytest.raises(rt.UnsupportedError, match=name.replace(".", r"\.")):
        rt.GradientTape(lambda x: np.sum(call(x)), np.eye(2))


def test_unsupported_scipy_ufuncs_are_named_as_scipy_functions():
    sps = pytest.importorskip("scipy.special")
    with pytest.raises(rt.UnsupportedError, match=r"scipy\.special\.ellipk"):
        rt.GradientTape(lambda x: np.sum(sps.ellipk(x)), np.full(2, 0.3))


def test_scipy_python_functions_work_on_tracked_values_through_rt_special():
    sps = pytest.importorskip("scipy.special")
    x = np.array([0.5, 1.5, 2.5])
    for name, fn in (("logsumexp", lambda x: sps.logsumexp(x)),
                     ("polygamma", lambda x: np.sum(sps.polygamma(1, x))),
                     ("softmax", lambda x: sps.softmax(x) @ np.arange(3.0)),
                     ("log_softmax", lambda x: sps.log_softmax(x) @ np.arange(3.0)),
                     ("multigammaln", lambda x: sps.multigammaln(x[0] + 3.0, 2))):
        check_grad(fn, x)
        np.testing.assert_allclose(rt.value(rt.GradientTape(fn, x).output), fn(x), rtol=1e-14)
        np.testing.assert_allclose(rt.compile(rt.GradientTape(fn, x)).forward(x + 1), fn(x + 1), rtol=1e-14)
    import scipy.special._logsumexp as m
    assert sps.logsumexp.__wrapped__ is m.logsumexp      # plain calls reach scipy's own


def test_plain_calls_to_routed_scipy_functions_are_scipys_own():
    sps = pytest.importorskip("scipy.special")
    import scipy.special._logsumexp as m
    a = np.array([[1.0, -np.inf], [3.0, 2.0]])
    for kw in ({}, {"axis": 1}, {"b": np.array([1.0, -1.0]), "return_sign": True}):
        np.testing.assert_array_equal(sps.logsumexp(a, **kw), m.logsumexp(a, **kw))
    np.testing.assert_array_equal(sps.polygamma([0, 1, 2], 2.5), sps.polygamma.__wrapped__([0, 1, 2], 2.5))
    with pytest.raises(type(_raised(lambda: m.logsumexp(a, axis=5)))):
        sps.logsumexp(a, axis=5)


def _raised(thunk):
    try:
        thunk()
    except Exception as e:      # noqa: BLE001 -- the exception scipy raises, whatever it is
        return e
    raise AssertionError("expected scipy to raise")


def test_with_the_opt_out_scipy_is_untouched_and_errors_point_to_rt_special():
    pytest.importorskip("scipy")
    code = textwrap.dedent("""
        import numpy as np
        import scipy.special as sps, scipy.linalg as sla
        before = (sps.logsumexp, sps.polygamma, sps.gammaln, sla.cholesky)
        import revtape as rt
        assert (sps.logsumexp, sps.polygamma, sps.gammaln, sla.cholesky) == before
        for fn, name in ((lambda x: sps.logsumexp(x), "logsumexp"),
                         (lambda x: np.sum(sps.polygamma(1, x)), "polygamma")):
            try:
                rt.GradientTape(fn, np.ones(3))
            except rt.ConversionError as e:
                assert f"rt.special.{name}" in str(e), str(e)
            else:
                raise AssertionError("no ConversionError")
    """)
    env = dict(os.environ, REVTAPE_SCIPY_DISPATCH="0")
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_revtape_imports_and_records_special_functions_without_scipy():
    # scipy blocked in a fresh interpreter: import, record, compile and replay
    code = textwrap.dedent("""
        import sys
        sys.modules["scipy"] = None          # any `import scipy...` now fails
        import numpy as np
        import revtape as rt
        assert "scipy" not in [m.split(".")[0] for m in sys.modules if sys.modules[m]]
        from revtape import special as S
        f = lambda x: (np.sum(S.gammaln(np.exp(x)) + S.digamma(2 + x ** 2) + S.expit(x)
                              + S.log_expit(x) + S.erf(x) + S.xlogy(x ** 2, 1 + x ** 2))
                       + S.logsumexp(x) + np.sum(S.polygamma(1, 1 + x ** 2)))
        x = np.array([0.3, -1.2, 0.8])
        tape = rt.GradientTape(f, x)
        v, g = rt.compile(tape).value_and_gradient(x + 0.1)
        v2, g2 = tape.value_and_gradient(x + 0.1)
        assert abs(v - v2) <= 1e-12 * abs(v), (v, v2)
        assert np.allclose(g, g2, rtol=1e-12, atol=1e-14), (g, g2)
        # the numpy-side fallbacks at poles and infinities follow the C kernels
        pts = np.array([0.0, -0.0, -1.0, -2.5, np.inf, -np.inf, np.nan, 1e-300, 30.0, -70.5])
        for name in ("gammaln", "digamma", "expit", "log_expit", "erf"):
            t = rt.JacobianTape(getattr(S, name), np.ones(len(pts)))
            a = rt.compile(t).forward(pts)
            b = t.forward(pts)
            assert np.allclose(a, b, rtol=1e-13, atol=0, equal_nan=True), (name, a, b)
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "ok"


def test_scipy_free_fallbacks_match_scipy():
    sps = pytest.importorskip("scipy.special")
    from revtape.core import specfun as _specfun
    x = np.concatenate([RNG.uniform(-20, 20, 200), RNG.uniform(0, 3, 100),
                        [0.0, -0.0, -1.0, -2.5, np.inf, -np.inf, np.nan, 1e-300, -70.5, 1e5]])
    with np.errstate(all="ignore"):
        for name in ("gammaln", "digamma", "expit", "log_expit", "erf"):
            np.testing.assert_allclose(getattr(_specfun, name)(x), getattr(sps, name)(x),
                                       rtol=1e-12, atol=1e-300, err_msg=name)
        for n in (1, 2):
            pos = x[np.isfinite(x)]
            np.testing.assert_allclose(_specfun.polygamma(n, pos), sps.polygamma(n, pos),
                                       rtol=2e-11, err_msg=f"polygamma {n}")
        np.testing.assert_allclose(_specfun.xlogy(x, np.abs(x[::-1])), sps.xlogy(x, np.abs(x[::-1])),
                                   rtol=1e-15)
        A = RNG.normal(size=(3, 4)) * 10
        A[0, 1] = np.inf
        A[2] = -np.inf
        for axis in (None, 0, 1, (0, 1)):
            for kd in (False, True):
                np.testing.assert_allclose(_specfun.logsumexp(A, axis=axis, keepdims=kd),
                                           sps.logsumexp(A, axis=axis, keepdims=kd), rtol=1e-14)


@pytest.mark.parametrize("bad", [None, 1, "x", lambda x: x, rt.NULL_TAPE, "ctape", "recording",
                                 "no output"])
def test_compile_refuses_what_is_not_a_finished_tape(bad):
    if bad == "ctape":
        bad = rt.compile(rt.GradientTape(lambda x: np.sum(x), np.ones(2)))
    elif bad == "recording":
        bad = rt.Tape()
        bad.track(np.ones(2))
    with pytest.raises(rt.RevtapeError) as info:
        rt.compile(bad)
    assert not isinstance(info.value, AttributeError)
    assert "tape" in str(info.value)


def test_a_tape_without_inputs_gets_a_clear_error():
    tape = rt.Tape()
    tape.finish(3.0)
    with pytest.raises(rt.RevtapeError, match="no inputs"):
        rt.compile(tape)


def test_round_and_math_functions_say_what_to_use():
    t = rt.Tape()
    x = t.track(2.5)
    with pytest.raises(rt.ConversionError, match="np.round"):
        round(x)
    for fn in (math.floor, math.ceil, math.trunc):
        with pytest.raises(rt.ConversionError):
            fn(x)
    with pytest.raises(rt.ConversionError, match=r"np\.exp"):
        math.exp(x)
    with pytest.raises(rt.ConversionError, match=r"np\.log1p"):
        y = math.log1p(x)  # noqa: F841
    with pytest.raises(rt.ConversionError, match=r"np\.\*"):
        float(x)


def test_formatting_a_tracked_value_shows_its_value():
    # a debugging print inside f must not raise (and records nothing)
    tape = rt.Tape()
    x = tape.track(2.5)
    n = len(tape)
    assert f"{x:.2f}" == "2.50" and f"{x * 2.0:g}" == "5"
    a = tape.track(np.array([1.0, 2.0]))
    assert f"{a}" == str(np.array([1.0, 2.0]))
    assert len(tape) == n + 1           # only the multiplication


@pytest.mark.parametrize("bad", [None, 1, "x"])
def test_whole_function_helpers_refuse_what_is_not_a_function(bad):
    for helper in (rt.gradient, rt.value_and_gradient, rt.jacobian, rt.hessian):
        with pytest.raises(rt.RevtapeError, match="function"):
            helper(bad, np.ones(2))
    with pytest.raises(rt.RevtapeError, match="function"):
        rt.GradientTape(bad, np.ones(2))


def test_scipy_stats_methods_are_named_by_distribution():
    stats = pytest.importorskip("scipy.stats")
    with pytest.raises(rt.ConversionError, match=r"scipy\.stats\.norm\.logpdf"):
        rt.gradient(lambda x: np.sum(stats.norm.logpdf(x)), np.ones(2))
