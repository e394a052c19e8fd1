"""nan and +-inf are values: every replay computes them as numpy does.

Optimizers and samplers hand non-finite points over on purpose (scipy's
trust-krylov calls hessp with nan vectors; a divergent leapfrog step lands on
inf) and expect nan/-inf back, never an exception.  These tests compare the
compiled replay, the reference replay, rt.gradient (recording at the point
itself) and numpy at such points, element by element: the same nan pattern,
the same infinities, and finite values equal to 1e-12 -- for every
elementwise row of the op table, read from the table itself.
"""

import itertools
import math
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import revtape as rt
from revtape.core import ops
from revtape.core.ops import P
from conftest import FNS

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.5, -2.5]


def same(a, b, atol=1e-300):
    """Equal as numpy results: same nan positions, same infinities, finite to 1e-12."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or not np.array_equal(np.isnan(a), np.isnan(b)):
        return False
    if not np.array_equal(np.where(np.isinf(a), a, 0.0), np.where(np.isinf(b), b, 0.0)):
        return False
    fin = np.isfinite(a) & np.isfinite(b)
    return np.allclose(a[fin], b[fin], rtol=1e-12, atol=atol)


# Every elementwise row of the op table (src/revtape/core/ops.py), called as a
# user calls it: its ufunc (numpy's, or scipy's when scipy imports), else its
# primitive (trigamma, pow, copy, azmul, stop_gradient: no ufunc of their
# own; azmul's reference is its own forward, a multiply in which a zero
# stays zero).  A row added to the table is covered here with no edit.
ROWS = {name: op for name, op in ops.OPS.items()
        if op.family in (ops.UNARY, ops.UNARY_ND, ops.BINARY, ops.BINARY_ND)}


def _as_users_call_it(op):
    return op.ufuncs[0] if op.ufuncs else getattr(P, op.name)


# numpy ufuncs revtape records as several rows: their nan/inf come out as numpy's too.
COMPOSITE_UNARY = {"log2": np.log2, "log10": np.log10, "cbrt": np.cbrt, "exp2": np.exp2}
COMPOSITE_BINARY = {"fmax": np.fmax, "fmin": np.fmin, "hypot": np.hypot}

UNARY = {**{name: _as_users_call_it(op) for name, op in ROWS.items()
            if op.family in (ops.UNARY, ops.UNARY_ND)}, **COMPOSITE_UNARY}
BINARY = {**{name: _as_users_call_it(op) for name, op in ROWS.items()
             if op.family in (ops.BINARY, ops.BINARY_ND)}, **COMPOSITE_BINARY}
# Differentiable in x only (a tracked shape or order is refused): it runs over the
# special values as a constant.
CONSTANT_FIRST = {"gammainc", "gammaincc", "jn", "yn", "iv", "ive"}

# The reductions are hand kernels, not elementwise rows: each is added here by hand.
REDUCTIONS = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod, "mean": np.mean,
              "var": np.var, "std": np.std, "norm": np.linalg.norm,
              "logsumexp": lambda x: rt.special.logsumexp(x)}


def _in_domain(*args):
    return all(np.isnan(v) or 0 < v < np.inf for v in args)


# Where numpy's (scipy's) answer cannot be matched, the points left out, and why
# (each predicate takes the row's arguments):
LEFT_OUT = {
    # scipy.special.betaln answers +-inf wherever an argument is not positive
    # and finite (its log-gamma terms' poles, inf - inf), nan or not; revtape's
    # C kernel answers nan there, so with scipy installed the reference replay
    # (scipy's forward) and the compiled one (the C kernel) part.
    "betaln": lambda a, b: not _in_domain(a, b),
    # The partials at the edge of the domain: the reference replay evaluates
    # the row's numpy rule, the compiled replay its C rule, and there they
    # part -- erfcx's 2 x erfcx(x) - 2/sqrt(pi) is inf * 0 = nan at +inf where
    # the C rule gives the limit 0, log_ndtr's C rule gives nan at +inf where
    # numpy's gives 0, and gammainc/gammaincc's x-partial differs at x <= 0,
    # x = inf and a not positive (nan, 0, +-inf against each other).  The
    # values agree everywhere.
    "erfcx": lambda x: x == np.inf,
    "log_ndtr": lambda x: x == np.inf,
    "gammainc": lambda a, x: not _in_domain(a, x),
    "gammaincc": lambda a, x: not _in_domain(a, x),
}
# A point of each where the partials part: an expected failure below, until
# the numpy and C rules agree.
EDGES = {"erfcx": [[np.inf]], "log_ndtr": [[np.inf]],
         "gammainc": [[1.0, -1.0], [0.0, 1.0]], "gammaincc": [[1.0, -1.0], [0.0, 1.0]]}


def _points(name, points, *constants):
    drop = LEFT_OUT.get(name)
    return [p for p in points if not drop(*constants, *p)] if drop else points


def check_agree(f, x0, points):
    """Compiled replay == reference replay == rt.value_and_gradient(f, x) == numpy at each point."""
    g = lambda x: np.sum(f(x))
    tape = rt.GradientTape(g, x0)
    ctape = rt.compile(tape, guards=False)
    bad = []
    for x in points:
        x = np.array(x, dtype=float)
        with warnings.catch_warnings():
            warnings.simplefilter("error")      # the replays compute quietly, as values
            v_ref, g_ref = tape.value_and_gradient(x)
            v_c, g_c = ctape.value_and_gradient(x)
            v_rec, g_rec = rt.value_and_gradient(g, x)
        with np.errstate(all="ignore"):
            v_np = g(x)
        if not (same(v_ref, v_np) and same(v_c, v_ref) and same(g_c, g_ref)
                and same(v_rec, v_ref) and same(g_rec, g_ref)):
            bad.append((x.tolist(), v_np, v_ref, v_c, g_ref.tolist(), g_c.tolist(), g_rec.tolist()))
    assert not bad, bad[:5]


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_at_non_finite_points_agree_with_numpy_in_every_replay(name):
    check_agree(UNARY[name], np.array([0.7]), _points(name, [[s] for s in SPECIAL]))


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_ops_at_non_finite_points_agree_with_numpy_in_every_replay(name):
    f = BINARY[name]
    if name in CONSTANT_FIRST:
        for a in SPECIAL:
            xs = _points(name, [[s] for s in SPECIAL], a)
            check_agree(lambda x: f(a, x), np.array([0.7]), xs)
            check_agree(lambda x: f(a, x[:2]), np.array([0.7, 1.3]),
                        [[s, t] for (s,), (t,) in itertools.product(xs, xs)])
        return
    pairs = _points(name, [list(p) for p in itertools.product(SPECIAL, SPECIAL)])
    if ROWS.get(name) is not None and ROWS[name].mask:
        # comparisons of two tracked scalars branch (a guard): arrays make the mask
        check_agree(lambda x: f(x[:1], x[1:]), np.array([0.7, 1.3]), pairs)
    else:
        check_agree(lambda x: f(x[0], x[1]), np.array([0.7, 1.3]), pairs)
    # array-scalar and scalar-array opcodes
    check_agree(lambda x: f(x[:2], x[2]), np.array([0.7, 1.1, 1.3]), [[s, 1.0, t] for s, t in pairs])
    check_agree(lambda x: f(x[2], x[:2]), np.array([0.7, 1.1, 1.3]), [[s, 1.0, t] for s, t in pairs])


def test_every_elementwise_row_is_checked_at_non_finite_points():
    assert set(ROWS) <= set(UNARY) | set(BINARY)
    assert set(LEFT_OUT) | CONSTANT_FIRST <= set(ROWS)


@pytest.mark.xfail(strict=True, reason="the reference replay's numpy rule and the C rule of "
                   "these partials part at the edge of the domain (LEFT_OUT)")
@pytest.mark.parametrize("name", sorted(EDGES))
def test_partials_at_the_edge_of_the_domain_agree_in_every_replay(name):
    if name in CONSTANT_FIRST:
        for a, x in EDGES[name]:
            check_agree(lambda x, a=a: BINARY[name](a, x), np.array([0.7]), [[x]])
    else:
        check_agree(UNARY[name], np.array([0.7]), EDGES[name])


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions_at_non_finite_points_agree_in_every_replay(name):
    f = REDUCTIONS[name]
    vals = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0]
    check_agree(f, np.array([0.7, 1.3, 0.2]), [list(p) for p in itertools.product(vals, repeat=3)])


def test_matmul_where_clip_and_indexing_at_non_finite_points():
    pts = [list(p) + [1.0, 2.0] for p in itertools.product(SPECIAL, repeat=2)]
    check_agree(lambda x: x.reshape(2, 2) @ x[:2], np.arange(4.0) + 1, pts)
    check_agree(lambda x: np.clip(x, -1.0, 2.0), np.array([0.5]), [[s] for s in SPECIAL])
    check_agree(lambda x: np.where(x > 0, x, np.log(x)), np.array([0.5, 1.0]),
           [[s, 1.0] for s in SPECIAL])
    check_agree(lambda x: x[0] * x[1] + np.sum(x[::-1] ** 2) + x[2], np.array([0.5, 1.0, 2.0]),
           [[s, 1.0, t] for s, t in itertools.product(SPECIAL, SPECIAL)])


def test_issue_reproducers_inf_and_nan_points():
    # numpy's own answers, written out: d/dx sum(x**2) = 2x, d/dx log(x1) = 1/x1
    f = lambda x: np.sum(x ** 2) + np.log(x[1])
    tape = rt.GradientTape(f, np.ones(2))
    ct = rt.compile(tape)
    for x, v, g in [([np.inf, 1.0], np.inf, [np.inf, 3.0]),
                    ([np.nan, 0.0], np.nan, [np.nan, np.inf]),
                    ([1.0, -1.0], np.nan, [2.0, -3.0]),
                    ([1.0, 0.0], -np.inf, [2.0, np.inf])]:
        x = np.array(x)
        for replay in (tape.value_and_gradient, ct.value_and_gradient,
                       lambda x: rt.value_and_gradient(f, x)):
            value, grad = replay(x)
            assert same(value, v) and same(grad, g), (replay, x, value, grad)
        assert same(ct.forward(x), v) and same(tape.forward(x), v)
        np.testing.assert_array_equal(ct.jacobian(x), grad)


def test_a_minus_inf_log_density_comes_back_as_minus_inf():
    # a normal log density at a point that underflows the scale: log(0) = -inf
    def logp(x):
        mu, log_sigma = x[0], x[1]
        sigma = np.exp(log_sigma)
        return -0.5 * ((2.0 - mu) / sigma) ** 2 - np.log(sigma) + np.log(np.exp(-mu * mu))
    tape = rt.GradientTape(logp, np.array([0.1, 0.2]))
    ct = rt.compile(tape)
    g = np.empty(2)
    x = np.array([40.0, 0.0])                 # exp(-1600) underflows to 0
    run = ct.bind(x, g)
    assert run() == -np.inf
    assert ct.forward(x) == -np.inf == tape.forward(x)
    v, grad = ct.value_and_gradient(x)
    v2, grad2 = tape.value_and_gradient(x)
    assert v == v2 == -np.inf and same(grad, grad2)
    for bad in ([np.inf, 0.0], [0.0, -np.inf], [np.nan, 0.0]):   # divergent leapfrog steps
        x[:] = bad
        with np.errstate(all="ignore"):
            want = logp(x.copy())
        assert same(run(), want) and same(tape.forward(x), want)
        assert same(g, tape.gradient(x))
    x[:] = [0.5, 0.1]
    assert run() == pytest.approx(logp(np.array([0.5, 0.1])), rel=1e-14)


def test_nan_and_inf_tangents_flow_through_jvp_and_hvp():
    f = lambda x: np.sum(x ** 3) + x[0] * x[1]
    x = np.array([1.0, 2.0, 3.0])
    H = np.diag(6 * x) + np.array([[0, 1, 0], [1, 0, 0], [0, 0, 0]])
    ct = rt.compile(rt.GradientTape(f, x))
    ht = rt.compile(rt.HessianTape(f, x))
    jt = rt.compile(rt.JacobianTape(lambda x: x ** 2, x))
    for v in (np.array([np.nan, 0.0, 0.0]), np.array([np.inf, 1.0, 0.0]),
              np.array([0.0, 0.0, -np.inf]), np.array([1.0, 0.5, 2.0])):
        # H v through the gradient program's own operations: a nan in v_j reaches
        # exactly the rows where H[i, j] is a computed (not structural) entry --
        # row 2 never sees v_0, so it stays 0 where a dense H @ v says 0 * nan.
        # JAX's jvp does the same.
        with np.errstate(all="ignore"):
            want = np.array([sum(H[i, j] * v[j] for j in range(3) if H[i, j] != 0 or i == j)
                             for i in range(3)])
        assert same(ct.hvp(x, v), want), (v, ct.hvp(x, v), want)
        assert same(ht.hvp(x, v), want)
        with np.errstate(all="ignore"):
            assert same(jt.jvp(x, v), 2 * x * v)
        # the reference replay agrees (a reverse sweep of the gradient tape)
        assert same(rt.GradientTape(f, x).hvp(x, v), want)
    # a tangent that does not touch x1 stays exactly 0 on it even with an inf partial
    sq = rt.compile(rt.JacobianTape(lambda x: np.stack([np.sqrt(x[1]) + x[0], x[0]]), x))
    np.testing.assert_array_equal(sq.jvp(np.array([1.0, 0.0, 1.0]), np.array([np.nan, 0.0, 0.0])),
                                  [np.nan, np.nan])
    np.testing.assert_array_equal(sq.jvp(np.array([1.0, 0.0, 1.0]), np.array([1.0, 0.0, 0.0])),
                                  [1.0, 1.0])


def test_hessian_and_jacobian_at_non_finite_points():
    f = lambda x: np.sum(np.exp(x)) + x[0] * x[1]
    x = np.array([np.inf, 1.0])
    ht = rt.HessianTape(f, np.zeros(2))
    want = np.array([[np.inf, 1.0], [1.0, np.e]])
    assert same(rt.compile(ht).hessian(x), want)
    assert same(ht.hessian(x), want)
    jt = rt.JacobianTape(lambda x: np.exp(x) * x[0], np.zeros(2))
    assert same(rt.compile(jt).jacobian(x), jt.jacobian(x))


def test_guards_at_nan_follow_numpys_comparison():
    def f(x):
        if x[0] > 0:                  # nan > 0 is False, as in numpy
            return np.sum(x ** 2)
        return np.sum(x)
    tape = rt.GradientTape(f, np.array([1.0, 2.0]))
    ct = rt.compile(tape)
    x = np.array([np.nan, 2.0])
    with pytest.raises(rt.BranchChanged):
        tape.gradient(x)
    with pytest.raises(rt.BranchChanged):
        ct.gradient(x)
    tape2 = rt.GradientTape(f, np.array([-1.0, 2.0]))   # recorded on the other branch
    v, g = rt.compile(tape2).value_and_gradient(x)
    assert math.isnan(v) and same(g, [1.0, 1.0])
    assert same(tape2.gradient(x), [1.0, 1.0])
    # != is True at nan: the guard holds
    tape3 = rt.GradientTape(lambda x: x[0] * 2.0 if x[0] != 1.5 else x[0], np.array([0.0]))
    assert math.isnan(rt.compile(tape3).forward(np.array([np.nan])))


def test_non_finite_data_arguments_and_tuple_inputs():
    f = lambda a, b: np.sum(a * b) + np.log(b[0])
    a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    tape = rt.GradientTape(f, (a, b))
    ct = rt.compile(tape)
    pts = [(np.array([np.inf, 2.0]), b), (a, np.array([-1.0, np.nan])), (a, np.array([0.0, 1.0]))]
    for p in pts:
        v, g = ct.value_and_gradient(p)
        v2, g2 = tape.value_and_gradient(p)
        assert same(v, v2) and all(same(u, w) for u, w in zip(g, g2))
    grad = rt.grad(lambda x, data: np.sum(x * data))
    assert same(grad(np.ones(2), np.array([np.nan, 1.0])), [np.nan, 1.0])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")     # scipy's own, with numpy too
def test_trust_krylov_converges_with_compiled_gradient_and_hvp():
    # scipy's trust-krylov calls hessp with nan vectors near convergence; with
    # replays refusing them it died, with numpy it converges to ~1e-9.
    optimize = pytest.importorskip("scipy.optimize")

    def rosen(x):
        return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)

    n = 20
    x0 = np.full(n, -1.2)
    x0[1::2] = 1.0
    ct = rt.compile(rt.GradientTape(rosen, x0))
    res = optimize.minimize(lambda x: ct.value_and_gradient(x), x0, jac=True,
                            hessp=lambda x, p: ct.hvp(x, p), method="trust-krylov",
                            options={"gtol": 1e-10, "maxiter": 500})
    assert np.max(np.abs(res.x - 1.0)) < 1e-8, (res.message, res.x)
    assert res.fun < 1e-15


@pytest.mark.parametrize("fn", [np.nansum, np.nanprod, np.nanmean, np.nanmax, np.nanmin])
def test_nan_ignoring_reductions_see_the_nans_of_each_replay(fn):
    # the nan mask is computed at replay time: recorded at a point without nan,
    # replayed where some (or all) elements of a slice are nan
    f = lambda x: fn(x.reshape(2, 3), axis=1)
    g = lambda x: np.sum(fn(x.reshape(2, 3), axis=1) ** 2)
    x0 = np.array([0.5, 1.5, -2.0, 0.25, 3.0, 1.0])
    tape = rt.JacobianTape(f, x0)
    ct = rt.compile(tape)
    gt = rt.GradientTape(g, x0)
    cg = rt.compile(gt)
    for x in (x0, np.array([np.nan, 1.5, -2.0, 0.25, np.nan, 1.0]),
              np.array([np.nan, np.nan, np.nan, 0.25, 3.0, np.inf])):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)   # numpy warns at an all-nan slice
            want = fn(x.reshape(2, 3), axis=1)
        assert same(ct.forward(x), want) and same(tape.forward(x), want), (x, ct.forward(x), want)
        assert same(cg.gradient(x), gt.gradient(x))
    # the gradient ignores the nan elements
    x = np.array([np.nan, 1.5, -2.0, 0.25, np.nan, 1.0])
    grad = cg.gradient(x)
    assert grad[0] == 0.0 and grad[4] == 0.0 and np.all(np.isfinite(grad))
    assert same(rt.gradient(g, x), grad)


def test_selections_route_an_infinite_adjoint_without_multiplying_it_by_zero():
    # clip, max and min select where their adjoint goes; an unselected element
    # gets exactly 0 even when the adjoint is inf (inf * 0 would be nan), in
    # the reference replay as in the C kernels
    cases = [
        (lambda x: np.sum(np.clip(x[1:], -1.0, 2.0)) * x[0], [np.inf, 5.0, 0.5]),
        (lambda x: np.max(x[1:]) * x[0], [np.inf, 5.0, 0.5]),
        (lambda x: np.min(x[1:]) * x[0], [-np.inf, 5.0, 0.5]),
        (lambda x: np.sum(np.max(x[1:].reshape(2, 2), axis=1)) * x[0], [np.inf, 1.0, 2.0, 2.0, 0.0]),
        (lambda x: np.max(x[1:]) * x[0], [np.inf, np.nan, 0.5]),
    ]
    for f, x in cases:
        x = np.array(x)
        tape = rt.GradientTape(f, np.ones_like(x))
        g_ref, g_c = tape.gradient(x), rt.compile(tape).gradient(x)
        assert same(g_ref, g_c), (x, g_ref, g_c)
        assert same(rt.gradient(f, x), g_c)
    g = rt.compile(rt.GradientTape(cases[0][0], np.ones(3))).gradient(np.array(cases[0][1]))
    assert same(g, [2.5, 0.0, np.inf])


@pytest.mark.parametrize("name", sorted(FNS))
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_composite_programs_agree_at_points_holding_nan_and_inf(name, data):
    f, n = FNS[name]
    x0 = np.linspace(-0.6, 0.7, n)
    tape = rt.GradientTape(f, x0)
    ctape = rt.compile(tape)
    elem = st.one_of(st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e300, -1e-300]),
                     st.floats(-3, 3))
    x = np.array(data.draw(st.lists(elem, min_size=n, max_size=n)))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            v_ref, g_ref = tape.value_and_gradient(x)
    except rt.BranchChanged:
        with pytest.raises(rt.BranchChanged):
            ctape.value_and_gradient(x)
        return
    v_c, g_c = ctape.value_and_gradient(x)
    # adjoint sums may add in another order: a cancellation to ~0 (1 + 1e-150 - 1)
    # then differs in absolute terms of the size of the inputs' rounding
    assert same(v_c, v_ref, atol=1e-12) and same(g_c, g_ref, atol=1e-12), (
        x, v_ref, v_c, g_ref, g_c)


def test_batched_replay_gives_each_non_finite_row_its_single_replay():
    f = lambda x: np.sum(x ** 2) + np.log(x[1]) + x[0] * x[2]
    x0 = np.array([1.0, 2.0, 3.0])
    ct = rt.compile(rt.GradientTape(f, x0))
    X = np.array([[np.inf, 1.0, 0.0], [np.nan, 0.0, 1.0], [1.0, -1.0, 2.0], [1.0, 0.0, -np.inf],
                  [0.5, 2.0, 1.0]] * 5)         # 25 rows: wide and row-loop forms alike
    vals, grads = ct.batch_value_and_gradient(X)
    for k, x in enumerate(X):
        v, g = ct.value_and_gradient(x)
        assert same(vals[k], v) and same(grads[k], g), (x, vals[k], v, grads[k], g)
    assert same(ct.batch_forward(X), vals)
