"""numpy forwards of the special-function rows for when scipy is not installed.

The op table's special functions take scipy.special's forwards when scipy
imports (the reference replay is then checked against scipy itself); without
scipy these take their place, so that recording and the reference replay
still work.  They follow csrc/kernels/specfun.c -- the C VM's own kernels --
algorithm for algorithm (same recurrences, series and reflections, same
values at poles and infinities), written on Python floats and vectorised;
they are slow, and only used without scipy.
"""

import math

import numpy as np

_ASYMPTOTIC_FROM = 10.0
_NEG_RECURRENCE_LIMIT = -64.0


def _vectorize(f, nin=1):
    uf = np.frompyfunc(f, nin, 1)

    def g(*args):
        with np.errstate(all="ignore"):
            out = uf(*[np.asarray(a, dtype=np.float64) for a in args])
        return np.asarray(out, dtype=np.float64)[()]
    g.__name__ = f.__name__.lstrip("_")
    return g


def _gammaln(x):
    if math.isnan(x):
        return x
    if x == -math.inf:
        return -math.inf                     # scipy.special.gammaln(-inf)
    if x <= 0.0 and x == math.floor(x):
        return math.inf                      # the poles
    return math.lgamma(x)


def _frac_nearest(x):
    return x - round(x)                      # exact; round() is round-half-even, as nearbyint


def _cotpi_reduced(r):
    ar = abs(r)
    if ar <= 0.25:
        return 1.0 / math.tan(math.pi * r)
    t = math.tan(math.pi * (0.5 - ar))
    return -t if r < 0 else t


def _digamma_asym(x):
    z = 1.0 / (x * x)
    s = z * (1.0 / 12 + z * (-1.0 / 120 + z * (1.0 / 252 + z * (-1.0 / 240
        + z * (1.0 / 132 + z * (-691.0 / 32760 + z * (1.0 / 12
        + z * (-3617.0 / 8160 + z * (43867.0 / 14364
        + z * (-174611.0 / 6600))))))))))
    return math.log(x) - 0.5 / x - s


def _trigamma_asym(x):
    t = 1.0 / x
    z = t * t
    p = 1.0 / 6 + z * (-1.0 / 30 + z * (1.0 / 42 + z * (-1.0 / 30
        + z * (5.0 / 66 + z * (-691.0 / 2730 + z * (7.0 / 6
        + z * (-3617.0 / 510 + z * (43867.0 / 798
        + z * (-174611.0 / 330 + z * (854513.0 / 138))))))))))
    return t * (1.0 + t * (0.5 + t * p))


def _tetragamma_asym(x):
    t = 1.0 / x
    z = t * t
    q = 0.5 + z * (-1.0 / 6 + z * (1.0 / 6 + z * (-3.0 / 10
        + z * (5.0 / 6 + z * (-691.0 / 210 + z * (35.0 / 2
        + z * (-3617.0 / 30 + z * (43867.0 / 42
        + z * (-1222277.0 / 110 + z * (854513.0 / 6))))))))))
    return -(z * (1.0 + t + z * q))


def _digamma(x):
    if math.isnan(x) or x == -math.inf:
        return math.nan
    if x == 0.0:
        return -math.copysign(math.inf, x)
    if x < 0.0:
        if x == math.floor(x):
            return math.nan
        return _digamma(1.0 - x) - math.pi * _cotpi_reduced(_frac_nearest(x))
    if x == math.inf:
        return x
    acc = 0.0
    while x < _ASYMPTOTIC_FROM:
        acc -= 1.0 / x
        x += 1.0
    return _digamma_asym(x) + acc


def _trigamma(x):
    if math.isnan(x):
        return x
    if x == -math.inf:
        return math.inf
    if x <= 0.0 and x == math.floor(x):
        return math.inf
    if x == math.inf:
        return 0.0
    if x < _NEG_RECURRENCE_LIMIT:
        s = math.pi / math.sin(math.pi * _frac_nearest(x))
        return s * s - _trigamma(1.0 - x)
    acc = 0.0
    while x < _ASYMPTOTIC_FROM:
        t = 1.0 / x
        acc += t * t
        x += 1.0
    return _trigamma_asym(x) + acc


def _tetragamma(x):
    if math.isnan(x):
        return x
    if x == -math.inf:
        return -math.inf
    if x <= 0.0 and x == math.floor(x):
        return -math.inf
    if x == math.inf:
        return -0.0
    if x < 0.0:
        r = _frac_nearest(x)
        s = math.sin(math.pi * r)
        return _tetragamma(1.0 - x) - 2.0 * math.pi ** 3 * _cotpi_reduced(r) / (s * s)
    acc = -0.0
    while x < _ASYMPTOTIC_FROM:
        t = 1.0 / x
        acc -= 2.0 * (t * t * t)
        x += 1.0
    return _tetragamma_asym(x) + acc


def _erf(x):
    return math.erf(x)


def _xlogy(x, y):
    if x == 0.0 and not math.isnan(y):
        return 0.0
    with np.errstate(all="ignore"):
        return float(np.float64(x) * np.log(np.float64(y)))


gammaln = _vectorize(_gammaln)
digamma = _vectorize(_digamma)
trigamma = _vectorize(_trigamma)
tetragamma = _vectorize(_tetragamma)
erf = _vectorize(_erf)
xlogy = _vectorize(_xlogy, 2)


def expit(x):
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        e = np.exp(-np.abs(x))
        return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))[()]


def log_expit(x):
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        e = np.log1p(np.exp(-np.abs(x)))
        return np.where(x >= 0, -e, x - e)[()]


def polygamma(n, x):
    n = int(n)
    if n == 0:
        return digamma(x)
    if n == 1:
        return trigamma(x)
    if n == 2:
        return tetragamma(x)
    from ..errors import UnsupportedError
    raise UnsupportedError("without scipy, polygamma supports n = 0, 1, 2; install scipy")


def logsumexp(x, axis=None, keepdims=False):
    """scipy.special.logsumexp's values: the maxima are taken out of the sum,
    nan -> nan, an infinite maximum is the result, empty -> -inf (csrc/instr/reduce.h)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        if x.size == 0:
            return np.full(np.sum(x, axis=axis, keepdims=keepdims).shape, -np.inf)[()]
        m = np.max(x, axis=axis, keepdims=True)
        top = x == m
        cnt = np.sum(top, axis=axis, keepdims=True)
        s = np.sum(np.where(top, 0.0, np.exp(x - m)), axis=axis, keepdims=True) / cnt
        out = np.where(np.isfinite(m), np.log1p(s) + np.log(cnt) + m, m)
        if not keepdims:
            out = np.squeeze(out, axis=axis)
    return np.asarray(out, dtype=np.float64)[()]


def gammasgn(x):
    """The sign of Gamma(x), as csrc/kernels/specfun.c's rt_gammasgn: nan at
    nan, -inf and the negative integers; +-1 at +-0."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        fl = np.floor(x)
        neg = np.where(np.fmod(fl, 2.0) == 0.0, 1.0, -1.0)
        out = np.where(x > 0.0, 1.0, np.where(x == fl, np.nan, neg))
        out = np.where(x == 0.0, np.copysign(1.0, x), out)
        out = np.where(np.isnan(x) | (x == -np.inf), np.nan, out)
    return out[()]


def _betainc(a, b, x):
    # I_x(a, b) by its continued fraction (DLMF 8.17.22, modified Lentz), on
    # the side where it converges fast (x < (a+1)/(a+b+2)), else by symmetry.
    if math.isnan(a) or math.isnan(b) or math.isnan(x) or not (0.0 <= x <= 1.0):
        return math.nan
    if a < 0.0 or b < 0.0 or (a == 0.0 and b == 0.0) or math.isinf(a) or math.isinf(b):
        return math.nan
    if a == 0.0:
        return 1.0
    if b == 0.0:
        return 0.0
    if x == 0.0 or x == 1.0:
        return x
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _betainc(b, a, 1.0 - x)
    lbeta = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    front = math.exp(a * math.log(x) + b * math.log1p(-x) - lbeta) / a
    tiny = 1e-300

    def guard(v):
        return v if abs(v) > tiny else tiny
    c = 1.0
    d = 1.0 / guard(1.0 - (a + b) * x / (a + 1.0))
    h = d
    for m in range(1, 2000):
        for num in (m * (b - m) * x / ((a - 1.0 + 2 * m) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 1.0 + 2 * m))):
            d = 1.0 / guard(1.0 + num * d)
            c = guard(1.0 + num / c)
            h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return front * h


betainc = _vectorize(_betainc, 3)
