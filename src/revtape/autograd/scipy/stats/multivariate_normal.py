"""scipy.stats.multivariate_normal: revtape's log densities on tracked values (see _dist)."""

from ._dist import namespace

globals().update(namespace("multivariate_normal"))
