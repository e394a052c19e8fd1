"""numpy.random, as autograd.numpy.random is: draws are plain numbers."""

from numpy.random import *  # noqa: F401,F403
from numpy.random import Generator, RandomState, default_rng, seed  # noqa: F401
