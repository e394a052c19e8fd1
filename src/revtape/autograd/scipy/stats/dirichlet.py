"""scipy.stats.dirichlet: revtape's log densities on tracked values (see _dist)."""

from ._dist import namespace

globals().update(namespace("dirichlet"))
