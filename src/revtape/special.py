"""``rt.special``: scipy.special's functions working on tracked values.

The public namespace; the implementation lives in ``revtape.numpy_api.special``."""

from .numpy_api.special import *  # noqa: F401,F403
from .numpy_api.special import __all__  # noqa: F401
