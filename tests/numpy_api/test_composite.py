"""numpy functions built from several rows (src/revtape/numpy_api/composite.py):
kron, cross, linspace, select, piecewise, real/imag/conj/angle of real values.
Values against numpy (bit for bit where numpy's arithmetic is repeated),
gradients against analytic formulas and finite differences, reference vs
compiled replay, Hessians; numpy's errors; guards where the data chooses."""

import warnings

import numpy as np
import pytest

import revtape as rt
from conftest import check_all, check_grad, same_bits

RNG = np.random.default_rng(5)


def _tracked_value(fn, *xs):
    t = rt.Tape()
    return rt.value(fn(*[t.track(x) for x in xs]))


# ---------------------------------------------------------------- kron

@pytest.mark.parametrize("sa,sb", [((2, 3), (3, 2)), ((3,), (2, 2)), ((2, 1, 2), (3,)), ((4,), (1,)),
                                   ((), (3,))])
def test_kron(sa, sb):
    a, b = RNG.standard_normal(sa), RNG.standard_normal(sb)
    assert same_bits(_tracked_value(np.kron, a, b), np.kron(a, b))
    assert same_bits(_tracked_value(lambda a: np.kron(a, b), a), np.kron(a, b))
    assert same_bits(_tracked_value(lambda b: np.kron(a, b), b), np.kron(a, b))
    W = RNG.standard_normal(np.kron(a, b).shape)
    n = a.size
    f = lambda z: np.sum(W * np.kron(z[:n].reshape(sa), z[n:].reshape(sb)) ** 2)
    check_all(f, np.concatenate([a.ravel(), b.ravel()]))
    # analytic: d/da_i sum(W * kron) = sum over the block of a_i of W * b
    ga = rt.gradient(lambda a: np.sum(W * np.kron(a, b)), a)
    want = np.array([np.sum(W * np.kron(e.reshape(sa), b)) for e in np.eye(n)]).reshape(sa)
    np.testing.assert_allclose(ga, want, rtol=1e-13, atol=1e-14)


# ---------------------------------------------------------------- cross

@pytest.mark.parametrize("sa,sb,kw", [((3,), (3,), {}), ((4, 3), (3,), {}), ((2, 4, 3), (4, 3), {}),
                                      ((3, 4), (4, 3), dict(axisa=0)),
                                      ((3, 2), (2, 3), dict(axisa=0, axisb=-1, axisc=0)),
                                      ((3, 5), (3, 5), dict(axis=0)),
                                      ((4, 2), (4, 3), {}), ((4, 3), (2,), {}), ((5, 2), (5, 2), {})])
def test_cross(sa, sb, kw):
    a, b = RNG.standard_normal(sa), RNG.standard_normal(sb)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)      # numpy's 2-vector warning
        want = np.cross(a, b, **kw)
        assert same_bits(_tracked_value(lambda a, b: np.cross(a, b, **kw), a, b), want)
        assert same_bits(_tracked_value(lambda a: np.cross(a, b, **kw), a), want)
        W = RNG.standard_normal(want.shape)
        n = a.size
        f = lambda z: np.sum(W * np.cross(z[:n].reshape(sa), z[n:].reshape(sb), **kw))
        check_all(f, np.concatenate([a.ravel(), b.ravel()]))


def test_cross_analytic_gradient():
    # d/da (w . (a x b)) = b x w
    a, b, w = RNG.standard_normal((3, 3))
    ga, gb = rt.gradient(lambda a, b: np.dot(w, np.cross(a, b)), (a, b))
    np.testing.assert_allclose(ga, np.cross(b, w), rtol=1e-14)
    np.testing.assert_allclose(gb, np.cross(w, a), rtol=1e-14)


def test_cross_errors_are_numpys():
    t = rt.Tape()
    with pytest.raises(ValueError, match="incompatible dimensions"):
        np.cross(t.track(np.ones(4)), np.ones(3))
    with pytest.warns(DeprecationWarning):
        np.cross(t.track(np.ones(2)), np.ones(2))


# ---------------------------------------------------------------- linspace

@pytest.mark.parametrize("kw", [dict(num=7), dict(num=6, endpoint=False), dict(num=1), dict(num=0),
                                dict(num=2), dict(num=5, axis=-1), dict(num=4, retstep=True)])
@pytest.mark.parametrize("shapes", [((), ()), ((3,), ()), ((2, 3), (3,))], ids=str)
def test_linspace(kw, shapes):
    start = RNG.standard_normal(shapes[0]) if shapes[0] else 0.3
    stop = RNG.standard_normal(shapes[1]) if shapes[1] else 2.9
    if kw.get("axis") and not shapes[0] and not shapes[1]:
        pytest.skip("axis=-1 of a 1-d result is axis 0")
    want = np.linspace(start, stop, **kw)
    got = _tracked_value(lambda a, b: np.linspace(a, b, **kw)[0] if kw.get("retstep")
                         else np.linspace(a, b, **kw), start, stop)
    assert same_bits(got, want[0] if kw.get("retstep") else want)
    if kw.get("num", 50) == 0:
        return
    if kw.get("retstep"):
        t = rt.Tape()
        step = np.linspace(t.track(start), t.track(stop), **kw)[1]
        assert same_bits(rt.value(step), want[1])
    sa, sb = np.shape(start), np.shape(stop)
    na = int(np.prod(sa))
    W = RNG.standard_normal(np.shape(want[0] if kw.get("retstep") else want))
    lin = lambda z: np.linspace(z[:na].reshape(sa), z[na:].reshape(sb), **kw)
    f = lambda z: np.sum(W * np.sin(lin(z)[0] if kw.get("retstep") else lin(z)))
    check_all(f, np.concatenate([np.ravel(start), np.ravel(stop)]))


def test_linspace_analytic_gradient():
    # sample k of n is start + k (stop - start) / (n - 1)
    n = 5
    g = rt.gradient(lambda z: np.sum(np.arange(1.0, n + 1) * np.linspace(z[0], z[1], n)),
                    np.array([0.5, 2.0]))
    k = np.arange(n)
    np.testing.assert_allclose(g, [np.sum((k + 1) * (1 - k / (n - 1))),
                                   np.sum((k + 1) * k / (n - 1))], rtol=1e-14)


def test_linspace_refuses_other_dtypes_and_checks_num():
    t = rt.Tape()
    with pytest.raises(rt.UnsupportedError, match="dtype"):
        np.linspace(t.track(0.0), 1.0, 5, dtype=np.float32)
    with pytest.raises(ValueError, match="non-negative"):
        np.linspace(t.track(0.0), 1.0, -1)


# ---------------------------------------------------------------- select, piecewise

def test_select_with_tracked_and_plain_conditions():
    x = np.array([-2.0, -0.7, 0.1, 0.6, 1.7, 3.0])
    plain = np.array([True, False, False, True, False, False])
    f = lambda x: np.select([x > 1.0, plain, x < -1.0], [x ** 2, 3 * x, np.sin(x)], default=x ** 3)
    assert same_bits(_tracked_value(f, x), f(x))
    g = rt.gradient(lambda x: np.sum(f(x)), x)
    want = np.where(x > 1.0, 2 * x, np.where(plain, 3.0, np.where(x < -1.0, np.cos(x), 3 * x ** 2)))
    np.testing.assert_allclose(g, want, rtol=1e-14)
    check_all(lambda x: np.sum(f(x)), x)
    # the conditions are recorded, not frozen: a replay elsewhere selects anew
    tape = rt.GradientTape(lambda x: np.sum(f(x)), x)
    y = -x
    np.testing.assert_allclose(rt.compile(tape).gradient(y), rt.gradient(lambda x: np.sum(f(x)), y))


def test_select_broadcasts_and_checks_like_numpy():
    x = RNG.standard_normal((2, 3))
    f = lambda x: np.select([x[0] > 0], [x], default=np.array([[1.0], [2.0]]))
    assert same_bits(_tracked_value(f, x), f(x))
    t = rt.Tape()
    with pytest.raises(ValueError):
        np.select([t.track(x) > 0], [])
    with pytest.raises(TypeError, match="boolean"):
        np.select([np.ones(3)], [t.track(np.ones(3))])


def test_piecewise_calls_each_function_on_its_elements():
    x = np.array([-2.0, -0.5, 0.3, 1.5, 2.5])
    seen = []

    def neg(v):
        seen.append(np.shape(v))
        return v ** 2

    f = lambda x: np.piecewise(x, [x < 0, x > 1], [neg, lambda v: np.exp(v), 7.0])
    assert same_bits(_tracked_value(f, x), f(x))
    assert seen[-1] == (2,)                    # numpy's x[cond], not the whole array
    g = rt.gradient(lambda x: np.sum(f(x)), x)
    np.testing.assert_allclose(g, np.where(x < 0, 2 * x, np.where(x > 1, np.exp(x), 0.0)))
    check_all(lambda x: np.sum(np.sin(f(x))), x)


def test_piecewise_later_conditions_win_and_scalars_fill():
    x = np.linspace(-1.0, 1.0, 7)
    f = lambda x: np.piecewise(x, [x > -0.5, x > 0.2], [lambda v: 2 * v, lambda v: -v])
    assert same_bits(_tracked_value(f, x), f(x))
    g = lambda x: np.piecewise(x, [x < 0], [lambda v: v, lambda v: v * 3.0])     # 'otherwise'
    assert same_bits(_tracked_value(g, x), g(x))
    h = lambda x: np.piecewise(x, x > 0, [lambda v: v ** 3])                   # one condition
    assert same_bits(_tracked_value(h, x), h(x))
    plain = x > 0.4
    k = lambda x: np.piecewise(x, [plain], [lambda v: v + 1.0])
    assert same_bits(_tracked_value(k, x), k(x))


def test_piecewise_guards_the_elements_chosen():
    f = lambda x: np.sum(np.piecewise(x, [x < 0], [lambda v: v ** 2, lambda v: v]))
    x = np.array([-1.0, 0.5, 2.0])
    tape = rt.GradientTape(f, x)
    ct = rt.compile(tape)
    np.testing.assert_allclose(ct.gradient(x * 1.1), [-2.2, 1.0, 1.0])
    with pytest.raises(rt.BranchChanged, match="piecewise"):
        ct.gradient(-x)
    assert np.allclose(rt.grad(f)(-x), [1.0, -1.0, -4.0])


def test_piecewise_of_a_scalar():
    f = lambda x: np.piecewise(x, [x < 0, x >= 0], [lambda v: -v, lambda v: v ** 2])
    assert same_bits(_tracked_value(f, 1.5), f(np.float64(1.5)))
    np.testing.assert_allclose(rt.gradient(f, 1.5), 3.0)
    np.testing.assert_allclose(rt.gradient(f, -1.5), -1.0)


# ---------------------------------------------------------------- complex parts of real values

def test_real_imag_conj_angle_of_real_values():
    x = np.array([-2.0, -0.0, 0.0, 1.5, np.inf, -np.inf, np.nan])
    for fn in (np.real, np.imag, np.conj, np.conjugate, np.angle, lambda v: np.angle(v, deg=True),
               lambda v: v.real, lambda v: v.imag, lambda v: v.conj()):
        want = fn(x)
        got = _tracked_value(fn, x)
        assert same_bits(got, want) or (np.array_equal(got, want, equal_nan=True)
                                        and fn is not np.angle)
    z = np.array([-2.0, 0.5, 3.0])
    np.testing.assert_array_equal(
        rt.gradient(lambda v: np.sum(np.real(v) * np.conj(v) + np.angle(v) + np.imag(v)), z), 2 * z)
    check_grad(lambda v: np.sum(np.real(v) ** 3), z)


# ---------------------------------------------------------------- nan_to_num

@pytest.mark.parametrize("kw", [{}, dict(nan=-1.0, posinf=7.0), dict(neginf=-3.0, copy=False)])
def test_nan_to_num(kw):
    x = np.array([np.nan, 1.5, np.inf, -np.inf, -0.0, -2.0])
    assert same_bits(_tracked_value(lambda v: np.nan_to_num(v, **kw), x),
                     np.nan_to_num(x.copy(), **kw))          # copy=False writes into x
    g = rt.gradient(lambda v: np.sum(np.nan_to_num(v, **kw) * np.arange(6.0)), x)
    np.testing.assert_array_equal(g, [0.0, 1.0, 0.0, 0.0, 4.0, 5.0])
    # the replacement is recomputed at each replay, never frozen
    tape = rt.GradientTape(lambda v: np.sum(np.nan_to_num(v, **kw) ** 2), x)
    y = np.array([1.0, np.nan, 2.0, 3.0, np.inf, 1.0])
    np.testing.assert_array_equal(rt.compile(tape).gradient(y), [2.0, 0.0, 4.0, 6.0, 0.0, 2.0])
