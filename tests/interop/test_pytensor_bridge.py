"""revtape.interop.pytensor_op: a LogDensity as a PyTensor Op whose values,
gradients and Hessians match the analytic ones, the compiled tape and the
reference replay; PyTensor's verify_grad passes on the value Op and on the
gradient Op; perform asks for the value alone; PyMC samples a pm.Potential
built on it, recovering known means."""

import pickle

import numpy as np
import pytest

import revtape as rt
from revtape import interop

pytensor = pytest.importorskip("pytensor", reason="pytensor is not installed "
                                                  "(pip install \"revtape[pytensor]\")")
pt = pytest.importorskip("pytensor.tensor")
from pytensor.gradient import hessian, verify_grad    # noqa: E402

MU = np.array([1.0, -2.0, 0.5])
SD = np.array([1.0, 0.5, 2.0])


def logp(p):
    # b ~ N(MU, SD) with a log-cosh term in a: not a quadratic, so the
    # Hessian depends on the point
    return (-0.5 * np.sum(((p["b"] - MU) / SD) ** 2) - np.log(np.cosh(p["a"]))
            + 0.25 * p["a"] * p["b"][0])


def value(x):
    a, b = x[0], x[1:]
    return -0.5 * np.sum(((b - MU) / SD) ** 2) - np.log(np.cosh(a)) + 0.25 * a * b[0]


def gradient(x):
    a, b = x[0], x[1:]
    g = np.empty(4)
    g[0] = -np.tanh(a) + 0.25 * b[0]
    g[1:] = -(b - MU) / SD ** 2
    g[1] += 0.25 * a
    return g


def hess(x):
    a = x[0]
    H = np.zeros((4, 4))
    H[1:, 1:] = np.diag(-1.0 / SD ** 2)
    H[0, 0] = -1.0 / np.cosh(a) ** 2
    H[0, 1] = H[1, 0] = 0.25
    return H


def _ld():
    return rt.LogDensity(logp, {"b": np.zeros(3), "a": 0.0})      # flat (sorted keys): a, b[0..2]


def _points(n=4, seed=0):
    return np.random.default_rng(seed).normal(size=(n, 4)) * 1.5


def test_values_gradients_hessians_match():
    ld = _ld()
    op = interop.pytensor_op(ld)
    x = pt.dvector("x")
    out = op(x)
    f = pytensor.function([x], [out, pytensor.grad(out, x), hessian(out, x)])
    ct = rt.compile(ld._tapes[0])
    for p in _points():
        v, g, H = f(p)
        assert float(v) == pytest.approx(value(p), rel=1e-13)
        np.testing.assert_allclose(g, gradient(p), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(H, hess(p), rtol=1e-12, atol=1e-14)
        # the compiled program and the reference (Python) replay of the tape
        v_c, g_c = ct.value_and_gradient(p)
        v_r, g_r = ld._tapes[0].value_and_gradient(p)
        assert float(v) == v_c and float(v) == pytest.approx(v_r, rel=1e-14)
        np.testing.assert_array_equal(g, g_c)
        np.testing.assert_allclose(g, g_r, rtol=1e-13, atol=1e-15)


def test_verify_grad_on_the_value_and_gradient_ops():
    ld = _ld()
    op = interop.pytensor_op(ld)
    x = pt.dvector("x")
    grad_of_op = pytensor.function([x], pytensor.grad(op(x), x))
    for seed, p in enumerate(_points(3, seed=1)):
        # verify_grad raises when PyTensor's finite differences disagree with the Op's grad
        verify_grad(op, [p], rng=np.random.default_rng(seed))
        # the gradient Op's own gradient (the Hessian-vector product)
        verify_grad(op.gradient_op, [p], rng=np.random.default_rng(seed))
        # and what that grad is: the analytic gradient
        assert np.allclose(grad_of_op(p), gradient(p), rtol=1e-12, atol=1e-14)


def test_cotangent_and_r_op():
    ld = _ld()
    op = interop.pytensor_op(ld)
    x, v = pt.dvector("x"), pt.dvector("v")
    g3 = pytensor.grad(3.0 * op(x), x)
    rop = pytensor.gradient.Rop(op.gradient_op(x), x, v)
    f = pytensor.function([x, v], [g3, rop])
    p, d = _points(2, seed=2)
    G, Hv = f(p, d)
    np.testing.assert_allclose(G, 3.0 * gradient(p), rtol=1e-12)
    np.testing.assert_allclose(Hv, hess(p) @ d, rtol=1e-12, atol=1e-14)


def test_perform_asks_for_the_value_alone():
    ld = _ld()
    calls = {"value": 0, "gradient": 0}
    value_fn, vg_fn = ld.logdensity, ld.logdensity_and_gradient

    def counted_value(x):
        calls["value"] += 1
        return value_fn(x)

    def counted_vg(x):
        calls["gradient"] += 1
        return vg_fn(x)

    ld.logdensity, ld.logdensity_and_gradient = counted_value, counted_vg
    op = interop.pytensor_op(ld)
    x = pt.dvector("x")
    f = pytensor.function([x], op(x))
    for p in _points():
        assert float(f(p)) == pytest.approx(value(p), rel=1e-13)
    assert calls == {"value": 4, "gradient": 0}
    df = pytensor.function([x], pytensor.grad(op(x), x))
    df(_points(1)[0])
    assert calls["gradient"] == 1


def test_structure_shaped_like_x0():
    ld = _ld()
    op = interop.pytensor_op(ld)
    a, b = pt.dscalar("a"), pt.dvector("b")
    out = op({"b": b, "a": a})
    f = pytensor.function([a, b], [out] + pytensor.grad(out, [a, b]))
    p = _points(1)[0]
    v, ga, gb = f(p[0], p[1:])
    g = gradient(p)
    assert float(v) == pytest.approx(value(p), rel=1e-13)
    assert float(ga) == pytest.approx(g[0], rel=1e-12)
    np.testing.assert_allclose(gb, g[1:], rtol=1e-12)
    # a plain list of numbers is the flat vector, not a structure
    assert float(op(list(p)).eval()) == pytest.approx(value(p), rel=1e-13)


def test_float32_input_is_cast():
    op = interop.pytensor_op(_ld())
    x = pt.fvector("x")
    out = op(x)
    f = pytensor.function([x], [out, pytensor.grad(out, x)])
    p = _points(1)[0].astype(np.float32)
    v, g = f(p)
    assert float(v) == pytest.approx(value(p.astype(np.float64)), rel=1e-13)
    np.testing.assert_allclose(g, gradient(p.astype(np.float64)), rtol=1e-6)


def test_bad_inputs_raise_clear_errors():
    ld = _ld()
    op = interop.pytensor_op(ld)
    with pytest.raises(rt.InputError, match="flat parameter vector"):
        op(pt.dmatrix("m"))
    with pytest.raises(rt.InputError, match="length 4"):
        op(pt.tensor("x", shape=(5,), dtype="float64"))
    with pytest.raises(rt.InputError, match="shape"):
        op({"b": pt.dvector("b"), "a": pt.dvector("a")})
    with pytest.raises(rt.InputError, match="structure"):
        op({"b": pt.dvector("b")})
    with pytest.raises(rt.InputError, match="length 4"):
        op(np.zeros(5))                   # a constant: its shape is known
    with pytest.raises(rt.InputError, match="rt.LogDensity"):
        interop.pytensor_op(logp)
    with pytest.raises(rt.InputError, match="rt.LogDensity"):
        interop.pytensor_op(3.0)
    # a vector of the wrong length known only at run time
    x = pt.dvector("x")
    f = pytensor.function([x], op(x))
    with pytest.raises(rt.InputError, match="length 4"):
        f(np.zeros(3))


def test_bijectors_take_the_unconstrained_vector():
    from revtape import bijectors as B
    ld = rt.LogDensity(logp, {"b": np.zeros(3), "a": 1.0}, bijectors={"a": B.exp})
    op = interop.pytensor_op(ld)
    with pytest.raises(rt.InputError, match="bijectors"):
        op({"b": pt.dvector("b"), "a": pt.dscalar("a")})
    y = np.array([0.1, 0.2, 0.3, 0.4])
    assert float(op(y).eval()) == ld.logdensity(y)


def test_negative_and_pickle():
    ld = _ld()
    p = _points(1)[0]
    neg = interop.pytensor_op(ld.negative())
    assert float(neg(p).eval()) == pytest.approx(-value(p), rel=1e-13)
    op = pickle.loads(pickle.dumps(interop.pytensor_op(ld)))
    x = pt.dvector("x")
    f = pytensor.function([x], pytensor.grad(op(x), x))
    np.testing.assert_allclose(f(p), gradient(p), rtol=1e-12)
    # Ops of one LogDensity compare equal (PyTensor merges them); of another, not
    assert interop.pytensor_op(ld) == interop.pytensor_op(ld)
    assert interop.pytensor_op(ld) != interop.pytensor_op(_ld())


def gaussian(x):
    return -0.5 * np.sum(((x - MU) / SD) ** 2)


def test_pymc_potential_recovers_known_means():
    pm = pytest.importorskip("pymc", reason="pymc is not installed (pip install pymc)")
    ld = rt.LogDensity(gaussian, np.zeros(3))
    with pm.Model():
        x = pm.Flat("x", shape=3)
        pm.Potential("lik", interop.pytensor_op(ld)(x))
        idata = pm.sample(draws=600, tune=400, chains=2, cores=1, random_seed=4,
                          progressbar=False, compute_convergence_checks=False)
    draws = idata.posterior["x"].values.reshape(-1, 3)
    # Monte Carlo error of the mean ~ SD / sqrt(1200 draws): 5 of them
    assert np.all(np.abs(draws.mean(axis=0) - MU) < 5 * SD / np.sqrt(1200))
    np.testing.assert_allclose(draws.std(axis=0), SD, rtol=0.15)
