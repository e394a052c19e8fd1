"""Gradient-based optimizers with autograd's signatures: each takes
grad(x, i) -> gradient at x in iteration i, an initial x (any nested
list/tuple/dict of arrays), an optional callback(x, i, g), and returns the
final x in x's structure."""

from typing import Any, Callable

import numpy as np

from .flatten import flatten


def _flat(optimize: Callable[..., Any]) -> Callable[..., Any]:
    def run(grad, x0, callback=None, *args, **kwargs):
        flat0, unflatten = flatten(x0)

        def flat_grad(x, i):
            return flatten(grad(unflatten(x), i))[0]
        flat_cb = None if callback is None else (
            lambda x, i, g: callback(unflatten(x), i, unflatten(g)))
        return unflatten(optimize(flat_grad, np.array(flat0, dtype=float), flat_cb,
                                  *args, **kwargs))
    run.__name__ = optimize.__name__
    run.__doc__ = optimize.__doc__
    return run


@_flat
def sgd(grad, x, callback=None, num_iters=200, step_size=0.1, mass=0.9):
    """Stochastic gradient descent with momentum (step_size may be a function of i)."""
    velocity = np.zeros(len(x))
    for i in range(num_iters):
        g = grad(x, i)
        if callback:
            callback(x, i, g)
        velocity = mass * velocity - (1.0 - mass) * g
        x = x + _step(step_size, i) * velocity
    return x


@_flat
def rmsprop(grad, x, callback=None, num_iters=100, step_size=0.1, gamma=0.9, eps=10**-8):
    """Root mean squared prop: gradient steps scaled by a running RMS of the gradients."""
    avg_sq_grad = np.ones(len(x))
    for i in range(num_iters):
        g = grad(x, i)
        if callback:
            callback(x, i, g)
        avg_sq_grad = avg_sq_grad * gamma + g ** 2 * (1 - gamma)
        x = x - _step(step_size, i) * g / (np.sqrt(avg_sq_grad) + eps)
    return x


@_flat
def adam(grad, x, callback=None, num_iters=100, step_size=0.001, b1=0.9, b2=0.999, eps=10**-8):
    """Adam (Kingma and Ba, arXiv:1412.6980), with bias-corrected moments."""
    m = np.zeros(len(x))
    v = np.zeros(len(x))
    for i in range(num_iters):
        g = grad(x, i)
        if callback:
            callback(x, i, g)
        m = (1 - b1) * g + b1 * m
        v = (1 - b2) * (g ** 2) + b2 * v
        mhat = m / (1 - b1 ** (i + 1))
        vhat = v / (1 - b2 ** (i + 1))
        x = x - _step(step_size, i) * mhat / (np.sqrt(vhat) + eps)
    return x


def _step(step_size, i):
    return step_size(i) if callable(step_size) else step_size
