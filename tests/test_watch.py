"""rt.grad in real programs (issue 11 items 1, 2, 4, 6): random draws are never
frozen, attributes of objects f reaches are guarded, recording coexists with
profilers/tracers, and the first call does not scan the heap."""

import cProfile
import gc
import pstats
import random
import sys
import warnings

import itertools

import numpy as np
import pytest

import revtape as rt

X3 = np.array([0.5, -1.0, 2.0])


# ---------------------------------------------------------------- 1. random draws

# (make f from a generator, the analytic gradient from a twin generator)
def _std_normal(r):
    return (lambda x: np.sum((x + r.standard_normal(3)) ** 2),
            lambda x: 2 * (x + r.standard_normal(3)))


def _normal(r):
    return (lambda x: np.sum((x - r.normal(1.0, 2.0, size=3)) ** 2),
            lambda x: 2 * (x - r.normal(1.0, 2.0, size=3)))


def _uniform(r):
    return (lambda x: np.sum(x * r.uniform(-1.0, 3.0, size=3)),
            lambda x: r.uniform(-1.0, 3.0, size=3))


def _random(r):
    return lambda x: np.sum(x ** 2 * r.random(3)), lambda x: 2 * x * r.random(3)


def _std_exponential(r):
    return (lambda x: np.sum(x ** 2 * r.standard_exponential(3)),
            lambda x: 2 * x * r.standard_exponential(3))


def _exponential(r):
    return (lambda x: np.sum(x * r.exponential(2.0, 3)), lambda x: r.exponential(2.0, 3))


def _integers(r):
    return (lambda x: np.sum(x * r.integers(0, 5, size=3)),
            lambda x: r.integers(0, 5, size=3).astype(float))


def _choice(r):
    def f(x):
        idx = r.choice(3, 2, replace=False)
        return np.sum(x[idx] ** 2)

    def df(x):
        g = np.zeros(3)
        idx = r.choice(3, 2, replace=False)
        g[idx] = 2 * x[idx]
        return g
    return f, df


def _permutation(r):
    return (lambda x: np.sum(x * np.arange(3.0)[r.permutation(3)]),
            lambda x: np.arange(3.0)[r.permutation(3)])


def _shuffle(r):
    def f(x):
        a = np.arange(3.0)
        r.shuffle(a)
        return np.sum(x * a)

    def df(x):
        a = np.arange(3.0)
        r.shuffle(a)
        return a
    return f, df


GENERATOR_CASES = [_std_normal, _normal, _uniform, _random, _std_exponential, _exponential,
                   _integers, _choice, _permutation, _shuffle]
# draws replayed by the compiled tape (the rest record f on every call)
COMPILED_CASES = {_std_normal, _normal, _uniform, _random, _std_exponential, _exponential,
                  _integers, _choice}


def _quiet(fn, *a):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rt.RandomDrawWarning)
        return fn(*a)


@pytest.mark.parametrize("case", GENERATOR_CASES, ids=lambda c: c.__name__[1:])
def test_generator_draws_are_fresh_on_every_call_like_a_rerun(case):
    rng, twin = np.random.default_rng(7), np.random.default_rng(7)
    f, _ = case(rng)
    _, df = case(twin)
    g = rt.grad(f)
    for k in range(4):
        x = X3 * (k + 1)
        np.testing.assert_allclose(_quiet(g, x), df(x), rtol=1e-14, atol=1e-300)
    # the generator advanced exactly as four runs of f advance it
    assert rng.bit_generator.state == twin.bit_generator.state
    info = g.cache_info()
    assert info.eager is (case not in COMPILED_CASES)
    assert info.records == (1 if case in COMPILED_CASES else 4)


@pytest.mark.parametrize("seed", range(8))
def test_a_draw_transformed_to_match_itself_is_still_fresh(seed):
    # abs(z) == z whenever z > 0: checking values on a sample run cannot tell
    # them apart, so nothing may assume a tape constant equal to a draw is it
    rng, twin = np.random.default_rng(seed), np.random.default_rng(seed)
    g = rt.grad(lambda x: x[0] * np.abs(rng.standard_normal()) + np.sum(x * rng.random(3)))
    for _ in range(4):
        want = np.abs(twin.standard_normal()) * np.array([1.0, 0, 0]) + twin.random(3)
        np.testing.assert_allclose(_quiet(g, X3), want, rtol=1e-14)


# A Generator passed as an argument: its plain draws become tape inputs that
# each call refills from it, so the tape stays compiled.

def _svi_loss(w, rng):
    z = rng.standard_normal(3)
    return np.sum((w + np.exp(w) * np.abs(z)) ** 2) + w[0] * rng.random() \
        + np.sum(w * rng.standard_exponential(3))


def _svi_grad(w, rng):
    z, u, e = np.abs(rng.standard_normal(3)), rng.random(), rng.standard_exponential(3)
    r = w + np.exp(w) * z
    g = 2 * r * (1 + np.exp(w) * z) + e
    g[0] += u
    return g


def test_generator_argument_draws_are_replayed_compiled_and_fresh():
    rng, twin = np.random.default_rng(5), np.random.default_rng(5)
    g = rt.grad(_svi_loss)
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # nothing to warn about: nothing frozen
        for k in range(6):
            w = X3 * (k - 2) / 3
            np.testing.assert_allclose(g(w, rng), _svi_grad(w, twin), rtol=1e-13)
    info = g.cache_info()
    assert info.records == 1 and info.replays == 5 and not info.eager
    assert rng.bit_generator.state == twin.bit_generator.state


def test_generator_argument_replay_survives_branches_without_extra_draws():
    def f(x, rng):
        e = rng.standard_normal(3)
        if x[0] > 0:                   # a branch on x: two variants
            return np.sum(x * e)
        if e[0] > 0:                   # a branch on the draw: a guard on a tape input
            return np.sum(x ** 2 * e)
        return np.sum(x ** 3 * e)

    def df(x, rng):
        e = rng.standard_normal(3)
        if x[0] > 0:
            return e
        return 2 * x * e if e[0] > 0 else 3 * x ** 2 * e

    rng, twin = np.random.default_rng(31), np.random.default_rng(31)
    g = rt.grad(f)
    for k in range(12):
        x = X3 * (1 if k % 3 else -1) * (1 + k / 10)
        np.testing.assert_allclose(g(x, rng), df(x, twin), rtol=1e-13)
    assert rng.bit_generator.state == twin.bit_generator.state
    assert g.cache_info().branch_failures > 0


@pytest.mark.parametrize("draw, plain", [
    (lambda r: abs(float(r.standard_normal())), lambda r: abs(r.standard_normal())),
    (lambda r: r.gamma(np.float32(2.0), size=3, ).astype(np.float32).astype(float),
     lambda r: r.gamma(np.float32(2.0), size=3).astype(np.float32).astype(float)),
    (lambda r: r.permuted(np.arange(3.0), out=np.empty(3)),
     lambda r: r.permuted(np.arange(3.0), out=np.empty(3))),
    (lambda r: r.standard_normal(3, dtype=np.float32).astype(float),
     lambda r: r.standard_normal(3, dtype=np.float32).astype(float)),
    (lambda r: r.standard_normal(3).astype(np.float32).astype(float),
     lambda r: r.standard_normal(3).astype(np.float32).astype(float)),
    # drawn indices of a plain array: the gather would be a constant
    (lambda r: np.arange(5.0)[r.choice(5, 3)], lambda r: np.arange(5.0)[r.choice(5, 3)]),
    (lambda r: r.choice(5, 3) % 2, lambda r: r.choice(5, 3) % 2),
])
def test_generator_argument_draws_that_cannot_be_inputs_stay_fresh(draw, plain):
    def f(x, rng):
        return np.sum(x * draw(rng)) + np.sum(x * rng.standard_normal(3))

    rng, twin = np.random.default_rng(9), np.random.default_rng(9)
    g = rt.grad(f)
    for _ in range(4):
        want = plain(twin) + twin.standard_normal(3)
        np.testing.assert_allclose(_quiet(g, X3, rng), want * np.ones(3), rtol=1e-14)
    assert g.cache_info().eager
    assert rng.bit_generator.state == twin.bit_generator.state


def test_legacy_numpy_random_functions_are_fresh():
    def f(x):
        return np.sum(x * np.random.normal(size=3)) + x[0] * np.random.rand()

    np.random.seed(3)
    g = rt.grad(f)
    got = [_quiet(g, X3) for _ in range(3)]
    twin = np.random.RandomState(3)
    for gr in got:
        expected = twin.normal(size=3)
        expected[0] += twin.rand()
        np.testing.assert_allclose(gr, expected, rtol=1e-14)


def test_randomstate_object_and_python_random_are_fresh():
    rs, r = np.random.RandomState(5), random.Random(5)

    def f(x):
        return np.sum(x * rs.randn(3)) + x[1] * r.gauss(0.0, 1.0) + x[2] * random.random()

    random.seed(11)
    g = rt.grad(f)
    got = [_quiet(g, X3) for _ in range(3)]
    rs2, r2, r3 = np.random.RandomState(5), random.Random(5), random.Random(11)
    for gr in got:
        e = rs2.randn(3)
        e[1] += r2.gauss(0.0, 1.0)
        e[2] += r3.random()
        np.testing.assert_allclose(gr, e, rtol=1e-14)


class Noisy:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def loss(self, x):
        return np.sum((x - self.rng.standard_normal(3)) ** 2)


def test_draws_through_self_and_through_an_argument():
    m, twin = Noisy(1), np.random.default_rng(1)
    vg = rt.value_and_grad(m.loss)
    for _ in range(3):
        v, gr = _quiet(vg, X3)
        e = twin.standard_normal(3)
        assert v == pytest.approx(np.sum((X3 - e) ** 2), rel=1e-14)
        np.testing.assert_allclose(gr, 2 * (X3 - e), rtol=1e-14)

    def loss(x, rng):
        return np.sum(x * rng.uniform(size=3))

    rng, twin = np.random.default_rng(2), np.random.default_rng(2)
    g = rt.grad(loss)
    for _ in range(3):
        np.testing.assert_allclose(_quiet(g, X3, rng), twin.uniform(size=3))


class _Sampler:
    def __init__(self, seed):
        self.rngs = [np.random.default_rng(seed)]


class _Deep:
    def __init__(self, seed):
        self.sampler = _Sampler(seed)

    def loss(self, x):
        return np.sum(x * self.sampler.rngs[0].standard_normal(3))


def test_generator_two_attributes_deep_in_a_list():
    m, twin = _Deep(6), np.random.default_rng(6)
    g = rt.grad(m.loss)
    for _ in range(3):
        np.testing.assert_allclose(_quiet(g, X3), twin.standard_normal(3))


def test_generator_made_inside_f_is_not_frozen():
    def f(x):
        rng = np.random.default_rng()          # fresh entropy on every run
        e = rng.standard_normal(3)
        return np.sum(x * e)

    g = rt.grad(f)
    a, b = _quiet(g, X3), _quiet(g, X3)
    assert not np.array_equal(a, b)


def test_generator_made_and_drawn_in_one_expression_is_not_frozen():
    def f(x):
        return np.sum(x * np.random.default_rng().standard_normal(3))

    g = rt.grad(f)
    a, b = _quiet(g, X3), _quiet(g, X3)
    assert not np.array_equal(a, b)


def test_draw_only_on_one_branch_becomes_fresh_when_that_branch_runs():
    rng, twin = np.random.default_rng(4), np.random.default_rng(4)

    def f(x):
        if x[0] > 0:
            return np.sum(x * rng.standard_normal(3))
        return np.sum(x ** 2)

    g = rt.grad(f)
    np.testing.assert_allclose(g(-X3), -2 * X3)          # no draw: compiled and cached
    assert not g.cache_info().eager
    for _ in range(3):
        np.testing.assert_allclose(_quiet(g, X3), twin.standard_normal(3), rtol=1e-14)


def test_grad_warns_once_naming_the_draw_site():
    rng = np.random.default_rng(0)

    def f(x):                       # in place: not replayed compiled, so recorded every call
        return np.sum(x * rng.permuted(np.arange(3.0), out=np.empty(3)))

    line = f.__code__.co_firstlineno + 1
    g = rt.grad(f)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(4):
            g(X3)
    draws = [x for x in w if issubclass(x.category, rt.RandomDrawWarning)]
    assert len(draws) == 1
    assert issubclass(rt.RandomDrawWarning, RuntimeWarning)
    msg = str(draws[0].message)
    assert f"{__file__}:{line}" in msg
    assert draws[0].filename == __file__           # points at the user's call


class _Hyper:
    beta = 2.0          # also the name of a Generator method


def test_draw_site_is_the_line_that_draws():
    rng, m = np.random.default_rng(0), _Hyper()

    def f(x):
        b = m.beta
        e = rng.random(size=3, dtype=np.float32)
        return b * np.sum(x * e)

    line = f.__code__.co_firstlineno + 2
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        rt.grad(f)(X3)
    (draw,) = [x for x in w if issubclass(x.category, rt.RandomDrawWarning)]
    assert f" at {__file__}:{line}" in str(draw.message)


def test_no_draw_no_warning_and_compiled():
    rng = np.random.default_rng(0)
    noise = rng.standard_normal(3)

    def f(x, r=rng):                 # reaches a generator, never draws from it
        return np.sum(x * noise)

    g = rt.grad(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            np.testing.assert_allclose(g(X3), noise)
        rt.GradientTape(f, X3)
    assert g.cache_info().records == 1 and not g.cache_info().eager


def test_minibatch_sgd_with_choice_matches_numpy_and_converges():
    data = np.random.default_rng(10)
    A = data.normal(size=(200, 3))
    w_true = np.array([1.0, -2.0, 0.5])
    b = A @ w_true + 0.1 * data.normal(size=200)
    w_opt = np.linalg.lstsq(A, b, rcond=None)[0]

    def run(grad_fn, rng):
        w = np.zeros(3)
        for step in range(400):
            w = w - 0.05 / (1 + step / 100) * grad_fn(w, rng)
        return w

    def loss(w, rng):
        idx = rng.choice(200, 20, replace=False)
        r = A[idx] @ w - b[idx]
        return np.mean(r ** 2)

    def numpy_grad(w, rng):
        idx = rng.choice(200, 20, replace=False)
        return 2 * A[idx].T @ (A[idx] @ w - b[idx]) / 20

    g = rt.grad(loss)
    w_rt = _quiet(run, g, np.random.default_rng(99))
    w_np = run(numpy_grad, np.random.default_rng(99))
    np.testing.assert_allclose(w_rt, w_np, rtol=1e-10)
    np.testing.assert_allclose(w_rt, w_opt, atol=0.05)
    # A and b are globals of the test: their gathers by drawn indices are refilled inputs
    assert g.cache_info().records == 1 and not g.cache_info().eager


# ---------------------------------------------------------------- compiled fresh draws, every path
# However f reaches a generator, its replayable draws become tape inputs that
# each call refills from that same generator: one recording, then replays
# equal to f's gradient with the generator in the same state.

_GLOBAL_RNG = np.random.default_rng(21)
_GLOBAL_RS = np.random.RandomState(21)


def _via_global(x):
    return np.sum((x - _GLOBAL_RNG.standard_normal(3)) ** 2) + x[0] * _GLOBAL_RNG.random()


class _Holder:
    def __init__(self, rng):
        self.rng = rng

    def loss(self, x):
        return np.sum((x - self.rng.standard_normal(3)) ** 2) + x[0] * self.rng.random()


class _Slotted:
    __slots__ = ("rng",)

    def __init__(self, rng):
        self.rng = rng

    def loss(self, x):
        return np.sum((x - self.rng.standard_normal(3)) ** 2) + x[0] * self.rng.random()


class _Outer:
    def __init__(self, rng):
        self.inner = {"rngs": [rng]}

    def loss(self, x):
        r = self.inner["rngs"][0]
        return np.sum((x - r.standard_normal(3)) ** 2) + x[0] * r.random()


def _twin_grad(x, r):
    g = 2 * (x - r.standard_normal(3))
    g[0] += r.random()
    return g


def _closure(rng):
    def f(x):
        return np.sum((x - rng.standard_normal(3)) ** 2) + x[0] * rng.random()
    return f


def _helper_closure(rng):
    def helper():
        return rng.standard_normal(3)

    def f(x):
        return np.sum((x - helper()) ** 2) + x[0] * rng.random()
    return f


PLACES = {
    "closure": lambda rng: _closure(rng),
    "closure of a helper": lambda rng: _helper_closure(rng),
    "self attribute": lambda rng: _Holder(rng).loss,
    "slots": lambda rng: _Slotted(rng).loss,
    "self, a dict and a list deep": lambda rng: _Outer(rng).loss,
    "callable object": lambda rng: _CallableLoss(rng),
}


class _CallableLoss:
    def __init__(self, rng):
        self.rng = rng

    def __call__(self, x):
        return np.sum((x - self.rng.standard_normal(3)) ** 2) + x[0] * self.rng.random()


@pytest.mark.parametrize("place", sorted(PLACES))
def test_draws_from_any_reachable_generator_are_compiled_and_fresh(place):
    rng, twin = np.random.default_rng(8), np.random.default_rng(8)
    f = PLACES[place](rng)
    g = rt.grad(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # nothing frozen, nothing to warn about
        for k in range(5):
            x = X3 * (k - 2)
            np.testing.assert_array_equal(g(x), _twin_grad(x, twin))
    info = g.cache_info()
    assert (info.records, info.replays, info.eager) == (1, 4, False)
    assert rng.bit_generator.state == twin.bit_generator.state


def test_a_generator_keyword_argument_is_compiled_and_keyed_by_identity():
    def f(x, *, rng):
        return np.sum((x - rng.standard_normal(3)) ** 2) + x[0] * rng.random()

    g = rt.grad(f)
    r1, t1 = np.random.default_rng(1), np.random.default_rng(1)
    r2, t2 = np.random.default_rng(2), np.random.default_rng(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in range(3):
            np.testing.assert_array_equal(g(X3 * k, rng=r1), _twin_grad(X3 * k, t1))
            np.testing.assert_array_equal(g(X3 * k, rng=r2), _twin_grad(X3 * k, t2))
    assert g.cache_info().records == 2       # one per generator (a static argument)


def test_draws_from_a_module_global_generator_are_compiled_and_fresh():
    twin = np.random.default_rng(21)
    twin.bit_generator.state = _GLOBAL_RNG.bit_generator.state
    g = rt.grad(_via_global)
    for k in range(4):
        np.testing.assert_array_equal(g(X3 * k), _twin_grad(X3 * k, twin))
    assert g.cache_info().records == 1
    assert _GLOBAL_RNG.bit_generator.state == twin.bit_generator.state
    assert type(globals()["_GLOBAL_RNG"]) is np.random.Generator      # put back


def test_stand_ins_are_put_back_and_f_sees_its_own_generator_types():
    rng = np.random.default_rng(0)
    h = _Holder(rng)
    seen = []

    def f(x):
        seen.append(isinstance(h.rng, np.random.Generator))
        return np.sum(x * h.rng.standard_normal(3))

    rt.grad(f)(X3)
    assert seen == [True] and h.rng is rng and type(h.rng) is np.random.Generator
    assert np.random.normal == np.random.mtrand._rand.normal

    def boom(x):
        h.rng.standard_normal(3)
        raise KeyError("user error")

    with pytest.raises(KeyError):
        rt.grad(boom)(X3)
    assert h.rng is rng and np.random.standard_normal == np.random.mtrand._rand.standard_normal


def test_rebinding_the_generator_rerecords_and_draws_from_the_new_one():
    h = _Holder(np.random.default_rng(1))
    g = rt.grad(h.loss)
    twin = np.random.default_rng(1)
    np.testing.assert_array_equal(g(X3), _twin_grad(X3, twin))
    old = h.rng
    old_state = old.bit_generator.state
    h.rng = np.random.default_rng(2)
    twin2 = np.random.default_rng(2)
    for _ in range(3):
        np.testing.assert_array_equal(g(X3), _twin_grad(X3, twin2))
    assert old.bit_generator.state == old_state       # the old generator was not touched
    assert g.cache_info().records == 2


def _loc_scale_cases():
    def normal(r, t):
        return r.normal(t[0], np.exp(t[1]), size=4)

    def uniform(r, t):
        return r.uniform(t[0], t[0] + np.exp(t[1]), size=(2, 2))

    def exponential(r, t):
        return r.exponential(np.exp(t[1]), size=4)

    def arrays(r, t):              # array parameters broadcast to the result's shape
        return r.normal(t[0] * np.array([1.0, 2.0]), np.exp(t[1]) * np.ones((3, 1)))

    def plain(r, t):               # constant parameters, size as a keyword
        return t[0] + r.uniform(low=-1.0, high=np.array([2.0, 3.0]), size=(3, 2))
    return [normal, uniform, exponential, arrays, plain]


@pytest.mark.parametrize("draw", _loc_scale_cases(), ids=lambda d: d.__name__)
def test_reparameterised_draws_with_tracked_parameters_are_compiled(draw):
    # f(t) = sum(y**2), y drawn with parameters depending on t; the gradient by
    # finite differences on the same draws (a twin generator, state copied)
    rng = np.random.default_rng(17)
    g = rt.value_and_grad(lambda t: np.sum(draw(rng, t) ** 2))
    for k in range(4):
        t = np.array([0.3 * k - 0.4, 0.2 - 0.1 * k])
        state = rng.bit_generator.state
        v, gr = g(t)

        def at(tt):
            r = np.random.default_rng()
            r.bit_generator.state = state
            return np.sum(draw(r, tt) ** 2)

        assert v == at(t)                        # the very numbers numpy draws
        h = 1e-6
        fd = [(at(t + h * e) - at(t - h * e)) / (2 * h) for e in np.eye(2)]
        np.testing.assert_allclose(gr, fd, rtol=1e-6, atol=1e-8)
    assert g.cache_info().records == 1


def test_a_tracked_scale_numpy_refuses_rerecords_and_raises_numpys_error():
    rng, twin = np.random.default_rng(3), np.random.default_rng(3)
    g = rt.grad(lambda s: np.sum(rng.normal(1.0, s, size=3) ** 2))
    z = twin.standard_normal(3)
    np.testing.assert_allclose(g(2.0), np.sum(2 * (1 + 2.0 * z) * z), rtol=1e-14)
    with pytest.raises(ValueError, match="scale"):
        g(-1.0)
    assert rng.bit_generator.state == twin.bit_generator.state    # the refused call drew nothing
    for s in (0.5, 0.0, 3.0, 0.0):      # a zero scale: numpy accepts it, another variant
        z = twin.standard_normal(3)
        np.testing.assert_allclose(g(s), np.sum(2 * (1 + s * z) * z), rtol=1e-14)
    assert not g.cache_info().eager and rng.bit_generator.state == twin.bit_generator.state


def test_legacy_numpy_random_functions_are_compiled_and_exact():
    def f(x):
        return (np.sum(x * np.random.normal(0.5, 2.0, size=3)) + x[0] * np.random.rand()
                + np.sum(x * np.random.randn(3)) + x[1] * np.random.standard_exponential()
                + np.sum(x * np.random.uniform(-1, 1, 3)) + x[2] * np.random.random())

    def df(r):
        e = r.normal(0.5, 2.0, size=3)
        e[0] += r.rand()
        e = e + r.randn(3)
        e[1] += r.standard_exponential()
        e = e + r.uniform(-1, 1, 3)
        e[2] += r.random()
        return e

    np.random.seed(3)
    twin = np.random.RandomState(3)
    g = rt.grad(f)
    for _ in range(4):
        np.testing.assert_allclose(g(X3), df(twin), rtol=1e-14)
    assert g.cache_info().records == 1
    # the gauss cache (randn draws pairs) is part of the state: it matches too
    assert str(np.random.get_state()) == str(twin.get_state())


def test_randomstate_attribute_is_compiled_and_exact():
    h = _Holder(np.random.RandomState(4))
    twin = np.random.RandomState(4)
    g = rt.grad(lambda x: np.sum(x * h.rng.randn(3)) + x[0] * h.rng.normal(1.0, 3.0))
    for _ in range(4):
        e = twin.randn(3)
        e[0] += twin.normal(1.0, 3.0)
        np.testing.assert_array_equal(g(X3), e)
    assert g.cache_info().records == 1


def test_a_draw_that_bypasses_the_stand_ins_is_recorded_every_call():
    rng = np.random.default_rng(12)
    draw = (rng,)                      # a tuple cannot be swapped: seen moving, so eager
    twin = np.random.default_rng(12)
    g = rt.grad(lambda x: np.sum(x * draw[0].standard_normal(3)))
    for _ in range(3):
        np.testing.assert_array_equal(_quiet(g, X3), twin.standard_normal(3))
    assert g.cache_info().eager


def test_sgd_on_a_stochastic_objective_converges_to_the_analytic_optimum():
    # E_z ||w - m - s*z||^2 is minimised at w = m; the compiled SGD run equals
    # the plain-numpy run with its analytic gradient step for step
    m, s = np.array([1.0, -2.0, 0.5]), np.array([0.5, 1.0, 2.0])

    def make(rng):
        return lambda w: np.sum((w - m - s * rng.standard_normal(3)) ** 2)

    def analytic(w, rng):
        return 2 * (w - m - s * rng.standard_normal(3))

    def sgd(step):
        w = np.zeros(3)
        for k in range(3000):
            w = w - 0.5 / (k + 1) * step(w)
        return w

    g = rt.grad(make(np.random.default_rng(0)))
    twin = np.random.default_rng(0)
    w_rt = sgd(g)
    w_np = sgd(lambda w: analytic(w, twin))
    np.testing.assert_array_equal(w_rt, w_np)
    np.testing.assert_allclose(w_rt, m, atol=0.1)
    assert g.cache_info().records == 1


# Integers drawn as indices (choice, permutation, integers): indexing a tracked
# array with them records a gather whose indices are a tape input, refilled by
# the same draw on every replay (and checked by the VM on every sweep).

def test_minibatch_sgd_with_data_arguments_is_compiled_and_converges():
    data = np.random.default_rng(10)
    A = data.normal(size=(200, 3))
    w_true = np.array([1.0, -2.0, 0.5])
    b = A @ w_true + 0.1 * data.normal(size=200)
    w_opt = np.linalg.lstsq(A, b, rcond=None)[0]

    def loss(w, A, b, rng):
        idx = rng.choice(200, 20, replace=False)
        r = A[idx] @ w - b[idx]
        return np.mean(r ** 2)

    def numpy_grad(w, A, b, rng):
        idx = rng.choice(200, 20, replace=False)
        return 2 * A[idx].T @ (A[idx] @ w - b[idx]) / 20

    def run(grad_fn, rng):
        w = np.zeros(3)
        for step in range(400):
            w = w - 0.05 / (1 + step / 100) * grad_fn(w, A, b, rng)
        return w

    g = rt.grad(loss)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        w_rt = run(g, np.random.default_rng(99))
    w_np = run(numpy_grad, np.random.default_rng(99))
    np.testing.assert_allclose(w_rt, w_np, rtol=1e-10)
    np.testing.assert_allclose(w_rt, w_opt, atol=0.05)
    info = g.cache_info()
    assert (info.records, info.eager) == (1, False)


def test_permutation_and_integers_index_tracked_arrays_compiled():
    rng, twin = np.random.default_rng(4), np.random.default_rng(4)
    M = np.arange(12.0).reshape(4, 3)

    def f(x, M):
        p = rng.permutation(4)
        j = rng.integers(0, 3)                 # a scalar index
        return np.sum(M[p[:2] if False else p, :] @ x) * x[j] + np.sum(x * rng.integers(1, 4, 3))

    def df(x):
        p = twin.permutation(4)
        j = twin.integers(0, 3)
        s = np.sum(M[p, :] @ x)
        gr = M[p, :].sum(axis=0) * x[j]
        gr[j] += s
        return gr + twin.integers(1, 4, 3)

    g = rt.grad(f)
    for k in range(5):
        x = X3 + k
        np.testing.assert_allclose(g(x, M), df(x), rtol=1e-14)
    assert g.cache_info().records == 1
    assert rng.bit_generator.state == twin.bit_generator.state


def test_permuted_and_chosen_float_data_are_refilled_inputs():
    # permutation/choice of a float array return data: tape inputs refilled by
    # the same call on the same array (rows of D shuffled afresh each call)
    r, t = np.random.default_rng(1), np.random.default_rng(1)
    D = np.arange(12.0).reshape(4, 3)
    vals = np.array([0.5, 1.5, 2.5])

    def f(w):
        P = r.permutation(D)
        return np.sum((P[:2] @ w) ** 2) + np.sum(w * r.choice(vals, 3))

    def df(w):
        P, c = t.permutation(D), t.choice(vals, 3)
        return 2 * P[:2].T @ (P[:2] @ w) + c

    g = rt.grad(f)
    for k in range(4):
        np.testing.assert_allclose(g(np.ones(3) * k), df(np.ones(3) * k), rtol=1e-14)
    assert g.cache_info().records == 1


def test_other_distributions_with_plain_parameters_are_refilled_inputs():
    # gamma, beta, poisson (integers), multivariate_normal, legacy laplace:
    # their numbers are tape inputs refilled by the same call each replay
    r, t = np.random.default_rng(6), np.random.default_rng(6)
    np.random.seed(6)
    L = np.random.RandomState(6)
    cov = np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.1], [0.0, 0.1, 0.5]])

    def draws(g, legacy):
        e = g.gamma(2.0, 0.5, size=3) * g.beta(2.0, 3.0)
        e = e + g.multivariate_normal(np.zeros(3), cov)
        e[0] += g.poisson(4.0)
        e[1] += legacy.laplace(1.0, 2.0)
        return e

    def f(w):
        e = r.gamma(2.0, 0.5, size=3) * r.beta(2.0, 3.0)
        e = e + r.multivariate_normal(np.zeros(3), cov)
        return np.sum(w * e) + w[0] * r.poisson(4.0) + w[1] * np.random.laplace(1.0, 2.0)

    g = rt.grad(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in range(4):
            np.testing.assert_allclose(g(X3 * k), draws(t, L), rtol=1e-14)
    assert g.cache_info().records == 1
    assert r.bit_generator.state == t.bit_generator.state


def test_scipy_rvs_with_a_reachable_random_state_is_compiled():
    # scipy checks isinstance(random_state, RandomState/Generator): the
    # stand-ins are both, and forward everything to the real generator
    st = pytest.importorskip("scipy.stats")
    rs, tw = np.random.RandomState(3), np.random.RandomState(3)
    rng, twin = np.random.default_rng(3), np.random.default_rng(3)

    def f(x):
        return (np.sum(x * st.norm.rvs(size=3, random_state=rs)) + x[0] * rs.randn()
                + np.sum(x * st.gamma.rvs(2.0, size=3, random_state=rng)))

    g = rt.grad(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            e = st.norm.rvs(size=3, random_state=tw)
            e[0] += tw.randn()
            e = e + st.gamma.rvs(2.0, size=3, random_state=twin)
            np.testing.assert_allclose(g(X3), e, rtol=1e-14)
    assert g.cache_info().records == 1
    assert str(rs.get_state()) == str(tw.get_state())


def test_legacy_choice_and_randint_indices_are_compiled():
    def f(x):
        i = np.random.choice(3, 2, replace=False)
        return np.sum(x[i] ** 2) + x[np.random.randint(0, 3)]

    def df(r, x):
        gr = np.zeros(3)
        i = r.choice(3, 2, replace=False)
        gr[i] += 2 * x[i]
        gr[r.randint(0, 3)] += 1.0
        return gr

    np.random.seed(8)
    twin = np.random.RandomState(8)
    g = rt.grad(f)
    for k in range(5):
        np.testing.assert_allclose(g(X3 * k), df(twin, X3 * k), rtol=1e-14)
    assert g.cache_info().records == 1


def test_drawn_indices_of_closure_and_attribute_arrays_are_compiled():
    # A[idx] on an array f reaches (closure, global, self.data): the gathered
    # rows are a tape input each replay refills by indexing A again -- as it
    # is then, so an in-place change of A is seen as a re-run would see it
    rng, twin = np.random.default_rng(5), np.random.default_rng(5)
    A = np.arange(10.0)
    h = _Holder(None)
    h.data = np.linspace(0.0, 1.0, 10)

    def f(x):
        i = rng.choice(10, 3)
        return np.sum(x * A[i]) + np.sum(x ** 2 * h.data[i])

    g = rt.grad(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in range(5):
            if k == 3:
                A[:] = A * 2                   # in place: the next replay reads it
            i = twin.choice(10, 3)
            np.testing.assert_array_equal(g(X3), A[i] + 2 * X3 * h.data[i])
    assert g.cache_info().records == 1
    assert rng.bit_generator.state == twin.bit_generator.state
    assert type(h.data) is np.ndarray          # put back


def test_drawn_indices_of_a_temporary_array_are_recorded_every_call_and_say_why():
    rng, twin = np.random.default_rng(5), np.random.default_rng(5)

    def f(x):
        return np.sum(x * np.arange(10.0)[rng.choice(10, 3)])

    g = rt.grad(f)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):
            np.testing.assert_array_equal(g(X3), np.arange(10.0)[twin.choice(10, 3)])
    (warn,) = [x for x in w if issubclass(x.category, rt.RandomDrawWarning)]
    assert "index a tracked array" in str(warn.message)
    assert "as an argument" in str(warn.message)
    assert g.cache_info().eager
    assert rng.bit_generator.state == twin.bit_generator.state


def test_a_data_gather_index_out_of_range_is_refused_by_the_vm_not_read():
    # the VM checks every index of a data gather on every sweep: values numpy's
    # indexing never makes (but a caller could write) stop the replay cleanly
    from revtape.core.ops import P
    t = rt.Tape()
    x = t.track(np.arange(6.0) ** 2)
    ix = t.track(np.array([5.0, 0.0, 2.0, 2.0]))
    t.finish(np.sum(P.take_idx(x, ix) ** 2))
    ct = rt.CompiledTape(t, n_grad=1)
    xs = np.arange(6.0) ** 2
    v, gr = ct.value_and_gradient((xs, np.array([1.0, 1, 3, 5])))
    assert v == np.sum(xs[[1, 1, 3, 5]] ** 2)
    np.testing.assert_array_equal(gr, np.bincount([1, 1, 3, 5], 2 * xs[[1, 1, 3, 5]], 6))
    for bad in (6.0, -1.0, 2.5, np.nan, np.inf, -np.inf, 1e300, 2.0 ** 63):
        with pytest.raises(rt.IndexInputError, match="not a whole number"):
            ct.value_and_gradient((xs, np.array([1.0, bad, 3, 5])))
        with pytest.raises(IndexError):
            t.value_and_gradient((xs, np.array([1.0, bad, 3, 5])))   # the reference agrees
    v2, _ = ct.value_and_gradient((xs, np.array([0.0, 1, 3, 5])))      # still usable
    assert v2 == np.sum(xs[[0, 1, 3, 5]] ** 2)


def test_threads_recording_draws_at_once_share_the_swaps_and_put_everything_back():
    import threading
    originals = {k: np.random.__dict__[k] for k in ("normal", "rand", "choice")}
    barrier = threading.Barrier(4)
    errors = []

    def worker(seed):
        try:
            rng, twin = np.random.default_rng(seed), np.random.default_rng(seed)

            def f(x):
                barrier.wait(timeout=10)       # every thread records at the same moment
                assert np.random.normal is not None    # names np.random: its functions swapped
                return np.sum((x - rng.normal(1.0, 2.0, 3)) ** 2)

            g = rt.grad(f)
            np.testing.assert_array_equal(g(X3), 2 * (X3 - twin.normal(1.0, 2.0, 3)))
            for _ in range(20):
                np.testing.assert_array_equal(g(X3), 2 * (X3 - twin.normal(1.0, 2.0, 3)))
            assert g.cache_info().records == 1
        except BaseException as e:          # reported below, in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k, v in originals.items():          # np.random's functions are numpy's again
        assert np.random.__dict__[k] == v and type(np.random.__dict__[k]) is type(v)


@pytest.mark.parametrize("make", [rt.GradientTape, rt.JacobianTape, rt.HessianTape])
def test_explicit_tapes_keep_draws_but_warn_with_site_and_how_to_silence(make):
    rng = np.random.default_rng(0)

    def f(x):
        return np.sum(x ** 2 * rng.standard_normal(3))

    line = f.__code__.co_firstlineno + 1
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        tape = make(f, X3)
    draws = [x for x in w if issubclass(x.category, rt.RandomDrawWarning)]
    assert len(draws) == 1
    msg = str(draws[0].message)
    assert f"{__file__}:{line}" in msg
    assert "filterwarnings" in msg and "RandomDrawWarning" in msg
    assert draws[0].filename == __file__           # the line that made the tape
    if make is rt.GradientTape:            # a recording: replays reuse the numbers
        e = np.random.default_rng(0).standard_normal(3)
        np.testing.assert_allclose(tape.gradient(X3), 2 * X3 * e)
        np.testing.assert_allclose(tape.gradient(X3), 2 * X3 * e)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=rt.RandomDrawWarning)
        make(f, X3)


def test_one_shot_helpers_use_this_runs_draws_without_warning():
    rng, twin = np.random.default_rng(12), np.random.default_rng(12)

    def f(x):
        return np.sum(x ** 3 * rng.standard_normal(3))

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        e = twin.standard_normal(3)
        np.testing.assert_allclose(rt.gradient(f, X3), 3 * X3 ** 2 * e)
        e = twin.standard_normal(3)
        v, gr = rt.value_and_gradient(f, X3)
        assert v == pytest.approx(np.sum(X3 ** 3 * e))
        e = twin.standard_normal(3)
        np.testing.assert_allclose(rt.hessian(f, X3), np.diag(6 * X3 * e))
        e = twin.standard_normal(3)
        np.testing.assert_allclose(rt.hvp(f, X3, np.ones(3)), 6 * X3 * e)
        e = twin.standard_normal(3)
        np.testing.assert_allclose(rt.jacobian(lambda x: x ** 2 * rng.standard_normal(3), X3),
                                   np.diag(2 * X3 * e))


# ---------------------------------------------------------------- 2. attribute guards

class Model:
    def __init__(s, y):
        s.y = y

    def logp(s, mu):
        return -0.5 * np.sum((s.y - mu) ** 2)


def test_issue_reproducer_rebinding_self_y():
    m = Model(np.array([1.0, 2, 3]))
    g = rt.grad(m.logp)
    assert g(0.0) == 6.0
    assert g(0.0) == 6.0
    assert g.cache_info().records == 1
    m.y = np.array([10.0, 20, 30])
    assert g(0.0) == 60.0


class Prior:
    def __init__(self, scale):
        self.scale = scale


class Hier:
    def __init__(self):
        self.prior = Prior(2.0)

    def logp(self, x):
        return -np.sum(x ** 2) / self.prior.scale


def test_nested_attribute_chain_and_scalar_equality():
    m = Hier()
    g = rt.grad(m.logp)
    np.testing.assert_allclose(g(X3), -X3)
    m.prior.scale = 4.0
    np.testing.assert_allclose(g(X3), -X3 / 2)
    m.prior = Prior(1.0)
    np.testing.assert_allclose(g(X3), -2 * X3)
    n = g.cache_info().records
    m.prior.scale = float("1.0")              # an equal value: nothing to re-record
    np.testing.assert_allclose(g(X3), -2 * X3)
    assert g.cache_info().records == n


class Slotted:
    __slots__ = ("w", "b")

    def __init__(self, w, b):
        self.w, self.b = w, b

    def __call__(self, x):
        return np.sum(self.w * x) + self.b * x[0]


def test_slots_and_callable_object():
    s = Slotted(np.array([1.0, 2.0, 3.0]), 1.0)
    g = rt.grad(s)
    np.testing.assert_allclose(g(X3), [2.0, 2.0, 3.0])
    s.w = np.array([0.0, 1.0, 0.0])
    np.testing.assert_allclose(g(X3), [1.0, 1.0, 0.0])
    s.b = 5.0
    np.testing.assert_allclose(g(X3), [5.0, 1.0, 0.0])


class WithProperty:
    def __init__(self, y):
        self._y = y

    @property
    def y(self):
        return self._y

    @property
    def y2(self):
        return self._y * 2.0          # a new array on every access

    def logp(self, x):
        return np.sum(x * self.y) + np.sum(x * self.y2)


def test_property_is_followed_not_frozen():
    m = WithProperty(np.array([1.0, 2.0, 3.0]))
    g = rt.grad(m.logp)
    for _ in range(3):
        np.testing.assert_allclose(g(X3), [3.0, 6.0, 9.0])
    assert g.cache_info().records == 1          # a fresh array from y2 is no change
    m._y = np.array([1.0, 0.0, 0.0])
    np.testing.assert_allclose(g(X3), [3.0, 0.0, 0.0])


def test_closure_captured_object_attribute():
    m = Model(np.array([1.0, 2.0, 3.0]))

    def f(mu):
        return -0.5 * np.sum((m.y - mu) ** 2)

    g = rt.grad(f)
    assert g(0.0) == 6.0
    m.y = np.array([10.0, 20, 30])
    assert g(0.0) == 60.0


CONFIG = Model(np.array([1.0, 2.0, 3.0]))


def _global_logp(mu):
    return -0.5 * np.sum((CONFIG.y - mu) ** 2)


def test_global_object_attribute():
    g = rt.grad(_global_logp)
    assert g(0.0) == 6.0
    CONFIG.y = np.array([10.0, 20, 30])
    try:
        assert g(0.0) == 60.0
    finally:
        CONFIG.y = np.array([1.0, 2.0, 3.0])


class Scaled:
    scale = 2.0

    def logp(self, x):
        return self.scale * np.sum(x ** 2)


def test_class_attribute_and_instance_shadowing():
    m = Scaled()
    g = rt.grad(m.logp)
    np.testing.assert_allclose(g(X3), 4 * X3)
    m.scale = 3.0                                  # shadows the class attribute
    np.testing.assert_allclose(g(X3), 6 * X3)
    other = Scaled()
    g2 = rt.grad(other.logp)
    g2(X3)
    Scaled.scale = 5.0
    try:
        np.testing.assert_allclose(g2(X3), 10 * X3)
    finally:
        Scaled.scale = 2.0


def test_attribute_of_a_static_argument_object():
    def f(x, model):
        return np.sum(x * model.y)

    m = Model(np.array([1.0, 2.0, 3.0]))
    g = rt.grad(f)
    np.testing.assert_allclose(g(X3, m), [1.0, 2.0, 3.0])
    m.y = np.array([3.0, 2.0, 1.0])
    np.testing.assert_allclose(g(X3, m), [3.0, 2.0, 1.0])


def test_function_stored_on_an_object_is_guarded_with_its_code():
    def square(v):
        return v ** 2

    class Glm:
        def __init__(self):
            self.link = square

        def loss(self, x):
            return np.sum(self.link(x))

    m = Glm()
    g = rt.grad(m.loss)
    np.testing.assert_allclose(g(X3), 2 * X3)
    old = square.__code__
    try:
        square.__code__ = (lambda v: v ** 3).__code__
        np.testing.assert_allclose(g(X3), 3 * X3 ** 2)
    finally:
        square.__code__ = old
    m.link = np.sin
    np.testing.assert_allclose(g(X3), np.cos(X3))


def test_objects_in_a_list_attribute():
    class Layer:
        def __init__(self, w):
            self.w = w

    class Net:
        def __init__(self):
            self.layers = [Layer(1.0), Layer(2.0)]

        def loss(self, x):
            out = x
            for layer in self.layers:
                out = out * layer.w
            return np.sum(out)

    net = Net()
    g = rt.grad(net.loss)
    np.testing.assert_allclose(g(X3), 2.0 * np.ones(3))
    net.layers[1].w = 3.0
    np.testing.assert_allclose(g(X3), 3.0 * np.ones(3))


# ---------------------------------------------------------------- 4. profilers and tracers

_FRESH = itertools.count()


def _fresh_f():
    # a default of its own: rt.grad shares programs between functions with the
    # same code and bindings, and these tests watch a first recording
    def traced_model(x, _k=next(_FRESH)):
        return np.sum(np.sin(x) ** 2)
    return traced_model


def _expected(x):
    return 2 * np.sin(x) * np.cos(x)


def _after_the_call():
    return None


def test_first_call_under_cprofile_and_the_profiler_keeps_collecting():
    f = _fresh_f()
    g = rt.grad(f)
    p = cProfile.Profile()
    p.enable()
    try:
        got = g(X3)
        _after_the_call()
    finally:
        p.disable()
    np.testing.assert_allclose(got, _expected(X3))
    names = {k[2] for k in pstats.Stats(p).stats}
    assert "traced_model" in names                 # the recording run was profiled too
    assert "_after_the_call" in names              # and the profiler is still on after it
    np.testing.assert_allclose(g(X3), _expected(X3))


def test_draws_are_seen_under_cprofile_too():
    rng, twin = np.random.default_rng(1), np.random.default_rng(1)
    g = rt.grad(lambda x: np.sum(x * rng.standard_normal(3)))
    p = cProfile.Profile()
    p.enable()
    try:
        got = [_quiet(g, X3) for _ in range(2)]
    finally:
        p.disable()
    for gr in got:
        np.testing.assert_allclose(gr, twin.standard_normal(3))


def test_first_call_under_the_pure_python_profiler():
    import profile

    f = _fresh_f()
    p = profile.Profile()
    got = p.runcall(rt.grad(f), X3)
    np.testing.assert_allclose(got, _expected(X3))
    assert "traced_model" in {k[2] for k in pstats.Stats(p).stats}


def test_first_call_under_a_python_profile_hook_chains_it():
    f = _fresh_f()
    seen = []

    def hook(frame, event, arg):
        if event == "call":
            seen.append(frame.f_code.co_name)

    sys.setprofile(hook)
    try:
        got = rt.grad(f)(X3)
        still = sys.getprofile()
    finally:
        sys.setprofile(None)
    np.testing.assert_allclose(got, _expected(X3))
    assert still is hook and "traced_model" in seen


def test_first_call_under_settrace_and_the_tracer_keeps_running():
    f = _fresh_f()
    events = []

    def local(frame, event, arg):
        events.append((frame.f_code.co_name, event))
        return local

    def tracer(frame, event, arg):
        events.append((frame.f_code.co_name, event))
        return local

    sys.settrace(tracer)
    try:
        got = rt.grad(f)(X3)
        still = sys.gettrace()
    finally:
        sys.settrace(None)
    np.testing.assert_allclose(got, _expected(X3))
    assert still is tracer
    assert ("traced_model", "call") in events and ("traced_model", "line") in events


def test_under_cprofile_and_a_tracer_together():
    f = _fresh_f()
    events = []

    def tracer(frame, event, arg):
        events.append(frame.f_code.co_name)
        return None

    p = cProfile.Profile()
    sys.settrace(tracer)
    p.enable()
    try:
        got = rt.grad(f)(X3)
        still = sys.gettrace()
    finally:
        p.disable()
        sys.settrace(None)
    np.testing.assert_allclose(got, _expected(X3))
    assert still is tracer and "traced_model" in events
    assert "traced_model" in {k[2] for k in pstats.Stats(p).stats}


def test_an_exception_in_f_leaves_every_hook_as_it_was():
    def hook(frame, event, arg):
        pass

    def bad(x):
        raise ValueError("inside f")

    sys.setprofile(hook)
    try:
        with pytest.raises(ValueError, match="inside f"):
            rt.grad(bad)(X3)
        with pytest.raises(ValueError, match="inside f"):
            rt.GradientTape(bad, X3)
        assert sys.getprofile() is hook
    finally:
        sys.setprofile(None)
    if sys.version_info >= (3, 12):
        assert all(sys.monitoring.get_tool(i) is None for i in range(6))


def test_recording_inside_a_coverage_like_tracer():
    lines = set()
    target = _fresh_f()

    def cover(frame, event, arg):
        if event == "line" and frame.f_code is target.__code__:
            lines.add(frame.f_lineno)
        return cover

    sys.settrace(cover)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            g = rt.grad(target)
            g(X3)
            tape = rt.GradientTape(target, X3)
    finally:
        sys.settrace(None)
    assert lines == {target.__code__.co_firstlineno + 1}
    np.testing.assert_allclose(tape.gradient(X3), _expected(X3))
    np.testing.assert_allclose(g(2 * X3), _expected(2 * X3))


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_monitoring_tool_ids_are_borrowed_and_returned():
    mon = sys.monitoring
    before = [mon.get_tool(i) for i in range(6)]
    f = _fresh_f()
    np.testing.assert_allclose(rt.grad(f)(X3), _expected(X3))
    assert [mon.get_tool(i) for i in range(6)] == before
    # every tool id held by someone else: recording still works, and a draw is seen
    taken = [i for i in range(6) if mon.get_tool(i) is None]
    for i in taken:
        mon.use_tool_id(i, "someone else")
    try:
        np.testing.assert_allclose(rt.grad(_fresh_f())(X3), _expected(X3))
        rng, twin = np.random.default_rng(8), np.random.default_rng(8)
        g = rt.grad(lambda x: np.sum(x * rng.standard_normal(3)))
        for _ in range(2):
            np.testing.assert_allclose(_quiet(g, X3), twin.standard_normal(3))
    finally:
        for i in taken:
            mon.free_tool_id(i)


def test_rt_grad_inside_a_recording():
    inner = rt.grad(lambda y: np.sum(y ** 3))

    def f(x):
        return np.sum(x * inner(np.array([1.0, 2.0])).sum())

    np.testing.assert_allclose(rt.grad(f)(X3), 15.0 * np.ones(3))
    assert sys.getprofile() is None and sys.gettrace() is None


def test_threads_recording_at_once():
    import threading

    def make(k):
        def f(x):
            y = x
            for _ in range(50):
                y = np.sin(y) + k
            return np.sum(y)
        return f

    def expected(k, x):
        y, d = x, np.ones_like(x)
        for _ in range(50):
            d = d * np.cos(y)
            y = np.sin(y) + k
        return d

    errors = []

    def work(k):
        try:
            for j in range(4):
                np.testing.assert_allclose(rt.grad(make(k))(X3 + j), expected(k, X3 + j),
                                           rtol=1e-12)
        except Exception as e:          # reported below, in the main thread
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert sys.getprofile() is None and sys.gettrace() is None


# ---------------------------------------------------------------- 6. first call: no heap scan

def _helper(x):
    return np.sum(x ** 2)


def _uses_helper(x):
    return _helper(x) + Terms().term(x)


class Terms:
    def term(self, x):
        return np.sum(x)


def test_first_call_does_not_scan_the_heap_and_still_sees_code_swaps(monkeypatch):
    def no_scan(*a):
        raise AssertionError("gc.get_referrers scans the whole heap")

    monkeypatch.setattr(gc, "get_referrers", no_scan)
    g = rt.grad(_uses_helper)
    np.testing.assert_allclose(g(X3), 2 * X3 + 1)
    old_helper, old_term = _helper.__code__, Terms.term.__code__
    try:
        _helper.__code__ = (lambda x: np.sum(x ** 3)).__code__
        np.testing.assert_allclose(g(X3), 3 * X3 ** 2 + 1)
        Terms.term.__code__ = (lambda self, x: np.sum(2 * x)).__code__
        np.testing.assert_allclose(g(X3), 3 * X3 ** 2 + 2)
    finally:
        _helper.__code__, Terms.term.__code__ = old_helper, old_term


def test_the_warning_for_draws_that_cannot_stay_on_the_tape_points_at_the_call():
    # the second recording (plain draws, after float() refused a tracked draw)
    # warns from deeper inside revtape: the warning still names the user's line
    rng = np.random.default_rng(0)

    def f(x):
        return np.sum(x) * float(rng.normal(size=3)[0])

    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        rt.grad(f)(X3)
    (draw,) = [x for x in w if issubclass(x.category, rt.RandomDrawWarning)]
    assert "could not stay on the tape" in str(draw.message)
    assert draw.filename == __file__
