"""numpy functions that move elements (src/revtape/numpy_api/rearrange.py):
split and its variants, swapaxes/moveaxis/rollaxis, repeat, roll, tile,
flips, rot90, pad, reshape in F order.  Values are numpy's bit for bit (a
gather copies), on odd shapes, negative axes and empty arrays; gradients
against finite differences and the analytic adjoint (a count of copies);
reference replay vs compiled; Hessians; bad arguments raise numpy's errors,
refused modes and tracked shape arguments rt.UnsupportedError."""

import numpy as np
import pytest

import revtape as rt
from conftest import check_all, opcodes, same_bits

RNG = np.random.default_rng(11)
X34 = RNG.standard_normal((3, 4))
X234 = RNG.standard_normal((2, 3, 4))
X5 = RNG.standard_normal(5)

# (name, function, input): each function maps an array to an array (or a list)
CASES = [
    ("split", lambda a: np.split(a, 2, axis=1), X34),
    ("split_neg_axis", lambda a: np.split(a, [1, 2], axis=-3), X234),
    ("split_indices_past_end", lambda a: np.split(a, [2, 9]), X5),
    ("array_split", lambda a: np.array_split(a, 3, axis=-1), X234),
    ("array_split_uneven", lambda a: np.array_split(a, 3), X5),
    ("hsplit", lambda a: np.hsplit(a, [1, 3]), X34),
    ("hsplit_1d", lambda a: np.hsplit(a, [2]), X5),
    ("vsplit", lambda a: np.vsplit(a, 3), X34),
    ("dsplit", lambda a: np.dsplit(a, 2), X234),
    ("swapaxes", lambda a: np.swapaxes(a, 0, -1), X234),
    ("swapaxes_method", lambda a: a.swapaxes(1, 0), X34),
    ("moveaxis", lambda a: np.moveaxis(a, [0, 1], [-1, 0]), X234),
    ("rollaxis", lambda a: np.rollaxis(a, 2, 1), X234),
    ("repeat", lambda a: np.repeat(a, [1, 0, 3], axis=0), X34),
    ("repeat_flat", lambda a: np.repeat(a, 2), X34),
    ("repeat_neg_axis", lambda a: np.repeat(a, 2, axis=-1), X234),
    ("repeat_method", lambda a: a.repeat(3), X5),
    ("roll", lambda a: np.roll(a, -7), X34),
    ("roll_axes", lambda a: np.roll(a, (1, -2), axis=(0, -1)), X234),
    ("tile", lambda a: np.tile(a, (2, 1, 3)), X34),
    ("tile_short_reps", lambda a: np.tile(a, 2), X234),
    ("flip", lambda a: np.flip(a, axis=(0, 2)), X234),
    ("flip_all", np.flip, X34),
    ("fliplr", np.fliplr, X34),
    ("flipud", np.flipud, X5),
    ("rot90", lambda a: np.rot90(a, -1, axes=(2, 0)), X234),
    ("pad_constant", lambda a: np.pad(a, ((1, 2), (0, 3)), constant_values=((1.5, -2), (0, 7))),
     X34),
    ("pad_edge", lambda a: np.pad(a, 2, mode="edge"), X34),
    ("pad_reflect", lambda a: np.pad(a, (3, 1), mode="reflect"), X5),
    ("pad_symmetric", lambda a: np.pad(a, ((0, 1), (2, 2), (1, 0)), mode="symmetric"), X234),
    ("pad_wrap", lambda a: np.pad(a, 6, mode="wrap"), X5),
    ("reshape_F", lambda a: np.reshape(a, (4, 3), order="F"), X34),
    ("reshape_None", lambda a: np.reshape(a, (6, 2), order=None), X34),
    ("ravel_F", lambda a: np.ravel(a, order="F"), X234),
    ("flatten_F", lambda a: a.flatten("F"), X34),
]


def _pieces(r):
    return list(r) if isinstance(r, list) else [r]


@pytest.mark.parametrize("name,fn,x", CASES, ids=[c[0] for c in CASES])
def test_values_are_numpys_bit_for_bit(name, fn, x):
    want = _pieces(fn(x))
    t = rt.Tape()
    got = _pieces(fn(t.track(x)))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert same_bits(rt.value(g), w)
    # compiled forward of the concatenated pieces, against numpy's
    flat = lambda a: np.concatenate([np.ravel(p) for p in _pieces(fn(a))])
    jt = rt.JacobianTape(flat, x)
    assert same_bits(rt.compile(jt).forward(x), flat(x))


@pytest.mark.parametrize("name,fn,x", CASES, ids=[c[0] for c in CASES])
def test_gradients_hessians_and_replays(name, fn, x):
    flat = lambda a: np.concatenate([np.ravel(p) for p in _pieces(fn(a))])
    W = np.random.default_rng(3).standard_normal(flat(x).shape)
    f = lambda a: np.sum(W * np.sin(flat(a)))
    check_all(f, x)


@pytest.mark.parametrize("name,fn,x", CASES, ids=[c[0] for c in CASES])
def test_the_adjoint_counts_the_copies(name, fn, x):
    # the gradient of sum(fn(x)) is how often each element appears in fn(x)
    # (pad's constant border reads nothing)
    flat = lambda a: np.concatenate([np.ravel(p) for p in _pieces(fn(a))])
    labels = np.arange(1, x.size + 1, dtype=float).reshape(x.shape)
    moved = flat(labels)
    counts = np.array([np.sum(moved == k) for k in labels.ravel()]).reshape(x.shape)
    if name == "pad_constant":        # the border's constants may equal a label
        counts = np.ones(x.shape)
    np.testing.assert_array_equal(rt.gradient(lambda a: np.sum(flat(a)), x), counts)


def test_one_gather_per_call():
    tape = rt.GradientTape(lambda a: np.sum(np.roll(np.tile(a, 2), 3) ** 2), X5)
    names = opcodes(rt.compile(tape))
    assert names.count("GATHER") == 2 and "SCATTER" not in names


def test_moves_that_move_nothing_record_no_gather():
    t = rt.Tape()
    a = t.track(X34)
    n = len(t.instructions)
    for r in (np.roll(a, 0), np.tile(a, 1), np.repeat(a, 1, axis=0), np.moveaxis(a, 0, 0),
              np.pad(a, 0)):
        assert same_bits(rt.value(r), X34)
    assert all(ins[0].name != "take" for ins in t.instructions[n:])


@pytest.mark.parametrize("fn,shape", [
    (lambda a: np.repeat(a, 2, axis=1), (0, 3)),
    (lambda a: np.split(a, 3, axis=1)[1], (0, 3)),
    (lambda a: np.tile(a, (2, 0)), (2, 3)),
    (lambda a: np.pad(a, 1), (0, 3)),
    (lambda a: np.roll(a, 2), (0,)),
    (lambda a: np.swapaxes(a, 0, 1), (0, 2)),
])
def test_empty_arrays(fn, shape):
    x = np.zeros(shape)
    t = rt.Tape()
    r = fn(t.track(x))
    want = fn(x)
    assert np.shape(rt.value(r)) == want.shape
    np.testing.assert_array_equal(rt.value(r), want)
    g = rt.gradient(lambda a: np.sum(fn(a)) + np.sum(a), x)
    assert g.shape == shape


def test_nan_and_inf_are_copied():
    x = np.array([[np.nan, 1.0], [np.inf, -np.inf]])
    t = rt.Tape()
    for fn in (lambda a: np.roll(a, 1), lambda a: np.pad(a, 1, mode="reflect"),
               lambda a: np.repeat(a, 2, axis=0), lambda a: np.pad(a, 1, constant_values=np.nan)):
        assert same_bits(rt.value(fn(t.track(x))), fn(x))


def test_pad_constant_border_takes_no_adjoint_even_at_nan():
    x = np.array([np.nan, 2.0])
    g = rt.gradient(lambda a: np.nansum(np.pad(a, 2, constant_values=5.0) * 3.0), x)
    np.testing.assert_array_equal(g, [0.0, 3.0])


def test_numpys_errors():
    t = rt.Tape()
    a = t.track(X34)
    with pytest.raises(ValueError):
        np.split(a, 3, axis=1)                    # 4 does not divide into 3
    with pytest.raises(np.exceptions.AxisError):
        np.swapaxes(a, 0, 2)
    with pytest.raises(ValueError):
        np.repeat(a, [1, 2], axis=0)
    with pytest.raises(ValueError):
        np.vsplit(t.track(X5), 5)                 # vsplit needs 2 dimensions
    with pytest.raises(ValueError, match="order"):
        np.reshape(a, (12,), order="X")


def test_refusals_name_the_argument():
    t = rt.Tape()
    a = t.track(X34)
    for mode in ("linear_ramp", "maximum", "mean", "median", "minimum"):
        with pytest.raises(rt.UnsupportedError, match=mode):
            np.pad(a, 1, mode=mode)
    with pytest.raises(rt.UnsupportedError, match="reflect_type"):
        np.pad(a, 1, mode="reflect", reflect_type="odd")
    with pytest.raises(rt.UnsupportedError, match="function"):
        np.pad(a, 1, mode=lambda v, w, i, k: None)
    with pytest.raises(rt.UnsupportedError, match="constant_values"):
        np.pad(a, 1, constant_values=a[0, 0])
    with pytest.raises(rt.UnsupportedError, match="repeats"):
        np.repeat(a, a[0, 0])
    with pytest.raises(rt.UnsupportedError, match="shift"):
        np.roll(a, a[0, 0])


def test_rt_grad_replays_at_new_points():
    W = np.arange(30.0).reshape(6, 5)
    f = lambda a: np.sum(np.cos(np.moveaxis(np.pad(a, 1, mode="wrap"), 0, -1)) * W)
    g = rt.grad(f)
    for k in range(3):
        x = RNG.standard_normal(X34.shape)
        np.testing.assert_allclose(g(x), rt.gradient(f, x), rtol=1e-13, atol=1e-14)
