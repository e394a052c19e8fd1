"""Linear algebra on tracked values: numpy and scipy.linalg names, one
instruction each (kernels in csrc/instr/linalg/, rows in ops.py).

numpy's functions (``np.linalg.cholesky``, ``solve``, ``inv``, ``slogdet``,
``det``, ``np.trace``, ``np.diag``, ``np.diagonal``, ``np.tril``,
``np.triu``) dispatch here through ``__array_function__``.  scipy.linalg's
(``solve_triangular``, ``cholesky``, ``cho_factor``, ``cho_solve``) are
Python functions that call ``np.asarray`` on their arguments, so revtape
routes them to revtape's on tracked arguments (``_scipy_dispatch``); code
that did ``from scipy.linalg import solve_triangular`` before importing
revtape can call ``revtape.numpy_api.linalg.solve_triangular`` instead.

Matrices are 2-D and square (batched ``(..., n, n)`` input is refused).
A failed factorization is a value, not an exception: ``cholesky`` of a
matrix that is not positive definite is all nan, ``solve``/``inv`` of an
exactly singular matrix all nan, ``slogdet`` (0, -inf) as numpy; so a
sampler sees a log density of nan and rejects the point.
"""


import numpy as np

from . import scipy_dispatch as _scipy_dispatch
from ..core import ops
from . import functions as _api
from ..trace import tracked as _t
from ..errors import RevtapeError, UnsupportedError

P = ops.P
_value_of, istracked = _t._value_of, _t.istracked

from ..core import lazyscipy

_SlogdetResult = type(np.linalg.slogdet(np.eye(1)))


class LinAlgShapeError(RevtapeError, np.linalg.LinAlgError, ValueError):
    """A matrix argument of the wrong shape (not 2-D square, mismatched sizes)."""


def _shape(x):
    return tuple(np.shape(_value_of(x)))


def _square(name, a):
    s = _shape(a)
    if len(s) > 2:
        raise UnsupportedError(f"{name} of a batch of matrices (shape {s}) is not supported on "
                               "tracked values; loop over the leading axes")
    if len(s) != 2 or s[0] != s[1]:
        raise LinAlgShapeError(f"{name} needs a square 2-D matrix, got shape {s}")
    return s[0]


def _rhs(name, n, b):
    s = _shape(b)
    if len(s) not in (1, 2) or s[0] != n:
        raise LinAlgShapeError(f"{name}: the right-hand side must have shape ({n},) or ({n}, k) "
                               f"for a {n}x{n} matrix, got {s}")


def _no_extras(name, **kw):
    for k, v in kw.items():
        if v is not None and v is not False:
            raise UnsupportedError(f"{name}(..., {k}=...) is not supported on tracked values")


# ---------------------------------------------------------------- numpy.linalg

def cholesky(a, upper=False):
    """np.linalg.cholesky: lower L with L L^T = a, from a's lower triangle
    (upper=True: upper U with U^T U = a, from a's upper triangle); nan if not PD."""
    _square("cholesky", a)
    if upper:
        return ops.transpose(P.cholesky(ops.transpose(a)))
    return P.cholesky(a)


def solve(a, b):
    """np.linalg.solve: x with a x = b (b a vector or a matrix); LU with partial
    pivoting in C.  An exactly singular a gives all nan, not LinAlgError."""
    n = _square("solve", a)
    _rhs("solve", n, b)
    return P.solve(a, b)


def inv(a):
    """np.linalg.inv (LU with partial pivoting in C); singular: all nan."""
    _square("inv", a)
    return P.inv(a)


def slogdet(a):
    """np.linalg.slogdet: (sign, log|det a|), only the second differentiable; a
    singular matrix gives (0, -inf) as numpy."""
    _square("slogdet", a)
    r = P.slogdet(a)
    return _SlogdetResult(P.item(r, i=0), P.item(r, i=1))


def det(a):
    """sign * exp(logabsdet): 0 for a singular matrix (its gradient is nan there)."""
    sign, logdet = slogdet(a)
    return P.mul(sign, P.exp(logdet))


_EighResult = type(np.linalg.eigh(np.eye(1)))


def eigh(a, UPLO="L"):
    """np.linalg.eigh: (eigenvalues ascending, eigenvectors as columns), from
    a's lower (UPLO='L') or upper triangle.  Each eigenvector's
    largest-magnitude component is positive (numpy's signs are arbitrary:
    LAPACK's choice).  Gradients are nan where eigenvalues coincide."""
    n = _square("eigh", a)
    if UPLO not in ("L", "U", "l", "u"):
        raise ValueError("UPLO argument must be 'L' or 'U'")
    if UPLO in ("U", "u"):
        a = ops.transpose(a)
    r = P.eigh(a)
    w = P.take(r, idx=np.arange(n))
    V = P.reshape(P.take(r, idx=np.arange(n, n + n * n)), shape=(n, n))
    return _EighResult(w, V)


def eigvalsh(a, UPLO="L"):
    """np.linalg.eigvalsh: eigh's eigenvalues, ascending."""
    return eigh(a, UPLO)[0]


# ---------------------------------------------------------------- structure (gathers and selects)

def diagonal(a, offset=0, axis1=0, axis2=1):
    """np.diagonal: a gather, no new kernel."""
    s = _shape(a)
    idx = np.arange(int(np.prod(s, dtype=np.int64))).reshape(s).diagonal(offset, axis1, axis2)
    return P.take(a, idx=np.ascontiguousarray(idx))


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    """np.trace: the sum of a gathered diagonal (float64 dtype only, no out=)."""
    _no_extras("trace", out=out)
    if dtype is not None and np.dtype(dtype) != np.float64:
        raise UnsupportedError("trace(dtype=...) on tracked values: they are float64")
    return _api.reduce("sum", diagonal(a, offset, axis1, axis2), axis=-1)


def diag(v, k=0):
    """np.diag: a matrix's k-th diagonal, or the matrix with v on its k-th diagonal (no new kernel)."""
    s = _shape(v)
    if len(s) == 2:
        return diagonal(v, k)
    if len(s) != 1:
        raise ValueError("Input must be 1- or 2-d.")
    n = s[0]
    m = n + abs(int(k))
    i = np.arange(n)
    pos = (i + max(-k, 0)) * m + (i + max(k, 0))
    return P.scatter_add(v, idx=pos, shape=(m, m))


def tril(m, k=0):
    """np.tril of a matrix: a select with a constant mask."""
    if len(_shape(m)) < 2:
        raise UnsupportedError("np.tril of a 1-D tracked array is not supported; pass a matrix")
    return ops.tril(m, int(k))


def triu(m, k=0):
    """np.triu of a matrix: a select with a constant mask."""
    if len(_shape(m)) < 2:
        raise UnsupportedError("np.triu of a 1-D tracked array is not supported; pass a matrix")
    return ops.triu(m, int(k))


# ---------------------------------------------------------------- scipy.linalg

_TRANS = {0: False, "N": False, 1: True, "T": True, 2: True, "C": True}


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                     check_finite=True):
    """scipy.linalg.solve_triangular: x with op(a) x = b, reading a's lower
    (lower=True) or upper triangle only.  trans: 0/'N' a, 1/'T' (and, for
    real matrices the same, 2/'C') a^T.  overwrite_b and check_finite change
    nothing on tracked values (b is never overwritten; nan/inf flow as values)."""
    n = _square("solve_triangular", a)
    _rhs("solve_triangular", n, b)
    if trans not in _TRANS:
        raise ValueError(f"trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}")
    return P.trisolve(a, b, lower=bool(lower), trans=_TRANS[trans], unit=bool(unit_diagonal))


def scipy_cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """scipy.linalg.cholesky: upper by default (lower=True: lower), reading
    that triangle of a only."""
    return cholesky(a, upper=not lower)


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """scipy.linalg.cho_factor: (c, lower).  The unused triangle of c is zero
    (scipy leaves arbitrary numbers there)."""
    return scipy_cholesky(a, lower=lower), lower


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """scipy.linalg.cho_solve: x with a x = b, from cho_factor's (c, lower)."""
    c, lower = c_and_lower
    n = _square("cho_solve", c)
    _rhs("cho_solve", n, b)
    lower = bool(lower)
    # a = L L^T (lower) or U^T U: two triangular solves
    y = P.trisolve(c, b, lower=lower, trans=not lower, unit=False)
    return P.trisolve(c, y, lower=lower, trans=lower, unit=False)


def scipy_solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
                assume_a=None, transposed=False):
    """scipy.linalg.solve: 'gen' (LU), 'sym'/'her' (LU of the symmetric matrix
    built from a's lower or upper triangle, the one scipy reads), 'pos'
    (Cholesky), 'lower triangular'/'upper triangular' (a triangular solve);
    transposed=True solves a^T x = b."""
    n = _square("solve", a)
    _rhs("solve", n, b)
    kind = {None: "gen", "gen": "gen", "general": "gen", "sym": "sym", "symmetric": "sym",
            "her": "sym", "hermitian": "sym", "pos": "pos", "positive definite": "pos",
            "lower triangular": "lower", "upper triangular": "upper"}.get(assume_a)
    if kind is None:
        raise UnsupportedError(f"scipy.linalg.solve(assume_a={assume_a!r}) is not supported on "
                               "tracked values")
    if kind in ("lower", "upper"):
        return P.trisolve(a, b, lower=kind == "lower", trans=bool(transposed), unit=False)
    if kind == "pos":
        return cho_solve(cho_factor(a, lower=lower), b)      # symmetric: transposed is moot
    if kind == "sym":
        t = ops.tril(a) if lower else ops.triu(a)
        strict = ops.tril(a, -1) if lower else ops.triu(a, 1)
        return P.solve(P.add(t, ops.transpose(strict)), b)
    return P.solve(ops.transpose(a) if transposed else a, b)


def scipy_inv(a, overwrite_a=False, check_finite=True):
    return inv(a)


def scipy_det(a, overwrite_a=False, check_finite=True):
    return det(a)


# ---------------------------------------------------------------- dispatch

_api.HANDLED_FUNCTIONS.update({
    np.linalg.cholesky: cholesky, np.linalg.solve: solve, np.linalg.inv: inv,
    np.linalg.slogdet: slogdet, np.linalg.det: det, np.linalg.eigh: eigh,
    np.linalg.eigvalsh: eigvalsh,
    np.trace: trace, np.diag: diag, np.diagonal: diagonal, np.tril: tril, np.triu: triu,
})

_SCIPY = {"solve_triangular": solve_triangular, "cholesky": scipy_cholesky,
          "cho_factor": cho_factor, "cho_solve": cho_solve, "solve": scipy_solve,
          "inv": scipy_inv, "det": scipy_det}


# routed when the program imports scipy.linalg (revtape itself never does)
lazyscipy.when_imported("scipy.linalg", lambda sla: _scipy_dispatch.route(sla, _SCIPY))
_t.DROP_INS["scipy.linalg"] = lambda name, dist: (
    f"revtape.numpy_api.linalg's {name} (scipy.linalg.{name} looked up after importing revtape)"
    if name in _SCIPY else None)

__all__ = ["cholesky", "solve", "inv", "slogdet", "det", "eigh", "eigvalsh", "diagonal", "trace", "diag", "tril",
           "triu", "solve_triangular", "cho_factor", "cho_solve", "LinAlgShapeError"]
