"""Copy semantics (SPEC.md "Copy semantics"): copies never record onto an orphan
tape, finished tapes copy with their values, NULL_TAPE is never copied,
compiled tapes recompile, pickles rebuild."""

import collections
import copy
import dataclasses
import gc
import pickle

import numpy as np
import pytest

import revtape as rt

Pair = collections.namedtuple("Pair", "a b")


@dataclasses.dataclass
class Params:
    a: object
    b: object


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a, self.b = a, b


class Model:
    def __init__(self, theta, data):
        self.theta = theta
        self.data = data

    def logp(self):
        return -0.5 * np.sum((self.data - self.theta) ** 2)


X0 = np.array([0.7, -1.3, 2.1])


def grad_of(f, x=X0):
    return rt.gradient(f, x)


# ---------------------------------------------------------------- while recording

def test_deepcopy_of_scalar_while_recording_is_the_same_object():
    def f(x):
        c = copy.deepcopy(x[0])
        assert c is x[0] or rt.tape_of(c) is rt.tape_of(x)
        return c * x[1]

    g = grad_of(f)
    np.testing.assert_allclose(g, [X0[1], X0[0], 0.0])


def test_deepcopy_of_list_while_recording_keeps_gradient():
    # The case that silently gives zero gradients in a naive implementation.
    def f(x):
        a, b = x[0], x[1]
        ca, cb = copy.deepcopy([a, b])
        assert ca is a and cb is b
        return np.sin(ca) * cb

    g = grad_of(f)
    np.testing.assert_allclose(g, [np.cos(X0[0]) * X0[1], np.sin(X0[0]), 0.0], rtol=1e-14)
    assert np.any(g != 0)


@pytest.mark.parametrize("make", [
    lambda a, b: (a, (b, 2.0)),
    lambda a, b: {"a": a, "b": b},
    lambda a, b: Pair(a, b),
    lambda a, b: Params(a, b),
    lambda a, b: Slotted(a, b),
    lambda a, b: [[a], {"k": (b,)}],
    lambda a, b: np.array([a, b], dtype=object),
])
def test_deepcopy_of_containers_while_recording(make):
    def get(c):
        if isinstance(c, tuple) and not isinstance(c, Pair):
            return c[0], c[1][0]
        if isinstance(c, dict):
            return c["a"], c["b"]
        if isinstance(c, (Pair, Params, Slotted)):
            return c.a, c.b
        if isinstance(c, np.ndarray):
            return c[0], c[1]
        return c[0][0], c[1]["k"][0]

    def f(x):
        a, b = x[0], x[1]
        ca, cb = get(copy.deepcopy(make(a, b)))
        assert ca is a and cb is b
        return ca * ca * cb

    np.testing.assert_allclose(grad_of(f), [2 * X0[0] * X0[1], X0[0] ** 2, 0.0])


def test_copy_copy_while_recording_is_the_same_object():
    def f(x):
        assert copy.copy(x) is x
        assert copy.copy(x[2]) is not None
        return np.sum(copy.copy(x) ** 2)

    np.testing.assert_allclose(grad_of(f), 2 * X0)


def test_plain_data_beside_tracked_values_is_still_copied():
    data = np.array([1.0, 2.0, 3.0])
    seen = {}

    def f(x):
        state = {"theta": x, "data": data}
        c = copy.deepcopy(state)
        assert c["theta"] is x
        assert c["data"] is not data
        c["data"][0] = 100.0          # the copy is independent
        seen["orig"] = data[0]
        return np.sum(c["theta"] * data)

    np.testing.assert_allclose(grad_of(f), data)
    assert seen["orig"] == 1.0


def test_deepcopy_of_tracked_array_intermediate_records_nothing_extra():
    def f(x, copy_it):
        y = 2 * x
        if copy_it:
            y2 = copy.deepcopy(y)
            assert y2 is y
            y = y2
        return np.sum(y ** 2)

    t1 = rt.GradientTape(lambda x: f(x, False), X0)
    t2 = rt.GradientTape(lambda x: f(x, True), X0)
    assert len(t1) == len(t2)
    np.testing.assert_allclose(t2.gradient(X0), 8 * X0)


def test_deepcopy_of_whole_model_object_while_recording():
    data = np.array([0.5, 0.5, 0.5])

    def f(x):
        m = copy.deepcopy(Model(x, data))
        assert m.theta is x and m.data is not data
        return m.logp()

    np.testing.assert_allclose(grad_of(f), data - X0)


# ---------------------------------------------------------------- finished tapes

def _sq(x):
    return np.sum(np.sin(x) * x)


def _dsq(x):
    return np.cos(x) * x + np.sin(x)


def test_deepcopy_of_finished_tape_is_independent():
    tape = rt.GradientTape(_sq, X0)
    x1, x2 = X0 + 0.3, X0 - 0.4
    tc = copy.deepcopy(tape)
    np.testing.assert_allclose(tc.gradient(x1), _dsq(x1), rtol=1e-14)
    # the original still holds its recording values
    np.testing.assert_array_equal(rt.value(tape.inputs[0]), X0)
    np.testing.assert_allclose(tape.gradient(x2), _dsq(x2), rtol=1e-14)
    # ... and replaying the original does not touch the copy
    np.testing.assert_array_equal(rt.value(tc.inputs[0]), x1)
    # the copy's instructions refer to the copy's own objects
    assert tc.inputs[0] is not tape.inputs[0]
    assert rt.tape_of(tc.inputs[0]) is tc
    assert rt.tape_of(tc.output) is tc
    assert tc._vals[tc.inputs[0]._id] is not tape._vals[tape.inputs[0]._id]


def test_deepcopy_of_structure_shares_one_copy_of_the_tape():
    tape = rt.GradientTape(_sq, X0)
    holder = {"tape": tape, "x": tape.inputs[0], "y": tape.output}
    c = copy.deepcopy(holder)
    assert c["tape"] is not tape
    assert rt.tape_of(c["x"]) is c["tape"] and rt.tape_of(c["y"]) is c["tape"]
    assert c["x"] is c["tape"].inputs[0]


def test_tracked_value_of_finished_tape_copies_with_its_tape():
    tape = rt.GradientTape(_sq, X0)
    x = copy.deepcopy(tape.inputs[0])
    assert x is not tape.inputs[0]
    assert rt.tape_of(x) is not tape and rt.tape_of(x).inputs[0] is x


# ---------------------------------------------------------------- NULL_TAPE

def test_null_tape_is_never_copied():
    assert copy.deepcopy(rt.NULL_TAPE) is rt.NULL_TAPE
    assert copy.copy(rt.NULL_TAPE) is rt.NULL_TAPE
    assert pickle.loads(pickle.dumps(rt.NULL_TAPE)) is rt.NULL_TAPE


def test_constant_keeps_null_tape_through_copies():
    c = rt.TrackedReal(2.5)
    a = rt.TrackedArray(np.ones(3))
    for v in (c, a):
        assert rt.tape_of(v) is rt.NULL_TAPE
        for copied in (copy.deepcopy(v), copy.deepcopy([v])[0], copy.copy(v),
                       pickle.loads(pickle.dumps(v))):
            assert rt.tape_of(copied) is rt.NULL_TAPE
            np.testing.assert_array_equal(rt.value(copied), rt.value(v))


def test_null_tape_constant_records_nothing():
    c = copy.deepcopy({"c": rt.TrackedReal(3.0)})["c"]
    tape = rt.GradientTape(lambda x: np.sum(x * c), X0)
    np.testing.assert_allclose(tape.gradient(X0), [3.0, 3.0, 3.0])
    assert len(rt.NULL_TAPE) == 0


# ---------------------------------------------------------------- pickle (reference tapes)

def test_pickle_round_trip_of_tape():
    tape = rt.GradientTape(_sq, X0)
    t2 = pickle.loads(pickle.dumps(tape))
    x1 = X0 * 1.5
    np.testing.assert_allclose(t2.gradient(x1), _dsq(x1), rtol=1e-14)
    assert rt.tape_of(t2.inputs[0]) is t2


def test_pickle_of_tape_with_closure_function_does_not_need_the_function():
    scale = 3.0
    tape = rt.GradientTape(lambda x: scale * np.sum(x ** 2), X0)
    t2 = pickle.loads(pickle.dumps(tape))
    np.testing.assert_allclose(t2.gradient(X0), 6 * X0)
