"""``rt.bijectors``: bijectors from unconstrained to constrained spaces, with log-Jacobians.

The public namespace; the implementation lives in ``revtape.models.bijectors``."""

from .models.bijectors import *  # noqa: F401,F403
from .models.bijectors import __all__  # noqa: F401
