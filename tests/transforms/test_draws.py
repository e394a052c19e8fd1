"""Random draws in rt.grad's compiled replays (src/revtape/transforms/draws.py):
draws are never frozen -- recorded on every call where they cannot stay on
the tape, compiled as fresh inputs where they can, from any generator f
reaches, with one warning naming the draw site."""

import random
import warnings

import numpy as np
import pytest

import revtape as rt
from conftest import quiet_draws as _quiet

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
    # the in-place change re-records once: A is guarded by its contents too,
    # since a use of A other than the drawn gather would be baked into the tape
    assert g.cache_info().records == 2
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
