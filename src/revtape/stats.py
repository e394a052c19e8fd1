"""``rt.stats``: scipy.stats's distributions (logpdf, logpmf, logcdf, logsf) on tracked values.

The public namespace; the implementation lives in ``revtape.models.stats``."""

from .models.stats import *  # noqa: F401,F403
from .models.stats import __all__  # noqa: F401
