"""The tape (src/revtape/trace/tape.py): recording by hand with rt.Tape() --
tracking inputs, finishing, values before and after replays, NULL_TAPE --
what a tape shows (its listing), and its public IR: instructions, values,
input and output node ids -- what the compiler, the transforms and the
Hessian construction read instead of the tape's private fields."""

import math

import numpy as np
import pytest

import revtape as rt
from revtape.core import ops


# ---------------------------------------------------------------------------- Tape basics
def test_new_tape_is_recording_and_empty():
    tape = rt.Tape()
    assert tape.recording is True
    assert len(tape) == 0
    assert tape.inputs == []
    assert tape.output is None


def test_track_float_gives_tracked_real():
    tape = rt.Tape()
    for v in (1.5, np.float64(1.5), np.float32(1.5)):
        t = tape.track(v)
        assert isinstance(t, rt.TrackedReal)
        assert rt.istracked(t)
        assert rt.tape_of(t) is tape
        assert rt.value(t) == 1.5
        assert type(rt.value(t)) is float


def test_track_array_gives_tracked_array_of_any_shape():
    tape = rt.Tape()
    for shape in [(3,), (2, 3), (2, 1, 4)]:
        x = np.arange(float(np.prod(shape))).reshape(shape)
        t = tape.track(x)
        assert isinstance(t, rt.TrackedArray)
        assert t.shape == shape and t.ndim == len(shape) and t.size == x.size
        assert t.dtype == np.float64
        np.testing.assert_array_equal(rt.value(t), x)


def test_integer_input_becomes_float64():
    tape = rt.Tape()
    a = tape.track(3)
    assert isinstance(a, rt.TrackedReal) and rt.value(a) == 3.0 and type(rt.value(a)) is float
    b = tape.track(np.arange(4))
    assert isinstance(b, rt.TrackedArray)
    assert rt.value(b).dtype == np.float64
    np.testing.assert_array_equal(rt.value(b), [0.0, 1.0, 2.0, 3.0])
    tape.finish(a * np.sum(b))
    assert tape.gradient((2, np.arange(4))) == (6.0, pytest.approx(np.full(4, 2.0)))
    # an integer function argument works through the helpers too
    assert rt.gradient(lambda x: x * x, 3) == 6.0
    np.testing.assert_array_equal(rt.gradient(lambda x: np.sum(x * x), np.arange(3)), [0, 2, 4])


def test_tracked_input_is_a_private_copy():
    x = np.array([1.0, 2.0])
    tape = rt.Tape()
    t = tape.track(x)
    x[0] = 100.0
    tape.finish(np.sum(t * t))
    assert rt.value(tape.output) == 5.0


def test_finish_stops_recording_and_sets_output():
    tape = rt.Tape()
    a = tape.track(2.0)
    b = tape.track(np.array([1.0, 2.0]))
    assert tape.recording
    assert tape.inputs == [a, b]
    assert tape.inputs[0] is a and tape.inputs[1] is b
    y = a * np.sum(b)
    assert tape.finish(y) is tape
    assert tape.recording is False
    assert tape.output is y
    assert rt.value(tape.output) == 6.0
    assert tape.gradient((1.0, np.array([3.0, 4.0])))[0] == 7.0


def test_value_istracked_tape_of_on_plain_values():
    for v in (1.0, 3, np.float64(2.0), np.ones(2), "abc"):
        assert not rt.istracked(v)
        assert rt.tape_of(v) is rt.NULL_TAPE
    assert rt.value(2.5) == 2.5
    x = np.ones(3)
    assert rt.value(x) is x
    assert repr(rt.NULL_TAPE) == "NULL_TAPE"
    assert rt.NULL_TAPE.recording is False


def test_value_of_tracked_is_a_plain_copy():
    tape = rt.Tape()
    t = tape.track(np.array([1.0, 2.0]))
    v = rt.value(t)
    assert type(v) is np.ndarray and not rt.istracked(v)
    v[0] = 50.0
    np.testing.assert_array_equal(rt.value(t), [1.0, 2.0])


def test_values_after_replay_are_those_of_the_replay():
    tape = rt.Tape()
    x = tape.track(np.array([1.0, 2.0]))
    s = tape.track(3.0)
    y = s * np.sum(x ** 2)
    tape.finish(y)
    assert rt.value(tape.output) == 15.0
    val, (gx, gs) = tape.value_and_gradient((np.array([0.0, 1.0]), 2.0))
    assert val == 2.0
    assert rt.value(tape.output) == 2.0
    assert rt.value(y) == 2.0                        # the same node
    np.testing.assert_array_equal(rt.value(tape.inputs[0]), [0.0, 1.0])
    assert rt.value(tape.inputs[1]) == 2.0
    np.testing.assert_array_equal(gx, [0.0, 4.0])
    assert gs == 1.0
    assert tape.forward((np.array([1.0, 1.0]), 5.0)) == 10.0
    assert rt.value(tape.output) == 10.0
    np.testing.assert_array_equal(rt.value(tape.inputs[0]), [1.0, 1.0])
    assert rt.value(tape.inputs[1]) == 5.0


def test_gradient_tape_inputs_and_output_after_replay():
    tape = rt.GradientTape(lambda x: np.sum(np.exp(x)), np.zeros(2))
    assert rt.value(tape.output) == 2.0
    tape.gradient(np.array([1.0, 0.0]))
    assert rt.value(tape.output) == pytest.approx(math.e + 1.0, rel=1e-15)
    np.testing.assert_array_equal(rt.value(tape.inputs[0]), [1.0, 0.0])


# ---------------------------------------------------------------------------- listing
def test_len_and_repr_show_the_listing():
    tape = rt.Tape()
    a = tape.track(2.0)
    b = tape.track(3.0)
    c = a * b
    d = np.sin(c) + a
    tape.finish(d)
    assert len(tape) == 3
    text = repr(tape)
    assert f"%{c._id} = mul(%{a._id}, %{b._id})" in text
    assert f"= sin(%{c._id})" in text
    assert "finished" in text and "3 instructions" in text
    lines = text.splitlines()
    assert lines[1].strip() == f"%{c._id} = mul(%{a._id}, %{b._id})"
    assert lines[2].strip() == f"%{c._id + 1} = sin(%{c._id})"


def test_repr_shows_array_shapes_and_params():
    tape = rt.GradientTape(lambda x: np.sum(np.exp(x), axis=1) @ np.ones(2), np.ones((2, 3)))
    text = repr(tape)
    assert "exp(%0)  # (2, 3)" in text
    assert "sum(" in text and "axis=(1,)" in text
    assert "matmul(" in text


def test_repr_of_recording_tape_and_long_listing():
    tape = rt.Tape()
    x = tape.track(1.0)
    for _ in range(80):
        x = x * 1.01
    text = repr(tape)
    assert "recording" in text and "80 instructions" in text
    assert "... 30 more" in text


# ---------------------------------------------------------------------------- the IR

def test_ir_describes_the_recording():
    tape = rt.Tape()
    x = tape.track(np.array([1.0, 2.0]))
    y = tape.track(3.0)
    s = np.sum(np.exp(x)) * y
    if y > 0.5:                 # a guard: out == -1
        s = s + 1.0
    tape.finish(s)
    assert tape.input_ids == (x._id, y._id)
    assert tape.output_id == tape.output._id
    kinds = [(op.name, out) for op, out, args, params in tape.instructions]
    assert [k for k, _ in kinds] == ["exp", "sum", "mul", "guard", "add"]
    assert [o for n, o in kinds if n == "guard"] == [-1]
    op, out, args, params = tape.instructions[0]
    assert op is ops.OPS["exp"] and args == (x._id,)
    np.testing.assert_array_equal(tape.values[out], np.exp([1.0, 2.0]))
    assert tape.values[tape.output_id] == np.sum(np.exp([1.0, 2.0])) * 3.0 + 1.0
    # a reference replay updates the values the IR shows
    tape.forward((np.array([0.0, 0.0]), 2.0))
    assert tape.values[tape.output_id] == 5.0


def test_ir_of_an_unfinished_tape_and_copy_guard():
    tape = rt.Tape()
    assert tape.output_id is None and tape.input_ids == ()
    a = tape.track(1.0)
    other = rt.Tape()
    b = other.track(1.0)
    _ = b < 2.0
    params = other.instructions[-1][3]
    tape.copy_guard(a, 2.0, params)          # as a traced replay of `other` does
    op, out, args, copied = tape.instructions[-1]
    assert op is ops.OPS["guard"] and out == -1 and copied["pred"] == "lt"
    tape.finish(a * 1.0)
    assert tape.forward(1.5) == 1.5
    try:
        tape.forward(3.0)
    except rt.BranchChanged:
        pass
    else:
        raise AssertionError("the copied guard did not refuse 3.0 < 2.0 being False")
