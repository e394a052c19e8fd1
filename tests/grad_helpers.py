"""Module-level functions for tests/test_grad_calls.py: pickle stores a function
by reference, so a gradient sent to a spawned worker process must be built on
functions that the worker can import."""

import numpy as np


def logreg_loss(w, X, y):
    z = X @ w
    return np.sum(np.logaddexp(0.0, z) - y * z)


def logreg_grad(w, X, y):
    z = X @ w
    return X.T @ (1.0 / (1.0 + np.exp(-z)) - y)


class Quadratic:
    def __init__(self, c):
        self.c = c

    def logp(self, x):
        return -0.5 * np.sum((x - self.c) ** 2)


def call(fn, *args):
    """Run in a worker: call a (pickled) gradient function there."""
    return fn(*args)
