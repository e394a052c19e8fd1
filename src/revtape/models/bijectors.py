"""Constraining bijectors for samplers (names as TFP/PyMC users know them).

Each bijector maps unconstrained reals y to the constrained space:

    b.forward(y)                   -> x
    b.inverse(x)                   -> y
    b.forward_log_det_jacobian(y)  -> log|det dx/dy|, one number for the whole map

so an unconstrained HMC target is ``logp(b.forward(y)) + b.forward_log_det_jacobian(y)``.
For matrix-valued outputs the determinant is that of the map from y to the
free entries of x (the lower triangle of a Cholesky factor, the strictly
lower one of a correlation Cholesky factor), as Stan and TFP define it.

Every method works on tracked values (recording array instructions, so it
compiles) and on plain numbers/arrays.  Cumulative sums (stick-breaking,
ordered) are np.cumsum along the last axis: one instruction each.

    exp, log, positive          x > 0              (positive = exp)
    interval(a, b)              a < x < b          scaled logistic
    simplex                     K-1 -> K           Stan's stick-breaking
    ordered                     x_1 < x_2 < ...    x_k = x_{k-1} + exp(y_k)
    lower_cholesky              n(n+1)/2 -> (n, n) lower triangular, exp'd diagonal
    corr_cholesky               n(n-1)/2 -> (n, n) Cholesky factor of a correlation matrix
"""

import math
from typing import Any

import numpy as np

from ..core.apitypes import ArrayLike
from ..core.ops import P
from ..trace.tracked import value as _value

_LOG2 = math.log(2.0)


def _n(v):
    return np.shape(_value(v))


class Bijector:
    """Base class: forward, inverse, forward_log_det_jacobian and the inverse's."""

    name = "bijector"

    def forward(self, y: ArrayLike) -> Any:
        """The constrained value x for the unconstrained y (tracked or plain)."""
        raise NotImplementedError

    def inverse(self, x: ArrayLike) -> Any:
        """The unconstrained y for a constrained x."""
        raise NotImplementedError

    def forward_log_det_jacobian(self, y: ArrayLike) -> Any:
        """log |det d forward / dy| at y: one number for the whole map (for a
        matrix output, of the map to its free entries)."""
        raise NotImplementedError

    def inverse_log_det_jacobian(self, x: ArrayLike) -> Any:
        """log |det d inverse / dx| at x: minus the forward one at inverse(x)."""
        return -self.forward_log_det_jacobian(self.inverse(x))

    def __repr__(self):
        return f"<revtape.bijectors.{self.name}>"


def _quiet(f):
    import functools

    @functools.wraps(f)
    def g(*a, **k):
        # unselected branches (log of a masked-out entry) are numbers, not warnings
        with np.errstate(all="ignore"):
            return f(*a, **k)
    return g


class _Exp(Bijector):
    """forward is exp: maps the line onto the positive reals (also rt.bijectors.positive)."""
    name = "exp"

    @_quiet
    def forward(self, y: ArrayLike) -> Any:
        return np.exp(y)

    @_quiet
    def inverse(self, x: ArrayLike) -> Any:
        return np.log(x)

    @_quiet
    def forward_log_det_jacobian(self, y: ArrayLike) -> Any:
        return np.sum(y)


class _Log(Bijector):
    """The inverse of exp: forward is log (maps positive reals to the line)."""

    name = "log"

    @_quiet
    def forward(self, y: ArrayLike) -> Any:
        return np.log(y)

    @_quiet
    def inverse(self, x: ArrayLike) -> Any:
        return np.exp(x)

    @_quiet
    def forward_log_det_jacobian(self, y: ArrayLike) -> Any:
        return -np.sum(np.log(y))


class interval(Bijector):
    """a + (b - a) * expit(y): maps the line onto (a, b).

    Parameters
    ----------
    a, b : float or array_like
        The bounds, a < b elementwise (plain or tracked values).

    Raises
    ------
    ValueError
        a >= b somewhere.
    """

    name = "interval"

    def __init__(self, a: ArrayLike, b: ArrayLike) -> None:
        if not np.all(np.less(_value(a), _value(b))):
            raise ValueError(f"interval(a, b) needs a < b (got a={_value(a)!r}, b={_value(b)!r})")
        self.a, self.b = a, b

    def __repr__(self):
        return f"<revtape.bijectors.interval({_value(self.a)!r}, {_value(self.b)!r})>"

    @_quiet
    def forward(self, y: ArrayLike) -> Any:
        return self.a + (self.b - self.a) * P.expit(y)

    @_quiet
    def inverse(self, x: ArrayLike) -> Any:
        return P.logit((x - self.a) / (self.b - self.a))

    @_quiet
    def forward_log_det_jacobian(self, y: ArrayLike) -> Any:
        # log((b - a) expit(y) expit(-y)), each factor in log space (no underflow)
        lw = np.log(self.b - self.a) + 0.0 * y
        return np.sum(lw + P.log_expit(y) + P.log_expit(-y))


def _exclusive_cumsum(v):
    """[0, v_0, v_0 + v_1, ...] along the last axis: one entry longer than v."""
    zero = np.zeros(_n(v)[:-1] + (1,))
    return np.concatenate([zero, np.cumsum(v, axis=-1)], axis=-1)


def _reverse_cumsum(v):
    """v_k + v_{k+1} + ... along the last axis (summed from the end)."""
    return np.cumsum(v[..., ::-1], axis=-1)[..., ::-1]


class _Simplex(Bijector):
    """Stan's stick-breaking: y (..., K-1) -> x (..., K) with x > 0, sum(x) = 1.

    u_k = y_k - log(K - k) (k = 1..K-1; y = 0 maps to the uniform point),
    z_k = expit(u_k), x_k = z_k (1 - x_1 - ... - x_{k-1}), x_K the rest.
    Computed in log space: log(rest before k) = sum_{j<k} log_expit(-u_j)."""

    name = "simplex"

    @staticmethod
    def _offsets(km1):
        return np.log(np.arange(km1, 0, -1, dtype=np.float64))      # log(K - k)

    @_quiet
    def forward(self, y: ArrayLike) -> Any:
        km1 = _n(y)[-1]
        u = y - self._offsets(km1)
        log_rest = _exclusive_cumsum(P.log_expit(-u))  # (..., K): log of the stick left
        log_z = np.concatenate([P.log_expit(u), np.zeros(_n(u)[:-1] + (1,))], axis=-1)
        return np.exp(log_rest + log_z)

    @_quiet
    def inverse(self, x: ArrayLike) -> Any:
        K = _n(x)[-1]
        # the rest at k, x_k + ... + x_K, summed from the end (more accurate than 1 - cumsum)
        rest = _reverse_cumsum(x)[..., :K - 1]
        head = x[..., :K - 1]
        return P.logit(head / rest) + self._offsets(K - 1)

    @_quiet
    def forward_log_det_jacobian(self, y: ArrayLike) -> Any:
        km1 = _n(y)[-1]
        u = y - self._offsets(km1)
        lneg = P.log_expit(-u)
        log_rest = _exclusive_cumsum(lneg)[..., :km1]
        # d x_k / d y_k = rest_k z_k (1 - z_k); the Jacobian is triangular
        return np.sum(log_rest + P.log_expit(u) + lneg)


class _Ordered(Bijector):
    """x_1 = y_1, x_k = x_{k-1} + exp(y_k): a strictly increasing vector."""

    name = "ordered"

    @staticmethod
    def _first(k):
        m = np.zeros(k)
        m[0] = 1.0
        return m

    @_quiet
    def forward(self, y: ArrayLike) -> Any:
        k = _n(y)[-1]
        steps = P.where(self._first(k), y, np.exp(y))
        return np.cumsum(steps, axis=-1)

    @_quiet
    def inverse(self, x: ArrayLike) -> Any:
        d = np.diff(x, axis=-1)                        # x_k - x_{k-1}
        return np.concatenate([x[..., :1], np.log(d)], axis=-1)

    @_quiet
    def forward_log_det_jacobian(self, y: ArrayLike) -> Any:
        k = _n(y)[-1]
        return np.sum(y * (1.0 - self._first(k)))


def _tril_size(m, strict):
    """n with m = n(n+1)/2 (strict: n(n-1)/2)."""
    n = int(round((math.sqrt(8 * m + 1) - 1) / 2)) + (1 if strict else 0)
    if (n * (n - 1) if strict else n * (n + 1)) // 2 != m:
        what = "n(n-1)/2" if strict else "n(n+1)/2"
        raise ValueError(f"a vector of length {m} is not {what} for any n")
    return n


def _place(v, n, k):
    """An (n, n) matrix with v at np.tril_indices(n, k) (row-major) and zeros elsewhere."""
    m = _n(v)[0]
    idx = np.full((n, n), m)
    idx[np.tril_indices(n, k)] = np.arange(m)
    return np.concatenate([v, np.zeros(1)])[idx]


class _LowerCholesky(Bijector):
    """y (n(n+1)/2,) -> L (n, n) lower triangular with a positive (exp'd)
    diagonal: the Cholesky factor of a covariance matrix.  y holds L's lower
    triangle in np.tril_indices(n) order, the diagonal entries as logs."""

    name = "lower_cholesky"

    @staticmethod
    def _diag_mask(n):
        rows, cols = np.tril_indices(n)
        return (rows == cols).astype(np.float64)

    @_quiet
    def forward(self, y: ArrayLike) -> Any:
        n = _tril_size(_n(y)[0], strict=False)
        v = P.where(self._diag_mask(n), np.exp(y), y)
        return _place(v, n, 0)

    @_quiet
    def inverse(self, x: ArrayLike) -> Any:
        n = _n(x)[0]
        v = x[np.tril_indices(n)]
        return P.where(self._diag_mask(n), np.log(v), v)

    @_quiet
    def forward_log_det_jacobian(self, y: ArrayLike) -> Any:
        n = _tril_size(_n(y)[0], strict=False)
        return np.sum(y * self._diag_mask(n))


class _CorrCholesky(Bijector):
    """y (n(n-1)/2,) -> L (n, n), the Cholesky factor of a correlation matrix
    (unit rows, positive diagonal), as Stan's: canonical partial correlations
    z = tanh(y) placed at np.tril_indices(n, -1), then column by column
    L_ij = z_ij sqrt(1 - sum_{k<j} L_ik^2), L_ii = sqrt(1 - sum_{k<i} L_ik^2).

    log|det| is of the map y -> L's strictly lower entries:
    sum log(1 - tanh(y)^2) + sum_{i>j} log(1 - sum_{k<j} L_ik^2) / 2."""

    name = "corr_cholesky"

    @_quiet
    def forward(self, y: ArrayLike) -> Any:
        L, _ = self._forward(y)
        return L

    @_quiet
    def forward_log_det_jacobian(self, y: ArrayLike) -> Any:
        _, ldj = self._forward(y)
        return ldj

    def _forward(self, y: ArrayLike) -> Any:
        n = _tril_size(_n(y)[0], strict=True)
        Z = _place(P.tanh(y), n, -1)
        rows = np.arange(n)
        S = np.zeros(n)                       # sum_{k<j} L_ik^2, per row i
        cols = []
        ldj = None
        for j in range(n):
            below = (rows > j).astype(np.float64)
            on = (rows == j).astype(np.float64)
            room = np.sqrt(1.0 - S)
            col = P.where(below, Z[:, j] * room, P.where(on, room, 0.0))
            if j < n - 1:
                term = np.sum(P.where(below, np.log(P.where(below, 1.0 - S, 1.0)), 0.0))
                ldj = term if ldj is None else ldj + term
            S = S + P.where(below, np.square(col), 0.0)
            cols.append(col)
        L = np.stack(cols, axis=1)
        # log(1 - tanh(y)^2) = 2 (log 2 - |y| - log1p(exp(-2|y|))), with no cancellation
        ay = np.abs(y)
        tanh_term = np.sum(2.0 * (_LOG2 - ay - np.log1p(np.exp(-2.0 * ay))))
        ldj = tanh_term if ldj is None else tanh_term + 0.5 * ldj
        return L, ldj

    @_quiet
    def inverse(self, x: ArrayLike) -> Any:
        n = _n(x)[0]
        # S_ij = sum_{k<j} L_ik^2: the row-wise exclusive cumulative sum, one matmul
        S = np.square(x) @ np.triu(np.ones((n, n)), 1)
        Z = x / np.sqrt(1.0 - S)
        return np.arctanh(Z[np.tril_indices(n, -1)])


exp = _Exp()
positive = exp
log = _Log()
simplex = _Simplex()
ordered = _Ordered()
lower_cholesky = _LowerCholesky()
corr_cholesky = _CorrCholesky()

__all__ = ["Bijector", "exp", "log", "positive", "interval", "simplex", "ordered",
           "lower_cholesky", "corr_cholesky"]
