"""Log densities with scipy.stats's names, argument names and parameterisations.

    rt.stats.norm.logpdf(x, loc=0, scale=1)
    rt.stats.gamma.logpdf(x, a, loc=0, scale=1)
    rt.stats.poisson.logpmf(k, mu, loc=0)

Each is built from op-table primitives, so on tracked values it records a
few array instructions (no Python per call once compiled) and on plain
values it computes with numpy.  The formulas follow scipy's own (so that
the two agree to rounding), and so do the conventions:

* the output has the broadcast shape of all arguments;
* outside the support (scipy's closed interval, integers for the discrete
  ones) the value is -inf, selected with np.where, so that the gradient there
  is 0 and never nan;
* an invalid parameter (scale <= 0, p outside [0, 1], ...) gives nan, as
  scipy's does; nan in gives nan out.

Masks are computed with the comparison primitives (never Python `if`), so
they record as select instructions and a compiled replay evaluates them
again at its own parameters: no branch guards.
"""

import math
from typing import Any, NoReturn, TypeAlias

import numpy as np

from ..numpy_api import linalg as _la
from ..numpy_api import special as _sp
from ..errors import UnsupportedError
from ..core.ops import P
from ..core.apitypes import ArrayLike

Density: TypeAlias = Any
"""A log density's value: the broadcast shape of the arguments (a float for
scalars, else an ndarray; tracked when an argument is)."""
from ..trace import tracked as _t
from ..trace.tracked import istracked
from ..trace.tracked import value as _value

_INF = math.inf
_LOG_2PI = math.log(2.0 * math.pi)
_LOG_PI = math.log(math.pi)


# ---------------------------------------------------------------- helpers

def _const(v, c):
    """v is the plain constant c (so the operation with it can be skipped)."""
    return (not istracked(v)) and np.ndim(v) == 0 and float(v) == c


def _plain_false(m):
    return m is None or (not istracked(m) and not np.any(m))


def _or(*masks):
    out = None
    for m in masks:
        if _plain_false(m):
            continue
        out = m if out is None else P.logical_or(out, m)
    return out


def _select(mask, a, b):
    """np.where(mask, a, b), skipped (b) when mask is a plain all-false mask."""
    if _plain_false(mask):
        return b
    return P.where(mask, a, b)


def _shape(*args):
    return np.broadcast_shapes(*[np.shape(_value(a)) for a in args])


def _finish(lp, shape):
    """lp with the broadcast shape of all arguments (scipy's output shape)."""
    if np.shape(_value(lp)) != tuple(shape):
        lp = lp + np.zeros(shape)
    return lp


def _standardize(x, loc, scale):
    z = x if _const(loc, 0.0) else x - loc
    return z if _const(scale, 1.0) else z / scale


def _minus_log_scale(lp, scale):
    return lp if _const(scale, 1.0) else lp - np.log(scale)


def _lt(a, b):
    return P.lt(a, b)


def _gt(a, b):
    return P.gt(a, b)


def _le(a, b):
    return P.le(a, b)


def _not_integer(v):
    """v - floor(v) > 0: false for nan (which then flows through as nan)."""
    if not istracked(v) and np.all(np.floor(v) == v):
        return None
    return P.gt(P.sub(v, P.floor(v)), 0.0)


def _result(lp, outside, invalid, shape):
    lp = _select(outside, -_INF, lp)
    lp = _select(invalid, math.nan, lp)
    return _finish(lp, shape)


def _tails(lp, below, above, cdf):
    """logcdf: -inf below the support, 0 above it; logsf the other way round."""
    lp = _select(below, -_INF if cdf else 0.0, lp)
    return _select(above, 0.0 if cdf else -_INF, lp)


def _bad_scale(scale):
    return None if _const(scale, 1.0) else _le(scale, 0.0)


def _loc_scale(std, x, loc, scale, density, outside=None):
    """A location-scale family at x: std(z) at z = (x - loc) / scale, less
    log(scale) for a density; -inf where outside(z), nan where scale <= 0."""
    z = _standardize(x, loc, scale)
    lp = std(z)
    if density:
        lp = _minus_log_scale(lp, scale)
    return _result(lp, None if outside is None else outside(z), _bad_scale(scale),
                   _shape(x, loc, scale))


def _below_zero(z):
    return _lt(z, 0.0)


def _cosm1(x):
    # cos(x) - 1 = -2 sin^2(x/2), without cos's cancellation near 0 (scipy's cosm1)
    return -2.0 * np.square(np.sin(0.5 * x))


def _as_input(v):
    """Lists and ints become float arrays/floats (as scipy's asarray); tracked
    values and None pass; a list holding tracked values is stacked."""
    if v is None or istracked(v) or isinstance(v, (float, np.ndarray, _Dist)):
        return v
    if isinstance(v, (list, tuple)) and any(istracked(e) for e in v):
        return np.stack([e if istracked(e) else np.asarray(e, dtype=np.float64) for e in v])
    return np.asarray(v, dtype=np.float64)[()]


def _quiet(method):
    import functools

    @functools.wraps(method)
    def quiet(*args, **kwargs):
        args = [_as_input(a) for a in args]
        kwargs = {k: (v if k == "allow_singular" else _as_input(v)) for k, v in kwargs.items()}
        # outside the support the unselected branch may take log(-1): numbers, not warnings
        with np.errstate(all="ignore"):
            return method(*args, **kwargs)
    return quiet


def _exp_of(log_name):
    def method(self, *args: Any, **kwargs: Any) -> Density:
        return np.exp(getattr(self, log_name)(*args, **kwargs))
    method.__name__ = log_name[3:]
    method.__doc__ = f"exp of {log_name}, scipy.stats's {log_name[3:]}."
    return method


class _Dist:
    """One distribution: its methods are scipy's, with scipy's signatures."""

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        for m in ("logpdf", "logpmf", "logcdf", "logsf"):
            if m in cls.__dict__:
                setattr(cls, m, _quiet(cls.__dict__[m]))
        # pdf, pmf, cdf, sf: the exponentials of the log forms (exp(-inf) = 0
        # outside the support, nan stays nan), each where its log form exists
        for m in ("pdf", "pmf", "cdf", "sf"):
            if m not in cls.__dict__ and hasattr(cls, "log" + m):
                setattr(cls, m, _exp_of("log" + m))

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self):
        return f"<revtape.stats.{self.name}>"

    def __getattr__(self, attr: str) -> NoReturn:
        if attr in ("logpdf", "logpmf", "logcdf", "logsf", "pdf", "pmf", "cdf", "sf", "ppf",
                    "rvs", "mean", "var", "entropy"):
            have = [m for m in ("logpdf", "logpmf", "logcdf", "logsf") if hasattr(type(self), m)]
            raise UnsupportedError(
                f"rt.stats.{self.name} has {', '.join(have)}; {attr} is not provided (for "
                f"densities use exp of the log, np.exp(rt.stats.{self.name}.{have[0]}(...)))")
        raise AttributeError(f"rt.stats.{self.name} has no attribute {attr!r}")


# ---------------------------------------------------------------- continuous

class _Norm(_Dist):
    """The normal distribution, scipy.stats.norm: mean loc, standard deviation scale."""

    def logpdf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return _loc_scale(lambda z: -0.5 * np.square(z) - 0.5 * _LOG_2PI, x, loc, scale, True)

    def logcdf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return _loc_scale(P.log_ndtr, x, loc, scale, False)

    def logsf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return _loc_scale(lambda z: P.log_ndtr(-z), x, loc, scale, False)

    @_quiet
    def ppf(self, q: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        """loc + scale ndtri(q): nan outside [0, 1] and for scale <= 0 (scipy)."""
        out = loc + scale * P.ndtri(q)
        return _result(out, None, _bad_scale(scale), _shape(q, loc, scale))

    @_quiet
    def isf(self, q: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return self.ppf(1.0 - q, loc, scale)


class _Halfnorm(_Dist):
    """The half-normal distribution on [loc, inf), scipy.stats.halfnorm."""

    def logpdf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return _loc_scale(lambda z: 0.5 * math.log(2.0 / math.pi) - 0.5 * np.square(z),
                          x, loc, scale, True, _below_zero)

    def logcdf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return _loc_scale(lambda z: _tails(np.log(P.erf(z * math.sqrt(0.5))), _lt(z, 0.0), None, True),
                          x, loc, scale, False)

    def logsf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return _loc_scale(lambda z: _tails(math.log(2.0) + P.log_ndtr(-z), _lt(z, 0.0), None, False),
                          x, loc, scale, False)


def _log_diff_exp(la, lb):
    """log(exp(la) - exp(lb)) for la >= lb (scipy's _log_diff)."""
    return la + np.log(-np.expm1(lb - la))


def _log_gauss_mass(a, b):
    """log(Phi(b) - Phi(a)), as scipy: in the left tail as a difference of
    log-cdfs, the right tail by symmetry, the centre as log1p(-Phi(a) - Phi(-b))."""
    left = _log_diff_exp(P.log_ndtr(b), P.log_ndtr(a))
    right = _log_diff_exp(P.log_ndtr(-a), P.log_ndtr(-b))
    central = np.log1p(-P.ndtr(a) - P.ndtr(-b))
    return P.where(_le(b, 0.0), left, P.where(_gt(a, 0.0), right, central))


class _Truncnorm(_Dist):
    """The normal distribution truncated to [a, b], scipy.stats.truncnorm: a and b
    are in standard units, (bound - loc) / scale."""

    def logpdf(self, x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0.0,
               scale: ArrayLike = 1.0) -> Density:
        z = _standardize(x, loc, scale)
        lp = -0.5 * np.square(z) - 0.5 * _LOG_2PI - _log_gauss_mass(a, b)
        lp = _minus_log_scale(lp, scale)
        outside = _or(_lt(z, a), _gt(z, b))
        invalid = _or(_bad_scale(scale), P.ge(a, b))
        return _result(lp, outside, invalid, _shape(x, a, b, loc, scale))


def _cauchy_std(z):
    # scipy's two branches: log1p(z^2) for |z| < 1, 2 log|z| + log1p(1/z^2) beyond
    # (no overflow of z^2)
    az = np.abs(z)
    small = -_LOG_PI - np.log1p(np.square(az))
    big_z = P.where(_lt(az, 1.0), 1.0, az)
    big = -_LOG_PI - (2.0 * np.log(big_z) + np.log1p(np.square(1.0 / big_z)))
    return P.where(_lt(az, 1.0), small, big)


class _Cauchy(_Dist):
    """The Cauchy distribution, scipy.stats.cauchy: location loc, scale scale."""

    def logpdf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return _loc_scale(_cauchy_std, x, loc, scale, True)

    def logcdf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return _loc_scale(lambda z: np.log(np.arctan2(1.0, -z) / math.pi), x, loc, scale, False)

    def logsf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return _loc_scale(lambda z: np.log(np.arctan2(1.0, z) / math.pi), x, loc, scale, False)


class _Halfcauchy(_Dist):
    """The half-Cauchy distribution on [loc, inf), scipy.stats.halfcauchy."""

    def logpdf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return _loc_scale(lambda z: math.log(2.0 / math.pi) - np.log1p(np.square(z)),
                          x, loc, scale, True, _below_zero)

    def logcdf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return _loc_scale(lambda z: _tails(np.log(2.0 / math.pi * np.arctan(z)), _lt(z, 0.0), None, True),
                          x, loc, scale, False)

    def logsf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return _loc_scale(
            lambda z: _tails(np.log(2.0 / math.pi * np.arctan2(1.0, z)), _lt(z, 0.0), None, False),
            x, loc, scale, False)


class _T(_Dist):
    """Student's t distribution with df degrees of freedom, scipy.stats.t."""

    def logpdf(self, x: ArrayLike, df: ArrayLike,
               loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        # log Gamma((df+1)/2) - log Gamma(df/2) = log Gamma(1/2) - betaln(df/2, 1/2):
        # accurate for large df, where the two gammalns cancel.
        z = _standardize(x, loc, scale)
        half = 0.5 * df
        lp = (-P.betaln(half, 0.5) - 0.5 * np.log(df)
              - (half + 0.5) * np.log1p(np.square(z) / df))
        lp = _minus_log_scale(lp, scale)
        return _result(lp, None, _or(_bad_scale(scale), _le(df, 0.0)), _shape(x, df, loc, scale))

    def logcdf(self, x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        """log stdtr(df, z) below the centre, log1p(-stdtr(df, -z)) above (the
        upper tail without cancellation); differentiable in x, loc and scale."""
        if istracked(df):
            raise UnsupportedError(
                "rt.stats.t.logcdf/logsf are differentiable in x, loc and scale only: the "
                "derivative of the incomplete beta function with respect to df is not "
                "implemented; pass df as a plain number or array (logpdf has every gradient)")
        z = _standardize(x, loc, scale)
        tail = _sp.stdtr(df, _select(_gt(z, 0.0), -z, z))   # (not -|z|: its slope at 0 is 0)
        lp = _select(_gt(z, 0.0), np.log1p(-tail), np.log(tail))
        return _result(lp, None, _or(_bad_scale(scale), _le(df, 0.0)), _shape(x, df, loc, scale))

    def logsf(self, x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return self.logcdf(-x, df, -loc if not _const(loc, 0.0) else loc, scale)


class _Laplace(_Dist):
    """The Laplace (double exponential) distribution, scipy.stats.laplace."""

    def logpdf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return _loc_scale(lambda z: -np.abs(z) - math.log(2.0), x, loc, scale, True)

    @staticmethod
    def _logcdf_std(z):
        # log(1 - exp(-z)/2) above 0 (through log1p), z - log 2 below
        pos = _gt(z, 0.0)
        return P.where(pos, np.log1p(-0.5 * np.exp(-P.where(pos, z, 0.0))), z - math.log(2.0))

    def logcdf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return _loc_scale(self._logcdf_std, x, loc, scale, False)

    def logsf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return _loc_scale(lambda z: self._logcdf_std(-z), x, loc, scale, False)


def _logistic_std(z):
    y = -np.abs(z)
    return y - 2.0 * np.log1p(np.exp(y))


class _Logistic(_Dist):
    """The logistic distribution, scipy.stats.logistic."""

    def logpdf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return _loc_scale(_logistic_std, x, loc, scale, True)

    def logcdf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return _loc_scale(P.log_expit, x, loc, scale, False)

    def logsf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return _loc_scale(lambda z: P.log_expit(-z), x, loc, scale, False)


class _Expon(_Dist):
    """The exponential distribution on [loc, inf) with mean scale, scipy.stats.expon."""

    def logpdf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return _loc_scale(lambda z: -z, x, loc, scale, True, _below_zero)

    def logcdf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return _loc_scale(lambda z: np.log(-np.expm1(-z)), x, loc, scale, False, _below_zero)

    def logsf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        # below the support the survival function is 1: log 1 = 0
        return _loc_scale(lambda z: _select(_lt(z, 0.0), 0.0, -z), x, loc, scale, False)


def _plain_shape_param(a, what):
    if istracked(a):
        raise UnsupportedError(
            f"rt.stats.gamma.{what} is differentiable in x, loc and scale only: the "
            "derivative of the incomplete gamma function with respect to the shape a is not "
            "implemented; pass a as a plain number or array (logpdf has every gradient)")


class _Gamma(_Dist):
    """The gamma distribution with shape a, scipy.stats.gamma (the rate is 1 / scale)."""

    def logpdf(self, x: ArrayLike, a: ArrayLike,
               loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        z = _standardize(x, loc, scale)
        lp = _minus_log_scale(P.xlogy(a - 1.0, z) - z - P.gammaln(a), scale)
        return _result(lp, _lt(z, 0.0), _or(_bad_scale(scale), _le(a, 0.0)),
                       _shape(x, a, loc, scale))

    def logcdf(self, x: ArrayLike, a: ArrayLike,
               loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        _plain_shape_param(a, "logcdf")
        z = _standardize(x, loc, scale)
        zc = _select(_lt(z, 0.0), 0.0, z)      # gammainc is nan below 0: keep it finite
        return _result(np.log(P.gammainc(a, zc)), _lt(z, 0.0),
                       _or(_bad_scale(scale), _le(a, 0.0)), _shape(x, a, loc, scale))

    def logsf(self, x: ArrayLike, a: ArrayLike,
              loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        _plain_shape_param(a, "logsf")
        z = _standardize(x, loc, scale)
        below = _lt(z, 0.0)
        zc = _select(below, 0.0, z)
        lp = _select(below, 0.0, np.log(P.gammaincc(a, zc)))
        return _result(lp, None, _or(_bad_scale(scale), _le(a, 0.0)), _shape(x, a, loc, scale))


class _Chi2(_Dist):
    """chi2(df) is gamma(a = df/2, scale = 2): the same formulas."""

    def logpdf(self, x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return gamma.logpdf(x, 0.5 * df, loc, 2.0 * scale)

    def logcdf(self, x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        _plain_shape_param(df, "logcdf")
        return gamma.logcdf(x, 0.5 * df, loc, 2.0 * scale)

    def logsf(self, x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        _plain_shape_param(df, "logsf")
        return gamma.logsf(x, 0.5 * df, loc, 2.0 * scale)


class _Invgamma(_Dist):
    """The inverse gamma distribution with shape a, scipy.stats.invgamma."""

    def logpdf(self, x: ArrayLike, a: ArrayLike,
               loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        z = _standardize(x, loc, scale)
        lp = _minus_log_scale(-(a + 1.0) * np.log(z) - P.gammaln(a) - 1.0 / z, scale)
        # at z = 0 scipy's formula gives -inf (through -1/z): kept, it is in the support
        return _result(lp, _lt(z, 0.0), _or(_bad_scale(scale), _le(a, 0.0)),
                       _shape(x, a, loc, scale))


class _Beta(_Dist):
    """The beta distribution with shapes a, b on [loc, loc + scale], scipy.stats.beta."""

    def logpdf(self, x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0.0,
               scale: ArrayLike = 1.0) -> Density:
        z = _standardize(x, loc, scale)
        lp = P.xlog1py(b - 1.0, -z) + P.xlogy(a - 1.0, z) - P.betaln(a, b)
        lp = _minus_log_scale(lp, scale)
        return _result(lp, _or(_lt(z, 0.0), _gt(z, 1.0)),
                       _or(_bad_scale(scale), _le(a, 0.0), _le(b, 0.0)),
                       _shape(x, a, b, loc, scale))

    def _cdf(self, x, a, b, loc, scale, upper):
        """log I_z(a, b) (upper: log I_(1-z)(b, a) = log(1 - I_z(a, b)), accurate
        in the upper tail), z clamped to [0, 1]: 0/-inf beyond the support."""
        for v, what in ((a, "a"), (b, "b")):
            if istracked(v):
                raise UnsupportedError(
                    f"rt.stats.beta.{'logsf' if upper else 'logcdf'} is differentiable in x, loc "
                    f"and scale only: the derivative of the incomplete beta function with "
                    f"respect to {what} is not implemented; pass it as a plain number or array")
        z = _standardize(x, loc, scale)
        below, above = _lt(z, 0.0), _gt(z, 1.0)
        zc = _select(below, 0.0, _select(above, 1.0, z))
        lp = np.log(_sp.betainc(b, a, 1.0 - zc) if upper else _sp.betainc(a, b, zc))
        lp = _select(below, 0.0 if upper else -_INF, _select(above, -_INF if upper else 0.0, lp))
        return _result(lp, None, _or(_bad_scale(scale), _le(a, 0.0), _le(b, 0.0)),
                       _shape(x, a, b, loc, scale))

    def logcdf(self, x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return self._cdf(x, a, b, loc, scale, False)

    def logsf(self, x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return self._cdf(x, a, b, loc, scale, True)


class _Lognorm(_Dist):
    """The log-normal distribution, scipy.stats.lognorm: log((x - loc) / scale) is
    normal with standard deviation s (scale = exp(mu))."""

    def logpdf(self, x: ArrayLike, s: ArrayLike,
               loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        z = _standardize(x, loc, scale)
        zero = P.eq(z, 0.0)
        zs = _select(zero, 1.0, z)
        lp = -np.square(np.log(zs)) / (2.0 * np.square(s)) - np.log(s * zs * math.sqrt(2 * math.pi))
        lp = _select(zero, -_INF, lp)
        lp = _minus_log_scale(lp, scale)
        return _result(lp, _lt(z, 0.0), _or(_bad_scale(scale), _le(s, 0.0)),
                       _shape(x, s, loc, scale))

    def _cdfs(self, x, s, loc, scale, cdf):
        z = _standardize(x, loc, scale)
        below = _le(z, 0.0)
        u = np.log(_select(below, 1.0, z)) / s
        lp = _tails(P.log_ndtr(u if cdf else -u), below, None, cdf)
        return _result(lp, None, _or(_bad_scale(scale), _le(s, 0.0)), _shape(x, s, loc, scale))

    def logcdf(self, x: ArrayLike, s: ArrayLike,
               loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return self._cdfs(x, s, loc, scale, True)

    def logsf(self, x: ArrayLike, s: ArrayLike,
              loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        return self._cdfs(x, s, loc, scale, False)


class _Uniform(_Dist):
    """The uniform distribution on [loc, loc + scale], scipy.stats.uniform."""

    def logpdf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        z = _standardize(x, loc, scale)
        lp = _minus_log_scale(0.0, scale)
        return _result(lp, _or(_lt(z, 0.0), _gt(z, 1.0)), _bad_scale(scale),
                       _shape(x, loc, scale))

    def logcdf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        z = _standardize(x, loc, scale)
        lp = _tails(np.log(z), _lt(z, 0.0), _gt(z, 1.0), True)
        return _result(lp, None, _bad_scale(scale), _shape(x, loc, scale))

    def logsf(self, x: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        z = _standardize(x, loc, scale)
        lp = _tails(np.log1p(-z), _lt(z, 0.0), _gt(z, 1.0), False)
        return _result(lp, None, _bad_scale(scale), _shape(x, loc, scale))


class _WeibullMin(_Dist):
    """The Weibull distribution with shape c, scipy.stats.weibull_min."""

    def logpdf(self, x: ArrayLike, c: ArrayLike,
               loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        z = _standardize(x, loc, scale)
        zc = _select(_lt(z, 0.0), 0.0, z)      # z**c is nan below 0
        lp = np.log(c) + P.xlogy(c - 1.0, zc) - np.power(zc, c)
        lp = _minus_log_scale(lp, scale)
        return _result(lp, _lt(z, 0.0), _or(_bad_scale(scale), _le(c, 0.0)),
                       _shape(x, c, loc, scale))

    def logcdf(self, x: ArrayLike, c: ArrayLike,
               loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        z = _standardize(x, loc, scale)
        below = _lt(z, 0.0)
        lp = _tails(np.log(-np.expm1(-np.power(_select(below, 0.0, z), c))), below, None, True)
        return _result(lp, None, _or(_bad_scale(scale), _le(c, 0.0)), _shape(x, c, loc, scale))

    def logsf(self, x: ArrayLike, c: ArrayLike,
              loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        z = _standardize(x, loc, scale)
        below = _lt(z, 0.0)
        lp = _tails(-np.power(_select(below, 0.0, z), c), below, None, False)
        return _result(lp, None, _or(_bad_scale(scale), _le(c, 0.0)), _shape(x, c, loc, scale))


class _Vonmises(_Dist):
    """The von Mises distribution with concentration kappa, scipy.stats.vonmises."""

    def logpdf(self, x: ArrayLike, kappa: ArrayLike,
               loc: ArrayLike = 0.0, scale: ArrayLike = 1.0) -> Density:
        # scipy's: kappa cosm1(x) - log(2 pi) - log(i0e(kappa)); support the real line
        z = _standardize(x, loc, scale)
        lp = kappa * _cosm1(z) - _LOG_2PI - np.log(P.i0e(kappa))
        lp = _minus_log_scale(lp, scale)
        return _result(lp, None, _or(_bad_scale(scale), _le(kappa, 0.0)),
                       _shape(x, kappa, loc, scale))


# ---------------------------------------------------------------- discrete
# scipy: k - loc must be an integer in the support, else -inf.

def _shift(k, loc):
    return k if _const(loc, 0.0) else k - loc


def _p_invalid(p, open_low=False):
    return _or(_lt(p, 0.0) if not open_low else _le(p, 0.0), _gt(p, 1.0))


class _Poisson(_Dist):
    """The Poisson distribution with mean mu, scipy.stats.poisson."""

    def logpmf(self, k: ArrayLike, mu: ArrayLike, loc: ArrayLike = 0.0) -> Density:
        k = _shift(k, loc)
        lp = P.xlogy(k, mu) - P.gammaln(k + 1.0) - mu
        return _result(lp, _or(_lt(k, 0.0), _not_integer(k)), _lt(mu, 0.0), _shape(k, mu, loc))

    def logcdf(self, k: ArrayLike, mu: ArrayLike, loc: ArrayLike = 0.0) -> Density:
        """log Q(floor(k) + 1, mu) (the regularised upper incomplete gamma):
        differentiable in mu; k is data (a tracked k has no derivative)."""
        kf = np.floor(_value(_shift(k, loc)))
        below = kf < 0
        lp = np.log(P.gammaincc(np.where(below, 0.0, kf) + 1.0, mu))
        return _result(_select(below, -_INF, lp), None, _lt(mu, 0.0), _shape(k, mu, loc))

    def logsf(self, k: ArrayLike, mu: ArrayLike, loc: ArrayLike = 0.0) -> Density:
        kf = np.floor(_value(_shift(k, loc)))
        below = kf < 0
        lp = np.log(P.gammainc(np.where(below, 0.0, kf) + 1.0, mu))
        return _result(_select(below, 0.0, lp), None, _lt(mu, 0.0), _shape(k, mu, loc))


class _Binom(_Dist):
    """The binomial distribution of n trials with success probability p, scipy.stats.binom."""

    def logpmf(self, k: ArrayLike, n: ArrayLike, p: ArrayLike, loc: ArrayLike = 0.0) -> Density:
        k = _shift(k, loc)
        comb = P.gammaln(n + 1.0) - (P.gammaln(k + 1.0) + P.gammaln(n - k + 1.0))
        lp = comb + P.xlogy(k, p) + P.xlog1py(n - k, -p)
        invalid = _or(_lt(n, 0.0), _not_integer(n), _p_invalid(p))
        return _result(lp, _or(_lt(k, 0.0), _gt(k, n), _not_integer(k)), invalid,
                       _shape(k, n, p, loc))


class _Bernoulli(_Dist):
    """The Bernoulli distribution with success probability p, scipy.stats.bernoulli."""

    def logpmf(self, k: ArrayLike, p: ArrayLike, loc: ArrayLike = 0.0) -> Density:
        return binom.logpmf(k, 1.0, p, loc)


class _Nbinom(_Dist):
    """The negative binomial distribution, scipy.stats.nbinom: the failures before
    the n-th success, each trial a success with probability p."""

    def logpmf(self, k: ArrayLike, n: ArrayLike, p: ArrayLike, loc: ArrayLike = 0.0) -> Density:
        k = _shift(k, loc)
        lp = P.gammaln(n + k) - P.gammaln(k + 1.0) - P.gammaln(n) + n * np.log(p) \
            + P.xlog1py(k, -p)
        invalid = _or(_le(n, 0.0), _p_invalid(p, open_low=True))
        return _result(lp, _or(_lt(k, 0.0), _not_integer(k)), invalid, _shape(k, n, p, loc))


class _Geom(_Dist):
    """The geometric distribution, scipy.stats.geom: the trials up to and including
    the first success, of probability p."""

    def logpmf(self, k: ArrayLike, p: ArrayLike, loc: ArrayLike = 0.0) -> Density:
        k = _shift(k, loc)
        lp = P.xlog1py(k - 1.0, -p) + np.log(p)
        return _result(lp, _or(_lt(k, 1.0), _not_integer(k)), _p_invalid(p, open_low=True),
                       _shape(k, p, loc))


class _Betabinom(_Dist):
    """The beta-binomial distribution, scipy.stats.betabinom: n trials with a
    success probability drawn from beta(a, b)."""

    def logpmf(self, k: ArrayLike, n: ArrayLike, a: ArrayLike, b: ArrayLike,
               loc: ArrayLike = 0.0) -> Density:
        k = _shift(k, loc)
        comb = -np.log(n + 1.0) - P.betaln(n - k + 1.0, k + 1.0)
        lp = comb + P.betaln(k + a, n - k + b) - P.betaln(a, b)
        invalid = _or(_lt(n, 0.0), _not_integer(n), _le(a, 0.0), _le(b, 0.0))
        return _result(lp, _or(_lt(k, 0.0), _gt(k, n), _not_integer(k)), invalid,
                       _shape(k, n, a, b, loc))


# ---------------------------------------------------------------- multivariate

class _Dirichlet(_Dist):
    """The Dirichlet distribution with concentrations alpha, scipy.stats.dirichlet."""

    def logpdf(self, x: ArrayLike, alpha: ArrayLike) -> Density:
        """scipy's layout: alpha is (K,), x is (K,) or (K, ...) -- the components
        along the FIRST axis, as scipy.stats.dirichlet computes it; x may also
        hold K - 1 components (the last is 1 - their sum), as scipy allows."""
        K = np.shape(_value(alpha))
        if len(K) != 1:
            raise ValueError("Parameter vector 'a' must be one dimensional")
        K = K[0]
        xs = np.shape(_value(x))
        if not xs or xs[0] not in (K, K - 1):
            raise ValueError(f"Vector 'x' must have either the same number of entries as, or "
                             f"one entry fewer than, parameter vector 'a' ({K})")
        if xs[0] == K - 1:
            x = np.concatenate([x, np.reshape(1.0 - np.sum(x, axis=0), (1,) + xs[1:])], axis=0)
        am1 = np.reshape(alpha - 1.0, (K,) + (1,) * (len(xs) - 1))
        lnB = np.sum(P.gammaln(alpha)) - P.gammaln(np.sum(alpha))
        return np.sum(P.xlogy(am1, x), axis=0) - lnB


class _Multinomial(_Dist):
    """The multinomial distribution of n trials with probabilities p,
    scipy.stats.multinomial."""

    def logpmf(self, x: ArrayLike, n: ArrayLike, p: ArrayLike) -> Density:
        """Components along the last axis of x and p (scipy's layout)."""
        lp = P.gammaln(n + 1.0) + np.sum(P.xlogy(x, p) - P.gammaln(x + 1.0), axis=-1)
        bad_x = _or(_not_integer(x), _lt(x, 0.0))
        if bad_x is not None:
            lp = _select(np.max(bad_x, axis=-1), -_INF, lp)
        lp = _select(P.ne(np.sum(x, axis=-1), n), -_INF, lp)
        # p is used as given: scipy 1.17 replaces the last entry of a p that
        # does not sum to 1 (with a FutureWarning; nan from scipy 1.18 on)
        bad_p = _or(_lt(p, 0.0), _gt(p, 1.0))
        if bad_p is not None:
            lp = _select(np.max(bad_p, axis=-1), math.nan, lp)
        return _select(_lt(n, 0.0), math.nan, lp)


class _MultivariateNormal(_Dist):
    """The multivariate normal distribution, scipy.stats.multivariate_normal: mean
    and cov (a matrix, or a scalar or vector for a diagonal covariance)."""

    def logpdf(self, x: ArrayLike, mean: ArrayLike | None = None, cov: ArrayLike = 1,
               allow_singular: bool = False) -> Density:
        """scipy's layout: the last axis of x holds the components (a 1-D x is
        one point, or -- for dimension 1 -- many); mean (d,) (None: zeros);
        cov a (d, d) matrix, a (d,) diagonal or a scalar times the identity.

        The covariance is factored with np.linalg.cholesky (one instruction):
        a covariance that is not positive definite gives nan (scipy raises),
        so a sampler sees a rejectable value."""
        if allow_singular:
            raise UnsupportedError("multivariate_normal.logpdf(allow_singular=True) is not "
                                   "supported on tracked values")
        cshape = np.shape(_value(cov))
        mshape = np.shape(_value(mean)) if mean is not None else ()
        d = (cshape[0] if cshape else (mshape[0] if mshape else None))
        if d is None:
            d = 1
        if len(cshape) > 2 or (len(cshape) >= 1 and any(c != d for c in cshape)) \
                or (mshape and mshape != (d,)):
            raise ValueError(f"multivariate_normal: mean shape {mshape} and cov shape {cshape} "
                             "do not describe one dimension d")
        xshape = np.shape(_value(x))
        if len(xshape) == 0:
            x = np.reshape(x, (1, 1))
        elif len(xshape) == 1:
            x = np.reshape(x, (-1, 1) if d == 1 else (1, -1))
        if np.shape(_value(x))[-1] != d:
            raise ValueError(f"multivariate_normal: x has {np.shape(_value(x))[-1]} components, "
                             f"the distribution {d}")
        diff = x if mean is None else x - mean
        if len(cshape) == 2:
            L = _la.cholesky(cov)
            batch = np.shape(_value(diff))[:-1]
            flat = np.reshape(diff, (-1, d))
            z = _la.solve_triangular(L, np.transpose(flat), lower=True)   # (d, m)
            maha = np.reshape(np.sum(np.square(z), axis=0), batch)
            logdet = 2.0 * np.sum(np.log(_la.diagonal(L)))
        else:
            # a scalar or a diagonal covariance: elementwise
            var = cov + np.zeros(d)
            maha = np.sum(np.square(diff) / var, axis=-1)
            logdet = np.sum(np.log(var))
            logdet = P.where(P.le(np.min(var), 0.0), math.nan, logdet)
        out = -0.5 * (d * _LOG_2PI + logdet + maha)
        return np.reshape(out, ()) if np.size(_value(out)) == 1 else out

    @_quiet
    def entropy(self, mean: ArrayLike = None, cov: ArrayLike = 1) -> Density:
        """(d log(2 pi e) + log det cov) / 2; mean does not enter."""
        cshape = np.shape(_value(cov))
        if len(cshape) == 2:
            logdet = 2.0 * np.sum(np.log(_la.diagonal(_la.cholesky(cov))))
            d = cshape[0]
        else:
            d = cshape[0] if cshape else (np.shape(_value(mean))[0] if mean is not None
                                          and np.ndim(_value(mean)) else 1)
            logdet = np.sum(np.log(cov + np.zeros(d)))
        return 0.5 * (d * (_LOG_2PI + 1.0) + logdet)


norm = _Norm("norm")
halfnorm = _Halfnorm("halfnorm")
truncnorm = _Truncnorm("truncnorm")
cauchy = _Cauchy("cauchy")
halfcauchy = _Halfcauchy("halfcauchy")
t = _T("t")
laplace = _Laplace("laplace")
logistic = _Logistic("logistic")
expon = _Expon("expon")
gamma = _Gamma("gamma")
chi2 = _Chi2("chi2")
invgamma = _Invgamma("invgamma")
beta = _Beta("beta")
lognorm = _Lognorm("lognorm")
uniform = _Uniform("uniform")
weibull_min = _WeibullMin("weibull_min")
vonmises = _Vonmises("vonmises")
poisson = _Poisson("poisson")
binom = _Binom("binom")
nbinom = _Nbinom("nbinom")
bernoulli = _Bernoulli("bernoulli")
geom = _Geom("geom")
betabinom = _Betabinom("betabinom")
dirichlet = _Dirichlet("dirichlet")
multinomial = _Multinomial("multinomial")
multivariate_normal = _MultivariateNormal("multivariate_normal")

__all__ = ["norm", "halfnorm", "truncnorm", "cauchy", "halfcauchy", "t", "laplace", "logistic",
           "expon", "gamma", "chi2", "invgamma", "beta", "lognorm", "uniform", "weibull_min",
           "vonmises", "poisson", "binom", "nbinom", "bernoulli", "geom", "betabinom",
           "dirichlet", "multinomial", "multivariate_normal"]

# scipy.stats.<dist>.<method> on a tracked value: the error names ours
_t.DROP_INS["scipy.stats"] = lambda name, dist: (
    f"rt.stats.{dist}.{name}" if dist and hasattr(type(globals().get(dist)), name) else None)
