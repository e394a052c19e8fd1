"""Compiled tapes: the flat program, the C VM and its verifier, compared with
the reference replay; copies, pickles, threads and memory."""

import concurrent.futures as cf
import copy
import gc
import math
import multiprocessing
import os
import pickle
import resource
import sys
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import revtape as rt
from revtape.lower import compiler
from revtape.core import isa, ops
from revtape.bench import workloads
from revtape import special as sps   # revtape's own: works without scipy installed
from conftest import FNS

RNG = np.random.default_rng(42)


def _opcodes(ct):
    return [ops.VM_OPCODES[w & 0xFFFF] for w in ct.code[:, 0]]


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
    assert code.dtype == np.int32 and code.shape[1] == isa.WORDS
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
    from revtape.runtime.compiled import CompiledTape
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
    from revtape.runtime.compiled import CompiledTape
    with pytest.raises(rt.VerificationError) as e:
        CompiledTape(ct.tape, _program=compiler.Program.from_state(state))
    assert "instruction 0" in str(e.value)


def test_verifier_refuses_writes_into_inputs_and_unknown_opcodes():
    ct = _small_program()
    from revtape.runtime.compiled import CompiledTape
    for row, col, val in ((0, 2, 0), (0, 0, 60000), (1, 0, len(ops.VM_OPCODES))):
        state = ct.program.to_state()
        code = state["code"].copy()
        code[row, col] = val
        state["code"] = code
        with pytest.raises(rt.VerificationError):
            CompiledTape(ct.tape, _program=compiler.Program.from_state(state))


@pytest.mark.slow     # a fuzzing campaign: 300 programs
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


@pytest.mark.slow     # a fuzzing campaign: 200 programs
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


@pytest.mark.slow     # a soak: 10000 tapes
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


# ---------------------------------------------------------------- hardening

def _hammer(n_threads, work):
    """Run work(k) on n_threads threads at once; re-raise the first error."""
    errors = []
    barrier = threading.Barrier(n_threads)

    def run(k):
        try:
            barrier.wait()
            work(k)
        except BaseException as e:       # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


@pytest.mark.slow     # a stress test: threads hammering one tape
def test_threads_sharing_one_compiled_hessian_tape_never_get_each_others_numbers():
    f = lambda x: np.sum(np.exp(0.3 * x) * x[0]) + np.sum(x ** 4) + x[1] * x[2]
    n = 5
    ct = rt.compile(rt.HessianTape(f, np.linspace(0.1, 0.6, n)))
    xs = [np.linspace(-0.5, 0.5, n) + 0.1 * k for k in range(4)]
    vs = [np.cos(np.arange(n) + k) for k in range(4)]
    serial = [(ct.value_and_gradient(x), ct.hvp(x, v)) for x, v in zip(xs, vs)]
    wrong, ran = [], [0]

    def work(k):
        x, v = xs[k], vs[k]
        (v0, g0), hv0 = serial[k]
        for i in range(5000):
            try:
                if k % 2 == 0:
                    val, g = ct.value_and_gradient(x)
                    ok = val == v0 and np.array_equal(g, g0)
                else:
                    ok = np.array_equal(ct.hvp(x, v), hv0)
            except rt.ConcurrentUseError:
                continue
            ran[0] += 1
            if not ok:
                wrong.append((k, i))

    interval = sys.getswitchinterval()
    try:
        for every in (5e-3, 1e-6):       # GIL hand-overs: coarse, then very fine
            sys.setswitchinterval(every)
            _hammer(4, work)
    finally:
        sys.setswitchinterval(interval)
    assert ran[0] > 0 and not wrong, f"{len(wrong)} results belonged to another thread"
    H = ct.hessian(xs[0])
    np.testing.assert_allclose(H @ vs[0], serial[0][1], rtol=1e-12)


@pytest.mark.slow     # a stress test: threads hammering one tape
def test_threads_sharing_one_compiled_gradient_tape_never_get_each_others_numbers():
    wl = workloads.rosenbrock_loop(n=8)
    ct = rt.compile(rt.GradientTape(wl.f, wl.x0))
    xs = [wl.x0 + 0.05 * k for k in range(3)]
    serial = [ct.value_and_gradient(x) for x in xs]
    wrong, ran = [], [0]

    def work(k):
        v0, g0 = serial[k]
        x, out = xs[k].copy(), np.empty(8)
        for i in range(3000):
            try:
                v, g = (ct.value_and_gradient(x, out=out) if i % 2 else
                        ct.value_and_gradient(xs[k]))
            except rt.ConcurrentUseError:
                continue
            ran[0] += 1
            if v != v0 or not np.array_equal(g, g0):
                wrong.append(k)

    _hammer(3, work)
    assert ran[0] > 0 and not wrong


def _two_guards(x):
    a = x[0] * 2.0 if x[0] > 0.0 else -x[0]
    b = x[1] * 3.0 if x[1] > 1.0 else x[1] ** 2
    return a + b + np.sum(x ** 2)


def test_a_branch_changed_reports_the_guard_of_its_own_thread():
    ct = rt.compile(rt.GradientTape(_two_guards, np.array([1.0, 2.0, 0.5])))
    x_other = np.array([1.0, 2.0, 0.5])                       # takes the recorded branches
    bad = {0: np.array([-0.25, 2.0, 0.5]), 1: np.array([1.0, 0.75, 0.5])}
    seen = []

    def work(k):
        for i in range(1500):
            try:
                if k == 2:
                    ct.value_and_gradient(x_other)
                elif i % 2:
                    ct.value_and_gradient(bad[k])
                else:
                    ct.gradient(bad[k], out=np.empty(3))
            except rt.ConcurrentUseError:
                continue
            except rt.BranchChanged as e:
                seen.append((k, e.guard, e.operands))

    _hammer(3, work)
    assert seen
    for k, guard, operands in seen:
        assert guard == k
        assert operands == ((-0.25, 0.0) if k == 0 else (0.75, 1.0))


def test_the_pointer_cache_sees_strides_changed_in_place():
    ct = rt.compile(rt.GradientTape(lambda x: np.sum(x ** 2), np.ones(4)))
    g = np.empty(4)
    big = np.array([1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0])
    x = big[:4]                                     # [1, 2, 1, 2]: value 10
    assert ct.value_and_gradient(x, out=g)[0] == 10.0
    with pytest.warns(DeprecationWarning) if np.lib.NumpyVersion(np.__version__) >= "2.4.0" \
            else _nothing():
        x.strides = (16,)                           # the same array now means [1, 1, 1, 1]
    v, gx = ct.value_and_gradient(x, out=g)
    assert v == 4.0
    np.testing.assert_array_equal(gx, 2.0 * np.ones(4))


def test_a_strided_out_is_written_whole():
    ct = rt.compile(rt.GradientTape(lambda x: np.sum(x ** 2), np.ones(4)))
    base = np.zeros(8)
    gv = base[:4]
    ct.value_and_gradient(np.full(4, 3.0), out=gv)  # cached as a contiguous out
    with pytest.warns(DeprecationWarning) if np.lib.NumpyVersion(np.__version__) >= "2.4.0" \
            else _nothing():
        gv.strides = (16,)
    v, g = ct.value_and_gradient(np.full(4, 5.0), out=gv)
    assert g is gv and v == 100.0
    # every element of the strided out, and nothing between them (6.0: the first call)
    np.testing.assert_array_equal(base, [10.0, 6.0, 10.0, 6.0, 10.0, 0, 10.0, 0])
    fresh = np.zeros(8)
    ct.value_and_gradient(np.arange(4.0), out=fresh[::2])  # strided from the start
    np.testing.assert_array_equal(fresh, [0, 0, 2, 0, 4, 0, 6, 0])


def test_the_repeat_call_path_sees_every_in_place_change():
    # the same x and out as the previous call take a shorter path that only
    # re-reads what can change in place on them: each change must still count
    f = lambda x: np.sum(x ** 2) + x[0] * x[-1]
    ct = rt.compile(rt.GradientTape(f, np.ones(4)), native=False)
    x, g = np.array([1.0, 2.0, 3.0, 4.0]), np.empty(4)
    want = ct.value_and_gradient(x.copy())
    for _ in range(3):                               # the first call fills the cache
        v, gx = ct.value_and_gradient(x, out=g)
        assert gx is g and v == want[0]
        np.testing.assert_array_equal(g, want[1])
    bits = x.copy()
    x.dtype = np.int64                              # the same bytes now mean integers
    v, gx = ct.value_and_gradient(x, out=g)
    ref = ct.value_and_gradient(bits.view(np.int64).astype(np.float64))
    assert v == ref[0]
    np.testing.assert_array_equal(g, ref[1])
    x.dtype = np.float64
    ct.value_and_gradient(x, out=g)
    x.shape = (2, 2)                                # a 1-d fast shape changed in place
    with pytest.raises(rt.InputError):
        ct.value_and_gradient(x, out=g)
    x.shape = (4,)
    ct.value_and_gradient(x, out=g)
    g.dtype = np.int64
    with pytest.raises(rt.InputError, match="float64"):
        ct.value_and_gradient(x, out=g)
    g.dtype = np.float64
    ct.value_and_gradient(x, out=g)
    g.shape = (2, 2)
    with pytest.raises(rt.InputError):
        ct.value_and_gradient(x, out=g)
    g.shape = (4,)
    ct.value_and_gradient(x, out=g)
    g.setflags(write=False)
    with pytest.raises(rt.InputError, match="writeable"):
        ct.value_and_gradient(x, out=g)
    g.setflags(write=True)
    v, gx = ct.value_and_gradient(x, out=g)
    assert v == want[0]
    np.testing.assert_array_equal(g, want[1])


def test_the_repeat_call_path_sees_a_shape_changed_in_place_above_one_axis():
    # (2, 3) -> (3, 2) in place changes the strides too; (1, 6) with strides
    # set to (24, 8) is a shape of the same size with (2, 3)'s C strides:
    # only the shape comparison sees it
    ct = rt.compile(rt.GradientTape(lambda x: np.sum(x[0] * x[1]), np.ones((2, 3))),
                    native=False)
    x, g = np.arange(6.0).reshape(2, 3), np.empty((2, 3))
    ct.value_and_gradient(x, out=g)
    ct.value_and_gradient(x, out=g)
    x.shape = (3, 2)
    with pytest.raises(rt.InputError):
        ct.value_and_gradient(x, out=g)
    x.shape = (2, 3)
    ct.value_and_gradient(x, out=g)
    x.shape = (1, 6)
    with pytest.warns(DeprecationWarning) if np.lib.NumpyVersion(np.__version__) >= "2.4.0" \
            else _nothing():
        x.strides = (24, 8)
    assert x.strides == np.empty((2, 3)).strides
    with pytest.raises(rt.InputError):
        ct.value_and_gradient(x, out=g)
    x = np.arange(6.0).reshape(2, 3)
    v, gx = ct.value_and_gradient(x, out=g)
    assert v == 0 * 3 + 1 * 4 + 2 * 5
    np.testing.assert_array_equal(g, [[3.0, 4.0, 5.0], [0.0, 1.0, 2.0]])


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _misaligned(values):
    values = np.asarray(values, dtype=np.float64)
    buf = bytearray(8 * values.size + 1)
    a = np.frombuffer(buf, offset=1, count=values.size)
    a[...] = values
    assert not a.flags.aligned
    return a


def test_misaligned_arrays_are_copied_or_refused_at_every_entry_point():
    f = lambda x: np.sum(np.exp(x) * x[0]) + np.sum(x ** 3)
    x0 = np.array([0.3, -0.2, 0.5, 0.1])
    tape = rt.GradientTape(f, x0)
    ct = rt.compile(tape)
    x = x0 + 0.25
    xm = _misaligned(x)
    v_ref, g_ref = tape.value_and_gradient(x)
    v, g = ct.value_and_gradient(xm)
    assert v == pytest.approx(v_ref, rel=1e-14)
    np.testing.assert_allclose(g, g_ref, rtol=1e-13)
    out = _misaligned(np.zeros(4))
    for _ in range(2):                              # the second call goes through the caches
        v, g = ct.value_and_gradient(xm, out=out)
        assert g is out
        np.testing.assert_allclose(out, g_ref, rtol=1e-13)
    assert ct.forward(xm) == pytest.approx(v_ref, rel=1e-14)
    vv = _misaligned([1.0, -1.0, 0.5, 2.0])
    H = tape.hessian(x)
    np.testing.assert_allclose(ct.jvp(xm, vv), g_ref @ vv, rtol=1e-12)
    np.testing.assert_allclose(ct.hvp(xm, vv), H @ vv, rtol=1e-12)
    np.testing.assert_allclose(ct.vjp(xm, 2.0), 2 * g_ref, rtol=1e-13)
    np.testing.assert_allclose(ct.hessian(xm), H, rtol=1e-12)
    np.testing.assert_allclose(ct.jacobian(xm), g_ref, rtol=1e-13)
    with pytest.raises(rt.InputError, match="aligned"):
        ct.bind(xm, np.empty(4))
    with pytest.raises(rt.InputError, match="aligned"):
        ct.bind(x.copy(), _misaligned(np.zeros(4)))
    ht = rt.compile(rt.HessianTape(f, x0))
    np.testing.assert_allclose(ht.value_and_gradient(xm)[1], g_ref, rtol=1e-13)
    np.testing.assert_allclose(ht.hvp(xm, vv), H @ vv, rtol=1e-12)


# ------------------------------------------------ rt.value after refused replays, copies

def test_a_refused_compiled_replay_leaves_the_previous_replays_values():
    tape = rt.GradientTape(_two_guards, np.array([1.0, 2.0, 0.5]))
    ct = rt.compile(tape)
    x1 = np.array([2.0, 3.0, -1.0])
    v1 = ct.value_and_gradient(x1)[0]
    for refused in (lambda: ct.value_and_gradient(np.array([-1.0, 3.0, 0.0])),
                    lambda: ct.value_and_gradient(np.array([-1.0, 3.0, 0.0]), out=np.empty(3)),
                    lambda: ct.jacobian(np.array([1.0, 0.0, 0.0])),
                    lambda: ct.hvp(np.array([-1.0, 3.0, 0.0]), np.ones(3))):
        with pytest.raises(rt.BranchChanged):
            refused()
        np.testing.assert_array_equal(rt.value(tape.inputs[0]), x1)
        assert rt.value(tape.output) == v1


def test_a_refused_reference_replay_leaves_the_previous_replays_values():
    tape = rt.GradientTape(_two_guards, np.array([1.0, 2.0, 0.5]))
    x1 = np.array([2.0, 3.0, -1.0])
    v1 = tape.forward(x1)
    with pytest.raises(rt.BranchChanged):
        tape.value_and_gradient(np.array([1.0, 0.5, 0.0]))
    np.testing.assert_array_equal(rt.value(tape.inputs[0]), x1)
    assert rt.value(tape.output) == v1
    ct = rt.compile(tape)
    x2 = x1 + 1.0
    v2 = ct.forward(x2)                 # a compiled replay, then a refused reference one
    with pytest.raises(rt.BranchChanged):
        tape.forward(np.array([-1.0, 3.0, 0.0]))
    np.testing.assert_array_equal(rt.value(tape.inputs[0]), x2)
    assert rt.value(tape.output) == v2


@pytest.mark.parametrize("copier", [copy.deepcopy, lambda t: pickle.loads(pickle.dumps(t))])
def test_copies_of_a_replayed_tape_report_the_originals_values(copier):
    tape = rt.GradientTape(lambda x: np.sum(np.sin(x) * x), np.ones(3))
    ct = rt.compile(tape)
    x = np.array([0.5, -1.0, 2.0])
    ct.value_and_gradient(x)
    c = copier(tape)
    np.testing.assert_array_equal(rt.value(c.inputs[0]), rt.value(tape.inputs[0]))
    assert rt.value(c.output) == rt.value(tape.output) == ct.forward(x)
    np.testing.assert_array_equal(rt.value(c.inputs[0]), x)
    c2 = copier(ct)
    assert rt.value(c2.tape.output) == rt.value(tape.output)


# ------------------------------------------------ pickles from untrusted sources

def _pickled_parts(ct):
    fn, (state, tape, guards, n_grad) = ct.__reduce__()
    return fn, dict(state), tape, guards, n_grad


def test_a_pickle_whose_input_shape_disagrees_with_n_in_is_refused():
    ct = rt.compile(rt.GradientTape(lambda x: np.sum(x ** 2), np.ones(4)))
    fn, state, tape, guards, n_grad = _pickled_parts(ct)
    state["inputs"] = [(0, (1_000_000,), False)]           # C would copy 10^6 into out=
    with pytest.raises(rt.VerificationError, match="n_in"):
        fn(state, None, guards, n_grad)
    state = _pickled_parts(ct)[1]
    state["n_in"] = state["n_grad"] = state["n_fixed"] = 3
    with pytest.raises(rt.VerificationError):
        fn(state, None, guards, n_grad)
    with pytest.raises(rt.VerificationError, match="differentiated"):
        fn(_pickled_parts(ct)[1], None, guards, 7)


@pytest.mark.parametrize("code", [lambda c: c.reshape(-1), lambda c: c.reshape(-1, 3),
                                  lambda c: c.astype(np.int64), lambda c: c.astype(float),
                                  lambda c: c.tolist()])
def test_a_pickled_code_of_the_wrong_shape_or_dtype_is_refused(code):
    ct = _small_program()
    fn, state, tape, guards, n_grad = _pickled_parts(ct)
    state["code"] = code(state["code"])
    with pytest.raises(rt.VerificationError, match="code"):
        fn(state, tape, guards, n_grad)


def test_absurd_arenas_from_a_small_pickle_are_refused():
    ct = rt.compile(rt.GradientTape(lambda x: np.sum(x ** 2), np.ones(4)))
    fn, state, tape, guards, n_grad = _pickled_parts(ct)
    state["n_vals"] = 2 ** 27                              # 2 x 1 GiB of arenas
    with pytest.raises(rt.VerificationError, match="MiB"):
        fn(state, None, guards, n_grad)
    with pytest.raises(rt.VerificationError, match="MiB"):
        fn(state, tape, guards, n_grad)
    big = rt.compile(rt.GradientTape(lambda x: np.sum(np.outer(x, x)), np.ones(1100)))
    again = pickle.loads(pickle.dumps(big))                # 1.2e6 values, carried by its tape
    np.testing.assert_array_equal(again.gradient(np.ones(1100)), big.gradient(np.ones(1100)))


def test_what_the_verifier_saw_cannot_be_changed_afterwards():
    ct = _small_program()
    for arr in (ct._code, ct._ints, ct.code, ct.program.code, ct.program.ints):
        with pytest.raises(ValueError):
            arr.setflags(write=True)
        with pytest.raises(ValueError):
            arr[...] = 0


def test_a_guard_location_from_a_pickle_is_never_read(tmp_path):
    secret = tmp_path / "secret.py"
    secret.write_text("TOP SECRET CONTENTS\n")
    ct = rt.compile(rt.GradientTape(_two_guards, np.array([1.0, 2.0, 0.5])))
    fn, state, tape, guards, n_grad = _pickled_parts(ct)
    state["guards"] = [({**params, "where": (str(secret), 1)}, a, b)
                       for params, a, b in state["guards"]]
    loaded = pickle.loads(pickle.dumps(fn(state, tape, guards, n_grad)))
    with pytest.raises(rt.BranchChanged) as e:
        loaded.gradient(np.array([-1.0, 2.0, 0.5]))
    assert str(secret) in str(e.value) and "SECRET" not in str(e.value)
    # a whole tape from a pickle: its own recorded locations are not read either
    t2 = pickle.loads(pickle.dumps(ct.tape))
    with pytest.raises(rt.BranchChanged) as e:
        t2.gradient(np.array([-1.0, 2.0, 0.5]))
    assert "x[0] > 0.0" not in str(e.value)
    with pytest.raises(rt.BranchChanged) as e:     # in-process recordings quote their line
        ct.gradient(np.array([-1.0, 2.0, 0.5]))
    assert "x[0] > 0.0" in str(e.value)


def _mutations():
    def setter(key, values):
        return st.tuples(st.just(key), st.sampled_from(values))
    ints = [-1, 0, 1, 2, 3, 4, 5, 7, 100, 2 ** 20, 2 ** 31 - 1, 2 ** 31, -2 ** 31, 2 ** 40,
            True, 1.0, "3", None]
    return st.one_of(
        *(setter(k, ints) for k in ("n_in", "n_grad", "n_fixed", "n_vals", "out_off",
                                    "value_off")),
        setter("out_shape", [(), (1,), (2,), (4,), (0,), (-1,), (2, 2), (10 ** 6,), [1], None,
                             (1.5,)]),
        setter("inputs", [[], [(0, (4,), False)], [(0, (5,), False)], [(0, (3,), False)],
                          [(0, (), True)], [(1, (4,), False)], [(0, (2,), False), (2, (2,), False)],
                          [(0, (4,), True)], [(0, (-4,), False)], [(0, (4,))], "x", None]),
        setter("guards", [[], [({"pred": "gt", "expected": True, "where": ("f", 1), "index": 0},
                                0, 0)] * 3, [None], "x",
                          [({"pred": "zz", "expected": True, "where": ("f", 1), "index": 0}, 0, 0)]]),
        setter("consts", [np.zeros(0), np.zeros(1), np.zeros(100), np.zeros((2, 2)), [0.0],
                          np.zeros(3, dtype=np.float32)]),
        setter("ints", [np.zeros(0, np.int32), np.arange(100, dtype=np.int32),
                        np.zeros((2, 2), np.int32), np.zeros(3, np.int64), [1, 2]]),
        setter("code", ["shape", "dtype", "rows", "flat"]),
        setter("n_grad_arg", [None, 0, 1, 2, -1, 5, 1.0]),
        setter("tape", ["keep", "none", "other", "junk"]),
    )


@pytest.mark.slow     # a fuzzing campaign: 250 pickles
@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_mutations(), min_size=1, max_size=4), st.sampled_from(["grad", "hess", "tuple"]))
def test_fuzz_mutated_pickled_metadata_is_refused_or_replays_safely(mutations, kind):
    f = lambda x: np.sum(np.exp(x) * x[0]) + (x[1] * x[2] if x[1] > 0 else x[2])
    x0 = np.array([0.3, 0.2, 0.5, 0.1])
    base = _FUZZ_BASES.setdefault(kind, {
        "grad": lambda: rt.compile(rt.GradientTape(f, x0)),
        "hess": lambda: rt.compile(rt.HessianTape(f, x0)),
        "tuple": lambda: _CompiledTape(rt.GradientTape(lambda a, b: np.sum(a * b) + b[0] ** 3,
                                                       (x0[:2], x0[2:])), n_grad=1),
    }[kind]())
    fn, state, tape, guards, n_grad = _pickled_parts(base)
    for key, value in mutations:
        if key == "code":
            c = state["code"]
            state["code"] = {"shape": lambda: c.reshape(-1), "dtype": lambda: c.astype(np.int64),
                             "rows": lambda: c[:-1],
                             "flat": lambda: c.reshape(-1)[:c.size // 3 * 3].reshape(-1, 3)}[value]()
        elif key == "n_grad_arg":
            n_grad = value
        elif key == "tape":
            tape = {"keep": tape, "none": None, "other": _FUZZ_BASES.get("grad", base).tape,
                    "junk": "junk"}[value]
        else:
            state[key] = value
    try:
        ct = pickle.loads(pickle.dumps(fn(state, tape, guards, n_grad)))
    except rt.RevtapeError:
        event("refused")
        return
    event("accepted")
    # accepted: every number C trusts agrees with the buffers Python hands it
    prog = ct.program
    assert sum(math.prod(s) for _, s, _ in prog.inputs) == prog.n_in
    assert sum(math.prod(s) for s in ct._grad_shapes) == prog.n_grad
    xs = [np.full(s, 0.4) if s else 0.4 for _, s, _ in prog.inputs]
    x = xs[0] if len(xs) == 1 else tuple(xs)
    v = [np.ones(s) if s else 1.0 for s in ct._grad_shapes]
    calls = [lambda: ct.forward(x), lambda: ct.value_and_gradient(x), lambda: ct.jacobian(x),
             lambda: ct.jvp(x, v[0] if len(v) == 1 else tuple(v)),
             lambda: ct.vjp(x, np.ones(prog.out_shape)), lambda: ct.hessian(x),
             lambda: ct.hvp(x, v[0] if len(v) == 1 else tuple(v))]
    for call in calls:
        try:
            call()
        except rt.RevtapeError:
            pass
    if ct.tape is not None:
        rt.value(ct.tape.output)


_FUZZ_BASES = {}
from revtape.runtime.compiled import CompiledTape as _CompiledTape  # noqa: E402


# ------------------------------------------------ reference cycles

def test_dropped_tapes_and_compiled_tapes_die_without_the_cyclic_collector():
    import weakref
    was = gc.isenabled()
    gc.disable()
    try:
        for kind in ("grad", "hess", "bind"):
            tape = (rt.HessianTape if kind == "hess" else rt.GradientTape)(
                lambda x: np.sum(np.sin(x) * x) + (x[0] if x[1] > 0 else -x[0]), np.ones(5))
            ct = rt.compile(tape)
            ct.value_and_gradient(np.full(5, 0.5))
            if kind == "grad":
                tape.hvp(np.full(5, 0.5), np.ones(5))      # caches a traced gradient tape
                copy.deepcopy(ct).gradient(np.full(5, 0.5))
            if kind == "bind":
                run = ct.bind(np.full(5, 0.5), np.empty(5))
                run()
                ct.hvp(np.full(5, 0.5), np.ones(5))
                del run
            inp, out = tape.inputs[0], tape.output
            rt.value(out)
            refs = [weakref.ref(o) for o in (tape, ct, inp, out)]
            del tape, ct, inp, out
            assert [r() for r in refs] == [None] * 4, kind
    finally:
        if was:
            gc.enable()


@pytest.mark.slow     # a soak: record-compile-drop loops
def test_record_compile_replay_drop_loops_keep_memory_bounded_with_gc_off():
    x = np.linspace(-1.0, 1.0, 200_000)
    f = lambda x: np.sum(np.exp(0.1 * x) * x ** 2)
    was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(3):
            rt.compile(rt.GradientTape(f, x)).value_and_gradient(x)
        before = _rss_kib()
        for _ in range(100):
            tape = rt.GradientTape(f, x)
            ct = rt.compile(tape)
            ct.value_and_gradient(x + 0.1)
            rt.value(tape.output)
            del tape, ct
        grown = _rss_kib() - before
    finally:
        if was:
            gc.enable()
    # one loop holds ~15 MB (tape values, two arenas); 100 leaked loops were 1.4 GB
    assert grown < 64 * 1024, f"RSS grew by {grown} KiB over 100 loops with gc disabled"


@pytest.mark.slow     # a stress test: readers racing replays
def test_rt_value_during_concurrent_replays_never_reads_a_half_written_arena():
    n = 20_000
    tape = rt.GradientTape(lambda x: np.sum(x * x), np.ones(n))
    ct = rt.compile(tape)
    stop, torn, reads = threading.Event(), [], [0]

    def replay(k):
        xs = [np.full(n, float(j)) for j in range(1, 5)]
        i = 0
        while not stop.is_set():
            try:
                ct.value_and_gradient(xs[i % 4])
            except rt.ConcurrentUseError:
                pass
            i += 1

    threads = [threading.Thread(target=replay, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(3000):
            tape._replayed_by = getattr(ct, "_arena", ct)   # as after a replay: read it now
            tape._pull_replay()
            x, y = tape._vals[tape.inputs[0]._id], tape._vals[tape.output._id]
            reads[0] += 1
            if not (np.all(x == x[0]) and y == n * x[0] ** 2):
                torn.append((x[0], y))
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert reads[0] == 3000 and not torn, f"{len(torn)} reads mixed two replays"


def test_changing_ctape_program_after_loading_changes_nothing_c_sees():
    ct = rt.compile(rt.GradientTape(lambda x: np.sum(x ** 2), np.ones(4)))
    x = np.arange(4.0)
    prog = ct.program
    prog.n_in, prog.n_grad, prog.out_shape = 10 ** 6, 10 ** 6, (10 ** 6,)
    prog.inputs.clear() if isinstance(prog.inputs, list) else None
    assert ct.program.n_in == 4 and ct.program.out_shape == ()
    assert ct.forward(x) == 14.0
    np.testing.assert_array_equal(ct.gradient(x), 2 * x)
    np.testing.assert_array_equal(ct.jacobian(x), 2 * x)
    assert ct.jvp(x, np.ones(4)) == 12.0
    rt.value(ct.tape.output)


def test_a_batch_refused_at_a_row_reports_that_rows_guard_and_leaves_one_replay():
    tape = rt.GradientTape(_two_guards, np.array([1.0, 2.0, 0.5]))
    ct = rt.compile(tape)
    X = np.array([[1.0, 2.0, 0.5], [2.0, 3.0, 1.0], [1.5, 0.5, 0.25], [3.0, 3.0, 3.0]])
    with pytest.raises(rt.BranchChanged) as e:
        ct.batch_value_and_gradient(X)
    assert e.value.row == 2 and e.value.guard == 1 and e.value.operands == (0.5, 1.0)
    x = rt.value(tape.inputs[0])
    assert rt.value(tape.output) == tape.forward(x)     # inputs and output of one replay
    tape._replayed_by = ct._arena      # the arena itself holds the last complete row
    np.testing.assert_array_equal(rt.value(tape.inputs[0]), X[1])
    assert rt.value(tape.output) == ct.batch_value_and_gradient(X[:2])[0][1]


def test_a_failing_callback_reports_its_own_threads_error():
    @rt.primitive
    def picky(x):
        if x < 0:
            raise ValueError(f"picky refuses {x!r}")
        return x * 2.0

    rt.defvjp(picky, lambda ans, x: lambda g: 2.0 * g)
    ct = rt.compile(rt.GradientTape(lambda x: picky(x) + x, 1.0))
    seen = []

    def work(k):
        x = -1.0 - k
        for _ in range(3000):
            try:
                ct.value_and_gradient(x)
            except rt.ConcurrentUseError:
                continue
            except ValueError as e:
                seen.append((k, str(e)))
            except rt.RevtapeError as e:
                seen.append((k, str(e)))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        _hammer(3, work)
    finally:
        sys.setswitchinterval(interval)
    wrong = [(k, msg) for k, msg in seen if msg != f"picky refuses {-1.0 - k!r}"]
    assert seen and not wrong, f"{len(wrong)} of {len(seen)} errors were another thread's"



def test_the_words_of_batch_programs_cannot_be_changed_after_verification():
    wl = workloads.eight_schools()
    ct = rt.compile(rt.GradientTape(wl.f, wl.x0))
    X = wl.x0 + 0.01 * np.arange(40.0)[:, None]
    ct.batch_value_and_gradient(X)                     # builds the wide program
    assert ct._wide_arenas
    for arena in ct._wide_arenas:
        with pytest.raises(ValueError):
            arena.code.setflags(write=True)


def test_pivots_overwritten_between_sweeps_never_index_out_of_bounds():
    # The LU pivots of a solve are data in the value arena between the forward
    # and the reverse sweep; a crafted program can overwrite them (the verifier
    # checks offsets, not values).  The reverse sweep must check them.
    A = np.array([[2.0, 0.3, 0.1], [0.3, 1.5, 0.2], [0.1, 0.2, 1.0]])
    ct = rt.compile(rt.GradientTape(lambda x: np.sum(np.linalg.solve(A + np.diag(x ** 2), x)),
                                    np.array([0.2, 0.5, 0.9])))
    fn, state, tape, guards, n_grad = _pickled_parts(ct)
    code = state["code"]
    k = next(i for i, row in enumerate(code) if ops.VM_OPCODES[row[0] & 0xFFFF] == "SOLVE")
    N, scratch = int(state["ints"][code[k, 5]]), int(state["ints"][code[k, 5] + 3])
    piv, a = scratch + N * N, int(code[k, 3])
    exp = ops.VM_OPCODES.index("EXP")
    crafted = [[exp, 1, piv, a, 0, 0]]       # pivot 0 -> e^A[0,0] ~ 7.7 > N (no in-place write: refused)
    state["code"] = np.ascontiguousarray(
        np.concatenate([code[:k + 1], np.array(crafted, np.int32), code[k + 1:]]), np.int32)
    bad = fn(state, None, guards, n_grad)
    g = bad.gradient(np.array([0.2, 0.5, 0.9]))
    assert np.isnan(g).all()
    assert np.isnan(bad.jacobian(np.array([0.2, 0.5, 0.9]))).all()
