"""The tape's public IR (issue 12): instructions, values, input and output
node ids -- what the compiler, the transforms and the Hessian construction
read instead of the tape's private fields."""

import numpy as np

import revtape as rt
from revtape.core import ops


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
