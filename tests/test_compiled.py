"""Compiled tapes: the flat program, the C VM and its verifier, compared with
the reference replay; copies, pickles, threads and memory."""

import concurrent.futures as cf
import copy
import gc
import multiprocessing
import os
import pickle
import resource
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import revtape as rt
from revtape import compiler, ops
from revtape import workloads
from revtape import special as sps   # revtape's own: works without scipy installed

RNG = np.random.default_rng(42)


def _fns():
    W = RNG.normal(size=(4, 3))
    return {
        "elementwise": (lambda x: np.sum(np.exp(x) * np.sin(x) + np.log1p(x ** 2) / (2 + np.cos(x))), 4),
        "special": (lambda x: np.sum(sps.gammaln(np.exp(x)) + sps.digamma(2 + x ** 2)
                                     + sps.log_expit(x) + sps.erf(x) + sps.xlogy(x ** 2, 1 + x ** 2)), 4),
        "broadcast": (lambda x: np.sum(x.reshape(2, 2) * x[:2] + x[2] - x.reshape(2, 2).T), 4),
        "matmul": (lambda x: np.sum(np.tanh(W @ x[:3])) + x[:3] @ x[:3] + np.sum(x[:4] @ W), 4),
        "reduce": (lambda x: np.sum(np.max(x.reshape(2, 3), axis=0) * np.min(x.reshape(2, 3), axis=1,
                                                                             keepdims=True))
                   + sps.logsumexp(x.reshape(3, 2), axis=0).sum() + np.prod(x.reshape(3, 2), axis=1).sum(), 6),
        "select": (lambda x: np.sum(np.where(x > 0, np.sqrt(np.abs(x)), x ** 3))
                   + np.sum(np.clip(x, -0.5, 0.5)) + np.sum(np.maximum(x, 0.2)), 5),
        "index": (lambda x: np.sum(x[::-1] * x[[0, 0, 2, 4, 4]]) + x[1] * x[-1]
                  + np.sum(np.concatenate([x[:2], x[3:]]) ** 2) + np.sum(np.stack([x, x ** 2], axis=1)[:, 1]), 5),
        "scalar_loop": (lambda x: sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(4)), 5),
        "pow": (lambda x: np.sum(np.abs(x) ** x[0]) + np.sum((1 + x ** 2) ** 1.5) + 2.0 ** x[1], 3),
    }


FNS = _fns()


@pytest.mark.parametrize("name", sorted(FNS))
def test_compiled_replay_equals_reference_replay(name):
    f, n = FNS[name]
    x0 = RNG.normal(size=n) * 0.7
    tape = rt.GradientTape(f, x0)
    ctape = rt.compile(tape)
    for _ in range(3):
        x = x0 + 0.05 * RNG.normal(size=n)
        try:
            v_ref, g_ref = tape.value_and_gradient(x)
        except rt.BranchChanged:
            continue
        v, g = ctape.value_and_gradient(x)
        assert v == pytest.approx(v_ref, rel=1e-12, abs=1e-12)
        np.testing.assert_allclose(g, g_ref, rtol=1e-12, atol=1e-12)
        # and against a fresh recording at x
        np.testing.assert_allclose(g, rt.gradient(f, x), rtol=1e-12, atol=1e-12)
        assert rt.value(tape.output) == pytest.approx(v_ref)


@pytest.mark.parametrize("name", sorted(FNS))
def test_hessians_by_tangent_sweeps_equal_the_reference_reverse_over_reverse(name):
    # C: forward-over-reverse (tangent sweeps over the gradient program);
    # Python reference: reverse sweeps over the same HessianTape.
    f, n = FNS[name]
    x0 = RNG.normal(size=n) * 0.7
    ht = rt.HessianTape(f, x0)
    ch = rt.compile(ht)
    for _ in range(2):
        x = x0 + 0.05 * RNG.normal(size=n)
        try:
            H_ref = ht.hessian(x)
        except rt.BranchChanged:
            continue
        H = ch.hessian(x)
        np.testing.assert_allclose(H, H_ref, rtol=1e-11, atol=1e-11)
        np.testing.assert_allclose(H, H.T, rtol=1e-11, atol=1e-11)
        v = RNG.normal(size=n)
        np.testing.assert_allclose(ch.hvp(x, v), H_ref @ v, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("name", sorted(FNS))
def test_jvp_is_the_jacobian_times_v(name):
    f, n = FNS[name]
    g = lambda x: np.stack([f(x), f(x) * x[0], np.sin(f(x))])    # a vector output
    x0 = RNG.normal(size=n) * 0.7
    jt = rt.JacobianTape(g, x0)
    cj = rt.compile(jt)
    x = x0 + 0.05 * RNG.normal(size=n)
    try:
        J = jt.jacobian(x)
    except rt.BranchChanged:
        return
    v = RNG.normal(size=n)
    np.testing.assert_allclose(cj.jvp(x, v), J @ v, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(cj.jvp(x, np.eye(n)[1]), J[:, 1], rtol=1e-12, atol=1e-12)


def test_jvp_of_tuple_inputs_and_bad_tangents():
    f = lambda a, b: np.stack([np.sum(a * b), a[0] ** 2 * b])
    ct = rt.compile(rt.JacobianTape(f, (np.array([1.0, 2.0]), 3.0)))
    a, b = np.array([0.5, -1.0]), 2.0
    assert np.allclose(ct.jvp((a, b), (np.array([1.0, 0.0]), 0.0)), [b, 2 * a[0] * b])
    assert np.allclose(ct.jvp((a, b), (np.zeros(2), 1.0)), [np.sum(a), a[0] ** 2])
    with pytest.raises(rt.InputError):
        ct.jvp((a, b), np.ones(3))                   # not one tangent per input
    # a nan tangent is a value (it reaches exactly the outputs that depend on it)
    np.testing.assert_array_equal(ct.jvp((a, b), (np.array([np.nan, 0.0]), 0.0)), [np.nan, np.nan])
    with pytest.raises(rt.OutputError):
        rt.compile(rt.HessianTape(lambda x: np.sum(x ** 3), np.ones(2))).jvp(np.ones(2), np.ones(2))
    sq = rt.compile(rt.JacobianTape(lambda x: x ** 2, np.ones(3)))
    np.testing.assert_array_equal(sq.jvp(np.arange(3.0), np.ones(3)), [0.0, 2.0, 4.0])
    for bad in (np.ones(2), np.ones((3, 1))):
        with pytest.raises(rt.InputError):
            sq.jvp(np.ones(3), bad)
    np.testing.assert_array_equal(sq.jvp(np.ones(3), np.array([np.inf, 0.0, 0.0])), [np.inf, 0, 0])


def test_a_zero_tangent_never_becomes_nan_through_an_infinite_partial():
    # d sqrt(x1) / d x1 is inf at 0, but the tangent along x0 does not touch x1
    f = lambda x: np.stack([np.sqrt(x[1]) + x[0], x[0] * 2.0])
    ct = rt.compile(rt.JacobianTape(f, np.array([1.0, 1.0])))
    np.testing.assert_array_equal(ct.jvp(np.array([1.0, 0.0]), np.array([1.0, 0.0])), [1.0, 2.0])


# Only correctly rounded arithmetic (+ - * / sqrt) here, so that "bit for bit"
# tests the order of the adjoint sums and nothing else: numpy's own SIMD
# exp/sin/cos (numpy >= 2) differ from libm in the last bit for some inputs
# (np.exp for ~5% of uniform(-5, 5) draws on numpy 2.4), and the C VM calls libm.
@pytest.mark.parametrize("f", [
    lambda x: (np.sum(np.sqrt(x * x + 1.0)) + x[0] * x[1] + np.sum(x * x / (1.0 + x * x)) * x[0]
               + x[0] ** 2 * np.sum(x)),
    lambda x: (x[0] * 3.0 + np.sum(np.sqrt(x * x + 2.0) * x) + x[0] * x[2]
               + np.sum(1.0 / (1.0 + x * x)) + x[0] * 1.7),
    lambda x: sum(100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2 for i in range(4)),
])
def test_gradients_mixing_scalar_reads_and_array_ops_are_bit_for_bit(f):
    # the reference batches the adjoints of x[i] reads; it must still add them
    # in the order the C reverse sweep does
    x0 = np.array([0.3, -1.2, 0.8, 1.1, -0.4])
    tape = rt.GradientTape(f, x0)
    ct = rt.compile(tape)
    for k in range(10):
        x = x0 + 0.1 * np.sin(np.arange(5.0) + k)
        np.testing.assert_array_equal(ct.gradient(x), tape.gradient(x))


def test_elementwise_math_is_bit_for_bit_where_libm_is_shared():
    f = lambda x: x[0] * x[1] + x[0] / x[1] - x[1] ** 2 + np.sqrt(x[0])
    x = np.array([1.7, 0.3])
    tape = rt.GradientTape(f, x)
    v_ref, g_ref = tape.value_and_gradient(x * 1.1)
    v, g = rt.compile(tape).value_and_gradient(x * 1.1)
    assert v == v_ref
    np.testing.assert_array_equal(g, g_ref)


def test_out_and_bind_write_into_the_callers_buffers():
    wl = workloads.eight_schools()
    ctape = rt.compile(rt.GradientTape(wl.f, wl.x0))
    v_ref, g_ref = wl.numpy_vg(wl.x0)
    g = np.empty_like(wl.x0)
    v, g2 = ctape.value_and_gradient(wl.x0, out=g)
    assert g2 is g and v == pytest.approx(v_ref, rel=1e-13)
    np.testing.assert_allclose(g, g_ref, rtol=1e-12)
    xb, gb = wl.x0.copy(), np.empty_like(wl.x0)
    run = ctape.bind(xb, gb)
    for k in range(3):
        xb[:] = wl.x0 + 0.1 * k
        v_ref, g_ref = wl.numpy_vg(xb)
        assert run() == pytest.approx(v_ref, rel=1e-12)
        np.testing.assert_allclose(gb, g_ref, rtol=1e-11)


@pytest.mark.parametrize("bad", [np.zeros(9), np.zeros(10, dtype=np.float32), [1, 2], np.zeros((10, 1)),
                                 "abc"])
def test_bad_out_and_bind_buffers_are_refused(bad):
    ctape = rt.compile(rt.GradientTape(lambda x: np.sum(x ** 2), np.ones(10)))
    with pytest.raises(rt.RevtapeError):
        ctape.value_and_gradient(np.ones(10), out=bad)
    with pytest.raises(rt.RevtapeError):
        ctape.bind(np.ones(10), bad)
    np.testing.assert_allclose(ctape.gradient(np.ones(10)), 2 * np.ones(10))


def test_inputs_are_converted_and_checked():
    ctape = rt.compile(rt.GradientTape(lambda x: np.sum(x ** 3), np.ones(4)))
    np.testing.assert_allclose(ctape.gradient([1, 2, 3, 4]), 3 * np.arange(1, 5) ** 2)
    np.testing.assert_allclose(ctape.gradient(np.arange(8.0)[::2]), 3 * np.arange(0, 8, 2) ** 2)
    for bad in (np.ones(3), np.ones((2, 2)), np.array(["a"] * 4), None):
        with pytest.raises(rt.InputError):
            ctape.gradient(bad)


def test_tuple_and_float_inputs():
    f = lambda a, b, c: np.sum(a * b) * c
    a, b = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    ctape = rt.compile(rt.GradientTape(f, (a, b, 2.0)))
    ga, gb, gc = ctape.gradient((a, b, 2.0))
    np.testing.assert_allclose(ga, 2 * b)
    np.testing.assert_allclose(gb, 2 * a)
    assert gc == pytest.approx(np.sum(a * b)) and isinstance(gc, float)
    ct2 = rt.compile(rt.GradientTape(lambda t: t * t * 3.0, 2.0))
    assert ct2.gradient(3.0) == pytest.approx(18.0)


def test_constant_output_and_identity():
    ct = rt.compile(rt.GradientTape(lambda x: 3.0, np.ones(3)))
    assert ct.value_and_gradient(np.ones(3))[0] == 3.0
    np.testing.assert_array_equal(ct.gradient(np.ones(3)), np.zeros(3))
    ct = rt.compile(rt.GradientTape(lambda x: x[1], np.ones(3)))
    np.testing.assert_array_equal(ct.gradient(np.arange(3.0)), [0.0, 1.0, 0.0])
    assert ct.forward(np.arange(3.0)) == 1.0


def test_jacobian_hessian_hvp_in_c():
    f = lambda x: np.array([1.0, 2.0]) * np.sum(np.sin(x)) + x[:2] ** 2
    x = RNG.normal(size=3)
    jt = rt.JacobianTape(f, x)
    np.testing.assert_allclose(rt.compile(jt).jacobian(x * 2), jt.jacobian(x * 2), rtol=1e-12)
    h = lambda x: np.sum(np.exp(x) * x[0]) + sps.logsumexp(x) + np.sum(x ** 4)
    ht = rt.HessianTape(h, x)
    ch = rt.compile(ht)
    H_ref = ht.hessian(x + 0.1)
    np.testing.assert_allclose(ch.hessian(x + 0.1), H_ref, rtol=1e-11)
    v = RNG.normal(size=3)
    np.testing.assert_allclose(ch.hvp(x + 0.1, v), H_ref @ v, rtol=1e-11)
    np.testing.assert_allclose(ch.gradient(x + 0.1), rt.gradient(h, x + 0.1), rtol=1e-12)
    assert ch.forward(x) == pytest.approx(h(x))
    assert rt.hessian(ch, x).shape == (3, 3)


def test_code_is_a_read_only_view_of_its_own_buffer():
    ctape = rt.compile(rt.GradientTape(lambda x: np.sum(np.exp(x)), np.ones(3)))
    code = ctape.code
    assert code.dtype == np.int32 and code.shape[1] == compiler.WORDS
    with pytest.raises(ValueError):
        code[0, 0] = 7
    assert "EXP" in ctape.disassemble() and "REDUCE_SUM" in ctape.disassemble()


def test_dead_code_is_removed_and_constants_are_folded():
    data = np.arange(4.0)

    def f(x):
        unused = np.exp(x) * 3          # does not reach the output
        c = np.sum(np.sin(data) ** 2)   # constant subgraph: folded
        del unused
        return np.sum(x * c)

    tape = rt.GradientTape(f, np.ones(4))
    assert "exp" in repr(tape)          # recorded, then eliminated
    ct = rt.compile(tape)
    names = _opcodes(ct)
    assert "EXP" not in names and "SIN" not in names
    np.testing.assert_allclose(ct.gradient(np.ones(4)), np.sum(np.sin(data) ** 2) * np.ones(4))


def test_array_ops_are_one_instruction_each():
    x = np.ones(1000)
    ct = rt.compile(rt.GradientTape(lambda x: np.sum(np.exp(x)), x))
    assert len(ct) == 2


# ---------------------------------------------------------------- the verifier

def _small_program():
    return rt.compile(rt.GradientTape(
        lambda x: (np.sum(np.exp(x[:3]) * x[1:]) + np.max(x) + (x @ x) + np.sum(x[[0, 3, 3]])
                   + np.sin(x[0]) - np.cos(x[2])),        # two scalar sums: CSUMs to mutate
        np.array([0.1, 0.2, 0.3, 0.4])))


def _run_state(state):
    """Load a (possibly corrupt) program; if the verifier accepts it, run every entry point."""
    from revtape.compiled import CompiledTape
    prog = compiler.Program.from_state(state)
    try:
        ct = CompiledTape(None, _program=prog)
    except rt.RevtapeError:
        return "refused"
    x = np.linspace(-1, 1, max(prog.n_in, 1))[:prog.n_in]
    try:
        ct.forward(x.reshape(prog.inputs[0][1]) if len(prog.inputs) == 1 else x)
    except rt.RevtapeError:
        pass
    lib_vg(ct)
    return "ran"


def lib_vg(ct):
    """Every C entry point on a program the verifier accepted."""
    from revtape._vm import ffi, lib
    g = np.zeros(max(ct._program.n_grad, 1))
    lib.rt_value_and_grad(ct._p, ffi.NULL, ffi.new("double *"), ffi.from_buffer("double[]", g))
    J = np.zeros(max(ct._program.out_len * ct._program.n_grad, 1))
    lib.rt_jacobian(ct._p, ffi.NULL, ffi.NULL, ffi.from_buffer("double[]", J))
    lib.rt_jacobian_fwd(ct._p, ffi.NULL, ffi.NULL, ffi.from_buffer("double[]", J))
    ydot = np.zeros(max(ct._program.out_len, 1))
    lib.rt_jvp(ct._p, ffi.NULL, ffi.from_buffer("double[]", np.ones_like(g)), ffi.NULL,
               ffi.from_buffer("double[]", ydot))


def test_verifier_refuses_out_of_range_offsets():
    ct = _small_program()
    state = ct.program.to_state()
    code = state["code"].copy()
    code[0, 3] = 10 ** 6
    state["code"] = code
    from revtape.compiled import CompiledTape
    with pytest.raises(rt.VerificationError) as e:
        CompiledTape(ct.tape, _program=compiler.Program.from_state(state))
    assert "instruction 0" in str(e.value)


def test_verifier_refuses_writes_into_inputs_and_unknown_opcodes():
    ct = _small_program()
    from revtape.compiled import CompiledTape
    for row, col, val in ((0, 2, 0), (0, 0, 60000), (1, 0, len(ops.VM_OPCODES))):
        state = ct.program.to_state()
        code = state["code"].copy()
        code[row, col] = val
        state["code"] = code
        with pytest.raises(rt.VerificationError):
            CompiledTape(ct.tape, _program=compiler.Program.from_state(state))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_fuzz_mutated_programs_are_refused_or_run_safely(data):
    base = _small_program().program.to_state()
    state = dict(base)
    code = base["code"].copy()
    ints = base["ints"].copy()
    for _ in range(data.draw(st.integers(1, 4))):
        if data.draw(st.booleans()) or ints.size == 0:
            i = data.draw(st.integers(0, code.size - 1))
            code.flat[i] = data.draw(st.one_of(st.integers(-3, 40), st.integers(-2**31, 2**31 - 1)))
        else:
            i = data.draw(st.integers(0, ints.size - 1))
            ints.flat[i] = data.draw(st.integers(-5, 20))
    state["code"], state["ints"] = code, ints
    assert _run_state(state) in ("refused", "ran")


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.integers(-2**31, 2**31 - 1), min_size=6, max_size=60).filter(lambda w: len(w) % 6 == 0),
       st.integers(0, 8), st.integers(0, 30))
def test_fuzz_random_programs_are_refused_or_run_safely(words, n_in, n_vals):
    n_in = min(n_in, n_vals)
    state = dict(code=np.array(words, dtype=np.int32).reshape(-1, 6), ints=np.array([0, 1, 2, 1], np.int32),
                 consts=np.zeros(0), n_in=n_in, n_grad=n_in, n_fixed=n_in, n_vals=n_vals, out_off=0,
                 out_shape=(), inputs=[(0, (n_in,), False)], guards=[])
    assert _run_state(state) in ("refused", "ran")


# ---------------------------------------------------------------- copies, pickles, threads

def _chain_model():
    wl = workloads.logreg(N=200, D=5)
    return wl, rt.compile(rt.GradientTape(wl.f, wl.x0))


def test_deepcopy_recompiles_and_never_shares_buffers():
    wl, ct = _chain_model()
    c2 = copy.deepcopy(ct)
    assert not np.shares_memory(c2.code, ct.code)
    assert c2.tape is not ct.tape
    x = wl.x0 + 0.3
    g_ref = wl.numpy_vg(x)[1]
    del ct
    gc.collect()
    np.testing.assert_allclose(c2.gradient(x), g_ref, rtol=1e-10)


@pytest.mark.parametrize("kind", ["jacobian", "hessian"])
def test_deepcopy_of_jacobian_and_hessian_tapes(kind):
    x = np.array([0.3, -0.2, 0.5])
    if kind == "jacobian":
        ct = rt.compile(rt.JacobianTape(lambda x: np.exp(x) * x[0], x))
        ref = ct.jacobian(x + 1)
        c2 = copy.deepcopy(ct)
        del ct
        np.testing.assert_allclose(c2.jacobian(x + 1), ref)
    else:
        ct = rt.compile(rt.HessianTape(lambda x: np.sum(np.exp(x) * x[0]), x))
        ref = ct.hessian(x + 1)
        c2 = copy.deepcopy(ct)
        del ct
        np.testing.assert_allclose(c2.hessian(x + 1), ref)


def test_pickle_of_compiled_tape_rebuilds_and_verifies():
    wl, ct = _chain_model()
    c2 = pickle.loads(pickle.dumps(ct))
    assert not np.shares_memory(c2.code, ct.code)
    np.testing.assert_array_equal(c2.code, ct.code)
    x = wl.x0 - 0.2
    np.testing.assert_array_equal(c2.gradient(x), ct.gradient(x))


def test_pickle_from_an_incompatible_build_is_refused():
    wl, ct = _chain_model()
    reduced = ct.__reduce__()
    state = dict(reduced[1][0])
    state["op_table_hash"] = "0000000000000000"
    with pytest.raises(rt.BuildMismatchError):
        reduced[0](state, *reduced[1][1:])


class Sampler:
    """A model object holding a compiled tape, as an MCMC library would."""

    def __init__(self, ctape):
        self.ctape = ctape

    def logp_and_grad(self, x):
        return self.ctape.value_and_gradient(x)


def test_threads_with_deep_copied_models_match_serial_bit_for_bit():
    wl = workloads.eight_schools()
    model = Sampler(rt.compile(rt.GradientTape(wl.f, wl.x0)))
    points = [wl.x0 + 0.01 * k * np.sin(np.arange(10) + k) for k in range(300)]
    serial = [model.logp_and_grad(p) for p in points]

    def chain(m, offset):
        return [m.logp_and_grad(points[(i + offset) % len(points)]) for i in range(len(points))]

    models = [copy.deepcopy(model) for _ in range(4)]
    with cf.ThreadPoolExecutor(4) as ex:
        results = list(ex.map(chain, models, range(4)))
    for offset, res in enumerate(results):
        for i, (v, g) in enumerate(res):
            v0, g0 = serial[(i + offset) % len(points)]
            assert v == v0
            np.testing.assert_array_equal(g, g0)


def test_concurrent_use_of_one_compiled_tape_never_corrupts_results():
    wl = workloads.logreg(N=2000, D=20)
    ct = rt.compile(rt.GradientTape(wl.f, wl.x0))
    expected = ct.gradient(wl.x0)
    errors, wrong = [], []

    def hammer():
        for _ in range(200):
            try:
                g = ct.gradient(wl.x0)
            except rt.ConcurrentUseError:
                errors.append(1)
                continue
            if not np.array_equal(g, expected):
                wrong.append(1)

    threads = [threading.Thread(target=hammer) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong
    np.testing.assert_array_equal(ct.gradient(wl.x0), expected)


def test_repeated_calls_with_the_same_arrays_read_their_current_contents():
    # The checked entry reuses the C pointers of the last x and out it saw.
    wl = workloads.rosenbrock_loop(n=6)
    ct = rt.compile(rt.GradientTape(wl.f, wl.x0))
    x, g, g2 = wl.x0.copy(), np.empty(6), np.empty(6)
    for k in range(4):
        x[:] = wl.x0 + 0.1 * k                     # same array, new contents
        out = g if k % 2 == 0 else g2               # alternating outs
        v, gk = ct.value_and_gradient(x, out=out)
        v_ref, g_ref = wl.numpy_vg(x)
        assert gk is out and v == pytest.approx(v_ref, rel=1e-13)
        np.testing.assert_allclose(out, g_ref, rtol=1e-12)
    v, gnew = ct.value_and_gradient(x)              # out=None: a new array every call
    assert gnew is not g and gnew is not g2 and v == pytest.approx(wl.numpy_vg(x)[0], rel=1e-13)


def test_arrays_changed_in_place_after_a_call_are_checked_again():
    ct = rt.compile(rt.GradientTape(lambda x: np.sum(x ** 2), np.ones(10)))
    x, g = np.ones(10), np.empty(10)
    ct.value_and_gradient(x, out=g)
    x.shape = (2, 5)
    with pytest.raises(rt.InputError):
        ct.value_and_gradient(x, out=g)
    x.shape = (10,)
    g.setflags(write=False)
    with pytest.raises(rt.RevtapeError):
        ct.value_and_gradient(x, out=g)
    g.setflags(write=True)
    g.shape = (5, 2)
    with pytest.raises(rt.RevtapeError):
        ct.value_and_gradient(x, out=g)
    g.shape = (10,)
    np.testing.assert_array_equal(ct.value_and_gradient(2 * x, out=g)[1], 4 * x)


def test_threads_with_their_own_out_never_see_each_others_values():
    wl = workloads.rosenbrock_loop(n=20)
    ct = rt.compile(rt.GradientTape(wl.f, wl.x0))
    wrong, ran = [], []

    def worker(k):
        x, g = wl.x0 + 0.01 * k, np.empty(20)
        v_ref, g_ref = wl.numpy_vg(x)
        for _ in range(2000):
            try:
                v, _ = ct.value_and_gradient(x, out=g)
            except rt.ConcurrentUseError:
                continue
            ran.append(1)
            if v != pytest.approx(v_ref, rel=1e-12) or not np.allclose(g, g_ref, rtol=1e-11):
                wrong.append(k)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ran and not wrong


def _worker_gradient(ct, x):
    return ct.gradient(x)


def test_compiled_tape_travels_to_spawned_worker_processes():
    wl = workloads.eight_schools()
    ct = rt.compile(rt.GradientTape(wl.f, wl.x0))
    xs = [wl.x0 + 0.1 * k for k in range(3)]
    with cf.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as ex:
        remote = list(ex.map(_worker_gradient, [ct] * 3, xs))
    for x, g in zip(xs, remote):
        np.testing.assert_array_equal(g, ct.gradient(x))


def _rss_kib():
    with open(f"/proc/{os.getpid()}/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize() // 1024


def test_compiling_and_dropping_10000_tapes_does_not_grow_memory():
    tape = rt.GradientTape(workloads.eight_schools().f, workloads.eight_schools().x0)
    for _ in range(500):
        rt.compile(tape)
    gc.collect()
    before = _rss_kib()
    for _ in range(10_000):
        ct = rt.compile(tape)
        ct.gradient(tape._vals[tape.inputs[0]._id])
        del ct
    gc.collect()
    grown = _rss_kib() - before
    assert grown < 4 * 1024, f"RSS grew by {grown} KiB over 10,000 compile/free cycles"


def test_hessian_and_hvp_of_a_compiled_gradient_tape():
    f = lambda x: np.sum(np.exp(x) * x[0]) + np.sum(x ** 4)
    x = np.array([0.3, -0.2, 0.5])
    ct = rt.compile(rt.GradientTape(f, x))
    H = rt.hessian(f, x + 0.1)
    np.testing.assert_allclose(ct.hessian(x + 0.1), H, rtol=1e-12)
    v = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(ct.hvp(x + 0.1, v), H @ v, rtol=1e-12)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_inputs_are_values_in_every_replay(bad):
    # nan/inf used to be refused with InputError; they are values (SPEC), and
    # every entry point computes what numpy computes: d/dx sum(x**2) = 2x
    f = lambda x: np.sum(x ** 2)
    x = np.array([1.0, 2.0, 3.0])
    tape = rt.GradientTape(f, x)
    ct = rt.compile(tape)
    xb = x.copy()
    xb[1] = bad
    want_v, want_g = np.sum(xb ** 2), 2 * xb
    g = np.empty(3)
    np.testing.assert_array_equal(tape.gradient(xb), want_g)
    np.testing.assert_array_equal(ct.gradient(xb), want_g)
    np.testing.assert_array_equal(ct.jacobian(xb), want_g)
    np.testing.assert_array_equal(rt.gradient(f, xb), want_g)
    np.testing.assert_array_equal(ct.forward(xb), want_v)
    v, out = ct.value_and_gradient(xb, out=g)
    assert out is g and np.array_equal(v, want_v, equal_nan=True)
    np.testing.assert_array_equal(g, want_g)
    run = ct.bind(xb, g)
    assert np.array_equal(run(), want_v, equal_nan=True)
    np.testing.assert_array_equal(g, want_g)
    xb[1] = 0.0
    assert run() == pytest.approx(10.0)


def test_values_after_a_compiled_replay_are_readable_through_the_tape():
    f = lambda x: np.sum(np.sin(x) * x)
    x0, x1, x2 = np.array([0.1, 0.2]), np.array([1.0, -2.0]), np.array([0.5, 0.25])
    tape = rt.GradientTape(f, x0)
    ct = rt.compile(tape)
    ct.gradient(x1)
    assert rt.value(tape.output) == pytest.approx(f(x1))
    np.testing.assert_array_equal(rt.value(tape.inputs[0]), x1)
    g = np.empty(2)
    run = ct.bind(x2.copy(), g)
    run()
    assert rt.value(tape.output) == pytest.approx(f(x2))
    tape.forward(x0)                    # a reference replay takes over again
    assert rt.value(tape.output) == pytest.approx(f(x0))
    c2 = copy.deepcopy(ct)              # copies never carry the link to the arena
    c2.gradient(x1)
    assert rt.value(tape.output) == pytest.approx(f(x0))
    assert rt.value(c2.tape.output) == pytest.approx(f(x1))


def _opcodes(ct):
    return [ops.VM_OPCODES[w & 0xFFFF] for w in ct.code[:, 0]]


def _assert_same_bits(fused, unfused, tape, xs):
    """A fused program gives the unfused one's bits, and the reference's values."""
    for x in xs:
        v, g = fused.value_and_gradient(x)
        v2, g2 = unfused.value_and_gradient(x)
        assert v == v2
        np.testing.assert_array_equal(g, g2)
        v_ref, g_ref = tape.value_and_gradient(x)
        assert v == pytest.approx(v_ref, rel=1e-15)
        np.testing.assert_allclose(g, g_ref, rtol=1e-14)


@pytest.mark.parametrize("f", [
    lambda x: x[0] + 0.001 * np.sin(x[1]),                 # a + c*b: fused
    lambda x: 0.5 * x[0] * x[1] + x[0],                     # product on the left
    lambda x: x[0] * x[0] + x[0] * 3.0,                     # b == c, two candidates
    lambda x: x[1] + x[0] * x[1] + x[0] * x[1] * 2.0,       # a product used twice stays apart
    lambda x: (x[0] * 2.0 + x[1]) * (x[0] * 2.0) + x[0],
    lambda x: (x[0] - x[1]) ** 2 + (1.0 - x[0]) ** 2,        # square of a difference: fused
    lambda x: (x[0] - x[0]) ** 2 + 100.0 * (x[1] - x[0] ** 2) ** 2,
    lambda x: (x[0] - x[1]) ** 2 * (x[0] - x[1]),            # difference used twice stays apart
])
def test_fused_pairs_give_the_same_bits_as_the_pair(f, monkeypatch):
    x0 = np.array([0.37, -1.21])
    tape = rt.GradientTape(f, x0)
    fused = rt.compile(tape)
    monkeypatch.setattr(compiler._Lowering, "fusions", lambda self: ({}, {}))
    pair = rt.compile(tape)
    assert len(fused) < len(pair)
    _assert_same_bits(fused, pair, tape, (x0, x0 * 1.7, -x0))


def test_a_product_whose_operand_is_read_again_before_the_add_stays_apart():
    # x[0] is read by the product and, through another x[0], by sin in between:
    # fused, the product's adjoint would reach x[0] before sin's does.
    def f(x):
        p = x[0] * x[1]
        q = np.sin(x[0])
        return q + p
    ct = rt.compile(rt.GradientTape(f, np.array([0.3, 0.7])))
    names = _opcodes(ct)
    assert "AXPY" not in names and names.count("MUL_VV") == 1
    np.testing.assert_allclose(ct.gradient(np.array([0.3, 0.7])), [np.cos(0.3) + 0.7, 0.3], rtol=1e-15)


def _sum_of_four(x):
    s = np.sin(x[0]) + np.cos(x[1])
    t = s + np.exp(x[2])
    return t * s + np.tanh(x[3])                              # a partial sum read twice


@pytest.mark.parametrize("f, n_csum", [
    (lambda x: np.exp(x[0]) + np.sin(x[1]) - np.cos(x[2]) + np.tanh(x[3]), 1),
    (lambda x: sum(np.sin(x[i]) ** 2 for i in range(4)), 1),  # starts at the constant 0
    (lambda x: np.sin(x[0]) - (np.cos(x[1]) + np.exp(x[2]) - np.tanh(x[3])), 1),
    (lambda x: x[0] + x[1] - x[2] + x[3], 0),                 # terms are aliases of x
    (_sum_of_four, 0),
    (lambda x: np.exp(x[1]) + (t := np.sin(x[0])) + np.cos(x[1]) + t, 0),  # a term read twice
    (lambda x: np.abs(x[0]) + np.sqrt(x[1] ** 2) - np.maximum(x[2], 0.0) + np.log(x[3] ** 2), 1),
])
def test_sum_chains_give_the_same_bits_as_the_adds(f, n_csum, monkeypatch):
    x0 = np.array([0.37, -1.21, 0.0, 2.5])
    tape = rt.GradientTape(f, x0)
    fused = rt.compile(tape)
    monkeypatch.setattr(compiler._Lowering, "sum_chains", lambda self, inner, outer: (set(), {}))
    adds = rt.compile(tape)
    names = _opcodes(fused)
    assert names.count("CSUM") == n_csum and (len(fused) < len(adds)) == (n_csum > 0)
    _assert_same_bits(fused, adds, tape, (x0, x0 * 1.7, -x0 + 0.1))


def test_rosenbrock_terms_add_up_in_one_csum():
    wl = workloads.rosenbrock_loop(n=100)
    ct = rt.compile(rt.GradientTape(wl.f, wl.x0))
    names = _opcodes(ct)
    assert names.count("CSUM") == 1 and len(names) == 4 * 99 + 1
    assert "CSUM(@" in ct.disassemble()
    x = wl.x0 + 0.2
    v, g = ct.value_and_gradient(x)
    v_ref, g_ref = wl.numpy_vg(x)
    assert v == pytest.approx(v_ref, rel=1e-13)
    np.testing.assert_allclose(g, g_ref, rtol=1e-12)


def test_verifier_refuses_csum_terms_outside_the_arena():
    ct = rt.compile(rt.GradientTape(lambda x: np.exp(x[0]) + np.sin(x[1]) - np.cos(x[0]), np.ones(2)))
    from revtape.compiled import CompiledTape
    k = _opcodes(ct).index("CSUM")
    for bad_term in (ct.program.n_vals, ~ct.program.n_vals, 2**31 - 1, -2**31):
        state = ct.program.to_state()
        ints = state["ints"].copy()
        ints[ct.code[k, 5]] = bad_term
        state["ints"] = ints
        with pytest.raises(rt.VerificationError, match="term 0"):
            CompiledTape(ct.tape, _program=compiler.Program.from_state(state))
    for col, val in ((1, 0), (1, 10**6), (5, 10**6)):  # no terms; more terms than ints
        state = ct.program.to_state()
        code = state["code"].copy()
        code[k, col] = val
        state["code"] = code
        with pytest.raises(rt.VerificationError):
            CompiledTape(ct.tape, _program=compiler.Program.from_state(state))


def test_chain_steps_fuse_into_axpy():
    wl = workloads.chain(50)
    ct = rt.compile(rt.GradientTape(wl.f, wl.x0))
    names = _opcodes(ct)
    assert names.count("AXPY") == 50 and len(names) == 150
    np.testing.assert_allclose(ct.gradient(wl.x0), wl.numpy_vg(wl.x0)[1], rtol=1e-13)
