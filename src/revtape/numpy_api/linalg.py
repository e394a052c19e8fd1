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
import operator

from ..core import ops
from ..core.primitives import defvjp as _defvjp, primitive as _primitive
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
    if len(s) > 2 and s[-1] == s[-2]:
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
    if _is_batch(a):
        return _batched(lambda m: cholesky(m, upper), (a,), (2,))
    _square("cholesky", a)
    if upper:
        return ops.transpose(P.cholesky(ops.transpose(a)))
    return P.cholesky(a)


def solve(a, b):
    """np.linalg.solve: x with a x = b (b a vector or a matrix); LU with partial
    pivoting in C.  An exactly singular a gives all nan, not LinAlgError."""
    if _is_batch(a) or len(_shape(b)) > 2:
        # numpy 2: b is one vector only when it is 1-D, else a stack of matrices
        if len(_shape(b)) == 1:
            return _batched(lambda m: P.solve(m, b), (a,), (2,))
        return _batched(solve, (a, b), (2, 2))
    n = _square("solve", a)
    _rhs("solve", n, b)
    return P.solve(a, b)


def inv(a):
    """np.linalg.inv (LU with partial pivoting in C); singular: all nan."""
    if _is_batch(a):
        return _batched(inv, (a,), (2,))
    _square("inv", a)
    return P.inv(a)


def slogdet(a):
    """np.linalg.slogdet: (sign, log|det a|), only the second differentiable; a
    singular matrix gives (0, -inf) as numpy."""
    if _is_batch(a):
        return _SlogdetResult(*_batched(lambda m: tuple(slogdet(m)), (a,), (2,)))
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
    if UPLO not in ("L", "U", "l", "u"):
        raise ValueError("UPLO argument must be 'L' or 'U'")
    if _is_batch(a):
        return _EighResult(*_batched(lambda m: tuple(eigh(m, UPLO)), (a,), (2,)))
    n = _square("eigh", a)
    if UPLO in ("U", "u"):
        a = ops.transpose(a)
    r = P.eigh(a)
    w = P.take(r, idx=np.arange(n))
    V = P.reshape(P.take(r, idx=np.arange(n, n + n * n)), shape=(n, n))
    return _EighResult(w, V)


def eigvalsh(a, UPLO="L"):
    """np.linalg.eigvalsh: eigh's eigenvalues, ascending."""
    return eigh(a, UPLO)[0]


# ---------------------------------------------------------------- svd and eig
# LAPACK's decompositions (numpy's own, so values and signs are numpy's)
# called as a primitive: one instruction whose forward calls back into
# Python at each replay (such programs stay on the VM: the native tier does
# not compile callbacks).  The reverse rules are written with tracked
# operations, so they trace for Hessians.  Results travel packed into one
# flat array ([U | s | Vt] row-major, [w | V]) and are unpacked by gathers.

def _pack(*arrays):
    return np.concatenate([np.ravel(np.asarray(x, dtype=np.float64)) for x in arrays])


def _unpack(flat, shapes):
    out, at = [], 0
    for sh in shapes:
        n = int(np.prod(sh, dtype=np.int64))
        out.append(np.reshape(flat[at:at + n], sh))
        at += n
    return out


@_primitive
def _svd_packed(a):
    u, s, vt = np.linalg.svd(a, full_matrices=False)
    return _pack(u, s, vt)


def _svd_parts(flat, m, n):
    k = min(m, n)
    return _unpack(flat, ((m, k), (k,), (k, n)))


def _svd_vjp(ans, a):
    """Reduced real SVD A = U S V^T (Townsend, "Differentiating the singular
    value decomposition", 2016): with F_ij = 1/(s_j^2 - s_i^2) off the
    diagonal,  A-bar = U [(F o (U^T U-bar - U-bar^T U)) S + diag(s-bar)
    + S (F o (V^T V-bar - V-bar^T V))] V^T + (I - U U^T) U-bar S^-1 V^T
    + U S^-1 V-bar^T (I - V V^T).  Repeated singular values give inf/nan."""
    m, n = _shape(a)
    k = min(m, n)
    u, s, vt = _svd_parts(ans, m, n)

    def vjp(g):
        gu, gs, gvt = _svd_parts(g, m, n)
        v, gv = np.transpose(vt), np.transpose(gvt)
        eye = np.eye(k)
        s2 = np.square(s)
        diff = np.reshape(s2, (1, k)) - np.reshape(s2, (k, 1))
        F = P.where(eye, 0.0, P.reciprocal(P.where(eye, 1.0, diff)))
        ut_gu = matmul(np.transpose(u), gu)
        vt_gv = matmul(vt, gv)
        srow = np.reshape(s, (1, k))
        scol = np.reshape(s, (k, 1))
        inner = (P.azmul(ut_gu - np.transpose(ut_gu), F) * srow
                 + eye * np.reshape(gs, (1, k))
                 + scol * P.azmul(vt_gv - np.transpose(vt_gv), F))
        out = matmul(matmul(u, inner), vt)
        if m > k:
            proj = gu - matmul(u, ut_gu)
            out = out + matmul(proj / srow, vt)
        if n > k:
            proj = np.transpose(gv) - matmul(np.transpose(vt_gv), vt)
            out = out + matmul(u / srow, proj)
        return out
    return vjp


_defvjp(_svd_packed, _svd_vjp)


@_primitive
def _svd_full_packed(a):
    u, s, vt = np.linalg.svd(a, full_matrices=True)
    return _pack(u, s, vt)


def _svd_full_vjp(ans, a):
    def vjp(g):
        raise UnsupportedError(
            "the gradient of np.linalg.svd(full_matrices=True) of a non-square matrix is not "
            "defined (the extra columns of U or V^T are any orthonormal completion); use "
            "full_matrices=False")
    return vjp


_defvjp(_svd_full_packed, _svd_full_vjp)
_SVDResult = type(np.linalg.svd(np.eye(1)))


def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """np.linalg.svd of a real matrix (or a batch): numpy's values and signs.
    Differentiable with full_matrices=False, for square matrices, and for the
    singular values alone (compute_uv=False); the gradient of a non-square
    full SVD is refused.  hermitian=True is refused (use eigh)."""
    if hermitian:
        raise UnsupportedError("np.linalg.svd(hermitian=True) on tracked values: use "
                               "np.linalg.eigh for a symmetric matrix")
    sh = _shape(a)
    if len(sh) < 2:
        raise np.linalg.LinAlgError(f"{len(sh)}-dimensional array given. Array must be at "
                                    "least two-dimensional")
    if len(sh) > 2:
        r = _batched(lambda x: (svd(x, full_matrices, compute_uv),)
                     if not compute_uv else tuple(svd(x, full_matrices, compute_uv)),
                     (a,), (2,))
        return r[0] if not compute_uv else _SVDResult(*r)
    m, n = sh
    k = min(m, n)
    if not compute_uv:
        return _svd_parts(_svd_packed(a), m, n)[1]
    if full_matrices and m != n:
        return _SVDResult(*_unpack(_svd_full_packed(a), ((m, m), (k,), (n, n))))
    return _SVDResult(*_svd_parts(_svd_packed(a), m, n))


@_primitive
def _eig_packed(a):
    w, v = np.linalg.eig(a)
    if np.iscomplexobj(w):
        if np.any(np.imag(w) != 0):
            # a replay reaching complex eigenvalues: nan (the recording refused them)
            return np.full(a.shape[0] * (a.shape[0] + 1), np.nan)
        w, v = np.real(w), np.real(v)
    return _pack(w, v)


def _eig_vjp(ans, a):
    """A V = V diag(w), columns of V of unit length:  A-bar = V^-T G V^T,
    G = diag(w-bar) + F o (V^T V-bar - (V^T V) diag(diag(V^T V-bar))),
    F_ij = 1/(w_j - w_i) off the diagonal (the second term keeps the
    columns' normalisation).  Repeated eigenvalues give inf/nan."""
    n = _shape(a)[0]
    w, v = _unpack(ans, ((n,), (n, n)))

    def vjp(g):
        gw, gv = _unpack(g, ((n,), (n, n)))
        eye = np.eye(n)
        diff = np.reshape(w, (1, n)) - np.reshape(w, (n, 1))
        F = P.where(eye, 0.0, P.reciprocal(P.where(eye, 1.0, diff)))
        vt = np.transpose(v)
        vt_gv = matmul(vt, gv)
        c = np.reshape(diagonal(vt_gv), (1, n))
        G = eye * np.reshape(gw, (1, n)) + P.azmul(vt_gv - matmul(vt, v) * c, F)
        return solve(vt, matmul(G, vt))
    return vjp


_defvjp(_eig_packed, _eig_vjp)
_EigResult = type(np.linalg.eig(np.eye(1)))


def eig(a):
    """np.linalg.eig of a real matrix with a real spectrum (or a batch):
    numpy's values and unit eigenvectors.  A complex spectrum is refused
    (complex numbers are not tracked); gradients are nan where eigenvalues
    coincide."""
    sh = _shape(a)
    if len(sh) > 2:
        return _EigResult(*_batched(lambda x: tuple(eig(x)), (a,), (2,)))
    n = _square("eig", a)
    w0 = np.linalg.eigvals(np.asarray(_value_of(a), dtype=np.float64))
    if np.iscomplexobj(w0) and np.any(np.imag(w0) != 0):
        raise UnsupportedError("np.linalg.eig of a matrix with complex eigenvalues: complex "
                               "numbers are not supported on tracked values (a symmetric "
                               "matrix has a real spectrum: np.linalg.eigh)")
    return _EigResult(*_unpack(_eig_packed(a), ((n,), (n, n))))


def eigvals(a):
    """np.linalg.eigvals: eig's eigenvalues (real spectra only)."""
    return eig(a)[0]


def pinv(a, rcond=None, hermitian=False, *, rtol=None):
    """np.linalg.pinv through the SVD, numpy's cutoff: singular values at
    most rcond * max(s) (default rcond 1e-15; numpy 2's rtol= the same) are
    dropped.  Its gradient is the SVD's: nan where singular values coincide."""
    if hermitian:
        raise UnsupportedError("np.linalg.pinv(hermitian=True) on tracked values is not supported")
    if rcond is not None and rtol is not None:
        raise ValueError("`rtol` and `rcond` can't be both set.")
    cut = 1e-15 if rcond is None and rtol is None else (rcond if rcond is not None else rtol)
    if _is_batch(a):
        return _batched(lambda x: pinv(x, cut), (a,), (2,))
    u, s, vt = svd(a, full_matrices=False)
    # the cutoff is recorded (a replay at another matrix applies its own)
    keep = P.gt(s, P.mul(cut, _api.reduce("max", s, None)))
    sinv = P.where(keep, P.reciprocal(P.where(keep, s, 1.0)), 0.0)
    return matmul(np.transpose(vt) * np.reshape(sinv, (1, -1)), np.transpose(u))


def matrix_power(a, n):
    """np.linalg.matrix_power: binary powering with matmul (numpy's order of
    products); n = 0 the identity, n < 0 powers of the inverse."""
    n = operator.index(n)
    sh = _shape(a)
    if len(sh) < 2 or sh[-1] != sh[-2]:
        raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")
    if n == 0:
        return np.zeros(sh) + np.eye(sh[-1])
    if n < 0:
        a, n = inv(a), -n
    if n == 1:
        return a
    result, z = None, a
    while True:
        if n & 1:
            result = z if result is None else matmul(result, z)
        n >>= 1
        if not n:
            return result
        z = matmul(z, z)


def norm(x, ord=None, axis=None, keepdims=False):
    """np.linalg.norm: the spectral (ord=+-2: extreme singular value) and
    nuclear ('nuc': their sum) norms of matrices through the SVD's singular
    values; every other ord as functions.norm."""
    nd = len(_shape(x))
    two = (axis is None and nd == 2) or (axis is not None and not isinstance(
        axis, (int, np.integer)) and len(axis) == 2)
    if ord not in (2, -2, "nuc") or not two:
        return _api.norm(x, ord=ord, axis=axis, keepdims=keepdims)
    row, col = (0, 1) if axis is None else (int(axis[0]) % nd, int(axis[1]) % nd)
    if row == col:
        raise ValueError("Duplicate axes given.")
    rest = [i for i in range(nd) if i not in (row, col)]
    xs = ops.transpose(x, tuple(rest) + (row, col)) if (row, col) != (nd - 2, nd - 1) else x
    s = svd(xs, compute_uv=False)
    r = (_api.reduce("sum", s, -1) if ord == "nuc" else
         _api.reduce("max" if ord == 2 else "min", s, -1))
    if keepdims:
        shape = list(_shape(x))
        shape[row] = shape[col] = 1
        r = np.reshape(r, tuple(shape))
    return r


# ---------------------------------------------------------------- batches of matrices
# (..., n, n) input: the 2-D instruction once per matrix of the batch (a
# gather of that matrix, the kernel, and one stack of the results), the
# leading axes broadcast as numpy's.  Exact (the same kernel as a single
# matrix); the program grows with the batch size.

def _batched(fn, args, cores):
    """fn over the broadcast leading axes of args (arg i has cores[i] core
    axes); fn returns an array or a tuple of arrays."""
    shapes = [_shape(a) for a in args]
    lead = [s[:len(s) - c] for s, c in zip(shapes, cores)]
    batch = np.broadcast_shapes(*lead)
    if int(np.prod(batch, dtype=np.int64)) == 0:
        raise UnsupportedError("linear algebra over an empty batch of matrices is not supported "
                               "on tracked values")
    outs = []
    for idx in np.ndindex(*batch):
        sub = []
        for a, ls in zip(args, lead):
            k = tuple(0 if d == 1 else i for i, d in zip(idx[len(idx) - len(ls):], ls))
            sub.append(a[k] if k else a)
        outs.append(fn(*sub))

    def stacked(parts):
        return np.reshape(np.stack(parts), batch + _shape(parts[0]))
    if isinstance(outs[0], tuple):
        return tuple(stacked([o[j] for o in outs]) for j in range(len(outs[0])))
    return stacked(outs)


def _is_batch(a):
    return len(_shape(a)) > 2


def matmul(a, b):
    """a @ b with numpy's rules for 1-D operands and broadcast leading axes:
    one MATMUL instruction per matrix of the batch."""
    sa, sb = _shape(a), _shape(b)
    if len(sa) <= 2 and len(sb) <= 2:
        return P.matmul(a, b)
    squeeze = []
    if len(sa) == 1:
        a = np.reshape(a, (1,) + sa)
        squeeze.append(-2)
    if len(sb) == 1:
        b = np.reshape(b, sb + (1,))
        squeeze.append(-1)
    if _shape(a)[-1] != _shape(b)[-2]:
        raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0 "
                         f"(size {_shape(b)[-2]} is different from {_shape(a)[-1]})")
    r = _batched(P.matmul, (a, b), (2, 2))
    for ax in squeeze:
        r = np.squeeze(r, axis=ax if len(squeeze) == 1 else -1)
    return r


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
    np.linalg.eigvalsh: eigvalsh, np.linalg.svd: svd, np.linalg.eig: eig,
    np.linalg.eigvals: eigvals, np.linalg.pinv: pinv, np.linalg.matrix_power: matrix_power,
    np.linalg.norm: norm, np.matmul: matmul,
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

__all__ = ["cholesky", "solve", "inv", "slogdet", "det", "eigh", "eigvalsh", "svd", "eig",
           "eigvals", "pinv", "matrix_power", "norm", "matmul", "diagonal", "trace", "diag", "tril",
           "triu", "solve_triangular", "cho_factor", "cho_solve", "LinAlgShapeError"]
