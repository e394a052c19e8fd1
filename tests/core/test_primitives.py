"""Custom primitives (@rt.primitive, rt.defvjp, rt.defjvp) and rt.stop_gradient,
from the user's side: gradients against the built-in ops, analytic formulas
and finite differences; compiled, deep-copied, pickled to another process,
used from threads; errors raised inside callbacks; Hessians; rt.grad's
re-recording when a rule is redefined."""

import copy
import gc
import multiprocessing
import pickle
import threading

import numpy as np
import pytest

import revtape as rt
from conftest import check_grad

import conftest as H     # module-level primitives: spawned workers import them by name

XS = [np.array([0.3, -1.2, 0.8]), np.array([2.0, 0.1, -0.4]), np.array([-3.0, 5.0, 1.5])]


def _same(a, b):
    """Bit for bit equal (values and gradients, nested in tuples)."""
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return np.array_equal(np.asarray(a), np.asarray(b))


def _close(a, b, rtol=1e-12):
    return np.allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=1e-14)


# ---------------------------------------------------------------- the logsumexp primitive

def test_primitive_matches_the_builtin_in_every_replay():
    x0 = np.array([0.1, 0.2, -0.3])
    tape = rt.GradientTape(H.model, x0)
    builtin = rt.compile(rt.GradientTape(H.model_builtin, x0))
    ctape = rt.compile(tape)
    for x in XS:                          # none of them is the recording point
        v_ref, g_ref = builtin.value_and_gradient(x)
        for v, g in (tape.value_and_gradient(x), ctape.value_and_gradient(x),
                     rt.value_and_gradient(H.model, x)):
            assert _close(v, v_ref) and _close(g, g_ref)
    # elementwise math and sums round alike in C and numpy (matmul does not),
    # and the callbacks run the same Python: the two replays agree to the bit
    f = lambda x: H.logsumexp(2.0 * x) - 0.5 * np.sum(x ** 2)
    tape = rt.GradientTape(f, x0)
    ctape = rt.compile(tape)
    for x in XS:
        assert _same(tape.value_and_gradient(x), ctape.value_and_gradient(x))
    check_grad(H.model, XS[0])


def test_one_instruction_per_call_and_stats_count_callbacks():
    tape = rt.GradientTape(H.model, XS[0])
    names = [op.name for op, *_ in tape._instrs]
    assert names.count("pycall") == 2
    assert tape.stats()["callback_instructions"] == 2
    ctape = rt.compile(tape)
    stats = ctape.stats()
    assert stats["callback_instructions"] == 2
    assert stats["program_instructions"] == len(ctape)
    text = ctape.disassemble()
    assert text.count("PYCALL") == 2 and "logsumexp" in text and "calls back into Python" in text
    plain = rt.compile(rt.GradientTape(H.model_builtin, XS[0]))
    assert plain.stats()["callback_instructions"] == 0


def test_the_vjp_sees_each_replays_values_not_the_recordings():
    # ReverseDiff #187: a pullback closed over the recording's x gives the
    # recording's gradient after replay.  The maker must get this replay's x and ans.
    seen = []

    @rt.primitive
    def cube(x):
        return x ** 3

    def vjp(ans, x):
        seen.append((ans, x))
        return lambda g: g * 3.0 * x ** 2

    rt.defvjp(cube, vjp)
    ctape = rt.compile(rt.GradientTape(lambda x: cube(x) + 1.0, 2.0))
    for x in (1.5, -0.5, 3.0):
        seen.clear()
        v, g = ctape.value_and_gradient(x)
        assert v == x ** 3 + 1.0 and g == 3.0 * x ** 2
        assert seen == [(x ** 3, x)]
    # a forward-only replay never calls the VJP maker
    seen.clear()
    assert ctape.forward(2.5) == 2.5 ** 3 + 1.0 and seen == []


def test_plain_values_pass_through_and_static_arguments_are_kept():
    @rt.primitive
    def scaled_sum(x, scale, mode="plain"):
        assert type(x) is np.ndarray and mode in ("plain", "squared")
        return scale * np.sum(x ** 2 if mode == "squared" else x)

    rt.defvjp(scaled_sum, lambda ans, x, scale, mode="plain":
              lambda g: g * scale * (2 * x if mode == "squared" else np.ones_like(x)), None)
    x = np.array([1.0, 2.0])
    assert scaled_sum(x, 3, mode="squared") == 15.0          # untracked: just the function
    f = lambda x: scaled_sum(x, 3, mode="squared")
    ctape = rt.compile(rt.GradientTape(f, x))
    assert _same(ctape.gradient(np.array([0.5, -1.0])), np.array([3.0, -6.0]))


def test_none_marks_an_argument_not_differentiable_and_a_missing_vjp_is_named():
    @rt.primitive
    def mul(x, y):
        return x * y

    rt.defvjp(mul, lambda ans, x, y: lambda g: g * y, None)
    g = rt.gradient(lambda x, y: mul(x, y), (2.0, 5.0))
    assert g == (5.0, 0.0)
    ctape = rt.compile(rt.GradientTape(lambda x, y: mul(x, y), (2.0, 5.0)))
    assert ctape.gradient((3.0, 4.0)) == (4.0, 0.0)

    @rt.primitive
    def novjp(x):
        return 2.0 * x

    with pytest.raises(rt.UnsupportedError, match=r"novjp has no VJP for argument 0.*defvjp"):
        rt.gradient(lambda x: novjp(x) + x, 1.0)
    ctape = rt.compile(rt.GradientTape(lambda x: novjp(x) + x, 1.0))
    assert ctape.forward(3.0) == 9.0                   # forward needs no rule
    with pytest.raises(rt.UnsupportedError, match="novjp has no VJP"):
        ctape.gradient(3.0)


def test_a_vjp_returning_the_wrong_shape_is_refused_by_name():
    @rt.primitive
    def bad(x):
        return np.sum(x)

    rt.defvjp(bad, lambda ans, x: lambda g: np.ones(len(x) + 1))
    ctape = rt.compile(rt.GradientTape(lambda x: bad(x), np.ones(3)))
    with pytest.raises(rt.UnsupportedError, match="bad"):
        ctape.gradient(np.ones(3))
    assert ctape.forward(np.ones(3)) == 3.0


def test_a_primitive_changing_its_output_shape_at_replay_is_refused():
    @rt.primitive
    def head(x):
        return x[: int(x[0] > 0) + 1]

    rt.defvjp(head, lambda ans, x: lambda g: np.zeros_like(x))
    ctape = rt.compile(rt.GradientTape(lambda x: np.sum(head(x)), np.array([1.0, 2.0, 3.0])))
    with pytest.raises(rt.UnsupportedError, match=r"head returned shape \(1,\).*\(2,\)"):
        ctape.forward(np.array([-1.0, 2.0, 3.0]))


def test_tracked_keyword_arguments_and_containers_are_refused():
    @rt.primitive
    def f(x, y=0.0):
        return x + y

    with pytest.raises(rt.UnsupportedError, match="keyword argument 'y'.*positionally"):
        rt.gradient(lambda x: f(1.0, y=x), 2.0)

    @rt.primitive
    def g(xs):
        return sum(xs)

    with pytest.raises(rt.UnsupportedError, match="container"):
        rt.gradient(lambda x: g([x, x]), 2.0)


def test_defvjp_needs_a_primitive():
    with pytest.raises(rt.UnsupportedError, match="@rt.primitive"):
        rt.defvjp(np.sin, lambda ans, x: lambda g: g)


# ---------------------------------------------------------------- exceptions inside callbacks

def test_exceptions_raised_in_callbacks_propagate_and_leave_the_tape_usable():
    class Boom(Exception):
        pass

    @rt.primitive
    def picky(x):
        if x[0] > 10:
            raise Boom("forward refused")
        return np.sum(x ** 2)

    def vjp(ans, x):
        if x[0] < -10:
            raise Boom("vjp refused")
        return lambda g: 2.0 * g * x

    rt.defvjp(picky, vjp)
    ctape = rt.compile(rt.GradientTape(lambda x: picky(x) + np.sum(x), np.ones(2)))
    good = np.array([1.0, 2.0])
    expected = ctape.value_and_gradient(good)
    for bad, msg in ((np.array([11.0, 0.0]), "forward refused"),
                     (np.array([-11.0, 0.0]), "vjp refused")):
        with pytest.raises(Boom, match=msg):
            ctape.value_and_gradient(bad)
        assert _same(ctape.value_and_gradient(good), expected)       # still usable
    with pytest.raises(Boom, match="forward refused"):
        ctape.forward(np.array([11.0, 0.0]))
    with pytest.raises(Boom, match="forward refused"):
        ctape.batch_value_and_gradient(np.array([[1.0, 0.0], [11.0, 0.0]]))
    x, g = good.copy(), np.empty(2)
    run = ctape.bind(x, g)
    assert run() == expected[0]
    x[0] = 12.0
    with pytest.raises(Boom):
        run()
    x[0] = 1.0
    assert run() == expected[0] and _same(g, expected[1])


# ---------------------------------------------------------------- copies, pickles, threads

def test_deepcopy_copies_the_callback_table():
    ctape = rt.compile(rt.GradientTape(H.model, XS[0]))
    expected = [ctape.value_and_gradient(x) for x in XS]
    dup = copy.deepcopy(ctape)
    assert dup._table is not ctape._table and dup._ws is not ctape._ws
    assert dup._ws.vals is dup._vals                   # callbacks run on the copy's arena
    del ctape
    gc.collect()
    for x, e in zip(XS, expected):
        assert _same(dup.value_and_gradient(x), e)


def test_pickle_to_a_spawned_process():
    ctape = rt.compile(rt.GradientTape(H.model, XS[0]))
    expected = [ctape.value_and_gradient(x) for x in XS]
    payload = pickle.dumps(ctape)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        got = pool.apply(H.replay_pickled, (payload, XS))
    for (v, g), (ve, ge) in zip(got, expected):
        assert v == ve and _same(g, ge)


def test_primitives_pickle_by_qualified_name():
    assert pickle.loads(pickle.dumps(H.logsumexp)) is H.logsumexp
    assert copy.deepcopy(H.logsumexp) is H.logsumexp

    @rt.primitive
    def local(x):
        return x

    rt.defvjp(local, lambda ans, x: lambda g: g)
    tape = rt.GradientTape(lambda x: local(x) * 2.0, 1.0)
    with pytest.raises(rt.UnsupportedError, match="module level"):
        pickle.dumps(rt.compile(tape))


def test_threads_with_their_own_deep_copies():
    ctape = rt.compile(rt.GradientTape(H.model, XS[0]))
    rng = np.random.default_rng(5)
    points = rng.normal(size=(200, 3))
    expected = [ctape.value_and_gradient(x) for x in points]
    results, errors = {}, []

    def work(k, ct):
        try:
            results[k] = [ct.value_and_gradient(x) for x in points]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k, copy.deepcopy(ctape))) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for k in range(4):
        for (v, g), (ve, ge) in zip(results[k], expected):
            assert v == ve and _same(g, ge)


# ---------------------------------------------------------------- forward mode and Hessians

def test_jvp_uses_defjvp_and_refuses_without_it():
    x0, v = XS[0], np.array([0.5, -1.0, 2.0])
    with_jvp = rt.compile(rt.GradientTape(H.model_fwd, x0))
    g = with_jvp.gradient(XS[1])
    assert _close(with_jvp.jvp(XS[1], v), g @ v)
    without = rt.compile(rt.GradientTape(H.model, x0))
    with pytest.raises(rt.UnsupportedError, match=r"logsumexp has no forward-mode rule.*defjvp"):
        without.jvp(XS[1], v)
    assert _same(without.gradient(XS[1]), without.gradient(XS[1]))    # still usable


@pytest.mark.parametrize("model", [H.model, H.model_fwd], ids=["vjp-only", "with-jvp"])
def test_hessians_through_a_primitive_with_a_differentiable_vjp(model):
    x0 = XS[0]
    h_ref = rt.compile(rt.GradientTape(H.model_builtin, x0)).hessian(XS[1])
    tape = rt.GradientTape(model, x0)
    ctape = rt.compile(tape)
    assert _close(tape.hessian(XS[1]), h_ref, 1e-10)           # reverse over reverse
    assert _close(ctape.hessian(XS[1]), h_ref, 1e-10)          # compiled
    assert _close(rt.hessian(model, XS[1]), h_ref, 1e-10)      # one-shot
    v = np.array([1.0, 2.0, -0.5])
    assert _close(ctape.hvp(XS[1], v), h_ref @ v, 1e-10)
    assert _close(rt.HessianTape(model, x0).hvp(XS[1], v), h_ref @ v, 1e-10)


def test_hessian_through_a_black_box_vjp_is_refused_naming_the_primitive():
    def external_gradient(x):                   # a library that wants plain arrays
        return 2.0 * np.asarray(x, dtype=np.float64)

    @rt.primitive
    def blackbox(x):
        return float(np.sum(x ** 2))

    rt.defvjp(blackbox, lambda ans, x: lambda g: g * external_gradient(x))
    f = lambda x: blackbox(x) + np.sum(np.sin(x))
    ctape = rt.compile(rt.GradientTape(f, np.ones(2)))
    assert _close(ctape.gradient(np.array([0.5, 1.0])), 2 * np.array([0.5, 1.0]) + np.cos([0.5, 1.0]))
    for hess in (lambda: rt.hessian(f, np.ones(2)), lambda: ctape.hessian(np.ones(2)),
                 lambda: ctape.hvp(np.ones(2), np.ones(2))):
        with pytest.raises(rt.UnsupportedError, match=r"through primitive .*blackbox.*differentiable"):
            hess()


# ---------------------------------------------------------------- rt.grad and redefinitions

def test_redefining_the_vjp_under_rt_grad_re_records():
    # Zygote #22: derivative code cached before a rule was redefined must not be used after.
    @rt.primitive
    def square(x):
        return x * x

    rt.defvjp(square, lambda ans, x: lambda g: 2.0 * g * x)
    df = rt.grad(lambda x: np.sum(square(x)))
    x = np.array([1.0, -2.0])
    assert _same(df(x), 2 * x)
    assert _same(df(x), 2 * x)
    info = df.cache_info()
    assert info.records == 1 and info.replays == 1
    rt.defvjp(square, lambda ans, x: lambda g: 3.0 * g * x)     # a deliberately different rule
    assert _same(df(x), 3 * x)
    info = df.cache_info()
    assert info.records == 2 and info.stale == 1
    df_raise = rt.grad(lambda x: np.sum(square(x)), on_stale="raise")
    df_raise(x)
    rt.defvjp(square, lambda ans, x: lambda g: 2.0 * g * x)
    with pytest.raises(rt.StaleTape):
        df_raise(x)


def test_rebinding_a_primitives_name_under_rt_grad_re_records():
    namespace = {"np": np, "rt": rt}
    exec("@rt.primitive\ndef p(x):\n    return x * x\n"
         "rt.defvjp(p, lambda ans, x: lambda g: 2.0 * g * x)\n"
         "def f(x):\n    return np.sum(p(x))\n", namespace)
    df = rt.grad(namespace["f"])
    x = np.array([1.0, 3.0])
    assert _same(df(x), 2 * x)
    exec("@rt.primitive\ndef p(x):\n    return 2.0 * x * x\n"
         "rt.defvjp(p, lambda ans, x: lambda g: 4.0 * g * x)\n", namespace)
    assert _same(df(x), 4 * x) and df.cache_info().records == 2


def test_rt_grad_through_a_primitive_replays_compiled():
    df = rt.value_and_grad(H.model)
    for x in XS:
        v, g = df(x)
        ve, ge = rt.compile(rt.GradientTape(H.model_builtin, XS[0])).value_and_gradient(x)
        assert _close(v, ve) and _close(g, ge)
    assert df.cache_info().records == 1


# ---------------------------------------------------------------- black-box log densities

class ExternalModel:
    """Stands in for a compiled model or an ODE solver with its own adjoint: it
    takes plain float64 arrays and returns (log density, gradient) in one call."""

    def __init__(self):
        self.calls = 0
        self.mu = np.array([1.0, -2.0, 0.5])

    def value_and_grad(self, theta):
        theta = np.asarray(theta, dtype=np.float64)
        self.calls += 1
        r = theta - self.mu
        return -0.5 * float(r @ r), -r


EXT = ExternalModel()
_LAST = [None]


def _ext_value_and_grad(theta):
    # one external call per point: the forward and the VJP of one replay ask
    # at the same theta; the key is the point itself, never a stale value
    key = theta.tobytes()
    hit = _LAST[0]
    if hit is None or hit[0] != key:
        hit = (key, EXT.value_and_grad(theta))
        _LAST[0] = hit
    return hit[1]


@rt.primitive
def external_logp(theta):
    return _ext_value_and_grad(theta)[0]


rt.defvjp(external_logp, lambda ans, theta: lambda g: g * _ext_value_and_grad(theta)[1])


def test_black_box_log_density_recipe_inside_a_larger_model():
    def logp(x):
        theta = x[:3]
        log_sigma = x[3]
        prior = -0.5 * np.sum(theta ** 2) / np.exp(2 * log_sigma) - 3 * log_sigma - 0.5 * log_sigma ** 2
        return external_logp(theta) + prior

    def analytic(x):
        theta, s = x[:3], x[3]
        g = np.empty(4)
        g[:3] = -(theta - EXT.mu) - theta / np.exp(2 * s)
        g[3] = np.sum(theta ** 2) / np.exp(2 * s) - 3 - s
        return g

    x0 = np.array([0.1, 0.2, 0.3, 0.0])
    ctape = rt.compile(rt.GradientTape(logp, x0))
    rng = np.random.default_rng(3)
    for _ in range(5):
        x = rng.normal(size=4)
        before = EXT.calls
        v, g = ctape.value_and_gradient(x)
        assert EXT.calls == before + 1               # one external call per gradient
        assert _close(g, analytic(x), 1e-11)
    check_grad(logp, rng.normal(size=4))
    X = rng.normal(size=(6, 4))
    vs, gs = ctape.batch_value_and_gradient(X)
    for x, gi in zip(X, gs):
        assert _close(gi, analytic(x), 1e-11)


# ---------------------------------------------------------------- stop_gradient

def test_stop_gradient_passes_the_value_and_blocks_the_gradient():
    def f(x):
        return np.sum(rt.stop_gradient(x) * x) + rt.stop_gradient(x[0]) * x[1]

    x0 = np.array([1.0, 2.0, 3.0])
    tape = rt.GradientTape(f, x0)
    ctape = rt.compile(tape)
    for x in (x0, np.array([-0.5, 4.0, 0.25])):
        expected = x.copy()
        expected[1] += x[0]
        v = np.sum(x * x) + x[0] * x[1]
        for vi, gi in (tape.value_and_gradient(x), ctape.value_and_gradient(x)):
            assert vi == v and _same(gi, expected)
    assert "STOP_GRADIENT" in ctape.disassemble()
    # second order, as in JAX: the gradient is stop_gradient(x) + ..., a
    # value with no derivative, so the Hessian is zero
    assert _same(ctape.hessian(x0), np.zeros((3, 3)))
    assert _same(tape.hessian(x0), np.zeros((3, 3)))
    assert _same(ctape.jvp(x0, np.ones(3)), float(np.sum(x0) + x0[0]))


def test_stop_gradient_on_plain_values_and_containers():
    x = np.array([1.0, 2.0])
    assert rt.stop_gradient(x) is x and rt.stop_gradient(2.0) == 2.0
    g = rt.gradient(lambda x: sum(rt.stop_gradient({"a": x[0], "b": [x[1]]})["b"]) * x[0]
                    + x[1], x)
    assert _same(g, np.array([2.0, 1.0]))


# ---------------------------------------------------------------- array outputs, Jacobians

@rt.primitive
def softmax(x):
    e = np.exp(x - np.max(x))
    return e / np.sum(e)


rt.defvjp(softmax, lambda ans, x: lambda g: ans * (g - np.sum(g * ans)))
rt.defjvp(softmax, lambda t, ans, x: ans * (t - np.sum(t * ans)))


def test_array_valued_primitive_jacobians_in_both_modes():
    from conftest import fd_jacobian
    f = lambda x: softmax(np.sin(x)) * 3.0
    x = np.array([0.3, -0.2, 1.1, 0.5])
    jt = rt.JacobianTape(f, np.zeros(4))
    ct = rt.compile(jt)
    J = fd_jacobian(lambda z: 3.0 * (np.exp(np.sin(z)) / np.sum(np.exp(np.sin(z)))), x)
    assert np.allclose(jt.jacobian(x), J, atol=1e-8)
    assert np.allclose(ct.jacobian(x), J, atol=1e-8)
    v = np.array([1.0, -1.0, 0.5, 2.0])
    assert np.allclose(ct.jvp(x, v), J @ v, atol=1e-8)
    Y = ct.batch_forward(np.stack([x, 2 * x]))
    assert np.array_equal(Y[0], ct.forward(x)) and np.array_equal(Y[1], ct.forward(2 * x))


def test_the_verifier_refuses_callbacks_without_a_table():
    import dataclasses
    tape = rt.GradientTape(H.model, XS[0])
    prog = rt.compile(tape).program
    from revtape.runtime.compiled import CompiledTape
    with pytest.raises(rt.VerificationError, match="calls back into Python but has no callback"):
        CompiledTape(tape, _program=dataclasses.replace(prog, callbacks=[]))
    with pytest.raises(rt.VerificationError, match="callback slot 1 is outside"):
        CompiledTape(tape, _program=dataclasses.replace(prog, callbacks=prog.callbacks[:1]))


def test_static_array_arguments_are_captured_by_value():
    @rt.primitive
    def weighted(x, w):
        return float(np.dot(x, w))

    rt.defvjp(weighted, lambda ans, x, w: lambda g: g * w, None)
    w = np.array([1.0, 2.0])
    ctape = rt.compile(rt.GradientTape(lambda x: weighted(x, w), np.ones(2)))
    w[:] = 100.0                         # as for any constant a tape records
    assert ctape.value_and_gradient(np.ones(2))[0] == 3.0
    assert _same(ctape.gradient(np.ones(2)), np.array([1.0, 2.0]))


@rt.primitive
def weighted_lse(x, w):
    """log sum w * exp(x), two differentiable arguments."""
    m = np.max(x)
    return m + np.log(np.sum(w * np.exp(x - m)))


rt.defvjp(weighted_lse, lambda ans, x, w: lambda g: g * w * np.exp(x - ans),
          lambda ans, x, w: lambda g: g * np.exp(x - ans))
rt.defjvp(weighted_lse, lambda t, ans, x, w: np.sum(t * w * np.exp(x - ans)), argnums=[0])
rt.defjvp(weighted_lse, lambda t, ans, x, w: np.sum(t * np.exp(x - ans)), argnums=[1])


def test_two_differentiable_arguments_in_every_mode():
    def f(x, w):
        return weighted_lse(np.sin(x), w) * 2.0

    def plain(x, w):
        return 2.0 * np.log(np.sum(w * np.exp(np.sin(x))))

    x = np.array([0.3, -0.7, 1.1])
    w = np.array([0.5, 1.5, 2.0])
    check_grad(f, (x, w))
    ctape = rt.compile(rt.GradientTape(f, (x * 0.5, w * 0.5)))
    gx, gw = ctape.gradient((x, w))
    rgx, rgw = rt.gradient(f, (x, w))
    assert _close(gx, rgx) and _close(gw, rgw)
    vx, vw = np.array([1.0, 0.0, -1.0]), np.array([0.2, 0.1, 0.3])
    assert _close(ctape.jvp((x, w), (vx, vw)), gx @ vx + gw @ vw)
    # Hessian blocks of a tuple input: compiled (tangent sweeps, both JVPs
    # defined) against the reference (reverse over reverse), and a
    # finite-difference check of one block
    H_c = rt.compile(rt.HessianTape(f, (x * 0.5, w * 0.5))).hessian((x, w))
    H_r = rt.hessian(f, (x, w))
    for i in range(2):
        for j in range(2):
            assert _close(H_c[i][j], H_r[i][j], 1e-9)
    h = 1e-5
    fd = np.stack([(rt.gradient(plain, (x, w + h * e))[0] - rt.gradient(plain, (x, w - h * e))[0])
                   / (2 * h) for e in np.eye(3)], axis=1)
    assert np.allclose(H_r[0][1], fd, atol=1e-6)
