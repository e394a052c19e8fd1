/* The linear-algebra instructions through LAPACK and BLAS (kernels/blas.h),
 * taken when an instruction's flags carry RT_LA_BLAS and the VM holds the
 * routine: the compiler sets the bit for n past a threshold (small n stays
 * on the hand kernels, which win there).  The same functions and the same
 * conventions (lower triangle read, nan results for failed
 * factorizations, the eigenvector signs); other roundings.
 *   CHOLESKY  forward dpotrf; reverse (n >= RT_CHOL_REV_BLAS_MIN; below,
 *             the hand one) P = Phi(L^T tril(G)) (dtrmm), S + S^T
 *             = L^-T (P + P^T) L^-1 (dsygst), dA += S + S^T below the
 *             diagonal and S on it (the hand reverse's function); tangent:
 *             the hand one
 *   TRISOLVE  dtrsm forward, reverse (b-bar), tangent; a-bar by dgemm
 *   SOLVE, INV, SLOGDET  dgetrf on the row-major matrix (LAPACK's P A^T =
 *             L U), solves by dtrsm; products by dgemm
 *   EIGH      forward dsyevd; reverse's products by dgemm; tangent: the hand one
 * A section of linalg.c's translation unit.
 */
#ifndef REVTAPE_LINALG_LAPACK_H
#define REVTAPE_LINALG_LAPACK_H

#include <stdlib.h>
#include "kernels/blas.h"

/* 1: this instruction runs through `slot` (its record's flags bit, a
 * non-empty matrix, the routine held) */
static int la_blas(const int32_t *rec, int slot)
{
    return (rec[2] & RT_LA_BLAS) && rec[0] > 0 && rt_blas_has(slot);
}

static int la_nonfinite_lower(const double *A, int64_t n)
{
    int64_t i, j;
    for (i = 0; i < n; i++)
        for (j = 0; j <= i; j++)
            if (!(fabs(A[i * n + j]) < INFINITY))
                return 1;
    return 0;
}

/* ------------------------------------------------------------------ Cholesky */

static void chol_forward_blas(double *L, const double *A, int64_t n)
{
    int64_t i, j;
    memcpy(L, A, (size_t)(n * n) * sizeof(double));
    if (rt_blas_potrf_lower(L, n) != 0) {      /* not positive definite (or nan) */
        rt_lfill(L, NAN, n * n);
        return;
    }
    for (i = 0; i < n; i++)
        for (j = i + 1; j < n; j++)
            L[i * n + j] = 0.0;
    if (la_nonfinite_lower(L, n))              /* inf or nan off the diagonal: no factor */
        rt_lfill(L, NAN, n * n);
}

/* The level-3 reverse: W = L^T tril(G) (dtrmm, n^3/3 flops), Q = P + P^T
 * for P = Phi(W) (so Q's lower triangle is W's), and S + S^T = L^-T Q L^-1
 * by dsygst (n^3) on the matrices reversed: reversing a row-major buffer
 * gives the column-major J X^T J (J the order-reversing permutation), so
 * L^-T Q L^-1 = J inv(Lc) (J Q J) inv(Lc^T) J with Lc = J L^T J lower,
 * dsygst's itype 1 form.  Returns 1 (nothing done) without the memory.
 * 1.33 n^3 flops at BLAS speed against the hand reverse's 2n^3/3 in cache:
 * the same time at n = 300 and n = 500 on one OpenBLAS thread (AVX2), so the
 * hand reverse keeps the orders below RT_CHOL_REV_BLAS_MIN (on dpotrf's
 * factor, which it reads like its own). */
#define RT_CHOL_REV_BLAS_MIN 512

static int chol_reverse_blas(double *dA, const double *L, const double *G, double *W, int64_t n)
{
    const int64_t nn = n * n;
    int64_t i, j, k;
    double *Lr = malloc((size_t)nn * sizeof(double));
    if (Lr == NULL)
        return 1;
    for (k = 0; k < nn; k++)
        Lr[k] = L[nn - 1 - k];
    for (i = 0; i < n; i++)
        for (j = 0; j < n; j++)
            W[i * n + j] = j <= i ? G[i * n + j] : 0.0;
    rt_blas_trmm(1, 1, 1, 0, n, n, L, n, W, n);         /* W = L^T tril(G) */
    for (k = 0; k < nn / 2; k++) {                      /* J Q J (its lower triangle read) */
        const double t = W[k];
        W[k] = W[nn - 1 - k];
        W[nn - 1 - k] = t;
    }
    rt_blas_sygst_lower(W, Lr, n);
    free(Lr);
    for (k = 0; k < nn / 2; k++) {                      /* back: S + S^T, lower triangle */
        const double t = W[k];
        W[k] = W[nn - 1 - k];
        W[nn - 1 - k] = t;
    }
    for (i = 0; i < n; i++) {
        for (j = 0; j < i; j++)
            dA[i * n + j] += W[i * n + j];
        dA[i * n + i] += 0.5 * W[i * n + i];
    }
    return 0;
}

/* ------------------------------------------------------------------ LU */

/* lu_factor's contract on LAPACK's factors: LU := dgetrf of the row-major
 * A, whose lower triangle then holds Lr = U^T (LAPACK's U) and strict upper
 * Ur = L^T (unit), A = Lr Ur P^T; piv[k] = the 0-based row swapped at step k
 * (dgetrf's ints written into piv's own bytes, then widened in place from
 * the last one down, each read before its bytes are overwritten). */
static int lu_factor_blas(double *LU, double *piv, int64_t n)
{
    int64_t k;
    int *ip = (int *)(void *)piv;        /* 4 n bytes inside piv's 8 n */
    int info = rt_blas_getrf_t(LU, n, ip);
    for (k = n - 1; k >= 0; k--) {
        int pk;
        memcpy(&pk, (char *)piv + 4 * k, sizeof pk);
        piv[k] = (double)pk;
    }
    return info != 0 || tri_has_zero_diagonal(LU, n);
}

/* X := A^-1 X (trans 0) or A^-T X (trans 1), from lu_factor_blas's result */
static void lu_solve_blas(const double *LU, const double *piv, double *X, int64_t n, int64_t m,
                          int trans)
{
    int64_t k;
    if (!lu_pivots_ok(piv, n)) {
        rt_lfill(X, NAN, n * m);
        return;
    }
    if (!trans) {                        /* X = P Ur^-1 Lr^-1 B */
        rt_blas_trsm(1, 1, 0, 0, n, m, LU, n, X, m);
        rt_blas_trsm(1, 0, 0, 1, n, m, LU, n, X, m);
        for (k = n - 1; k >= 0; k--)
            if ((int64_t)piv[k] != k)
                swap_rows(X, k, (int64_t)piv[k], m);
    } else {                             /* X = Lr^-T Ur^-T P^T B */
        for (k = 0; k < n; k++)
            if ((int64_t)piv[k] != k)
                swap_rows(X, k, (int64_t)piv[k], m);
        rt_blas_trsm(1, 0, 1, 1, n, m, LU, n, X, m);
        rt_blas_trsm(1, 1, 1, 0, n, m, LU, n, X, m);
    }
}

/* The LU kernels of either path: blas picks LAPACK's (the instruction's
 * record decides, the same for its forward, reverse and tangent). */
static int lu_factor_x(int blas, double *LU, double *piv, int64_t n)
{
    return blas ? lu_factor_blas(LU, piv, n) : lu_factor(LU, piv, n);
}

static void lu_solve_x(int blas, const double *LU, const double *piv, double *X, int64_t n,
                       int64_t m, int trans)
{
    if (blas)
        lu_solve_blas(LU, piv, X, n, m, trans);
    else
        lu_solve(LU, piv, X, n, m, trans);
}

static void lu_inverse_x(int blas, const double *LU, const double *piv, double *Out, int64_t n)
{
    int64_t i;
    if (!blas) {
        lu_inverse(LU, piv, Out, n);
        return;
    }
    if (lu_singular(LU, n)) {
        rt_lfill(Out, NAN, n * n);
        return;
    }
    rt_lfill(Out, 0.0, n * n);
    for (i = 0; i < n; i++)
        Out[i * n + i] = 1.0;
    lu_solve_blas(LU, piv, Out, n, n, 0);
}

/* ------------------------------------------------------------------ eigh */

/* eigh_forward's contract through dsyevd; 0, or 1 when the work space could
 * not be had (the caller runs the hand kernel instead) */
static int eigh_forward_blas(double *out, const double *A, double *S, int64_t n)
{
    double *w = out, *V = out + n;
    int64_t i, j;
    int info;
    if (la_nonfinite_lower(A, n)) {
        rt_lfill(out, NAN, n + n * n);
        return 0;
    }
    memcpy(S, A, (size_t)(n * n) * sizeof(double));
    info = rt_blas_syevd_lower(S, w, n);
    if (info == -1000)
        return 1;
    if (info != 0) {
        rt_lfill(out, NAN, n + n * n);
        return 0;
    }
    /* eigenvector j is row j of S (LAPACK's column j); its largest-magnitude
     * entry (the first of equal ones) made positive */
    for (j = 0; j < n; j++) {
        const double *sj = S + j * n;
        int64_t m = 0;
        for (i = 1; i < n; i++)
            if (fabs(sj[i]) > fabs(sj[m]))
                m = i;
        for (i = 0; i < n; i++)
            V[i * n + j] = sj[m] < 0.0 ? -sj[i] : sj[i];
    }
    return 0;
}

#endif
