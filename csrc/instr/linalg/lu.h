/* LU with partial pivoting, shared by SOLVE, INV and SLOGDET: the factors
 * and pivots the forward keeps in the instruction's scratch, the solves and
 * the inverse the reverse and tangent sweeps run from them.
 * A section of linalg.c's translation unit (its pragmas and RT_CLONES apply).
 */
#ifndef REVTAPE_LINALG_LU_H
#define REVTAPE_LINALG_LU_H

/* LU := P A = L U (unit L below the diagonal, U on and above); piv[k] = the
 * row swapped with row k at step k.  Returns 1 when a pivot is exactly 0. */
RT_CLONES static int lu_factor(double *LU, double *piv, int64_t n)
{
    int64_t i, j, k;
    int singular = 0;
    for (k = 0; k < n; k++) {
        int64_t p = k;
        double best = fabs(LU[k * n + k]), pk;
        for (i = k + 1; i < n; i++)
            if (fabs(LU[i * n + k]) > best) {
                best = fabs(LU[i * n + k]);
                p = i;
            }
        piv[k] = (double)p;
        if (p != k)
            for (j = 0; j < n; j++) {
                const double tmp = LU[k * n + j];
                LU[k * n + j] = LU[p * n + j];
                LU[p * n + j] = tmp;
            }
        pk = LU[k * n + k];
        if (pk == 0.0) {
            singular = 1;
            continue;
        }
        for (i = k + 1; i < n; i++) {
            const double l = LU[i * n + k] / pk;
            LU[i * n + k] = l;
            rt_laxpy(LU + i * n + k + 1, -l, LU + k * n + k + 1, n - k - 1);
        }
    }
    return singular;
}

static int lu_singular(const double *LU, int64_t n)
{
    return tri_has_zero_diagonal(LU, n);
}

static void swap_rows(double *X, int64_t r, int64_t s, int64_t m)
{
    int64_t j;
    for (j = 0; j < m; j++) {
        const double tmp = X[r * m + j];
        X[r * m + j] = X[s * m + j];
        X[s * m + j] = tmp;
    }
}

/* The pivots are row numbers kept as doubles in the value arena between the
 * forward and the reverse sweep, where another instruction of a crafted
 * program may overwrite them (the verifier checks offsets, not data): a row
 * is swapped only after its number was checked. */
static int lu_pivots_ok(const double *piv, int64_t n)
{
    int64_t k;
    for (k = 0; k < n; k++)
        if (!(piv[k] >= 0.0 && piv[k] < (double)n))
            return 0;
    return 1;
}

/* X := A^-1 X (trans 0) or A^-T X (trans 1) from lu_factor's result. */
RT_CLONES static void lu_solve(const double *LU, const double *piv, double *X, int64_t n, int64_t m,
                     int trans)
{
    int64_t k;
    if (!lu_pivots_ok(piv, n)) {
        for (k = 0; k < n * m; k++)
            X[k] = NAN;
        return;
    }
    if (!trans) {
        for (k = 0; k < n; k++)
            if ((int64_t)piv[k] != k)
                swap_rows(X, k, (int64_t)piv[k], m);
        tri_solve(LU, X, n, m, 1, 0, 1);
        tri_solve(LU, X, n, m, 0, 0, 0);
    } else {
        tri_solve(LU, X, n, m, 0, 1, 0);    /* U^T */
        tri_solve(LU, X, n, m, 1, 1, 1);    /* L^T, unit */
        for (k = n - 1; k >= 0; k--)
            if ((int64_t)piv[k] != k)
                swap_rows(X, k, (int64_t)piv[k], m);
    }
}

/* Out = A^-1 from the factors; all nan when singular. */
static void lu_inverse(const double *LU, const double *piv, double *Out, int64_t n)
{
    int64_t i;
    if (lu_singular(LU, n)) {
        rt_lfill(Out, NAN, n * n);
        return;
    }
    rt_lfill(Out, 0.0, n * n);
    for (i = 0; i < n; i++)
        Out[i * n + i] = 1.0;
    lu_solve(LU, piv, Out, n, n, 0);
}

#endif
