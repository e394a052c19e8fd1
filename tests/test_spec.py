"""SPEC conformance: one short user-side test per promise of revtape's product
specification (SPEC, the contract the package is built to), with the names
exactly as SPEC writes them."""

import copy
import pickle
import subprocess
import sys
import textwrap
import threading
import types
from collections import namedtuple
from dataclasses import dataclass

import numpy as np
import pytest

import revtape as rt

try:
    import scipy.special as sps
    import scipy.stats as sst
    import scipy.linalg as sla
except ImportError:                      # the scipy-free CI job
    sps = sst = sla = None

needs_scipy = pytest.mark.skipif(sps is None, reason="scipy not installed")


def _need(obj, *names):
    for n in names:
        obj = getattr(obj, n)          # a missing SPEC name fails the test
    return obj


def f_quad(x):
    return np.sum(x ** 2) + np.sin(x[0]) * x[1]


def g_quad(x):
    g = 2 * x.copy()
    g[0] += np.cos(x[0]) * x[1]
    g[1] += np.sin(x[0])
    return g


X0 = np.array([0.3, -1.2, 2.0])


# ------------------------------------------------------------------ Recording
def test_tape_track_finish_recording_inputs_output():
    tape = rt.Tape()
    assert tape.recording is True
    a = tape.track(1.5)
    b = tape.track(np.array([1.0, 2.0]))
    i = tape.track(np.array([1, 2]))
    assert isinstance(a, rt.TrackedReal) and isinstance(b, rt.TrackedArray)
    assert rt.value(i).dtype == np.float64
    y = a * np.sum(b) + np.sum(i)
    assert tape.finish(y) is tape
    assert tape.recording is False
    assert len(tape.inputs) == 3 and tape.output is y
    assert rt.value(y) == 1.5 * 3.0 + 3.0


def test_tape_track_any_shape():
    tape = rt.Tape()
    x = tape.track(np.ones((2, 3, 4)))
    assert isinstance(x, rt.TrackedArray) and x.shape == (2, 3, 4)


def test_null_tape_value_istracked_tape_of():
    assert rt.tape_of(1.0) is rt.NULL_TAPE
    assert rt.tape_of(np.ones(2)) is rt.NULL_TAPE
    assert rt.istracked(1.0) is False
    assert rt.value(2.5) == 2.5
    tape = rt.Tape()
    x = tape.track(2.0)
    assert rt.istracked(x) and rt.tape_of(x) is tape and rt.value(x) == 2.0


def test_values_after_replay_reference_and_compiled():
    tape = rt.GradientTape(f_quad, X0)
    x1 = X0 + 1.0
    tape.gradient(x1)
    assert rt.value(tape.output) == pytest.approx(f_quad(x1), rel=1e-14)
    np.testing.assert_array_equal(rt.value(tape.inputs[0]), x1)
    ctape = rt.compile(tape)
    x2 = X0 - 0.5
    ctape.value_and_gradient(x2)
    assert rt.value(tape.output) == pytest.approx(f_quad(x2), rel=1e-14)
    np.testing.assert_array_equal(rt.value(tape.inputs[0]), x2)


def _check(f, x, g_expected=None, rtol=1e-10):
    v, g = rt.value_and_gradient(f, x)
    assert v == pytest.approx(f(x), rel=1e-12)
    c = rt.compile(rt.GradientTape(f, x))
    v2, g2 = c.value_and_gradient(x)
    assert v2 == pytest.approx(v, rel=1e-12)
    np.testing.assert_allclose(g2, g, rtol=1e-12, atol=1e-14)
    if g_expected is not None:
        np.testing.assert_allclose(g, g_expected, rtol=rtol, atol=1e-12)
    else:
        h = 1e-6
        fd = np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(x.size)])
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7)
    return g


OPS = {
    "arith": lambda x: np.sum((x * 2 - 1) / (x + 3) + x ** 2 - (-x)),
    "compare": lambda x: np.sum(np.where(x > 0, x, 2 * x)),
    "index_slice": lambda x: x[0] * x[2] + np.sum(x[1:]) + np.sum(x[::-1] * x),
    "ufuncs": lambda x: np.sum(np.exp(x) + np.log1p(x ** 2) + np.tanh(x) + np.sqrt(x ** 2 + 1)),
    "sum": lambda x: np.sum(x),
    "dot": lambda x: np.dot(x, x),
    "matmul": lambda x: x @ np.arange(3.0),
    "where": lambda x: np.sum(np.where(x > 0.5, x ** 2, x)),
    "concatenate": lambda x: np.sum(np.concatenate([x, 2 * x]) ** 2),
    "stack": lambda x: np.sum(np.stack([x, x ** 2]) ** 2),
    "reshape_transpose": lambda x: np.sum(np.reshape(np.concatenate([x, x]), (2, 3)).T
                                          @ np.ones(2) * x),
    "method_reshape": lambda x: np.sum(x.reshape(3, 1).T ** 3),
    "mean_max": lambda x: np.mean(x ** 2) + np.max(x),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_numpy_operations_on_tracked_values(name):
    _check(OPS[name], X0)


@needs_scipy
@pytest.mark.parametrize("name", ["gammaln", "digamma", "expit", "log_expit", "erf"])
def test_scipy_special_unary_on_tracked(name):
    fn = getattr(sps, name)
    _check(lambda x: np.sum(fn(x)), np.array([0.7, 1.3, 2.5]))


@needs_scipy
def test_scipy_special_xlogy_and_logsumexp_on_tracked():
    x = np.array([0.7, 1.3, 2.5])
    _check(lambda x: np.sum(sps.xlogy(x, x + 1)), x)
    g = _check(lambda x: sps.logsumexp(x), x)
    np.testing.assert_allclose(g, np.exp(x - sps.logsumexp(x)), rtol=1e-12)


def test_array_ops_are_one_instruction():
    tape = rt.GradientTape(lambda x: np.sum(np.exp(x)), np.ones(1000))
    assert len(rt.compile(tape).code) < 10


# ------------------------------------------------------------------ whole-function helpers
def test_whole_function_helpers():
    tape = rt.GradientTape(f_quad, X0)
    assert not tape.recording
    np.testing.assert_allclose(rt.gradient(f_quad, X0), g_quad(X0), rtol=1e-13)
    np.testing.assert_allclose(rt.gradient(tape, X0), g_quad(X0), rtol=1e-13)
    ct = rt.compile(tape)
    np.testing.assert_allclose(rt.gradient(ct, X0), g_quad(X0), rtol=1e-13)
    out = np.empty(3)
    r = rt.gradient(ct, X0, out=out)
    np.testing.assert_allclose(out, g_quad(X0), rtol=1e-13)
    assert r is out or np.shares_memory(r, out)
    v, g = rt.value_and_gradient(f_quad, X0)
    assert v == pytest.approx(f_quad(X0)) and np.allclose(g, g_quad(X0))
    v, g = rt.value_and_gradient(tape, X0)
    assert v == pytest.approx(f_quad(X0))


def test_jacobian_hessian_hvp_helpers():
    A = np.arange(6.0).reshape(2, 3)
    J = rt.jacobian(lambda x: A @ x, X0)
    np.testing.assert_allclose(J, A)
    jt = rt.JacobianTape(lambda x: A @ x, X0)
    np.testing.assert_allclose(rt.jacobian(jt, X0), A)
    np.testing.assert_allclose(rt.jacobian(rt.compile(jt), X0), A)
    f = lambda x: np.sum(x ** 3)
    H = rt.hessian(f, X0)
    np.testing.assert_allclose(H, np.diag(6 * X0), atol=1e-12)
    ht = rt.HessianTape(f, X0)
    np.testing.assert_allclose(rt.hessian(ht, X0), np.diag(6 * X0), atol=1e-12)
    np.testing.assert_allclose(rt.hessian(rt.compile(ht), X0), np.diag(6 * X0), atol=1e-12)
    v = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(rt.hvp(f, X0, v), 6 * X0 * v, atol=1e-12)


def test_tuple_x_and_float_x():
    f = lambda t: t[0] * np.sum(t[1] ** 2)
    x = (2.0, np.array([1.0, 3.0]))
    g = rt.gradient(f, x)
    assert isinstance(g, tuple) and len(g) == 2
    assert np.shape(g[0]) == () and g[1].shape == (2,)
    assert float(g[0]) == pytest.approx(10.0)
    np.testing.assert_allclose(g[1], [4.0, 12.0])
    ct = rt.compile(rt.GradientTape(f, x))
    g2 = ct.gradient(x)
    np.testing.assert_allclose(g2[1], g[1])
    assert rt.gradient(lambda a: a ** 3, 2.0) == pytest.approx(12.0)


# ------------------------------------------------------------------ function transforms
def test_grad_value_and_grad_cache_info():
    g = rt.grad(f_quad)
    np.testing.assert_allclose(g(X0), g_quad(X0), rtol=1e-13)
    np.testing.assert_allclose(g(X0 + 1), g_quad(X0 + 1), rtol=1e-13)
    info = g.cache_info()
    assert info is not None
    vg = rt.value_and_grad(f_quad)
    v, gr = vg(X0)
    assert v == pytest.approx(f_quad(X0)) and np.allclose(gr, g_quad(X0))


def test_grad_argnums_and_data_arguments_reread():
    def f(x, data):
        return np.sum(x * data)
    g = rt.grad(f)
    np.testing.assert_allclose(g(X0, np.ones(3)), np.ones(3))
    np.testing.assert_allclose(g(X0, np.full(3, 2.0)), np.full(3, 2.0))
    g1 = rt.grad(f, argnums=1)
    np.testing.assert_allclose(g1(X0, np.ones(3)), X0)
    g01 = rt.grad(f, argnums=(0, 1))
    a, b = g01(X0, np.ones(3))
    np.testing.assert_allclose(a, np.ones(3)) and np.testing.assert_allclose(b, X0)


def test_grad_on_stale_raise_and_rerecord():
    def f(x):
        return x ** 2 if x > 0 else -x
    g = rt.grad(f, on_stale="raise")
    assert g(2.0) == pytest.approx(4.0)
    with pytest.raises(rt.StaleTape):
        g(-1.0)
    g2 = rt.grad(f)
    assert g2(2.0) == pytest.approx(4.0)
    assert g2(-1.0) == pytest.approx(-1.0)


SCALE = 2.0


def _uses_global(x):
    return SCALE * np.sum(x)


def test_grad_rerecords_when_global_rebound():
    global SCALE
    g = rt.grad(_uses_global)
    np.testing.assert_allclose(g(X0), np.full(3, 2.0))
    SCALE = 5.0
    try:
        np.testing.assert_allclose(g(X0), np.full(3, 5.0))
    finally:
        SCALE = 2.0


# ------------------------------------------------------------------ replay
def test_replay_methods_reference_and_compiled():
    tape = rt.GradientTape(f_quad, X0)
    ct = rt.compile(tape)
    assert isinstance(ct, rt.CompiledTape)
    x = X0 * 1.7
    for t in (tape, ct):
        assert t.forward(x) == pytest.approx(f_quad(x), rel=1e-14)
        np.testing.assert_allclose(t.gradient(x), g_quad(x), rtol=1e-13)
        out = np.empty(3)
        v, g = t.value_and_gradient(x, out=out)
        np.testing.assert_allclose(out, g_quad(x), rtol=1e-13)
        out2 = np.empty(3)
        t.gradient(x, out=out2)
        np.testing.assert_allclose(out2, g_quad(x), rtol=1e-13)
    assert ct.forward(x) == tape.forward(x)


def test_ctape_code_is_read_only_view():
    ct = rt.compile(rt.GradientTape(f_quad, X0))
    code = ct.code
    assert isinstance(code, np.ndarray) and np.issubdtype(code.dtype, np.integer)
    assert not code.flags.writeable
    with pytest.raises(ValueError):
        code[0, 0] = 99 if code.ndim == 2 else 0


def test_bind_fast_path():
    ct = rt.compile(rt.GradientTape(f_quad, X0))
    xb, gb = X0.copy(), np.empty(3)
    run = ct.bind(xb, gb)
    assert run() == pytest.approx(f_quad(X0))
    np.testing.assert_allclose(gb, g_quad(X0), rtol=1e-13)
    xb[:] = X0 + 1
    assert run() == pytest.approx(f_quad(X0 + 1))
    np.testing.assert_allclose(gb, g_quad(X0 + 1), rtol=1e-13)
    with pytest.raises(rt.RevtapeError):
        ct.bind(np.empty(4), gb)
    with pytest.raises(rt.RevtapeError):
        ct.bind(xb, np.empty(3, dtype=np.float32))


def _branchy(x):
    return np.sum(x ** 2) if x[0] > 0 else np.sum(x)


def test_guards_branch_changed_and_guards_false():
    tape = rt.GradientTape(_branchy, X0)
    with pytest.raises(rt.BranchChanged):
        tape.gradient(-X0)
    ct = rt.compile(tape)
    with pytest.raises(rt.BranchChanged):
        ct.gradient(-X0)
    assert issubclass(rt.BranchChanged, rt.RevtapeError)
    np.testing.assert_allclose(ct.gradient(X0), 2 * X0)   # usable after the failure
    nog = rt.compile(tape, guards=False)
    np.testing.assert_allclose(nog.gradient(-X0), -2 * X0)


def test_compiled_equals_reference_bitwise_elementwise():
    f = lambda x: np.sum(np.exp(x) * np.sin(x) + np.log1p(x * x))
    tape = rt.GradientTape(f, X0)
    ct = rt.compile(tape)
    x = X0 + 0.123
    v1, g1 = tape.value_and_gradient(x)
    v2, g2 = ct.value_and_gradient(x)
    np.testing.assert_allclose(v2, v1, rtol=1e-12)
    np.testing.assert_allclose(g2, g1, rtol=1e-12)


# ------------------------------------------------------------------ errors
ERRORS = ["InputError", "TapeMixError", "TapeFinishedError", "OutputError",
          "VerificationError", "BranchChanged", "StaleTape", "ConversionError",
          "UnsupportedError"]


@pytest.mark.parametrize("name", ERRORS)
def test_error_classes_subclass_revtape_error(name):
    assert issubclass(getattr(rt, name), rt.RevtapeError)


@pytest.mark.parametrize("bad", [np.ones(4), np.ones((3, 1)), np.array(["a", "b", "c"]),
                                 np.ones(3, dtype=complex)])
def test_error_wrong_input_shape_or_dtype_leaves_tape_usable(bad):
    tape = rt.GradientTape(f_quad, X0)
    ct = rt.compile(tape)
    for t in (tape, ct):
        with pytest.raises(rt.RevtapeError) as e:
            t.gradient(bad)
        assert str(e.value)
        np.testing.assert_allclose(t.gradient(X0), g_quad(X0), rtol=1e-13)


@pytest.mark.parametrize("out", [np.empty(4), np.empty(3, dtype=np.float32),
                                 np.empty(3, dtype=np.int64)])
def test_error_wrong_out(out):
    tape = rt.GradientTape(f_quad, X0)
    for t in (tape, rt.compile(tape)):
        with pytest.raises(rt.RevtapeError):
            t.gradient(X0, out=out)
        with pytest.raises(rt.RevtapeError):
            t.value_and_gradient(X0, out=out)


def test_error_mixing_two_recording_tapes():
    t1, t2 = rt.Tape(), rt.Tape()
    a, b = t1.track(1.0), t2.track(2.0)
    with pytest.raises(rt.TapeMixError):
        a + b


def test_error_operation_on_finished_tape():
    t = rt.Tape()
    a = t.track(1.0)
    t.finish(a * 2)
    with pytest.raises(rt.TapeFinishedError):
        a * 3


def test_error_non_scalar_output_for_gradient():
    with pytest.raises(rt.OutputError):
        rt.gradient(lambda x: x * 2, X0)
    jt = rt.JacobianTape(lambda x: x * 2, X0)
    with pytest.raises(rt.OutputError):
        jt.gradient(X0)
    with pytest.raises(rt.OutputError):
        rt.compile(jt).gradient(X0)


# ------------------------------------------------------------------ non-finite values
def test_nonfinite_inputs_are_values():
    f = lambda x: np.sum(np.log(x))
    ct = rt.compile(rt.GradientTape(f, np.ones(3)))
    with np.errstate(all="ignore"):
        v = ct.forward(np.array([1.0, -1.0, 2.0]))
        assert np.isnan(v)
        v, g = ct.value_and_gradient(np.array([1.0, 0.0, 2.0]))
        assert v == -np.inf
        v = ct.forward(np.array([1.0, np.nan, 2.0]))
        assert np.isnan(v)
        ht = rt.compile(rt.HessianTape(lambda x: np.sum(x ** 3), np.ones(3)))
        r = ht.hvp(np.ones(3), np.array([np.nan, 1.0, np.inf]))
        assert np.isnan(r[0]) and r[1] == 6.0 and r[2] == np.inf


def test_nonfinite_guard_follows_numpy_comparison():
    ct = rt.compile(rt.GradientTape(_branchy, X0))
    with pytest.raises(rt.BranchChanged):      # nan > 0 is False
        ct.gradient(np.array([np.nan, 1.0, 1.0]))


# ------------------------------------------------------------------ copy semantics
@dataclass
class DC:
    a: object
    b: object


NT = namedtuple("NT", "a b")


def test_deepcopy_while_recording_returns_same_tracked_object():
    tape = rt.Tape()
    x = tape.track(np.array([1.0, 2.0]))
    s = tape.track(3.0)
    assert copy.deepcopy(x) is x and copy.copy(x) is x and copy.deepcopy(s) is s
    lst = copy.deepcopy([x, s])
    assert lst[0] is x and lst[1] is s
    assert copy.deepcopy((x, s))[0] is x
    assert copy.deepcopy({"k": s})["k"] is s
    d = copy.deepcopy(DC(x, s))
    assert d.a is x and d.b is s
    n = copy.deepcopy(NT(x, s))
    assert n.a is x and n.b is s
    obj = np.empty(2, dtype=object)
    obj[0], obj[1] = s, s * 2
    oc = copy.deepcopy(obj)
    assert oc[0] is s
    y = np.sum(lst[0] ** 2) * d.b
    tape.finish(y)
    np.testing.assert_allclose(tape.gradient([1.0, 2.0]) if False else
                               rt.value(y), 15.0)


def test_deepcopy_while_recording_gives_right_gradient():
    def f(x):
        params = copy.deepcopy({"w": x})
        return np.sum(params["w"] ** 2)
    np.testing.assert_allclose(rt.gradient(f, X0), 2 * X0)


def test_deepcopy_finished_tape_is_independent():
    tape = rt.GradientTape(f_quad, X0)
    t2 = copy.deepcopy(tape)
    assert t2 is not tape and t2.output is not tape.output
    t2.gradient(X0 + 1)
    np.testing.assert_array_equal(rt.value(tape.inputs[0]), X0)
    np.testing.assert_allclose(t2.gradient(X0), g_quad(X0), rtol=1e-13)


def test_null_tape_never_copied():
    assert copy.copy(rt.NULL_TAPE) is rt.NULL_TAPE
    assert copy.deepcopy(rt.NULL_TAPE) is rt.NULL_TAPE
    assert pickle.loads(pickle.dumps(rt.NULL_TAPE)) is rt.NULL_TAPE


def test_deepcopy_ctape_recompiles_and_survives_original():
    ct = rt.compile(rt.GradientTape(f_quad, X0))
    c2 = copy.deepcopy(ct)
    assert not np.shares_memory(c2.code, ct.code)
    del ct
    import gc
    gc.collect()
    np.testing.assert_allclose(c2.gradient(X0 + 1), g_quad(X0 + 1), rtol=1e-13)


def test_pickle_tape_and_ctape():
    tape = rt.GradientTape(f_quad, X0)
    t2 = pickle.loads(pickle.dumps(tape))
    np.testing.assert_allclose(t2.gradient(X0 + 1), g_quad(X0 + 1), rtol=1e-13)
    c2 = pickle.loads(pickle.dumps(rt.compile(tape)))
    assert isinstance(c2, rt.CompiledTape)
    np.testing.assert_allclose(c2.gradient(X0 + 1), g_quad(X0 + 1), rtol=1e-13)


def test_copies_replay_in_parallel_threads():
    ct = rt.compile(rt.GradientTape(f_quad, X0))
    copies = [copy.deepcopy(ct) for _ in range(4)]
    errs = []

    def work(c, k):
        try:
            for i in range(200):
                x = X0 + 0.01 * (i + k)
                np.testing.assert_allclose(c.gradient(x), g_quad(x), rtol=1e-12)
        except Exception as e:            # pragma: no cover - reported below
            errs.append(e)
    ts = [threading.Thread(target=work, args=(c, k)) for k, c in enumerate(copies)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errs


# ------------------------------------------------------------------ flat program
def test_flat_program_dce_and_constant_folding():
    def f(x):
        unused = np.exp(x) * 3             # never reaches the output
        c = np.exp(np.ones(3)) * 2         # constants only
        return np.sum(x * c)
    ct = rt.compile(rt.GradientTape(f, X0))
    small = rt.compile(rt.GradientTape(lambda x: np.sum(x * 5.0), X0))
    assert len(ct.code) <= len(small.code)
    np.testing.assert_allclose(ct.gradient(X0), 2 * np.e * np.ones(3), rtol=1e-14)


# ------------------------------------------------------------------ Additions (second wave)
def test_import_without_scipy():
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "scipy" or name.startswith("scipy."):
                    raise ImportError("scipy blocked")
        sys.meta_path.insert(0, Block())
        import numpy as np
        import revtape as rt
        assert "scipy" not in sys.modules
        g = rt.compile(rt.GradientTape(lambda x: np.sum(np.exp(x)), np.ones(3)))
        assert np.allclose(g.gradient(np.zeros(3)), 1.0)
        print(rt.special.gammaln(3.0), rt.special.logsumexp(np.zeros(2)))
        if STRICT:      # once rt.stats/rt.bijectors exist they must import without scipy
            print(rt.stats.norm.logpdf(0.5, loc=1.0), rt.bijectors.exp.forward(0.5))
            rt.gradient(lambda x: np.sum(rt.stats.norm.logpdf(x)), np.ones(2))
        print("ok")
    """).replace("STRICT", str(hasattr(rt, "stats") and hasattr(rt, "bijectors")))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "ok" in r.stdout


@pytest.mark.parametrize("name", ["special", "stats", "bijectors"])
def test_submodules_are_attributes(name):
    mod = _need(rt, name)
    assert isinstance(mod, types.ModuleType) and mod.__name__ == f"revtape.{name}"


def test_grad_objects_threads_deepcopy_pickle():
    g = rt.grad(f_quad)
    errs = []

    def work(k):
        try:
            for i in range(50):
                x = X0 + 0.01 * (i + k)
                np.testing.assert_allclose(g(x), g_quad(x), rtol=1e-12)
        except Exception as e:
            errs.append(e)
    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errs, errs[:1]
    g2 = copy.deepcopy(g)
    np.testing.assert_allclose(g2(X0), g_quad(X0), rtol=1e-13)
    g3 = pickle.loads(pickle.dumps(g))
    np.testing.assert_allclose(g3(X0), g_quad(X0), rtol=1e-13)


def _noisy(x, rng):
    return np.sum(x * rng.normal(size=3))


def test_random_draws_fresh_on_each_call():
    g = rt.grad(_noisy)
    rng = np.random.default_rng(0)
    with pytest.warns(None) if False else _nullcontext():
        a = g(X0, rng)
        b = g(X0, rng)
    assert not np.allclose(a, b)


class _nullcontext:
    def __enter__(self):
        import warnings
        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *a):
        self._w.__exit__(*a)


class Model:
    def __init__(self):
        self.scale = 2.0

    def logp(self, x):
        return self.scale * np.sum(x ** 2)


def test_attribute_guards():
    m = Model()
    g = rt.grad(m.logp)
    np.testing.assert_allclose(g(X0), 4 * X0)
    m.scale = 3.0
    np.testing.assert_allclose(g(X0), 6 * X0)


# rt.stats: (dist, method, kwargs, x) checked against scipy.stats
STATS = [
    ("norm", "logpdf", dict(loc=0.3, scale=1.7), 0.9),
    ("norm", "logcdf", dict(loc=0.3, scale=1.7), 0.9),
    ("norm", "logsf", dict(loc=0.3, scale=1.7), 0.9),
    ("halfnorm", "logpdf", dict(loc=0.0, scale=1.7), 0.9),
    ("truncnorm", "logpdf", dict(a=-1.0, b=2.0, loc=0.1, scale=1.3), 0.5),
    ("cauchy", "logpdf", dict(loc=0.3, scale=1.7), 0.9),
    ("halfcauchy", "logpdf", dict(loc=0.0, scale=1.7), 0.9),
    ("t", "logpdf", dict(df=4.5, loc=0.3, scale=1.7), 0.9),
    ("laplace", "logpdf", dict(loc=0.3, scale=1.7), 0.9),
    ("logistic", "logpdf", dict(loc=0.3, scale=1.7), 0.9),
    ("logistic", "logcdf", dict(loc=0.3, scale=1.7), 0.9),
    ("logistic", "logsf", dict(loc=0.3, scale=1.7), 0.9),
    ("expon", "logpdf", dict(loc=0.0, scale=1.7), 0.9),
    ("expon", "logcdf", dict(scale=1.7), 0.9),
    ("expon", "logsf", dict(scale=1.7), 0.9),
    ("gamma", "logpdf", dict(a=2.5, loc=0.0, scale=1.7), 0.9),
    ("gamma", "logcdf", dict(a=2.5, scale=1.7), 0.9),
    ("gamma", "logsf", dict(a=2.5, scale=1.7), 0.9),
    ("invgamma", "logpdf", dict(a=2.5, scale=1.7), 0.9),
    ("beta", "logpdf", dict(a=2.5, b=1.5), 0.3),
    ("lognorm", "logpdf", dict(s=0.8, scale=1.7), 0.9),
    ("uniform", "logpdf", dict(loc=0.1, scale=1.7), 0.9),
    ("weibull_min", "logpdf", dict(c=1.5, scale=1.7), 0.9),
    ("vonmises", "logpdf", dict(kappa=1.5, loc=0.2), 0.9),
    ("poisson", "logpmf", dict(mu=3.5), 2.0),
    ("binom", "logpmf", dict(n=10, p=0.3), 4.0),
    ("nbinom", "logpmf", dict(n=5, p=0.3), 4.0),
    ("bernoulli", "logpmf", dict(p=0.3), 1.0),
    ("geom", "logpmf", dict(p=0.3), 3.0),
    ("betabinom", "logpmf", dict(n=10, a=2.5, b=1.5), 4.0),
]


@needs_scipy
@pytest.mark.parametrize("dist,method,kw,x", STATS, ids=[f"{d}.{m}" for d, m, _, _ in STATS])
def test_stats_against_scipy(dist, method, kw, x):
    fn = _need(rt, "stats", dist, method)
    expect = getattr(getattr(sst, dist), method)(x, **kw)
    assert fn(x, **kw) == pytest.approx(expect, rel=1e-12)
    # differentiable in the first continuous parameter (or x for densities)
    key = next((k for k in ("loc", "scale", "mu", "p", "a", "kappa") if k in kw), None)
    f = lambda th: fn(x, **{**kw, key: th[0]})
    h = 1e-6
    fd = (getattr(getattr(sst, dist), method)(x, **{**kw, key: kw[key] + h})
          - getattr(getattr(sst, dist), method)(x, **{**kw, key: kw[key] - h})) / (2 * h)
    ct = rt.compile(rt.GradientTape(f, np.array([float(kw[key])])))
    v, g = ct.value_and_gradient(np.array([float(kw[key])]))
    assert v == pytest.approx(expect, rel=1e-12)
    assert g[0] == pytest.approx(fd, rel=1e-5, abs=1e-7)


@needs_scipy
def test_stats_multivariate():
    mvn = _need(rt, "stats", "multivariate_normal", "logpdf")
    mean = np.array([0.1, -0.2])
    cov = np.array([[2.0, 0.3], [0.3, 1.0]])
    x = np.array([0.5, 0.4])
    assert mvn(x, mean=mean, cov=cov) == pytest.approx(
        sst.multivariate_normal.logpdf(x, mean=mean, cov=cov), rel=1e-12)
    g = rt.gradient(lambda m: mvn(x, mean=m, cov=cov), mean)
    np.testing.assert_allclose(g, np.linalg.solve(cov, x - mean), rtol=1e-10)
    alpha = np.array([1.5, 2.0, 3.0])
    p = np.array([0.2, 0.3, 0.5])
    assert rt.stats.dirichlet.logpdf(p, alpha=alpha) == pytest.approx(
        sst.dirichlet.logpdf(p, alpha), rel=1e-12)
    k = np.array([2.0, 3.0, 5.0])
    assert rt.stats.multinomial.logpmf(k, n=10, p=p) == pytest.approx(
        sst.multinomial.logpmf(k, n=10, p=p), rel=1e-12)


@needs_scipy
def test_stats_on_tracked_broadcast_and_compiled():
    norm = _need(rt, "stats", "norm", "logpdf")
    data = np.array([0.1, 0.5, -1.0])
    f = lambda th: np.sum(norm(data, loc=th[0], scale=np.exp(th[1])))
    th = np.array([0.2, 0.3])
    ct = rt.compile(rt.GradientTape(f, th))
    assert ct.forward(th) == pytest.approx(np.sum(sst.norm.logpdf(data, 0.2, np.exp(0.3))),
                                           rel=1e-12)


BIJ = [("exp", (), np.array([0.3, -0.5])),
       ("interval", (-1.0, 3.0), np.array([0.3, -0.5])),
       ("simplex", (), np.array([0.3, -0.5])),
       ("ordered", (), np.array([0.3, -0.5, 0.1])),
       ("corr_cholesky", (), np.array([0.3, -0.5, 0.2])),
       ("lower_cholesky", (), np.array([0.3, -0.5, 0.2]))]


@pytest.mark.parametrize("name,args,y", BIJ, ids=[b[0] for b in BIJ])
def test_bijectors(name, args, y):
    b = _need(rt, "bijectors", name)
    if args:
        b = b(*args)
    x = b.forward(y)
    np.testing.assert_allclose(np.ravel(b.inverse(x)), y, rtol=1e-10, atol=1e-12)
    ld = b.forward_log_det_jacobian(y)
    assert np.ndim(ld) == 0
    # log|det J| of the map y -> free coordinates of x: finite differences
    if name in ("exp", "interval", "ordered"):
        h = 1e-6
        J = np.array([(np.ravel(b.forward(y + h * e)) - np.ravel(b.forward(y - h * e))) / (2 * h)
                      for e in np.eye(y.size)]).T
        assert float(ld) == pytest.approx(np.linalg.slogdet(J)[1], rel=1e-6, abs=1e-8)
    # usable inside a tape
    rt.gradient(lambda yy: b.forward_log_det_jacobian(yy) + np.sum(b.forward(yy)), y)


def test_linalg_names():
    rng = np.random.default_rng(1)
    A0 = rng.normal(size=(3, 3))
    S = A0 @ A0.T + 3 * np.eye(3)
    b = np.arange(1.0, 4.0)
    fns = {
        "cholesky": lambda s: np.sum(np.linalg.cholesky(s)),
        "solve": lambda s: np.sum(np.linalg.solve(s, b)),
        "inv": lambda s: np.sum(np.linalg.inv(s)),
        "slogdet": lambda s: np.linalg.slogdet(s)[1],
        "det": lambda s: np.linalg.det(s),
        "trace": lambda s: np.trace(s @ s),
        "diag": lambda s: np.sum(np.diag(s) ** 2) + np.sum(np.diag(np.diag(s))),
        "tril_triu": lambda s: np.sum(np.tril(s) ** 2) + np.sum(np.triu(s, 1) ** 3),
        "einsum": lambda s: np.einsum("ij,jk->", s, s),
        "cumsum": lambda s: np.sum(np.cumsum(s) ** 2),
        "sort": lambda s: np.sum(np.sort(np.ravel(s + A0)) * np.arange(9.0)),   # no ties
    }
    if sla is not None:
        fns["solve_triangular"] = lambda s: np.sum(
            sla.solve_triangular(np.linalg.cholesky(s), b, lower=True))
        fns["cho_solve"] = lambda s: np.sum(sla.cho_solve((np.linalg.cholesky(s), True), b))
    failures = []
    h = 1e-6
    for name, f in fns.items():
        try:
            g = rt.gradient(f, S)
            E = np.zeros((3, 3))
            E[1, 2] = 1.0
            fd = (f(S + h * E) - f(S - h * E)) / (2 * h)
            if name in ("cholesky", "solve_triangular", "cho_solve"):
                # cholesky reads the lower triangle only (numpy's convention)
                E2 = np.zeros((3, 3))
                E2[2, 1] = 1.0
                fd = (f(S + h * E2) - f(S - h * E2)) / (2 * h)
                assert g[2, 1] + g[1, 2] == pytest.approx(fd, rel=1e-5, abs=1e-7)
            elif name not in ("slogdet", "det", "inv", "solve"):
                assert g[1, 2] == pytest.approx(fd, rel=1e-5, abs=1e-7)
            ct = rt.compile(rt.GradientTape(f, S))
            np.testing.assert_allclose(ct.gradient(S), g, rtol=1e-10, atol=1e-12)
        except Exception as e:
            failures.append(f"{name}: {type(e).__name__}: {e}")
    assert not failures, failures


def test_primitive_defvjp_defjvp_stop_gradient():
    @rt.primitive
    def cube(x):
        return x ** 3
    rt.defvjp(cube, lambda ans, x: lambda g: g * 3 * x ** 2)
    assert rt.gradient(lambda x: np.sum(cube(x)), X0) == pytest.approx(3 * X0 ** 2)
    ct = rt.compile(rt.GradientTape(lambda x: np.sum(cube(x)), X0))
    np.testing.assert_allclose(ct.gradient(X0 + 1), 3 * (X0 + 1) ** 2, rtol=1e-12)

    @rt.primitive
    def sq(x):
        return x * x
    rt.defvjp(sq, lambda ans, x: lambda g: 2 * g * x)
    rt.defjvp(sq, lambda g, ans, x: 2 * g * x)
    np.testing.assert_allclose(rt.hessian(lambda x: np.sum(sq(x)), X0), 2 * np.eye(3),
                               atol=1e-12)
    g = rt.gradient(lambda x: np.sum(x * rt.stop_gradient(x)), X0)
    np.testing.assert_allclose(g, X0)


def test_pytrees_in_and_out():
    P = namedtuple("P", "mu sigma")
    params = {"a": 2.0, "b": [np.array([1.0, 2.0]), P(0.5, np.array([3.0]))]}

    def f(p):
        return p["a"] * np.sum(p["b"][0] ** 2) + p["b"][1].mu * np.sum(p["b"][1].sigma)
    g = rt.grad(f)(params)
    assert isinstance(g, dict) and isinstance(g["b"], list) and isinstance(g["b"][1], P)
    assert float(g["a"]) == pytest.approx(5.0)
    np.testing.assert_allclose(g["b"][0], [4.0, 8.0])
    assert float(g["b"][1].mu) == pytest.approx(3.0)
    np.testing.assert_allclose(g["b"][1].sigma, [0.5])
    g2 = rt.gradient(f, params)
    assert isinstance(g2, dict)
    np.testing.assert_allclose(g2["b"][0], [4.0, 8.0])


def test_has_aux_shapes_as_jax():
    def f(x):
        return np.sum(x ** 2), {"n": 3}
    grad, aux = rt.grad(f, has_aux=True)(X0)
    np.testing.assert_allclose(grad, 2 * X0)
    assert aux == {"n": 3}
    (v, aux), grad = rt.value_and_grad(f, has_aux=True)(X0)
    assert v == pytest.approx(np.sum(X0 ** 2)) and aux == {"n": 3}
    np.testing.assert_allclose(grad, 2 * X0)


def test_transforms_without_x():
    f = lambda x: np.sum(x ** 3)
    J = rt.jacobian(lambda x: x ** 2)
    H = rt.hessian(f)
    hv = rt.hvp(f)
    np.testing.assert_allclose(J(X0), np.diag(2 * X0), atol=1e-12)
    np.testing.assert_allclose(H(X0), np.diag(6 * X0), atol=1e-12)
    v = np.array([1.0, 0.0, 2.0])
    np.testing.assert_allclose(hv(X0, v), 6 * X0 * v, atol=1e-12)
    np.testing.assert_allclose(rt.hvp(f, X0, v), 6 * X0 * v, atol=1e-12)


def test_batch_value_and_gradient_and_forward():
    ct = rt.compile(rt.GradientTape(f_quad, X0))
    fn = _need(ct, "batch_value_and_gradient")
    X = np.stack([X0 + k for k in range(5)])
    vals, grads = fn(X)
    assert vals.shape == (5,) and grads.shape == (5, 3)
    for k in range(5):
        assert vals[k] == pytest.approx(f_quad(X[k]), rel=1e-13)
        np.testing.assert_allclose(grads[k], g_quad(X[k]), rtol=1e-12)
    vals2, grads2 = fn(X, threads=2)
    np.testing.assert_allclose(vals2, vals) and np.testing.assert_allclose(grads2, grads)
    out = np.empty((5, 3))
    fn(X, out=out)
    np.testing.assert_allclose(out, grads)
    fv = ct.batch_forward(X)
    assert fv.shape == (5,)
    np.testing.assert_allclose(fv, vals)


def _std_normal(x):
    return -0.5 * np.sum(x ** 2)


def test_logdensity():
    LD = _need(rt, "LogDensity")
    f = _std_normal
    ld = LD(f, X0, names=["a", "b", "c"])
    assert ld.dimension == 3 and list(ld.names) == ["a", "b", "c"]
    assert ld.logdensity(X0) == pytest.approx(f(X0))
    v, g = ld.logdensity_and_gradient(X0)
    assert v == pytest.approx(f(X0)) and np.allclose(g, -X0)
    np.testing.assert_allclose(ld.gradient(X0), -X0)
    neg = ld.negative()
    assert neg.logdensity(X0) == pytest.approx(-f(X0))
    np.testing.assert_allclose(neg.gradient(X0), X0)
    for c in (copy.deepcopy(ld), pickle.loads(pickle.dumps(ld))):
        np.testing.assert_allclose(c.gradient(X0 + 1), -(X0 + 1))
    ld2 = LD(f, X0)
    assert ld2.dimension == 3


# ------------------------------------------------------------------ further promises
@pytest.mark.parametrize("kind", ["bind", "jacobian", "hessian", "hvp", "ref_hvp", "ref_jacobian",
                                  "forward", "rt.gradient(ctape)", "tuple"])
def test_values_after_every_kind_of_replay(kind):
    fq = lambda x: np.sum(x ** 3)
    x = X0 + 1
    if kind == "bind":
        t = rt.GradientTape(fq, X0)
        rt.compile(t).bind(x.copy(), np.empty(3))()
    elif kind == "jacobian":
        t = rt.JacobianTape(lambda x: x ** 2, X0)
        rt.compile(t).jacobian(x)
    elif kind == "ref_jacobian":
        t = rt.JacobianTape(lambda x: x ** 2, X0)
        t.jacobian(x)
    elif kind == "hessian":
        t = rt.HessianTape(fq, X0)
        rt.compile(t).hessian(x)
    elif kind == "hvp":
        t = rt.HessianTape(fq, X0)
        rt.compile(t).hvp(x, np.ones(3))
    elif kind == "ref_hvp":
        t = rt.HessianTape(fq, X0)
        t.hvp(x, np.ones(3))
    elif kind == "forward":
        t = rt.GradientTape(fq, X0)
        rt.compile(t).forward(x)
    elif kind == "rt.gradient(ctape)":
        t = rt.GradientTape(fq, X0)
        rt.gradient(rt.compile(t), x)
    else:
        t = rt.GradientTape(lambda p: p[0] * np.sum(p[1]), (1.0, X0))
        rt.compile(t).gradient((5.0, x))
        assert rt.value(t.inputs[0]) == 5.0
        np.testing.assert_array_equal(rt.value(t.inputs[1]), x)
        assert rt.value(t.output) == pytest.approx(5.0 * np.sum(x))
        return
    np.testing.assert_array_equal(rt.value(t.inputs[0]), x)
    before = rt.value(rt.GradientTape(fq, X0).output)
    assert not np.array_equal(rt.value(t.output), before)


def test_replaying_a_deep_copy_leaves_the_original_tape_alone():
    t = rt.GradientTape(f_quad, X0)
    c = copy.deepcopy(rt.compile(t))
    c.gradient(X0 + 1)
    np.testing.assert_array_equal(rt.value(t.inputs[0]), X0)


@pytest.mark.parametrize("f", [
    lambda x: np.sum(np.exp(x) * np.sin(x)),
    lambda x: np.sum(np.log1p(x * x) + np.tanh(x) / (1 + x * x)),
    lambda x: np.sum((x * x + 1) ** 1.7 + np.sqrt(x * x + 2) * np.cos(x)),
    lambda x: x[0] * x[1] + np.sum(np.exp(x)) * x[2],
    lambda x: np.sum(np.logaddexp(x, 2 * x) + np.arctan2(x, x + 3)),
])
def test_compiled_equals_reference_to_the_last_bit(f):
    t = rt.GradientTape(f, X0)
    x = X0 + 0.37
    v1, g1 = t.value_and_gradient(x)
    v2, g2 = rt.compile(t).value_and_gradient(x)
    assert v1 == v2
    np.testing.assert_array_equal(g1, g2)


def test_one_ctape_shared_by_threads_never_crashes_or_corrupts():
    ct = rt.compile(rt.GradientTape(f_quad, X0))
    errs = []

    def work():
        for _ in range(500):
            try:
                np.testing.assert_array_equal(ct.gradient(X0), g_ref)
            except rt.ConcurrentUseError:
                pass
            except Exception as e:
                errs.append(e)
    g_ref = ct.gradient(X0)
    ts = [threading.Thread(target=work) for _ in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errs, errs[:1]


def test_pickled_ctape_replays_in_another_process():
    ct = rt.compile(rt.GradientTape(f_quad, X0))
    code = ("import pickle, sys, numpy as np; c = pickle.loads(sys.stdin.buffer.read()); "
            "print(repr(c.gradient(np.array([0.3, -1.2, 2.0])).tolist()))")
    r = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(ct), capture_output=True,
                       env={**__import__("os").environ,
                            "PYTHONPATH": __import__("os").pathsep.join(sys.path)})
    assert r.returncode == 0, r.stderr.decode()
    assert eval(r.stdout.decode()) == ct.gradient(X0).tolist()


def test_value_and_grad_from_threads_matches_serial_bit_for_bit():
    g = rt.value_and_grad(f_quad)
    xs = [X0 + 0.001 * i for i in range(200)]
    serial = [g(x) for x in xs]
    out = [None] * len(xs)
    errs = []

    def work(k):
        try:
            for i in range(k, len(xs), 4):
                out[i] = g(xs[i])
        except Exception as e:
            errs.append(e)
    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errs, errs[:1]
    for (v1, g1), (v2, g2) in zip(serial, out):
        assert v1 == v2
        np.testing.assert_array_equal(g1, g2)


def test_branch_change_seen_by_grad_on_stale_raise_and_rerecord_at_floats():
    # regression: rt.grad's arena replay reports a failed guard without an input
    # pointer; the report must still be a StaleTape/BranchChanged, not a TypeError
    def f(x):
        return x ** 2 if x > 0 else -x
    g = rt.grad(f, on_stale="raise")
    g(2.0)
    with pytest.raises(rt.StaleTape):
        g(-1.0)
    assert g(3.0) == pytest.approx(6.0)
    g2 = rt.grad(f)
    g2(2.0)
    assert g2(-1.0) == pytest.approx(-1.0)
    ct = rt.compile(rt.GradientTape(_branchy, X0))
    with pytest.raises(rt.BranchChanged):
        ct.gradient(-X0)
    assert isinstance(ct._branch_changed(None, None), rt.BranchChanged)


class _Cfg:
    pass


CFG = _Cfg()
CFG.s = 2.0
CFG.inner = _Cfg()
CFG.inner.t = 1.0


def _uses_global_object(x):
    return CFG.s * CFG.inner.t * np.sum(x)


def test_attribute_guards_on_globals_chains_and_closures():
    g = rt.grad(_uses_global_object)
    try:
        np.testing.assert_allclose(g(np.ones(2)), [2.0, 2.0])
        CFG.inner.t = 3.0                    # depth-2 attribute
        np.testing.assert_allclose(g(np.ones(2)), [6.0, 6.0])
    finally:
        CFG.inner.t = 1.0
    box = _Cfg()
    box.k = 2.0
    g2 = rt.grad(lambda x: box.k * np.sum(x))
    np.testing.assert_allclose(g2(np.ones(2)), [2.0, 2.0])
    box.k = 7.0
    np.testing.assert_allclose(g2(np.ones(2)), [7.0, 7.0])
