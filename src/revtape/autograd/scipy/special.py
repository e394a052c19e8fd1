"""scipy.special: revtape's functions (rt.special) where it has them, which
take tracked values; scipy's ufuncs otherwise (they dispatch to revtape's
rules or raise rt.UnsupportedError on a tracked value)."""

import scipy.special as _sps

from ... import special as _rts
from ._guard import passthrough_module

_OURS = {n for n in dir(_rts) if not n.startswith("_")}
globals().update({n: getattr(_rts, n) for n in _OURS})
__getattr__ = passthrough_module(_sps, "scipy.special", _OURS)
