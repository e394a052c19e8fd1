"""Module-level custom primitives for the tests: pickles refer to a primitive
by its qualified name, so a spawned process must be able to import it."""

import pickle

import numpy as np

import revtape as rt
from revtape.special import logsumexp as builtin_logsumexp


@rt.primitive
def logsumexp(x):
    """autograd's example primitive: a stable log-sum-exp of a vector."""
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


def _logsumexp_vjp(ans, x):
    return lambda g: g * np.exp(x - ans)


rt.defvjp(logsumexp, _logsumexp_vjp)


@rt.primitive
def logsumexp_fwd(x):
    """The same function with a forward-mode rule as well."""
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


rt.defvjp(logsumexp_fwd, _logsumexp_vjp)
rt.defjvp(logsumexp_fwd, lambda g, ans, x: np.sum(g * np.exp(x - ans)))

W = np.array([[1.0, -2.0, 0.5], [0.3, 0.7, -1.1]])


def model(x):
    """logsumexp inside a larger model."""
    return logsumexp(W @ x) + logsumexp(2.0 * x) - 0.5 * np.sum(x ** 2)


def model_builtin(x):
    """The same model with revtape's built-in logsumexp op."""
    return builtin_logsumexp(W @ x) + builtin_logsumexp(2.0 * x) - 0.5 * np.sum(x ** 2)


def model_fwd(x):
    return logsumexp_fwd(W @ x) + logsumexp_fwd(2.0 * x) - 0.5 * np.sum(x ** 2)


def replay_pickled(payload, xs):
    """Run in a spawned process: unpickle a compiled tape, replay it at xs."""
    ctape = pickle.loads(payload)
    return [ctape.value_and_gradient(np.asarray(x)) for x in xs]
