"""revtape.autograd runs programs written for autograd with only their imports
renamed.  Small programs in the style of autograd's examples (logistic
regression, a neural net, a GP marginal likelihood, an HMM forward pass,
optimizers, flatten, custom primitives); gradients are checked against
central differences always and against autograd itself when installed."""

import numpy as onp
import pytest

import revtape as rt
import revtape.autograd.numpy as np
import revtape.autograd.numpy.random as npr
from revtape.autograd import (elementwise_grad, grad, hessian, hessian_vector_product,
                              jacobian, make_jvp, make_vjp, value_and_grad)
from revtape.autograd.misc import flatten
from revtape.autograd.misc.optimizers import adam, rmsprop, sgd
from revtape.autograd.scipy.special import logsumexp


def numgrad(f, x, eps=1e-6):
    x = onp.array(x, dtype=float)
    g = onp.zeros_like(x)
    for i in onp.ndindex(*x.shape):
        e = onp.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


# ---------------------------------------------------------------- the programs

def logistic_program():
    rs = onp.random.RandomState(0)
    inputs = rs.randn(6, 3)
    targets = rs.rand(6) > 0.5

    def sigmoid(x):
        return 0.5 * (np.tanh(x / 2.0) + 1)

    def loss(w):
        p = sigmoid(np.dot(inputs, w))
        label_probs = p * targets + (1 - p) * (1 - targets)
        return -np.sum(np.log(label_probs))
    return loss, rs.randn(3)


def net_program():
    rs = onp.random.RandomState(1)
    X, y = rs.randn(5, 2), rs.randn(5, 1)
    shapes = [(2, 4), (4,), (4, 1), (1,)]
    params = [rs.randn(*s) * 0.5 for s in shapes]

    def predict(params, X):
        W1, b1, W2, b2 = params
        h = np.tanh(np.dot(X, W1) + b1)
        return np.dot(h, W2) + b2

    def loss(params):
        return np.mean((predict(params, X) - y) ** 2)
    return loss, params


def gp_program():
    rs = onp.random.RandomState(2)
    X = onp.linspace(-1, 1, 6)[:, None]
    y = onp.sin(3 * X[:, 0]) + 0.1 * rs.randn(6)

    def nll(theta):
        amp, ls, noise = np.exp(theta[0]), np.exp(theta[1]), np.exp(theta[2])
        d = (X - X.T) / ls
        K = amp * np.exp(-0.5 * d ** 2) + (noise + 1e-6) * np.eye(6)
        L = np.linalg.cholesky(K)
        alpha = np.linalg.solve(K, y)
        return 0.5 * np.dot(y, alpha) + np.sum(np.log(np.diag(L)))
    return nll, onp.array([0.1, -0.5, -2.0])


def hmm_program():
    rs = onp.random.RandomState(3)
    obs = rs.randint(0, 3, size=7)

    def log_lik(logits):
        # logits: (2, 2) transition and (2, 3) emission logits, flattened
        A = logits[:4].reshape(2, 2)
        B = logits[4:].reshape(2, 3)
        logA = A - logsumexp(A, axis=1, keepdims=True)
        logB = B - logsumexp(B, axis=1, keepdims=True)
        alpha = np.log(np.array([0.5, 0.5])) + logB[:, obs[0]]
        for o in obs[1:]:
            alpha = logsumexp(alpha[:, None] + logA, axis=0) + logB[:, o]
        return logsumexp(alpha)
    return log_lik, rs.randn(10)


PROGRAMS = {"logistic": logistic_program, "net": net_program, "gp": gp_program,
            "hmm": hmm_program}


def _flat_fun(f, x0):
    flat, unflatten = flatten(x0)
    return (lambda v: float(f(unflatten(v)))), onp.array(flat, dtype=float), unflatten


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_gradients_match_finite_differences(name):
    f, x0 = PROGRAMS[name]()
    val, g = value_and_grad(f)(x0)
    ff, flat0, _ = _flat_fun(f, x0)
    assert val == pytest.approx(ff(flat0), rel=1e-12)
    gflat = onp.array(flatten(g)[0], dtype=float)
    assert onp.allclose(gflat, numgrad(ff, flat0), rtol=1e-5, atol=1e-7)
    # the structure of the gradient is the argument's
    assert type(g) is type(x0)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_gradients_match_autograd(name):
    # (autograd.numpy: this test folder is itself named autograd, so a bare
    # "autograd" would import it when the real one is missing)
    anp = pytest.importorskip("autograd.numpy")
    import autograd as ag
    import autograd.scipy.special as asp
    import revtape.autograd.numpy as ours
    # the same program run under real autograd: rebind the namespace it uses
    g = PROGRAMS[name].__globals__
    saved = g["np"], g["logsumexp"]
    g["np"], g["logsumexp"] = anp, asp.logsumexp
    try:
        f, x0 = PROGRAMS[name]()
        ref_val, ref = ag.value_and_grad(f)(x0)
    finally:
        g["np"], g["logsumexp"] = saved
    assert g["np"] is ours
    f, x0 = PROGRAMS[name]()
    val, got = value_and_grad(f)(x0)
    assert val == pytest.approx(float(ref_val), rel=1e-12)
    assert onp.allclose(onp.array(flatten(got)[0], dtype=float),
                        onp.array(flatten(ref)[0], dtype=float), rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------- operators

def test_higher_order_against_analytic():
    f = lambda x: np.sum(np.sin(x) ** 2)
    x = onp.array([0.3, 0.5, -1.2])
    assert onp.allclose(grad(f)(x), onp.sin(2 * x))
    assert onp.allclose(hessian(f)(x), onp.diag(2 * onp.cos(2 * x)))
    v = onp.array([1.0, -2.0, 0.5])
    assert onp.allclose(hessian_vector_product(f)(x, v), 2 * onp.cos(2 * x) * v)
    assert grad(grad(grad(lambda x: x ** 4)))(0.7) == pytest.approx(24 * 0.7)


def test_scalar_shapes_follow_autograd():
    # a float input: derivative, jacobian and hessian are floats / shape ()
    assert type(grad(lambda x: x ** 3)(0.5)) is float
    assert onp.shape(jacobian(lambda x: x ** 3)(0.5)) == ()
    assert hessian(lambda x: x ** 3)(0.5) == pytest.approx(3.0)
    assert jacobian(lambda x: np.tanh(x))(onp.ones(3)).shape == (3, 3)


def test_closure_over_outer_argument():
    # autograd's nested-closure idiom: the inner function reads the outer x
    d = grad(lambda x: grad(lambda y: x * y * y)(3.0))(2.0)
    assert d == pytest.approx(6.0)


def test_forward_mode_is_the_transposed_vjp():
    x = onp.array([0.3, -0.4])
    ans, t = make_jvp(lambda x: np.exp(x) * x)(x)(onp.array([1.0, 2.0]))
    assert onp.allclose(ans, onp.exp(x) * x)
    assert onp.allclose(t, onp.exp(x) * (1 + x) * [1.0, 2.0])
    vjp, ans = make_vjp(lambda x: np.exp(x) * x)(x)
    assert onp.allclose(vjp(onp.ones(2)), onp.exp(x) * (1 + x))


def test_elementwise_grad_and_np_array_of_tracked_values():
    x = onp.linspace(-2, 2, 5)
    assert onp.allclose(elementwise_grad(np.tanh)(x), 1 - onp.tanh(x) ** 2)
    f = lambda a, b: np.sum(np.array([a * b, a ** 2, [b, 1.0][0]]))
    assert grad(f, 0)(2.0, 3.0) == pytest.approx(3.0 + 4.0)
    assert grad(f, 1)(2.0, 3.0) == pytest.approx(2.0 + 1.0)


def test_containers_in_and_out():
    f = lambda d: d["a"] * d["b"][0] + np.sum(d["c"] ** 2)
    g = grad(f)({"a": 2.0, "b": [3.0], "c": onp.ones(2)})
    assert g["a"] == 3.0 and g["b"] == [2.0] and onp.allclose(g["c"], 2.0)


def test_flatten_inside_the_objective():
    params = [onp.ones((2, 2)), onp.array([0.5, 1.5])]

    def loss(params):
        flat, _ = flatten(params)
        return np.sum(flat ** 3)
    g = grad(loss)(params)
    assert onp.allclose(g[0], 3.0) and onp.allclose(g[1], 3 * params[1] ** 2)


@pytest.mark.parametrize("opt", [adam, sgd, rmsprop])
def test_optimizers_minimise_with_int_iteration_argument(opt):
    target = onp.array([1.0, -2.0])
    objective = lambda x, i: np.sum((x["w"] - target) ** 2)
    steps = {"adam": 0.1, "sgd": 0.1, "rmsprop": 0.05}[opt.__name__]
    out = opt(grad(objective), {"w": onp.zeros(2)}, num_iters=500, step_size=steps)
    assert onp.allclose(out["w"], target, atol=5e-2)


def test_extend_primitive_with_defvjp():
    from revtape.autograd.extend import defvjp, primitive

    @primitive
    def logsumexp1(x):
        m = onp.max(x)
        return m + onp.log(onp.sum(onp.exp(x - m)))

    defvjp(logsumexp1, lambda ans, x: lambda g: g * np.exp(x - ans))
    x = onp.array([0.1, 0.7, -0.3])
    f = lambda x: logsumexp1(x) * 2.0
    assert onp.allclose(grad(f)(x), numgrad(lambda v: 2 * float(onp.log(onp.exp(v).sum())), x))


def test_fixed_point_gradient():
    from revtape.autograd.misc.fixed_points import fixed_point

    def newton_sqrt_iter(a):
        return lambda x: 0.5 * (x + a / x)

    def sqrt(a):
        return fixed_point(newton_sqrt_iter, a, 1.0, lambda x, y: abs(x - y), 1e-12)
    assert sqrt(4.0) == pytest.approx(2.0)
    assert grad(sqrt)(4.0) == pytest.approx(0.25, rel=1e-8)


def test_check_grads_accepts_and_rejects():
    from revtape.autograd.extend import defvjp, primitive
    from revtape.autograd.test_util import check_grads
    check_grads(lambda x: np.sum(np.tanh(x) * x ** 2), modes=["fwd", "rev"], order=2)(
        onp.array([0.3, -0.8]))

    @primitive
    def wrong(x):
        return onp.sin(x)
    defvjp(wrong, lambda ans, x: lambda g: g * onp.sin(x))     # should be cos
    with pytest.raises(AssertionError):
        check_grads(wrong, modes=["rev"], order=1)(0.4)


def test_unsupported_features_say_so():
    with pytest.raises(rt.UnsupportedError, match="FFT"):
        grad(lambda x: np.sum(np.fft.fft(x).real))(onp.ones(4))
    from revtape.autograd import holomorphic_grad
    with pytest.raises(rt.UnsupportedError, match="complex"):
        holomorphic_grad(lambda z: z * z)(1.0 + 1j)
    with pytest.raises(rt.UnsupportedError, match="complex"):
        grad(lambda z: np.abs(z))(1.0 + 2j)


def test_never_stale_in_place_data():
    X = onp.ones((3, 2))
    g = grad(lambda w: np.sum(np.dot(X, w) ** 2))
    w = onp.ones(2)
    assert onp.allclose(g(w), [12.0, 12.0])
    X *= 2
    assert onp.allclose(g(w), [48.0, 48.0])


def test_random_draws_are_plain_numbers():
    npr.seed(0)
    a = npr.randn(3)
    assert type(a) is onp.ndarray
