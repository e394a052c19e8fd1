"""Container outputs (transforms/outputs.py): rt.vjp, rt.jvp and rt.jacobian
of an f returning a tuple, list, dict or namedtuple of leaves of different
shapes answer in that structure; and rt.grad of a size-1 output."""

import numpy as np
import pytest

import revtape as rt

X = np.array([0.3, -0.5, 0.2])
V = np.array([1.0, 0.5, -2.0])


def f_dict(x):
    return {"s": np.sum(x ** 2), "v": np.sin(x), "m": np.outer(x, np.exp(x))}


def jac_dict(x):
    """The analytic Jacobians of f_dict."""
    e = np.exp(x)
    m = np.zeros((3, 3, 3))
    for i in range(3):
        for j in range(3):
            m[i, j, i] += e[j]
            m[i, j, j] += x[i] * e[j]
    return {"s": 2 * x, "v": np.diag(np.cos(x)), "m": m}


def test_vjp_of_eigh():
    A = np.array([[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 4.0]])
    (w, U), vjp_fun = rt.vjp(lambda a: np.linalg.eigh(a), A)
    w_np, U_np = np.linalg.eigh(A)
    np.testing.assert_allclose(w, w_np, rtol=1e-12)
    np.testing.assert_allclose(np.abs(U), np.abs(U_np), rtol=1e-12)
    # the cotangent (e_k, 0) picks eigenvalue k, whose derivative along a
    # symmetric E is u_k^T E u_k (eigh reads one triangle, as numpy's does,
    # so the gradient is compared along symmetric directions)
    E = np.array([[0.3, -1.0, 0.5], [-1.0, 2.0, 0.1], [0.5, 0.1, -0.7]])
    for k in range(3):
        (g,) = vjp_fun((np.eye(3)[k], np.zeros((3, 3))))
        assert np.sum(g * E) == pytest.approx(U_np[:, k] @ E @ U_np[:, k], rel=1e-10)
        fd = (np.linalg.eigh(A + 1e-6 * E)[0][k] - np.linalg.eigh(A - 1e-6 * E)[0][k]) / 2e-6
        assert np.sum(g * E) == pytest.approx(fd, rel=1e-7)


@pytest.mark.parametrize("make", [tuple, list])
def test_vjp_of_sequences(make):
    y, vjp_fun = rt.vjp(lambda x: make([x, 2 * x, x ** 2]), 1.5)
    assert type(y) is make and list(y) == [1.5, 3.0, 2.25]
    (g,) = vjp_fun(make([1.0, 10.0, 100.0]))
    assert g == pytest.approx(1 + 20 + 300)


def test_vjp_of_dict_with_shapes():
    y, vjp_fun = rt.vjp(f_dict, X)
    assert set(y) == {"s", "v", "m"} and y["m"].shape == (3, 3)
    np.testing.assert_allclose(y["v"], np.sin(X))
    w = {"s": 2.0, "v": V, "m": np.arange(9.0).reshape(3, 3)}
    (g,) = vjp_fun(w)
    J = jac_dict(X)
    want = 2.0 * J["s"] + V @ J["v"] + np.tensordot(w["m"], J["m"], 2)
    np.testing.assert_allclose(g, want, rtol=1e-12)
    with pytest.raises(rt.InputError, match="structure"):
        vjp_fun({"s": 1.0, "v": V})
    with pytest.raises(rt.InputError, match="shape"):
        vjp_fun({"s": 1.0, "v": V[:2], "m": np.ones((3, 3))})


def test_vjp_of_dict_of_repeated_leaf():
    y, vjp_fun = rt.vjp(lambda x: {"a": x, "b": x}, 1.0)
    assert y == {"a": 1.0, "b": 1.0}
    assert vjp_fun({"a": 1.0, "b": 2.0}) == (3.0,)


@pytest.mark.parametrize("cached", [True, False])
def test_jacobian_structure(cached):
    J = rt.jacobian(f_dict)(X) if cached else rt.jacobian(f_dict, X)
    want = jac_dict(X)
    assert set(J) == set(want)
    for k in want:
        np.testing.assert_allclose(J[k], want[k], rtol=1e-12)


def test_jacobian_of_tuple_output_pytree_input():
    f = lambda p: (p["a"] * p["b"], np.sum(p["b"]))
    p = {"a": 2.0, "b": np.array([1.0, 3.0])}
    J = rt.jacobian(f)(p)
    np.testing.assert_allclose(J[0]["a"], p["b"])
    np.testing.assert_allclose(J[0]["b"], 2.0 * np.eye(2))
    assert J[1]["a"] == 0.0
    np.testing.assert_allclose(J[1]["b"], np.ones(2))


def test_jvp_structure_plain_cached_and_nested():
    J = jac_dict(X)
    for y, yd in (rt.jvp(f_dict, (X,), (V,)), rt.jvp(f_dict)(X, V)):
        np.testing.assert_allclose(y["m"], np.outer(X, np.exp(X)))
        assert yd["s"] == pytest.approx(J["s"] @ V)
        np.testing.assert_allclose(yd["v"], J["v"] @ V, rtol=1e-12)
        np.testing.assert_allclose(yd["m"], J["m"] @ V, rtol=1e-12)
    # nested: reverse over the dict-valued jvp
    g = rt.grad(lambda x: rt.jvp(f_dict, (x,), (V,))[1]["s"])(X)
    np.testing.assert_allclose(g, 2 * V)


@pytest.mark.parametrize("shape", [(1,), (1, 1), (1, 1, 1)])
def test_grad_of_size_one_output(shape):
    f = lambda x: np.reshape(np.sum(np.sin(x) * x), shape)
    want = np.cos(X) * X + np.sin(X)
    np.testing.assert_allclose(rt.grad(f)(X), want, rtol=1e-12)
    value, g = rt.value_and_grad(f)(X)
    assert value == pytest.approx(np.sum(np.sin(X) * X))
    np.testing.assert_allclose(g, want, rtol=1e-12)
    # second order through the traced path
    H = rt.jacobian(rt.grad(f))(X)
    np.testing.assert_allclose(H, np.diag(2 * np.cos(X) - X * np.sin(X)), rtol=1e-12)


def test_grad_still_refuses_larger_outputs():
    with pytest.raises(rt.OutputError, match="scalar"):
        rt.grad(lambda x: x * 2)(X)
