"""Branch guards (src/revtape/trace/guards.py): a comparison Python branched on
records a guard with the user's source line, and the reference and compiled
replays raise BranchChanged naming it when it comes out the other way."""

import numpy as np
import pytest

import revtape as rt
from conftest import NEG, POS, d_piecewise, piecewise


# ---------------------------------------------------------------- branch guards

def test_comparison_on_tracked_scalar_records_a_guard():
    tape = rt.GradientTape(piecewise, POS)
    assert "guard" in repr(tape)
    assert "x[0] > 0" in repr(tape)        # the user's source line


@pytest.mark.parametrize("replay", ["reference", "compiled"])
def test_replay_across_a_branch_raises_branch_changed(replay):
    tape = rt.GradientTape(piecewise, POS)
    t = tape if replay == "reference" else rt.compile(tape)
    np.testing.assert_allclose(t.gradient(POS * 2), d_piecewise(POS * 2))
    with pytest.raises(rt.BranchChanged) as err:
        t.gradient(NEG)
    assert "x[0] > 0" in str(err.value)
    assert isinstance(err.value, rt.RevtapeError)
    # a failed call leaves the tape usable
    np.testing.assert_allclose(t.gradient(POS), d_piecewise(POS))


def test_guards_off_replays_the_recorded_branch():
    ctape = rt.compile(rt.GradientTape(piecewise, POS), guards=False)
    np.testing.assert_allclose(ctape.gradient(NEG), 2 * NEG)


@pytest.mark.parametrize("cond, x_other", [
    (lambda x: (x > 0).all(), [-0.5, 1.0]),
    (lambda x: (x > 0).any(), [-0.5, -1.0]),
    (lambda x: bool(x[0] >= 0.25), [0.1, 1.0]),
    (lambda x: x[0] != 0.5, [0.6, 1.0]),
    (lambda x: np.sum(x) < 10.0, [5.0, 6.0]),
])
def test_array_and_reduced_conditions_are_guarded(cond, x_other):
    def f(x):
        return np.sum(np.exp(x)) if cond(x) else np.sum(x)

    x = np.array([0.5, 1.0])
    x_other = np.array(x_other)
    assert cond(x) != cond(x_other)
    ctape = rt.compile(rt.GradientTape(f, x))
    np.testing.assert_allclose(ctape.gradient(x * 1.0), rt.gradient(f, x))
    with pytest.raises(rt.BranchChanged):
        ctape.gradient(x_other)
    np.testing.assert_allclose(rt.grad(f)(x_other), rt.gradient(f, x_other))


def test_masks_that_feed_where_are_selects_not_guards():
    def f(x):
        return np.sum(np.where(x > 0, np.log1p(x), 0.5 * x)) + np.sum(np.maximum(x, 0.1))

    tape = rt.GradientTape(f, POS)
    assert "guard" not in repr(tape)
    ctape = rt.compile(tape)
    for x in (NEG, POS, -POS):
        np.testing.assert_allclose(ctape.gradient(x), rt.gradient(f, x), rtol=1e-13)


def test_while_loop_with_data_dependent_trip_count():
    def f(x):
        y = x[0]
        while y < 10.0:
            y = y * 2.0
        return y

    ctape = rt.compile(rt.GradientTape(f, np.array([3.0])))      # 3 -> 6 -> 12: two doublings
    assert ctape.gradient(np.array([4.0]))[0] == 4.0
    with pytest.raises(rt.BranchChanged):
        ctape.gradient(np.array([1.0]))                           # needs four doublings
    g = rt.grad(f)
    for x0, expected in ((3.0, 4.0), (1.0, 16.0), (3.0, 4.0), (0.7, 16.0)):
        assert g(np.array([x0]))[0] == expected
