"""Second derivatives at kinks and ties, for every differentiable op reached
through numpy.

A rule rewritten through max/min, abs or sqrt can be right at first order and
wrong at second (a tie's adjoint split evenly has no derivative of its own),
and an infinite partial times a zero adjoint gives nan.  Where f is smooth at
the point, the nested gradient, the compiled Hessian and the one-shot
Hessian must equal a central second difference of f on plain numpy; where f
has a kink, the first derivative must be a subgradient (between the one-sided
slopes) and the values follow autograd's conventions (named case by case).
"""

import numpy as np
import pytest

import revtape as rt
from revtape.core import ops

try:
    import scipy.special as sps
except ImportError:          # the scipy ufuncs are then not reached through numpy
    sps = None

H = 1e-4
POINTS = (-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0)


def _plain(f, x):
    with np.errstate(all="ignore"):
        return float(f(np.float64(x)))


def _slopes(f, x0, h=1e-6):
    f0 = _plain(f, x0)
    return (f0 - _plain(f, x0 - h)) / h, (_plain(f, x0 + h) - f0) / h


def _second_difference(f, x0):
    return (_plain(f, x0 + H) - 2 * _plain(f, x0) + _plain(f, x0 - H)) / H ** 2


def _kind(f, x0):
    """'smooth', 'kink' or None (outside the domain, or too steep to difference)."""
    vals = [_plain(f, x0 + k * H) for k in (-2, -1, 0, 1, 2)]
    if not all(np.isfinite(vals)):
        return None
    left, right = _slopes(f, x0)
    if not (np.isfinite(left) and np.isfinite(right)) or max(abs(left), abs(right)) > 1e3:
        return None
    if abs(left - right) > 1e-3 * (1 + abs(left) + abs(right)):
        return "kink"
    d2 = _second_difference(f, x0)
    if abs(d2) > 1e5:
        return None
    # a kink in the first derivative: one-sided second differences disagree
    dl = (_plain(f, x0) - 2 * _plain(f, x0 - H) + _plain(f, x0 - 2 * H)) / H ** 2
    dr = (_plain(f, x0 + 2 * H) - 2 * _plain(f, x0 + H) + _plain(f, x0)) / H ** 2
    if abs(dl - dr) > 1e-2 * (1 + abs(dl) + abs(dr)):
        return "kink2"
    return "smooth"


def _unary_cases():
    out = []
    for u, op in ops.UFUNC_OPS.items():
        if op.family != "unary" or not isinstance(u, np.ufunc) or u.nin != 1:
            continue
        out.append((u.__name__, u))
    for name in ("cbrt", "log2", "log10", "exp2", "sinc"):
        out.append((name, getattr(np, name)))
    return sorted(out, key=lambda c: c[0])


def _binary_cases():
    """Binary ufuncs, each with its variants: one operand fixed at c, at the
    tie x == c (and |x| == |c|), and identical tracked operands."""
    ufuncs = [u for u, op in ops.UFUNC_OPS.items() if op.family == "binary"
              and isinstance(u, np.ufunc) and u.nin == 2]
    ufuncs += [np.hypot, np.fmax, np.fmin, np.power]
    out = []
    for u in sorted(set(ufuncs), key=lambda u: u.__name__):
        variants = []
        for c in (-1.5, 1.5, 0.0):
            variants.append((f"{u.__name__}(x, {c})", lambda x, u=u, c=c: u(x, c), (c, -c, 0.5)))
            variants.append((f"{u.__name__}({c}, x)", lambda x, u=u, c=c: u(c, x), (c, -c, 0.5)))
        variants.append((f"{u.__name__}(x*x, x*x)", lambda x, u=u: u(x * x, x * x), (0.5, 1.5)))
        variants.append((f"{u.__name__}(x, -x)", lambda x, u=u: u(x, -x), (0.5, 1.5)))
        out.append((u.__name__, variants))
    return out


def _derivatives(f, x0):
    g1 = rt.grad(f)(x0)
    gg = rt.grad(rt.grad(f))(x0)
    hc = rt.hessian(f)(x0)
    h1 = rt.hessian(f, x0)
    return g1, gg, hc, h1


def _check(name, f, x0):
    kind = _kind(f, x0)
    if kind is None:
        return None
    try:
        g1, gg, hc, h1 = _derivatives(f, x0)
    except rt.UnsupportedError:
        return None
    assert np.shape(hc) == () and np.shape(h1) == ()
    if kind == "smooth":
        want = _second_difference(f, x0)
        for got in (gg, hc, h1):
            assert got == pytest.approx(want, rel=1e-4, abs=2e-4), (name, x0, got, want)
    else:
        lo, hi = sorted(_slopes(f, x0))
        assert lo - 1e-4 <= g1 <= hi + 1e-4, (name, x0, g1, (lo, hi))    # a subgradient
        for got in (gg, hc, h1):
            assert np.isfinite(got), (name, x0, got)          # not an inf partial times 0
            assert got == pytest.approx(gg, rel=1e-12, abs=1e-12)
    return kind


@pytest.mark.parametrize("name, u", _unary_cases(), ids=[c[0] for c in _unary_cases()])
def test_unary_second_derivatives(name, u):
    seen = [_check(name, u, x0) for x0 in POINTS]
    assert any(seen), f"{name}: no point of the grid was checked"


@pytest.mark.parametrize("name, variants", _binary_cases(), ids=[c[0] for c in _binary_cases()])
def test_binary_second_derivatives_at_ties(name, variants):
    seen = [_check(label, f, x0) for label, f, points in variants for x0 in points]
    assert any(seen), f"{name}: no point was checked"


# ---------------------------------------------------------------- smooth through a tie

SMOOTH_AT_TIES = [
    ("hypot(x, 2) at x = 2", lambda x: np.hypot(x, 2.0), 2.0, 2.0 ** -2.5),
    ("hypot(x, -2) at x = 2", lambda x: np.hypot(x, -2.0), 2.0, 2.0 ** -2.5),
    ("hypot(x, x)", lambda x: np.hypot(x, x), 1.5, 0.0),
    ("norm([x, 2]) at x = 2", lambda x: np.linalg.norm(np.stack([x, 2.0 + 0 * x])), 2.0,
     2.0 ** -2.5),
    ("max([x*x, x*x])", lambda x: np.max(np.stack([x * x, x * x])), 1.0, 2.0),
    ("min([x*x, x*x])", lambda x: np.min(np.stack([x * x, x * x])), 1.0, 2.0),
    ("maximum(x*x, x*x)", lambda x: np.maximum(x * x, x * x), 1.0, 2.0),
    ("logaddexp(x, 1) at x = 1", lambda x: np.logaddexp(x, 1.0), 1.0, 0.25),
    ("softplus at 0", lambda x: np.logaddexp(0.0, x), 0.0, 0.25),
    ("logsumexp([x, 1]) at x = 1",
     lambda x: rt.special.logsumexp(np.stack([x, 1.0 + 0 * x])), 1.0, 0.25),
    ("std of one element", lambda x: np.std(x), 3.5, 0.0),
    ("var of one element", lambda x: np.var(x), 3.5, 0.0),
]


@pytest.mark.parametrize("name, f, x0, want", SMOOTH_AT_TIES, ids=[c[0] for c in SMOOTH_AT_TIES])
def test_second_derivative_through_a_tie(name, f, x0, want):
    assert _second_difference(f, x0) == pytest.approx(want, abs=1e-5)       # the oracle agrees
    for got in _derivatives(f, x0)[1:]:
        assert np.shape(got) == ()
        assert got == pytest.approx(want, rel=1e-12, abs=1e-15)


def test_hypot_issue_value():
    assert rt.grad(rt.grad(lambda x: np.hypot(x, 2.0)))(2.0) == pytest.approx(0.1767766952966369,
                                                                            rel=1e-14)


def test_hypot_hessian_at_a_tie_in_both_operands():
    def f(v):
        return np.hypot(v[0], v[1])

    for x in (np.array([2.0, 2.0]), np.array([2.0, -2.0]), np.array([-3.0, 1.0])):
        r = np.hypot(*x)
        want = (np.eye(2) * r ** 2 - np.outer(x, x)) / r ** 3
        np.testing.assert_allclose(rt.hessian(f)(x), want, rtol=1e-13)
        np.testing.assert_allclose(rt.hessian(f, x), want, rtol=1e-13)
        np.testing.assert_allclose(rt.grad(f)(x), x / r, rtol=1e-14)


def test_hypot_values_stay_numpys_and_do_not_overflow():
    for x, y in ((3e200, 4e200), (3e-200, 4e-200), (1.0, 1.0), (0.0, 0.0), (np.inf, np.nan),
                 (-2.0, np.inf), (np.nan, 1.0)):
        v = rt.value_and_grad(lambda t: np.hypot(t, y))(x)[0]
        np.testing.assert_allclose(v, np.hypot(x, y), rtol=1e-15)
    np.testing.assert_allclose(rt.grad(lambda t: np.hypot(t, 4e200))(3e200), 0.6, rtol=1e-15)


# ---------------------------------------------------------------- conventions at kinks

def test_conventions_at_non_differentiable_points():
    # autograd's: abs'(0) = 0; maximum/minimum/fmax/fmin split a tie evenly;
    # clip at a bound passes no gradient; std of one element has gradient 0
    assert rt.grad(np.abs)(0.0) == 0.0 and rt.grad(rt.grad(np.abs))(0.0) == 0.0
    for u in (np.maximum, np.minimum, np.fmax, np.fmin):
        assert rt.grad(lambda x: u(x, 1.0))(1.0) == 0.5
        assert rt.grad(rt.grad(lambda x: u(x, 1.0)))(1.0) == 0.0
    for bound in (0.0, 1.0):
        assert rt.grad(lambda x: np.clip(x, 0.0, 1.0))(bound) == 0.0
    # hypot at the origin: 0 (the smallest subgradient, as abs at 0;
    # autograd's x / hypot(x, y) is 0/0 = nan there)
    np.testing.assert_array_equal(rt.grad(lambda v: np.hypot(v[0], v[1]))(np.zeros(2)), 0.0)
    np.testing.assert_array_equal(rt.hessian(lambda v: np.hypot(v[0], v[1]))(np.zeros(2)), 0.0)


def test_an_infinite_slope_is_not_multiplied_away():
    # cbrt written as sign(x) * |x|**(1/3) gave 0 at 0 (sign's 0 times pow's
    # infinite slope); autograd's g / (3 cbrt(x)**2) is inf there
    assert rt.grad(np.cbrt)(0.0) == np.inf
    x = np.array([-8.0, -0.5, 0.5, 27.0])
    np.testing.assert_allclose(rt.grad(lambda x: np.sum(np.cbrt(x)))(x),
                               1.0 / (3.0 * np.cbrt(x) ** 2), rtol=1e-14)
    np.testing.assert_allclose(rt.hessian(lambda x: np.sum(np.cbrt(x)))(x),
                               np.diag(-2.0 / (9.0 * np.cbrt(x) ** 5)), rtol=1e-13)
    np.testing.assert_allclose(rt.value_and_grad(lambda x: np.sum(np.cbrt(x)))(x)[0],
                               np.sum(np.cbrt(x)), rtol=1e-15)
    # xlogy(0, y) is 0 for every y: its derivative in y is 0 there, y == 0 included
    sps = pytest.importorskip("scipy.special")
    assert rt.grad(lambda y: rt.special.xlogy(0.0, y))(0.0) == 0.0
    assert rt.grad(lambda y: sps.xlog1py(0.0, y))(-1.0) == 0.0
    assert rt.grad(lambda y: rt.special.xlogy(2.0, y))(0.5) == 4.0


def test_std_at_zero_spread_is_zero_like_numpy_and_autograd():
    assert rt.grad(lambda x: np.std(x))(3.5) == 0.0
    row = np.array([[1.0, 2.0, 5.0]])
    np.testing.assert_array_equal(rt.grad(lambda x: np.sum(np.std(x, axis=0)))(row), 0.0)
    np.testing.assert_array_equal(rt.grad(lambda x: np.std(x))(np.full(3, 2.0)), 0.0)
    # away from zero spread: (x - mean) / (n * std)
    x = np.array([1.0, 2.0, 4.0])
    want = (x - x.mean()) / (x.size * x.std())
    np.testing.assert_allclose(rt.grad(lambda x: np.std(x))(x), want, rtol=1e-14)
    np.testing.assert_allclose(rt.gradient(lambda x: np.std(x, ddof=1), x),
                               (x - x.mean()) / ((x.size - 1) * x.std(ddof=1)), rtol=1e-14)
    # ddof >= n: numpy's nan stays nan
    with np.errstate(all="ignore"):
        v, g = rt.value_and_grad(lambda x: np.std(x, ddof=1))(np.array([1.0]))
    assert np.isnan(v) and np.isnan(g).all()


# ---------------------------------------------------------------- shapes of a float input

@pytest.mark.parametrize("x0", [0.5, np.float64(0.5), 2])
def test_hessian_and_jacobian_of_a_float_have_shape_of_the_one_shot_forms(x0):
    f = lambda x: x ** 3                                   # noqa: E731
    assert np.shape(rt.hessian(f)(x0)) == np.shape(rt.hessian(f, x0)) == ()
    assert rt.hessian(f)(x0) == pytest.approx(6 * float(x0))
    assert np.shape(rt.jacobian(f)(x0)) == np.shape(rt.jacobian(f, x0)) == ()
    assert rt.jacobian(f)(x0) == pytest.approx(3 * float(x0) ** 2)
    v = lambda x: x * np.array([1.0, 2.0])                 # noqa: E731
    assert np.shape(rt.jacobian(v)(x0)) == np.shape(rt.jacobian(v, x0)) == (2,)
    assert np.shape(rt.hessian(f)(np.array(x0, dtype=float))) == ()
    assert np.shape(rt.hessian(lambda x: np.sum(x ** 3))(np.ones(3))) == (3, 3)
