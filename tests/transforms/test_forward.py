"""Nested forward mode (transforms/forward.py): rt.jvp at tracked primals or
tangents records its tangent onto their tape, so rt.jvp and rt.grad compose
to any order.  Every derivative is checked against its analytic formula and
against central finite differences of the order below; recorded tapes are
checked reference replay against compiled, at a point other than the
recording one."""

import numpy as np
import pytest

import revtape as rt


def fd(g, x, h=1e-5):
    """Central difference of a scalar function g at the float x."""
    return (g(x + h) - g(x - h)) / (2 * h)


def fd_dir(g, x, v, h=1e-5):
    """Central difference of g (float or array valued) at x along v."""
    return (np.asarray(g(x + h * v)) - np.asarray(g(x - h * v))) / (2 * h)


# f, f', f'', f''' on floats: elementwise ops of several kinds
SCALAR_CASES = {
    "sin_x2": (lambda x: np.sin(x) * x ** 2,
               lambda x: np.cos(x) * x ** 2 + 2 * x * np.sin(x),
               lambda x: -np.sin(x) * x ** 2 + 4 * x * np.cos(x) + 2 * np.sin(x),
               lambda x: -np.cos(x) * x ** 2 - 6 * x * np.sin(x) + 6 * np.cos(x)),
    "exp_half": (lambda x: np.exp(0.5 * x), lambda x: 0.5 * np.exp(0.5 * x),
                 lambda x: 0.25 * np.exp(0.5 * x), lambda x: 0.125 * np.exp(0.5 * x)),
    "log": (np.log, lambda x: 1 / x, lambda x: -1 / x ** 2, lambda x: 2 / x ** 3),
    "recip": (lambda x: 1.0 / (1.0 + x), lambda x: -1 / (1 + x) ** 2,
              lambda x: 2 / (1 + x) ** 3, lambda x: -6 / (1 + x) ** 4),
    "tanh": (np.tanh, lambda x: 1 - np.tanh(x) ** 2,
             lambda x: -2 * np.tanh(x) * (1 - np.tanh(x) ** 2),
             lambda x: (1 - np.tanh(x) ** 2) * (6 * np.tanh(x) ** 2 - 2)),
}


def d1_fwd(f):
    return lambda x: rt.jvp(f, (x,), (1.0,))[1]


@pytest.mark.parametrize("name", sorted(SCALAR_CASES))
def test_second_derivative_every_composition(name):
    f, d1, d2, _ = SCALAR_CASES[name]
    x0 = 0.7
    g = d1_fwd(f)
    ff_val, ff = rt.jvp(g, (x0,), (1.0,))           # forward over forward
    assert ff_val == pytest.approx(d1(x0), rel=1e-12)
    assert ff == pytest.approx(d2(x0), rel=1e-12)
    assert rt.grad(g)(x0) == pytest.approx(d2(x0), rel=1e-12)        # reverse over forward
    assert rt.jvp(rt.grad(f), (x0,), (1.0,))[1] == pytest.approx(d2(x0), rel=1e-12)
    assert ff == pytest.approx(fd(d1, x0), rel=1e-7)


@pytest.mark.parametrize("name", sorted(SCALAR_CASES))
def test_third_derivative_every_composition(name):
    f, _, d2, d3 = SCALAR_CASES[name]
    x0 = 0.7
    g = d1_fwd(f)
    fff = rt.jvp(d1_fwd(g), (x0,), (1.0,))[1]                         # fwd fwd fwd
    frf = rt.jvp(rt.grad(g), (x0,), (1.0,))[1]                        # fwd over rev over fwd
    rff = rt.grad(d1_fwd(g))(x0)                                      # rev over fwd over fwd
    rrf = rt.grad(rt.grad(g))(x0)                                     # rev rev fwd
    frr = rt.jvp(rt.grad(rt.grad(f)), (x0,), (1.0,))[1]               # fwd over rev over rev
    for got in (fff, frf, rff, rrf, frr):
        assert got == pytest.approx(d3(x0), rel=1e-10)
    assert fff == pytest.approx(fd(d2, x0), rel=1e-7)


def test_fourth_order():
    # x**5: the fourth derivative 120 x
    g = lambda x: x ** 5
    for _ in range(4):
        g = d1_fwd(g)
    assert g(1.3) == pytest.approx(120 * 1.3, rel=1e-12)
    assert rt.grad(d1_fwd(rt.grad(d1_fwd(lambda x: x ** 5))))(1.3) == pytest.approx(156.0)


A = np.array([[1.0, 2.0, 0.0], [0.5, -1.0, 3.0]])


def h(x):
    """matmul, elementwise and a reduction."""
    return np.sum(np.tanh(A @ x) ** 2)


def h_grad(x):
    t = np.tanh(A @ x)
    return A.T @ (2 * t * (1 - t ** 2))


def h_hess(x):
    t = np.tanh(A @ x)
    s = 1 - t ** 2
    return A.T @ np.diag(2 * s ** 2 - 4 * t ** 2 * s) @ A


X = np.array([0.3, -0.5, 0.2])
V = np.array([1.0, 0.5, -2.0])
U = np.array([-0.3, 1.0, 0.7])


def test_hvp_from_every_composition_on_arrays():
    want = h_hess(X) @ V
    jv = lambda x: rt.jvp(h, (x,), (V,))[1]
    np.testing.assert_allclose(rt.grad(jv)(X), want, rtol=1e-12)                    # rev/fwd
    np.testing.assert_allclose(rt.jvp(rt.grad(h), (X,), (V,))[1], want, rtol=1e-12)  # fwd/rev
    # forward over forward: u^T H v
    assert rt.jvp(jv, (X,), (U,))[1] == pytest.approx(U @ want, rel=1e-12)
    np.testing.assert_allclose(want, fd_dir(h_grad, X, V), rtol=1e-7)
    np.testing.assert_allclose(rt.hessian(h)(X) @ V, want, rtol=1e-12)


def test_third_order_on_arrays_against_finite_differences():
    # d/du of (H(x) v): finite differences of the analytic Hessian
    want = fd_dir(lambda x: h_hess(x) @ V, X, U)
    jv = lambda x: rt.jvp(h, (x,), (V,))[1]
    frf = rt.jvp(rt.grad(jv), (X,), (U,))[1]
    rff = rt.grad(lambda x: rt.jvp(jv, (x,), (U,))[1])(X)
    np.testing.assert_allclose(frf, want, rtol=1e-6)
    np.testing.assert_allclose(rff, want, rtol=1e-6)
    np.testing.assert_allclose(frf, rff, rtol=1e-12)


def test_array_output_jvp_nested():
    # a vector output: the Jacobian-vector product of the elementwise f is f'(x) * v
    f = lambda x: np.exp(x) * np.sin(x)
    d1 = lambda x: np.exp(x) * (np.sin(x) + np.cos(x))
    d2 = lambda x: 2 * np.exp(x) * np.cos(x)
    x = np.array([0.1, 0.4, -0.8])
    y, ydot = rt.jvp(lambda x: rt.jvp(f, (x,), (V,))[1], (x,), (U,))
    np.testing.assert_allclose(y, d1(x) * V, rtol=1e-12)
    np.testing.assert_allclose(ydot, d2(x) * V * U, rtol=1e-12)
    J = rt.jacobian(lambda x: rt.jvp(f, (x,), (V,))[1])(x)
    np.testing.assert_allclose(J, np.diag(d2(x) * V), rtol=1e-12)


def test_tracked_tangent():
    # d/dv (J v) = J, and reverse over a jvp whose primal is tracked too
    f = lambda x: np.sin(A @ x)
    J = np.cos(A @ X)[:, None] * A
    np.testing.assert_allclose(rt.jacobian(lambda v: rt.jvp(f, (X,), (v,))[1])(V), J,
                               rtol=1e-12)
    g = rt.grad(lambda x, v: np.sum(rt.jvp(f, (x,), (v,))[1]), argnums=(0, 1))(X, V)
    np.testing.assert_allclose(g[1], J.sum(0), rtol=1e-12)
    want_x = A.T @ (-np.sin(A @ X) * (A @ V))
    np.testing.assert_allclose(g[0], want_x, rtol=1e-12)


def test_recorded_tape_compiles_and_replays_elsewhere():
    # the tangent recorded on a tape is a computation of its inputs, not
    # constants: replayed at another point, reference and compiled agree with
    # the analytic second derivative there
    jv = lambda x: rt.jvp(h, (x,), (V,))[1]
    tape = rt.GradientTape(jv, X)
    ctape = rt.compile(tape, native=False)
    x1 = np.array([-0.4, 0.1, 0.9])
    want = h_hess(x1) @ V
    v_ref, g_ref = tape.value_and_gradient(x1)
    v_c, g_c = ctape.value_and_gradient(x1)
    assert v_ref == pytest.approx(h_grad(x1) @ V, rel=1e-12)
    np.testing.assert_allclose(g_ref, want, rtol=1e-12)
    np.testing.assert_allclose(g_c, g_ref, rtol=1e-13, atol=1e-15)
    assert v_c == pytest.approx(v_ref, rel=1e-13)
    # the compiled tape's own tangent sweep on top: a third derivative
    third = fd_dir(lambda x: h_hess(x) @ V, x1, U)
    np.testing.assert_allclose(ctape.hvp(x1, U), third, rtol=1e-6)


def test_cached_jvp_accepts_tracked_values():
    f = lambda x, c: c * np.sum(np.sin(x) ** 2)
    jf = rt.jvp(f)
    # rev over the cached forward transform; the static c tracked as well
    g = rt.grad(lambda x: jf(x, V, 2.0)[1])(X)
    want = 2.0 * 2 * np.cos(2 * X) * V
    np.testing.assert_allclose(g, want, rtol=1e-12)
    gc = rt.grad(lambda c: jf(X, V, c)[1])(3.0)
    assert gc == pytest.approx(np.sum(np.sin(2 * X) * V), rel=1e-12)
    # plain values still take the compiled path
    assert jf(X, V, 2.0)[1] == pytest.approx(2.0 * np.sum(np.sin(2 * X) * V), rel=1e-12)


def test_pytree_primals_and_outputs_nested():
    f = lambda p: {"a": p["w"] * np.sum(p["x"] ** 2), "b": np.cos(p["x"])}
    p0 = {"w": 1.5, "x": np.array([0.2, -0.1])}
    t0 = {"w": 1.0, "x": np.array([0.5, 2.0])}

    def scalar(w):
        y, yd = rt.jvp(f, ({"w": w, "x": p0["x"]},), (t0,))
        return yd["a"] + np.sum(yd["b"])
    # yd["a"] = 1 * sum x^2 + w * 2 x . tx: its w derivative is 2 x . tx
    assert rt.grad(scalar)(1.5) == pytest.approx(2 * p0["x"] @ t0["x"], rel=1e-12)
    assert scalar(1.5) == pytest.approx(
        np.sum(p0["x"] ** 2) + 1.5 * 2 * p0["x"] @ t0["x"] - np.sin(p0["x"]) @ t0["x"])


def test_guards_are_recorded_on_the_outer_tape():
    def f(x):
        return x ** 2 if x > 0 else -x ** 3
    g = rt.grad(lambda x: rt.jvp(f, (x,), (1.0,))[1])
    assert g(0.5) == pytest.approx(2.0)
    assert g(-0.5) == pytest.approx(-6 * -0.5)     # the other branch re-records


def test_errors():
    with pytest.raises(rt.InputError, match="shape"):
        rt.grad(lambda x: np.sum(rt.jvp(np.sin, (x,), (np.ones(2),))[1]))(X)
    with pytest.raises(rt.TapeMixError, match="closure"):
        rt.grad(lambda y: rt.jvp(lambda x: x * y, (1.0,), (1.0,))[1])(2.0)


def _quartic_jvp():
    """f = sum x^4: d/dx (J v) = 12 x^2 v, and its Hessian diag(24 x v)."""
    v = np.array([1.0, 2.0])
    return (lambda x: rt.jvp(lambda y: np.sum(y ** 4), (x,), (v,))[1]), np.array([0.3, -0.2]), v


def test_hessian_of_a_jvp():
    # a HessianTape of the recorded tangent: third derivatives
    jv, x, v = _quartic_jvp()
    np.testing.assert_allclose(rt.hessian(jv)(x), np.diag(24 * x * v), rtol=1e-12)
    np.testing.assert_allclose(rt.HessianTape(jv, x).hessian(2 * x), np.diag(48 * x * v),
                               rtol=1e-12)


@pytest.mark.slow          # a native build: a C compiler run
def test_native_tier_of_a_jvp():
    # the recorded tangent lowers to native C like any tape
    jv, x, v = _quartic_jvp()
    tape = rt.GradientTape(jv, x)
    nt, vm = rt.compile(tape, native=True), rt.compile(tape, native=False)
    x1 = 2 * x
    np.testing.assert_allclose(nt.gradient(x1), 12 * x1 ** 2 * v, rtol=1e-12)
    np.testing.assert_array_equal(nt.gradient(x1), vm.gradient(x1))
    np.testing.assert_allclose(nt.hvp(x1, v), 24 * x1 * v * v, rtol=1e-12)


def test_identity_and_constant_outputs():
    v = np.array([1.0, 2.0])
    x = np.array([0.3, -0.2])
    # the identity's tangent is the tangent itself (here tracked: x)
    g = rt.grad(lambda x: np.sum(rt.jvp(lambda y: y, (x,), (x,))[1] * v))(x)
    np.testing.assert_allclose(g, v)
    # a constant output has a zero tangent, in the output's structure
    (y, c), (yd, cd) = rt.jvp(lambda x: rt.jvp(lambda y: (y, 2.0), (x,), (v,))[0], (x,), (v,))
    np.testing.assert_allclose(yd, v)
    assert c == 2.0 and cd == 0.0


def test_vjp_nests():
    # rt.vjp at tracked primals records its sweep: d/dx (w^T J(x) u) for
    # f = sin(A x) is A^T (w * -sin(A x) * (A u)); and a tracked cotangent
    f = lambda x: np.sin(A @ x)
    w = np.array([1.0, -2.0])
    want = A.T @ (w * -np.sin(A @ X) * (A @ U))
    np.testing.assert_allclose(rt.grad(lambda x: rt.vjp(f, x)[1](w)[0] @ U)(X), want,
                               rtol=1e-12)
    np.testing.assert_allclose(rt.jvp(lambda x: rt.vjp(f, x)[1](w)[0], (X,), (U,))[1], want,
                               rtol=1e-12)
    np.testing.assert_allclose(rt.grad(lambda w: rt.vjp(f, X)[1](w)[0] @ U)(w),
                               np.cos(A @ X) * (A @ U), rtol=1e-12)
    # a container output at tracked primals
    g = rt.grad(lambda x: rt.vjp(lambda y: {"a": np.sum(y ** 2), "b": y}, x)[1](
        {"a": 1.0, "b": U})[0] @ U)(X)
    np.testing.assert_allclose(g, 2 * U, rtol=1e-12)


def _hess_dir(u):
    """d/du of the analytic Hessian of h at X, by central differences."""
    return (h_hess(X + 1e-5 * u) - h_hess(X - 1e-5 * u)) / 2e-5


def test_cached_transforms_inside_a_recording():
    # rt.hessian(f), rt.hvp(f), rt.jacobian(f) called at tracked values record
    # onto the outer tape instead of refusing them
    np.testing.assert_allclose(rt.jvp(rt.hessian(h), (X,), (U,))[1], _hess_dir(U), atol=1e-7)
    np.testing.assert_allclose(rt.jvp(lambda x: rt.hvp(h)(x, V), (X,), (U,))[1],
                               _hess_dir(U) @ V, atol=1e-7)
    np.testing.assert_allclose(rt.grad(lambda x: rt.hvp(h)(x, V) @ U)(X), _hess_dir(U) @ V,
                               atol=1e-7)
    f = lambda x: np.sin(A @ x)
    J2 = rt.jacobian(rt.jacobian(f))(X)
    np.testing.assert_allclose(J2, np.einsum("i,ij,ik->ijk", -np.sin(A @ X), A, A), atol=1e-15)
    d = rt.jacobian(lambda x: rt.jacobian(lambda y: {"a": np.sin(y), "b": np.sum(y)})(x)["a"])(X)
    np.testing.assert_allclose(d, np.einsum("ij,jk->ijk", np.diag(-np.sin(X)), np.eye(3)))


def test_cached_jvp_tracked_tangent_only():
    f = lambda x: np.sin(A @ x)
    J = np.cos(A @ X)[:, None] * A
    np.testing.assert_allclose(rt.jacobian(lambda v: rt.jvp(f)(X, v)[1])(V), J, rtol=1e-12)
