"""Every error path of the contract: an rt.RevtapeError subclass with a message
that says what to do, and a tape that still works after the failed call."""

import math
import operator

import numpy as np
import pytest

import revtape as rt


def sumsq(x):
    return np.sum(x * x)


@pytest.fixture
def gtape():
    return rt.GradientTape(sumsq, np.array([1.0, 2.0, 3.0]))


def still_works(tape, x=np.array([1.0, -1.0, 2.0])):
    """A correct replay after a failed one gives the right answer."""
    val, g = tape.value_and_gradient(x)
    assert val == pytest.approx(float(np.sum(x * x)))
    np.testing.assert_allclose(g, 2 * x)
    np.testing.assert_array_equal(rt.value(tape.inputs[0]), x)


def test_error_hierarchy():
    for name in ["InputError", "TapeMixError", "TapeFinishedError", "OutputError",
                 "ConversionError", "UnsupportedError", "VerificationError",
                 "ConcurrentUseError", "BuildMismatchError", "BranchChanged", "StaleTape"]:
        assert issubclass(getattr(rt, name), rt.RevtapeError)
    assert issubclass(rt.RevtapeError, Exception)


# ---------------------------------------------------------------------------- replay input
@pytest.mark.parametrize("bad", [np.ones(4), np.ones((3, 1)), np.ones((1, 3)), 1.0, np.ones(0),
                                 [1.0, 2.0]],
                         ids=["(4,)", "(3,1)", "(1,3)", "scalar", "empty", "short list"])
@pytest.mark.parametrize("method", ["gradient", "forward", "value_and_gradient", "jacobian",
                                    "hessian"])
def test_wrong_input_shape(gtape, bad, method):
    with pytest.raises(rt.InputError, match=r"shape") as e:
        getattr(gtape, method)(bad)
    assert "(3,)" in str(e.value)                      # says which shape it wants
    still_works(gtape)


@pytest.mark.parametrize("bad", ["abc", np.array(["a", "b", "c"]), np.array([1.0, None, 2.0]),
                                 np.array([1.0, 2.0, 3.0], dtype=object), None,
                                 np.ones(3) * 1j, [1.0, [2.0, 3.0]], {"x": 1}],
                         ids=["str", "str-array", "object-None", "object-float", "None",
                              "complex", "ragged", "dict"])
def test_wrong_input_type(gtape, bad):
    with pytest.raises(rt.InputError):
        gtape.gradient(bad)
    with pytest.raises(rt.InputError):
        gtape.forward(bad)
    still_works(gtape)


def test_tracked_value_as_replay_input(gtape):
    other = rt.Tape()
    t = other.track(np.ones(3))
    with pytest.raises(rt.InputError, match="not tracked"):
        gtape.gradient(t)
    still_works(gtape)


def test_failed_replay_does_not_touch_the_tape(gtape):
    gtape.gradient(np.array([4.0, 5.0, 6.0]))
    with pytest.raises(rt.InputError):
        gtape.gradient(np.ones(5))
    # the previous replay's values are still what the tape reports
    np.testing.assert_array_equal(rt.value(gtape.inputs[0]), [4.0, 5.0, 6.0])
    assert rt.value(gtape.output) == 77.0


def test_scalar_input_tape_refuses_arrays():
    tape = rt.GradientTape(lambda x: x * x, 2.0)
    with pytest.raises(rt.InputError):
        tape.gradient(np.ones(2))
    assert tape.gradient(np.float64(3.0)) == 6.0
    assert tape.gradient(np.array(3.0)) == 6.0       # a 0-d array is a scalar


def test_tuple_input_tape_wants_a_tuple():
    tape = rt.GradientTape(lambda a, b: np.sum(a) * b, (np.ones(3), 2.0))
    with pytest.raises(rt.InputError, match="tuple of 2"):
        tape.gradient(np.ones(3))
    with pytest.raises(rt.InputError, match="tuple of 2"):
        tape.gradient((np.ones(3),))
    with pytest.raises(rt.InputError, match="tuple of 2"):
        tape.gradient((np.ones(3), 1.0, 1.0))
    with pytest.raises(rt.InputError, match="shape"):
        tape.gradient((np.ones(3), np.ones(3)))
    ga, gb = tape.gradient((np.array([1.0, 2.0, 3.0]), 3.0))
    np.testing.assert_array_equal(ga, [3.0, 3.0, 3.0])
    assert gb == 6.0


def test_hvp_vector_of_wrong_shape():
    f = lambda x: np.sum(x ** 3)   # noqa: E731
    with pytest.raises(rt.InputError):
        rt.hvp(f, np.ones(3), np.ones(2))
    ht = rt.HessianTape(f, np.ones(3))
    with pytest.raises(rt.InputError):
        ht.hvp(np.ones(3), np.ones(4))
    np.testing.assert_array_equal(ht.hvp(np.ones(3), np.array([1.0, 0.0, 2.0])), [6.0, 0, 12.0])


# ---------------------------------------------------------------------------- out=
@pytest.mark.parametrize("bad_out", [np.zeros(4), np.zeros((3, 1)), np.zeros(3, np.float32),
                                     np.zeros(3, np.int64), [0.0, 0.0, 0.0], (np.zeros(3),),
                                     "out", 0.0],
                         ids=["shape", "shape2", "float32", "int64", "list", "tuple", "str",
                              "float"])
def test_bad_out(gtape, bad_out):
    with pytest.raises(rt.InputError, match="out="):
        gtape.gradient(np.ones(3), out=bad_out)
    with pytest.raises(rt.InputError, match="out="):
        gtape.value_and_gradient(np.ones(3), out=bad_out)
    with pytest.raises(rt.InputError, match="out="):
        rt.gradient(sumsq, np.ones(3), out=bad_out)
    with pytest.raises(rt.InputError, match="out="):
        rt.value_and_gradient(sumsq, np.ones(3), out=bad_out)
    still_works(gtape)


def test_bad_out_is_refused_before_the_replay(gtape):
    gtape.gradient(np.array([4.0, 5.0, 6.0]))
    with pytest.raises(rt.InputError):
        gtape.gradient(np.ones(3), out=np.zeros(2))
    # no replay happened at the new input
    np.testing.assert_array_equal(rt.value(gtape.inputs[0]), [4.0, 5.0, 6.0])


def test_read_only_out(gtape):
    out = np.zeros(3)
    out.setflags(write=False)
    with pytest.raises(rt.InputError, match="writeable"):
        gtape.gradient(np.ones(3), out=out)
    still_works(gtape)


def test_out_says_the_expected_shape_and_dtype(gtape):
    with pytest.raises(rt.InputError) as e:
        gtape.gradient(np.ones(3), out=np.zeros(3, np.float32))
    assert "float64" in str(e.value) and "(3,)" in str(e.value)


def test_bad_out_for_tuple_and_jacobian():
    tape = rt.GradientTape(lambda a, b: np.sum(a * b), (np.ones(2), np.ones(2)))
    with pytest.raises(rt.InputError, match="tuple of 2"):
        tape.gradient((np.ones(2), np.ones(2)), out=np.zeros(2))
    with pytest.raises(rt.InputError):
        tape.gradient((np.ones(2), np.ones(2)), out=(np.zeros(2), np.zeros(3)))
    with pytest.raises(rt.InputError):
        rt.jacobian(lambda x: x * x, np.ones(2), out=np.zeros((2, 3)))
    with pytest.raises(rt.InputError):
        rt.hessian(sumsq, np.ones(2), out=np.zeros(4))
    jt = rt.JacobianTape(lambda x: 2 * x, np.ones(2))
    with pytest.raises(rt.InputError):
        jt.jacobian(np.ones(2), out=np.zeros(2))
    np.testing.assert_array_equal(jt.jacobian(np.ones(2)), 2 * np.eye(2))


# ---------------------------------------------------------------------------- two tapes
def test_mixing_two_recording_tapes():
    t1, t2 = rt.Tape(), rt.Tape()
    a = t1.track(np.array([1.0, 2.0]))
    b = t2.track(np.array([3.0, 4.0]))
    for op in (operator.add, operator.mul, operator.truediv, operator.matmul,
               lambda a, b: np.maximum(a, b), lambda a, b: np.where(a > 0, a, b),
               lambda a, b: np.concatenate([a, b]), lambda a, b: np.stack([b, a])):
        with pytest.raises(rt.TapeMixError, match="two recording tapes"):
            op(a, b)
        with pytest.raises(rt.TapeMixError):
            op(b, a)
    # both tapes carry on
    t1.finish(np.sum(a * a))
    t2.finish(np.sum(b))
    np.testing.assert_array_equal(t1.gradient(np.array([1.0, 2.0])), [2.0, 4.0])
    np.testing.assert_array_equal(t2.gradient(np.array([1.0, 2.0])), [1.0, 1.0])


def test_mixing_tapes_scalar_and_nested_function():
    outer = rt.Tape()
    x = outer.track(2.0)

    def f(y):
        return y * x           # x belongs to the outer tape: an error, not a silent constant

    with pytest.raises(rt.TapeMixError):
        rt.gradient(f, 1.0)
    outer.finish(x * x)
    assert outer.gradient(3.0) == 6.0


def test_rt_value_brings_in_a_constant_from_another_tape():
    outer = rt.Tape()
    x = outer.track(2.0)
    assert rt.gradient(lambda y: y * rt.value(x), 1.0) == 2.0


# ---------------------------------------------------------------------------- finished tapes
def test_value_of_finished_tape_in_a_new_op():
    tape = rt.Tape()
    x = tape.track(np.array([1.0, 2.0]))
    y = x * 2.0
    tape.finish(np.sum(y))
    for op in (lambda: y + 1.0, lambda: np.exp(x), lambda: x[0], lambda: np.sum(x),
               lambda: 2.0 * x, lambda: x @ x):
        with pytest.raises(rt.TapeFinishedError, match="finished"):
            op()
    new = rt.Tape()
    z = new.track(1.0)
    with pytest.raises(rt.TapeFinishedError):
        z * x
    # the finished tape still replays, and the new tape still records
    np.testing.assert_array_equal(tape.gradient(np.array([5.0, 6.0])), [2.0, 2.0])
    new.finish(z * 3.0)
    assert new.gradient(2.0) == 3.0


def test_finish_or_track_after_finish():
    tape = rt.Tape()
    x = tape.track(1.0)
    tape.finish(x * x)
    with pytest.raises(rt.TapeFinishedError):
        tape.finish(x)
    with pytest.raises(rt.TapeFinishedError):
        tape.track(2.0)
    assert tape.gradient(3.0) == 6.0


def test_replay_of_a_recording_tape():
    tape = rt.Tape()
    x = tape.track(1.0)
    with pytest.raises(rt.RevtapeError, match="finish"):
        tape.gradient(1.0)
    with pytest.raises(rt.RevtapeError, match="finish"):
        tape.forward(1.0)
    tape.finish(x * 2.0)
    assert tape.gradient(5.0) == 2.0


def test_track_refuses_tracked_values_and_non_numbers():
    tape = rt.Tape()
    x = tape.track(1.0)
    with pytest.raises(rt.InputError, match=r"rt\.value"):
        tape.track(x)
    with pytest.raises(rt.InputError):
        tape.track("abc")
    with pytest.raises(rt.InputError):
        tape.track(np.ones(2) * 1j)
    with pytest.raises(rt.RevtapeError):
        tape.track(np.array([1.0, None]))
    tape.finish(x * 3.0)
    assert tape.gradient(1.0) == 3.0


# ---------------------------------------------------------------------------- output kind
def test_non_scalar_output_for_gradient():
    x = np.ones(3)
    with pytest.raises(rt.OutputError, match="jacobian") as e:
        rt.gradient(lambda x: x * 2, x)
    assert "(3,)" in str(e.value)
    with pytest.raises(rt.OutputError):
        rt.value_and_gradient(lambda x: x * 2, x)
    with pytest.raises(rt.OutputError):
        rt.GradientTape(lambda x: x * 2, x)
    with pytest.raises(rt.OutputError):
        rt.hessian(lambda x: x * 2, x)
    with pytest.raises(rt.OutputError):
        rt.hvp(lambda x: x * 2, x, x)
    jt = rt.JacobianTape(lambda x: x * 2, x)
    for method in (jt.gradient, jt.value_and_gradient, jt.hessian):
        with pytest.raises(rt.OutputError):
            method(x)
    np.testing.assert_array_equal(jt.jacobian(x), 2 * np.eye(3))


def test_non_scalar_output_on_a_hand_recorded_tape():
    tape = rt.Tape()
    x = tape.track(np.ones(2))
    tape.finish(x * 2)
    with pytest.raises(rt.OutputError):
        tape.gradient(np.ones(2))
    np.testing.assert_array_equal(tape.jacobian(np.ones(2)), 2 * np.eye(2))
    np.testing.assert_array_equal(tape.forward(np.ones(2)), [2.0, 2.0])


# ---------------------------------------------------------------------------- conversions
def _tracked_scalar_and_array():
    tape = rt.Tape()
    return tape, tape.track(1.5), tape.track(np.array([1.0, 2.0, 3.0]))


def _write_into_float_array(t):
    a = np.zeros(3)
    a[0] = t


def _write_slice(t):
    a = np.zeros(3)
    a[:] = t


def _ufunc_out(t):
    np.exp(t, out=np.zeros(np.shape(rt.value(t))))


CONVERSIONS = {
    "float": float, "int": int, "complex": complex, "math.exp": math.exp,
    "a[0] = t": _write_into_float_array, "np.asarray": np.asarray, "np.array": np.array,
    "np.array([t, t])": lambda t: np.array([t, t]), "t.item()": lambda t: t.item(),
    "t.tolist()": lambda t: t.tolist(), "range(t)": lambda t: range(t),
    "ufunc out=": _ufunc_out, "np.float64(t)": np.float64,
}


@pytest.mark.parametrize("name", sorted(CONVERSIONS))
def test_tracked_scalar_never_becomes_a_silent_constant(name):
    tape, t, _ = _tracked_scalar_and_array()
    with pytest.raises(rt.RevtapeError) as e:
        CONVERSIONS[name](t)
    assert "rt.value" in str(e.value) or "out=" in str(e.value)
    tape.finish(t * t)
    assert tape.gradient((2.0, np.zeros(3)))[0] == 4.0


@pytest.mark.parametrize("name", ["np.asarray", "np.array", "t.tolist()", "ufunc out=",
                                  "float"])
def test_tracked_array_never_becomes_a_silent_constant(name):
    tape, _, x = _tracked_scalar_and_array()
    with pytest.raises(rt.ConversionError):
        CONVERSIONS[name](x)
    with pytest.raises(rt.ConversionError):
        _write_slice(x)
    tape.finish(np.sum(x))
    gt, gx = tape.gradient((1.0, np.zeros(3)))
    assert gt == 0.0
    np.testing.assert_array_equal(gx, [1.0, 1.0, 1.0])


def test_conversion_errors_are_type_errors_too():
    _, t, _ = _tracked_scalar_and_array()
    with pytest.raises(TypeError):
        float(t)


def test_functions_that_call_asarray_point_to_revtape():
    stats = pytest.importorskip("scipy.stats")
    with pytest.raises(rt.ConversionError, match="np.asarray"):
        rt.gradient(lambda x: np.sum(stats.norm.logpdf(x)), np.ones(2))


# ---------------------------------------------------------------------------- unsupported
UNSUPPORTED = {
    "np.partition": lambda x: np.sum(np.partition(x, 1)),
    "np.spacing": lambda x: np.sum(np.spacing(x)),
    "floordiv": lambda x: np.sum(x // 2.0),
    "np.pad mode=mean": lambda x: np.sum(np.pad(x, 1, mode="mean")),
    "setitem": lambda x: x.__setitem__(0, 1.0),
    "tracked index": lambda x: x[x[0]],
    "np.partition": lambda x: np.sum(np.partition(x, 1)),
    "np.where(cond)": lambda x: np.where(x > 0),
    "cumsum out=": lambda x: np.sum(np.cumsum(x, out=np.zeros(3))),
    "astype int": lambda x: np.sum(x.astype(int)),
    "reduce out=": lambda x: np.sum(x, out=np.zeros(())),
}


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_operations_say_so(name):
    x = np.array([0.1, 0.2, 0.3])
    with pytest.raises(rt.RevtapeError) as e:
        rt.gradient(UNSUPPORTED[name], x)
    assert isinstance(e.value, (rt.UnsupportedError, rt.ConversionError))
    assert len(str(e.value)) > 20
    np.testing.assert_array_equal(rt.gradient(np.sum, x), [1.0, 1.0, 1.0])


def test_hessian_of_a_tuple_input_is_blocks_but_out_is_refused():
    H = rt.hessian(lambda a, b: a * b, (1.0, 2.0))
    np.testing.assert_allclose(np.array(H, dtype=float), [[0.0, 1.0], [1.0, 0.0]])
    with pytest.raises(rt.UnsupportedError, match="without out="):
        rt.hessian(lambda a, b: a * b, (1.0, 2.0), out=np.empty((2, 2)))


def test_branch_changed_says_where_and_what_to_do():
    def f(x):
        if x[0] > 0:
            return np.sum(x ** 2)
        return np.sum(x)

    tape = rt.GradientTape(f, np.array([1.0, 2.0]))
    with pytest.raises(rt.BranchChanged) as e:
        tape.gradient(np.array([-1.0, 2.0]))
    msg = str(e.value)
    assert "test_errors.py" in msg and "np.where" in msg
    assert e.value.where[0].endswith("test_errors.py")
    np.testing.assert_array_equal(tape.gradient(np.array([3.0, 2.0])), [6.0, 4.0])


# ---------------------------------------------------------------------------- misuse of the API
@pytest.mark.parametrize("bad", [None, 1, "x", lambda x: x, rt.NULL_TAPE, "ctape", "recording",
                                 "no output"])
def test_compile_refuses_what_is_not_a_finished_tape(bad):
    if bad == "ctape":
        bad = rt.compile(rt.GradientTape(lambda x: np.sum(x), np.ones(2)))
    elif bad == "recording":
        bad = rt.Tape()
        bad.track(np.ones(2))
    with pytest.raises(rt.RevtapeError) as info:
        rt.compile(bad)
    assert not isinstance(info.value, AttributeError)
    assert "tape" in str(info.value)


def test_a_tape_without_inputs_gets_a_clear_error():
    tape = rt.Tape()
    tape.finish(3.0)
    with pytest.raises(rt.RevtapeError, match="no inputs"):
        rt.compile(tape)


def test_round_and_math_functions_say_what_to_use():
    t = rt.Tape()
    x = t.track(2.5)
    with pytest.raises(rt.ConversionError, match="np.round"):
        round(x)
    for fn in (math.floor, math.ceil, math.trunc):
        with pytest.raises(rt.ConversionError):
            fn(x)
    with pytest.raises(rt.ConversionError, match=r"np\.exp"):
        math.exp(x)
    with pytest.raises(rt.ConversionError, match=r"np\.log1p"):
        y = math.log1p(x)  # noqa: F841
    with pytest.raises(rt.ConversionError, match=r"np\.\*"):
        float(x)


def test_formatting_a_tracked_value_shows_its_value():
    # a debugging print inside f must not raise (and records nothing)
    tape = rt.Tape()
    x = tape.track(2.5)
    n = len(tape)
    assert f"{x:.2f}" == "2.50" and f"{x * 2.0:g}" == "5"
    a = tape.track(np.array([1.0, 2.0]))
    assert f"{a}" == str(np.array([1.0, 2.0]))
    assert len(tape) == n + 1           # only the multiplication


@pytest.mark.parametrize("bad", [None, 1, "x"])
def test_whole_function_helpers_refuse_what_is_not_a_function(bad):
    for helper in (rt.gradient, rt.value_and_gradient, rt.jacobian, rt.hessian):
        with pytest.raises(rt.RevtapeError, match="function"):
            helper(bad, np.ones(2))
    with pytest.raises(rt.RevtapeError, match="function"):
        rt.GradientTape(bad, np.ones(2))
