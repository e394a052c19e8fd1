/* CHOLESKY: out[N*N] = cholesky(a[N*N]), lower, reading a's lower
 * triangle; not positive definite -> every element of out is nan.
 * Record (N, N, 0, scratch); scratch N*N: the reverse's work matrix.
 * A section of linalg.c's translation unit (its pragmas and RT_CLONES apply).
 */
#ifndef REVTAPE_LINALG_CHOLESKY_H
#define REVTAPE_LINALG_CHOLESKY_H

/* L = cholesky(lower triangle of A), row by row (Cholesky-Banachiewicz):
 * every entry is a dot product of two contiguous row prefixes. */
RT_CLONES static void chol_forward(double *L, const double *A, int64_t n)
{
    int64_t i, j;
    for (i = 0; i < n; i++) {
        double *li = L + i * n;
        for (j = 0; j < i; j++) {
            const double *lj = L + j * n;
            li[j] = (A[i * n + j] - rt_ldot(li, lj, j)) / lj[j];
        }
        {
            const double dd = A[i * n + i] - rt_ldot(li, li, i);
            if (!(dd > 0.0)) {              /* not positive definite (or nan) */
                rt_lfill(L, NAN, n * n);
                return;
            }
            li[i] = sqrt(dd);
            if (!(li[i] < INFINITY)) {         /* an infinite pivot: no factor either */
                rt_lfill(L, NAN, n * n);
                return;
            }
        }
        for (j = i + 1; j < n; j++)
            li[j] = 0.0;
    }
}

/* dA += reverse of chol_forward applied to tril(G), on A's lower triangle
 * (the entries chol_forward reads); W: n*n scratch. */
RT_CLONES static void chol_reverse(double *dA, const double *L, const double *G, double *W, int64_t n)
{
    int64_t i, j;
    for (i = 0; i < n; i++)
        for (j = 0; j <= i; j++)
            W[i * n + j] = G[i * n + j];
    /* Columns last to first; in a column the off-diagonal entries, then the
     * diagonal: the reverse of the order in which entries depend on each
     * other.  W's lower triangle holds L-bar, overwritten by A-bar. */
    for (j = n - 1; j >= 0; j--) {
        const double *lj = L + j * n;
        double *wj = W + j * n;
        const double ljj = lj[j];
        double u;
        for (i = j + 1; i < n; i++) {
            const double *li = L + i * n;
            double *wi = W + i * n;
            const double t = wi[j] / ljj;
            wi[j] = t;
            wj[j] -= t * li[j];
            rt_laxpy(wi, -t, lj, j);
            rt_laxpy(wj, -t, li, j);
        }
        u = wj[j] / (2.0 * ljj);
        wj[j] = u;
        rt_laxpy(wj, -2.0 * u, lj, j);
    }
    for (i = 0; i < n; i++)
        for (j = 0; j <= i; j++)
            dA[i * n + j] += W[i * n + j];
}

/* T = d cholesky(A)[Ad]: chol_forward differentiated (Ad's lower triangle). */
RT_CLONES static void chol_tangent(double *T, const double *L, const double *Ad, int64_t n)
{
    int64_t i, j;
    for (i = 0; i < n; i++) {
        const double *li = L + i * n;
        double *ti = T + i * n;
        for (j = 0; j < i; j++) {
            const double *lj = L + j * n, *tj = T + j * n;
            const double s = rt_ldot(ti, lj, j) + rt_ldot(li, tj, j);
            ti[j] = (Ad[i * n + j] - s - li[j] * tj[j]) / lj[j];
        }
        ti[i] = (Ad[i * n + i] - 2.0 * rt_ldot(li, ti, i)) / (2.0 * li[i]);
        for (j = i + 1; j < n; j++)
            ti[j] = 0.0;
    }
}

RT_LA_FWD(CHOLESKY)
{
    const int64_t N = rec[0];
    if (la_blas(rec, RT_BLAS_DPOTRF))
        chol_forward_blas(v + o, v + a, N);
    else
        chol_forward(v + o, v + a, N);
}

RT_LA_REV(CHOLESKY)
{
    const int64_t N = rec[0];
    double *S = v + rec[3];
    if (!(fl & 1))
        return;
    if (!(N >= RT_CHOL_REV_BLAS_MIN && la_blas(rec, RT_BLAS_DSYGST) && rt_blas_has(RT_BLAS_DTRMM)
          && chol_reverse_blas(d + a, v + o, d + o, S, N) == 0))
        chol_reverse(d + a, v + o, d + o, S, N);
}

RT_LA_TAN(CHOLESKY)
{
    const int64_t N = rec[0];
    if (fl & 1)
        chol_tangent(t + o, v + o, t + a, N);
    else
        rt_lfill(t + o, 0.0, N * N);
}

#endif
