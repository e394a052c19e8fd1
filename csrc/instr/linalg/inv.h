/* INV: out[N*N] = a^-1 (singular -> nan).  Record (N, N, 0, scratch);
 * scratch 2 N*N + N: the LU factors, the pivots (kept from the forward),
 * the reverse's and tangent's product.
 * A section of linalg.c's translation unit (its pragmas and RT_CLONES apply).
 */
#ifndef REVTAPE_LINALG_INV_H
#define REVTAPE_LINALG_INV_H

RT_LA_FWD(INV)
{
    const int64_t N = rec[0];
    double *S = v + rec[3];
    const int blas = la_blas(rec, RT_BLAS_DGETRF) && rt_blas_has(RT_BLAS_DTRSM);
    memcpy(S, v + a, (size_t)(N * N) * sizeof(double));
    lu_factor_x(blas, S, S + N * N, N);
    lu_inverse_x(blas, S, S + N * N, v + o, N);
}

RT_LA_REV(INV)
{
    const int64_t N = rec[0];
    double *S = v + rec[3];
    int64_t i, k;
    /* A-bar = -X^T G X^T: T = X^T G, then A-bar[i, k] = -T[i, :] . X[k, :] */
    double *T = S + N * N + N;
    const double *X = v + o, *G = d + o;
    if (!(fl & 1))
        return;
    if (la_blas(rec, RT_BLAS_DGEMM)) {
        rt_blas_gemm(1, 0, N, N, N, 1.0, X, N, G, N, 0.0, T, N);
        rt_blas_gemm(0, 1, N, N, N, -1.0, T, N, X, N, 1.0, d + a, N);
        return;
    }
    rt_lfill(T, 0.0, N * N);
    for (k = 0; k < N; k++)
        for (i = 0; i < N; i++)
            rt_laxpy(T + i * N, X[k * N + i], G + k * N, N);
    for (i = 0; i < N; i++)
        for (k = 0; k < N; k++)
            d[a + i * N + k] -= rt_ldot(T + i * N, X + k * N, N);
}

RT_LA_TAN(INV)
{
    const int64_t N = rec[0];
    double *S = v + rec[3];
    int64_t i, k;
    /* X-dot = -X A-dot X: T = A-dot X, then X-dot = -X T */
    double *T = S + N * N + N, *R = t + o;
    const double *X = v + o, *Ad = t + a;
    rt_lfill(T, 0.0, N * N);
    rt_lfill(R, 0.0, N * N);
    if (!(fl & 1))
        return;
    for (i = 0; i < N; i++)
        for (k = 0; k < N; k++)
            if (Ad[i * N + k] != 0.0)
                rt_laxpy(T + i * N, Ad[i * N + k], X + k * N, N);
    for (i = 0; i < N; i++)
        for (k = 0; k < N; k++)
            rt_laxpy(R + i * N, -X[i * N + k], T + k * N, N);
}

#endif
