"""``rt.special``: scipy.special's functions working on tracked values.

The public namespace; the implementation lives in ``revtape.numpy_api.special``."""

from typing import TYPE_CHECKING

from .numpy_api.special import *  # noqa: F401,F403
from .numpy_api.special import __all__  # noqa: F401

if TYPE_CHECKING:
    # The names the star import brings, spelled out for type checkers: the
    # implementation's __all__ is computed from the op table, which they cannot
    # evaluate (tests/test_typing.py checks that every name of __all__ has a type).
    from .numpy_api.special import (  # noqa: F401
        gammaln as gammaln, digamma as digamma, expit as expit, log_expit as log_expit,
        erf as erf, erfc as erfc, erfcx as erfcx, ndtr as ndtr, log_ndtr as log_ndtr,
        ndtri as ndtri, erfinv as erfinv, logit as logit, i0e as i0e, i1e as i1e,
        xlogy as xlogy, xlog1py as xlog1py, betaln as betaln, gammainc as gammainc,
        gammaincc as gammaincc, psi as psi, logsumexp as logsumexp, polygamma as polygamma,
        softmax as softmax, log_softmax as log_softmax, multigammaln as multigammaln,
        gamma as gamma, rgamma as rgamma, gammasgn as gammasgn, j0 as j0, j1 as j1,
        y0 as y0, y1 as y1, jn as jn, yn as yn, iv as iv, ive as ive, i0 as i0, i1 as i1,
        erfcinv as erfcinv, beta as beta, betainc as betainc, stdtr as stdtr)
