"""scipy on tracked values (src/revtape/numpy_api/scipy_dispatch.py): scipy's
Python functions routed to revtape's when an argument is tracked, plain calls
left to scipy's own, the opt-out, errors that name the scipy function or the
drop-in to use, and revtape without scipy at all."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import revtape as rt
from conftest import check_grad


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


def test_gamma_bessel_betainc_without_scipy():
    # the third-wave special functions with scipy blocked: values against the
    # standard library and closed forms, reference replay against compiled
    code = textwrap.dedent("""
        import math, sys
        sys.modules["scipy"] = None
        import numpy as np
        import revtape as rt
        from revtape import special as S
        x = np.array([0.7, 1.3, 2.9, 5.5])
        assert np.allclose(S.gamma(x), [math.gamma(v) for v in x], rtol=1e-13)
        assert np.allclose(S.rgamma(x), [1 / math.gamma(v) for v in x], rtol=1e-13)
        # I_1/2(x) = sqrt(2/(pi x)) sinh x; J_1/2 is not an integer order: jn of 0, 1 vs j0, j1
        assert np.allclose(S.iv(0.5, x), np.sqrt(2 / (np.pi * x)) * np.sinh(x), rtol=1e-13)
        assert np.allclose(S.jn(1, x), S.j1(x), rtol=1e-14)
        assert np.allclose(S.i0(x), S.iv(0.0, x), rtol=1e-13)
        # I_x(1, b) = 1 - (1 - x)^b; stdtr(1, t) = 1/2 + atan(t)/pi
        u = x / 6
        assert np.allclose(S.betainc(1.0, 2.5, u), 1 - (1 - u) ** 2.5, rtol=1e-13)
        assert np.allclose(S.stdtr(1.0, x - 2), 0.5 + np.arctan(x - 2) / np.pi, rtol=1e-13)
        assert np.allclose(S.erfcinv(S.erfc(x / 4)), x / 4, rtol=1e-13)
        f = lambda v: (np.sum(S.gamma(v) + S.j0(v) + S.y1(v) + S.i1(v) + S.iv(2.5, v)
                              + S.betainc(2.0, 3.0, v / 6) + S.stdtr(3.0, v) + S.beta(v, 2.0))
                       + S.logsumexp(v, b=np.array([1.0, -1.0, 2.0, 0.5]), return_sign=True)[0])
        tape = rt.GradientTape(f, x)
        ct = rt.compile(tape)
        v1, g1 = ct.value_and_gradient(x + 0.1)
        v2, g2 = tape.value_and_gradient(x + 0.1)
        assert abs(v1 - v2) <= 1e-12 * abs(v1) and np.allclose(g1, g2, rtol=1e-12), (g1, g2)
        h = 1e-6
        fd = [(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(4)]
        assert np.allclose(tape.gradient(x), fd, rtol=1e-6), (tape.gradient(x), fd)
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "ok"


def test_without_scipy_what_only_scipy_computes_is_refused_by_name():
    # scipy blocked in a fresh interpreter: rt.special's logsumexp computes
    # without it (b= and return_sign= too), and what only scipy computes
    # (polygamma of order 3 and more) is refused, saying so
    code = textwrap.dedent("""
        import sys
        sys.modules["scipy"] = None
        import numpy as np
        import revtape as rt
        x = np.array([0.5, 1.5])
        ref = np.log(np.exp(0.5) + np.exp(1.5))
        assert np.isclose(rt.special.logsumexp(x), ref)
        assert np.isclose(rt.special.logsumexp(x, b=np.ones(2)), ref)
        v, s = rt.special.logsumexp(x, b=np.array([1.0, -2.0]), return_sign=True)
        assert np.isclose(v, np.log(2 * np.exp(1.5) - np.exp(0.5))) and s == -1.0, (v, s)
        try:
            rt.special.polygamma(3, x)
        except rt.UnsupportedError as e:
            assert "install scipy" in str(e), str(e)
        else:
            raise AssertionError("polygamma(3, x) without scipy")
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "ok"


def test_scipy_stats_methods_are_named_by_distribution():
    stats = pytest.importorskip("scipy.stats")
    with pytest.raises(rt.ConversionError, match=r"scipy\.stats\.norm\.logpdf"):
        rt.gradient(lambda x: np.sum(stats.norm.logpdf(x)), np.ones(2))
