/* TRISOLVE: out[N*M] = op(a)^-1 b[N*M]; flags 1 lower, 2 transposed, 4 unit
 * diagonal (a's diagonal is not read); a zero on the diagonal -> out is all
 * nan.  Record (N, M, flags, scratch); scratch N*M: the reverse's b-bar.
 * A section of linalg.c's translation unit (its pragmas and RT_CLONES apply).
 */
#ifndef REVTAPE_LINALG_TRISOLVE_H
#define REVTAPE_LINALG_TRISOLVE_H

static int in_triangle(int64_t i, int64_t k, int lower, int unit)
{
    if (i == k)
        return !unit;
    return lower ? k < i : k > i;
}

RT_LA_FWD(TRISOLVE)
{
    const int64_t N = rec[0];
    const int64_t M = rec[1];
    const int flags = rec[2];
    if (!(flags & RT_TRI_UNIT) && tri_has_zero_diagonal(v + a, N)) {
        rt_lfill(v + o, NAN, N * M);
        return;
    }
    memcpy(v + o, v + b, (size_t)(N * M) * sizeof(double));
    if (la_blas(rec, RT_BLAS_DTRSM))
        rt_blas_trsm(1, flags & RT_TRI_LOWER, (flags & RT_TRI_TRANS) != 0,
                     (flags & RT_TRI_UNIT) != 0, N, M, v + a, N, v + o, M);
    else
        tri_solve(v + a, v + o, N, M, flags & RT_TRI_LOWER, (flags & RT_TRI_TRANS) != 0,
                  (flags & RT_TRI_UNIT) != 0);
}

RT_LA_REV(TRISOLVE)
{
    const int64_t N = rec[0];
    const int64_t M = rec[1];
    const int flags = rec[2];
    double *S = v + rec[3];
    int64_t i, k;
    /* B-bar = op(L)^-T X-bar; L-bar = -(B-bar X^T) (transposed for op =
     * L^T) on L's triangle. */
    const int lower = flags & RT_TRI_LOWER, trans = (flags & RT_TRI_TRANS) != 0;
    const int unit = (flags & RT_TRI_UNIT) != 0;
    const double *X = v + o;
    const int blas = la_blas(rec, RT_BLAS_DTRSM);
    memcpy(S, d + o, (size_t)(N * M) * sizeof(double));
    if (blas)
        rt_blas_trsm(1, lower, !trans, unit, N, M, v + a, N, S, M);
    else
        tri_solve(v + a, S, N, M, lower, !trans, unit);
    if (fl & 2)
        for (k = 0; k < N * M; k++)
            d[b + k] += S[k];
    if ((fl & 1) && blas && M > 1 && rt_blas_has(RT_BLAS_DGEMM)) {
        /* the products S X^T (X S^T transposed) by dgemm, into a work
         * matrix; without the memory, the loops below */
        double *P = malloc((size_t)(N * N) * sizeof(double));
        if (P != NULL) {
            if (trans)
                rt_blas_gemm(0, 1, N, N, M, 1.0, X, M, S, M, 0.0, P, N);
            else
                rt_blas_gemm(0, 1, N, N, M, 1.0, S, M, X, M, 0.0, P, N);
            for (i = 0; i < N; i++) {
                const int64_t k0 = lower ? 0 : (unit ? i + 1 : i);
                const int64_t k1 = lower ? (unit ? i : i + 1) : N;
                for (k = k0; k < k1; k++)
                    d[a + i * N + k] -= P[i * N + k];
            }
            free(P);
            return;
        }
    }
    if (fl & 1)
        for (i = 0; i < N; i++) {
            /* row i of L's triangle: columns [k0, k1) */
            const int64_t k0 = lower ? 0 : (unit ? i + 1 : i);
            const int64_t k1 = lower ? (unit ? i : i + 1) : N;
            double *da = d + a + i * N;
            if (M == 1) {
                const double u = trans ? X[i] : S[i];
                const double *w = trans ? S : X;
                for (k = k0; k < k1; k++)
                    da[k] -= u * w[k];
            } else {
                for (k = k0; k < k1; k++)
                    da[k] -= trans ? rt_ldot(X + i * M, S + k * M, M)
                                   : rt_ldot(S + i * M, X + k * M, M);
            }
        }
}

RT_LA_TAN(TRISOLVE)
{
    const int64_t N = rec[0];
    const int64_t M = rec[1];
    const int flags = rec[2];
    int64_t i, k;
    /* X-dot = op(L)^-1 (B-dot - op(L-dot) X), L-dot read on L's triangle */
    const int lower = flags & RT_TRI_LOWER, trans = (flags & RT_TRI_TRANS) != 0;
    const int unit = (flags & RT_TRI_UNIT) != 0;
    const double *X = v + o, *Ld = t + a;
    double *R = t + o;
    if (fl & 2)
        memcpy(R, t + b, (size_t)(N * M) * sizeof(double));
    else
        rt_lfill(R, 0.0, N * M);
    if (fl & 1)
        for (i = 0; i < N; i++)
            for (k = 0; k < N; k++) {
                const double ld = Ld[i * N + k];
                if (!in_triangle(i, k, lower, unit) || ld == 0.0)
                    continue;
                if (trans)
                    rt_laxpy(R + k * M, -ld, X + i * M, M);
                else
                    rt_laxpy(R + i * M, -ld, X + k * M, M);
            }
    if (la_blas(rec, RT_BLAS_DTRSM))
        rt_blas_trsm(1, lower, trans, unit, N, M, v + a, N, R, M);
    else
        tri_solve(v + a, R, N, M, lower, trans, unit);
}

#endif
