"""cumsum/cumprod, sort/argsort/argmax/argmin (guarded), einsum, tensordot,
append on tracked values: values against numpy, gradients against finite
differences, reference vs compiled replay, Hessians, guards."""

import numpy as np
import pytest

import revtape as rt
from conftest import check_all, check_grad, opcodes

REL = dict(rtol=1e-12, atol=1e-13)


# ---------------------------------------------------------------------------- scans

@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@pytest.mark.parametrize("shape,axis", [((5,), None), ((5,), 0), ((3, 4), 0), ((3, 4), 1),
                                        ((3, 4), -1), ((3, 4), None), ((2, 3, 2), 1)])
def test_scans(name, shape, axis, rng):
    fn = getattr(np, name)
    x = rng.uniform(0.5, 1.5, size=shape) * rng.choice([-1, 1], size=shape)
    W = rng.standard_normal(fn(x, axis=axis).shape)
    f = lambda x: np.sum(W * fn(x, axis=axis))
    tape, ct = check_all(f, x, hessian=shape != (2, 3, 2))
    assert name.upper() in opcodes(ct)
    t = rt.Tape()
    np.testing.assert_array_equal(rt.value(fn(t.track(x), axis=axis)), fn(x, axis=axis))
    # sequential, numpy's order: the compiled replay is bit-for-bit
    jt = rt.JacobianTape(lambda x: fn(x, axis=axis), x)
    np.testing.assert_array_equal(rt.compile(jt).forward(x), fn(x, axis=axis))


def test_cumprod_gradient_is_exact_at_zeros(rng):
    x = np.array([1.5, 0.0, 2.0, -0.5, 0.0, 3.0])
    W = rng.standard_normal(6)
    f = lambda x: np.sum(W * np.cumprod(x))
    tape = rt.GradientTape(f, x)
    g_ref = tape.gradient(x)
    g_c = rt.compile(tape).gradient(x)
    # brute force: d/dx_i sum_j W_j prod_{k<=j} x_k
    exp = np.array([sum(W[j] * np.prod(np.delete(x[:j + 1], i)) for j in range(i, 6))
                    for i in range(6)])
    np.testing.assert_allclose(g_ref, exp, **REL)
    np.testing.assert_allclose(g_c, exp, **REL)
    assert np.isfinite(g_c).all()


def test_scans_refuse_out_and_other_dtypes():
    t = rt.Tape()
    x = t.track(np.ones(3))
    with pytest.raises(rt.UnsupportedError):
        np.cumsum(x, out=np.empty(3))
    with pytest.raises(rt.UnsupportedError):
        np.cumsum(x, dtype=np.float32)


# ---------------------------------------------------------------------------- sort and friends

def separated(rng, shape):
    """Distinct values at least 0.3 apart: small perturbations keep their order."""
    n = int(np.prod(shape))
    return (rng.permutation(n) * 0.3 - 1.0 + rng.uniform(0, 0.05, n)).reshape(shape)


@pytest.mark.parametrize("shape,axis", [((6,), -1), ((3, 4), 0), ((3, 4), 1), ((3, 4), None)])
def test_sort_is_a_guarded_gather(shape, axis, rng):
    x = separated(rng, shape)
    W = rng.standard_normal(np.sort(x, axis=axis).shape)
    f = lambda x: np.sum(W * np.sort(x, axis=axis) ** 2)
    tape, ct = check_all(f, x)
    t = rt.Tape()
    np.testing.assert_array_equal(rt.value(np.sort(t.track(x), axis=axis)), np.sort(x, axis=axis))
    # another order: both replays refuse it
    y = -x
    with pytest.raises(rt.BranchChanged, match="sort order"):
        tape.gradient(y)
    with pytest.raises(rt.BranchChanged, match="sort order"):
        ct.gradient(y)
    # rt.grad re-records and gives the right answer there
    g = rt.grad(f)
    np.testing.assert_allclose(g(x), tape.gradient(x), **REL)
    np.testing.assert_allclose(g(y), rt.gradient(f, y), **REL)
    assert g.cache_info().records == 2


def test_argsort_argmax_argmin_are_plain_guarded_indices(rng):
    x = separated(rng, (6,))

    def f(x):
        i = np.argmax(x)
        j = np.argmin(x)
        p = np.argsort(x)
        assert isinstance(i, (int, np.integer)) and p.dtype.kind == "i"
        return x[i] * 2.0 + x[j] * 3.0 + np.sum(np.arange(6.0) * x[p])

    tape, ct = check_all(f, x)
    np.testing.assert_allclose(ct.gradient(x)[np.argmax(x)], 2.0 + np.argsort(np.argsort(x))[
        np.argmax(x)], **REL)
    for replay in (tape, ct):
        with pytest.raises(rt.BranchChanged):
            replay.gradient(x[::-1].copy())
    g = rt.grad(f)
    g(x)
    np.testing.assert_allclose(g(x[::-1].copy()), rt.gradient(f, x[::-1].copy()), **REL)


def test_argmax_along_an_axis(rng):
    x = separated(rng, (3, 4))
    t = rt.Tape()
    tx = t.track(x)
    np.testing.assert_array_equal(np.argmax(tx, axis=1), np.argmax(x, axis=1))
    np.testing.assert_array_equal(np.argmin(tx, axis=0), np.argmin(x, axis=0))
    np.testing.assert_array_equal(np.argmax(tx, axis=0, keepdims=True),
                                  np.argmax(x, axis=0, keepdims=True))

    def f(x):
        return np.sum(x[np.arange(3), np.argmax(x, axis=1)])

    tape, ct = check_all(f, x)
    y = x.copy()
    y[0] = y[0][::-1]
    if np.argmax(y[0]) != np.argmax(x[0]):
        with pytest.raises(rt.BranchChanged):
            ct.gradient(y)


# ---------------------------------------------------------------------------- einsum / tensordot / append

EINSUM = [
    ("ij,jk->ik", [(3, 4), (4, 2)]), ("ij,j->i", [(3, 4), (4,)]), ("i,i->", [(4,), (4,)]),
    ("ij->ji", [(3, 4)]), ("ii->", [(3, 3)]), ("ii->i", [(3, 3)]), ("ij,ij->", [(3, 4), (3, 4)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]), ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 2)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 2)]), ("ij,kj->ik", [(3, 4), (2, 4)]), ("ij", [(3, 4)]),
    ("ij,jk", [(3, 4), (4, 2)]), ("i,j->ij", [(3,), (4,)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("ij->i", [(3, 4)]), ("ijk->kji", [(2, 3, 4)]), ("...i,...i->...", [(3, 4), (3, 4)]),
    # numpy's broadcasting: size-1 labels and '...' axes stretch
    ("ij,ij->ij", [(1, 4), (3, 4)]), ("ij,jk", [(3, 1), (4, 2)]), ("...j,j", [(2, 1, 3), (3,)]),
    ("...ij,...jk->...ik", [(2, 1, 2, 3), (3, 3, 2)]), ("mnp,pq->mnq", [(2, 3, 4), (4, 1)]),
    ("i,i", [(1,), (4,)]), ("...,...->...", [(3, 1), (2,)]),
]


@pytest.mark.parametrize("subscripts,shapes", EINSUM)
def test_einsum(subscripts, shapes, rng):
    ops = [rng.standard_normal(s) for s in shapes]
    out = np.einsum(subscripts, *ops)
    W = rng.standard_normal(np.shape(out))
    sizes = [int(np.prod(s)) for s in shapes]
    ends = np.cumsum(sizes)

    def f(x):
        parts = [np.reshape(x[e - n:e], s) for e, n, s in zip(ends, sizes, shapes)]
        return np.sum(W * np.einsum(subscripts, *parts) ** 2)

    x = np.concatenate([o.ravel() for o in ops])
    tape, ct = check_all(f, x, hessian=x.size <= 30)
    t = rt.Tape()
    tracked = [t.track(o) for o in ops]
    np.testing.assert_allclose(rt.value(np.einsum(subscripts, *tracked)), out, **REL)
    # one tracked operand, the others constants
    np.testing.assert_allclose(rt.value(np.einsum(subscripts, tracked[0], *ops[1:])), out, **REL)


@pytest.mark.parametrize("args", [
    lambda a, b: (a, [0, 1], b, [1, 2], [0, 2]), lambda a, b: (a, [0, 1], b, [1, 2]),
    lambda a, b: (a, [Ellipsis, 1], b, [1, 2]), lambda a, b: (a, [1, 0], b, [0, 2], [2, 1]),
    lambda a, b: (a, [30, 0], b, [0, 29]),                 # labels past 'Z' keep numpy's order
    lambda a, b: (a, [0, 1], [1, 0]),
])
def test_einsum_sublist_form(args, rng):
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    out = np.einsum(*args(a, b))
    t = rt.Tape()
    got = np.einsum(*args(t.track(a), b))
    np.testing.assert_allclose(rt.value(got), out, **REL)
    W = rng.standard_normal(np.shape(out))
    check_all(lambda a: np.sum(W * np.einsum(*args(a, b)) ** 2), a)


def test_einsum_refuses_what_it_cannot_do(rng):
    t = rt.Tape()
    a = t.track(rng.standard_normal((3, 4)))
    with pytest.raises(ValueError, match="broadcast"):
        np.einsum("ij,ij->ij", a, np.ones((2, 4)))
    with pytest.raises(ValueError, match="sublist"):
        np.einsum(a, [0, "x"])
    with pytest.raises(rt.UnsupportedError):
        np.einsum("ij->i", a, out=np.empty(3))
    with pytest.raises(ValueError):
        np.einsum("ijk->i", a)


@pytest.mark.parametrize("axes", [2, 1, ([1], [0]), ([0, 1], [1, 0])])
def test_tensordot(axes, rng):
    a = rng.standard_normal((3, 4))
    b = rng.standard_normal((4, 3)) if axes != 2 else rng.standard_normal((3, 4))
    if axes == ([1], [0]) or axes == 1:
        b = rng.standard_normal((4, 5))
    out = np.tensordot(a, b, axes)
    W = rng.standard_normal(np.shape(out))
    f = lambda a: np.sum(W * np.tensordot(a, b, axes) ** 2)
    check_all(f, a)
    t = rt.Tape()
    np.testing.assert_allclose(rt.value(np.tensordot(t.track(a), b, axes)), out, **REL)


def test_append(rng):
    x = rng.standard_normal((2, 3))
    f = lambda x: np.sum(np.append(x, np.ones((1, 3)), axis=0) ** 3) + np.sum(
        np.sin(np.append(x, [1.0, 2.0])))
    check_all(f, x)
    t = rt.Tape()
    np.testing.assert_array_equal(rt.value(np.append(t.track(x), [7.0])), np.append(x, [7.0]))
    v = t.track(2.5)
    np.testing.assert_array_equal(rt.value(np.append(np.ones(2), v)), [1.0, 1.0, 2.5])


# ---------------------------------------------------------------------------- rt.r_ and rt.c_

_A = np.arange(3.0) - 0.5
_B = np.arange(6.0).reshape(2, 3) * 0.3

R_CASES = [
    lambda R, C, a, b: R[a, 0, a, 1:3], lambda R, C, a, b: R[a, [a[0] * 2, 5.0]],
    lambda R, C, a, b: R[a[0], a], lambda R, C, a, b: R[b, b], lambda R, C, a, b: R["-1", b, b],
    lambda R, C, a, b: R["0,2", a, a], lambda R, C, a, b: R["0,2,0", a, a],
    lambda R, C, a, b: R["1,2,0", a, a], lambda R, C, a, b: R[0.5:2:4j, a],
    lambda R, C, a, b: C[a, a], lambda R, C, a, b: C[b.T, a], lambda R, C, a, b: C[a[0], a[1]],
    lambda R, C, a, b: C[a, 2.0 * np.ones(3), a[::-1]],
]


@pytest.mark.parametrize("k", range(len(R_CASES)))
def test_r_and_c_of_tracked_items_are_numpys(k):
    fn = R_CASES[k]
    want = fn(np.r_, np.c_, _A, _B)
    t = rt.Tape()
    got = fn(rt.r_, rt.c_, t.track(_A), t.track(_B))
    assert np.shape(rt.value(got)) == want.shape
    np.testing.assert_array_equal(rt.value(got), want)
    W = np.random.default_rng(k).standard_normal(want.shape)
    x = np.concatenate([_A, _B.ravel()])
    check_all(lambda x: np.sum(W * fn(rt.r_, rt.c_, x[:3], x[3:].reshape(2, 3)) ** 2), x)


def test_r_without_tracked_items_is_numpys_and_matrices_are_refused():
    np.testing.assert_array_equal(rt.r_[1:4, 7, [8, 9]], np.r_[1:4, 7, [8, 9]])
    assert rt.c_[np.ones(2), np.zeros(2)].shape == (2, 2)
    t = rt.Tape()
    with pytest.raises(rt.UnsupportedError, match="matrix"):
        rt.r_["r", t.track(_A)]
    with pytest.raises(ValueError, match="directive"):
        rt.r_["x,y", t.track(_A)]
    with pytest.raises(rt.ConversionError):          # numpy's own np.r_ cannot hold them
        np.r_[t.track(_A), 1.0]


# ---------------------------------------------------------------------------- inner, atleast_3d, dstack, column_stack

@pytest.mark.parametrize("fn,shapes", [
    (np.inner, [(2, 3), (4, 3)]), (np.inner, [(3,), (2, 3)]), (np.inner, [(2, 2, 3), (3,)]),
    (np.inner, [(3,), (3,)]), (np.atleast_3d, [(3,)]), (np.atleast_3d, [(2, 3)]),
    (np.atleast_3d, [(2, 1, 2, 1)]), (lambda a, b: np.dstack([a, b]), [(3,), (3,)]),
    (lambda a, b: np.dstack([a, b]), [(2, 3), (2, 3)]),
    (lambda a, b: np.column_stack([a, b]), [(3,), (3, 2)]),
    (np.column_stack, [(4,)]),                 # the rows of one array: its scalars, (1, 4)
])
def test_inner_and_the_stacking_helpers(fn, shapes, rng):
    xs = [rng.standard_normal(s) for s in shapes]
    want = fn(*xs)
    t = rt.Tape()
    np.testing.assert_allclose(rt.value(fn(*[t.track(x) for x in xs])), want, **REL)
    sizes = np.cumsum([0] + [x.size for x in xs])
    W = rng.standard_normal(np.shape(want))
    f = lambda z: np.sum(W * np.sin(fn(*[z[i:j].reshape(s) for i, j, s in
                                         zip(sizes[:-1], sizes[1:], shapes)])))
    check_all(f, np.concatenate([x.ravel() for x in xs]))


def test_inner_of_misaligned_shapes_is_numpys_error():
    t = rt.Tape()
    with pytest.raises(ValueError, match="not aligned"):
        np.inner(t.track(np.ones((2, 3))), np.ones((3, 2)))
