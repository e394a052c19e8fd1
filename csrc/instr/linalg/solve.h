/* SOLVE: out[N*M] = a^-1 b (LU with partial pivoting; singular -> nan).
 * Record (N, M, 0, scratch); scratch N*N + N + N*M: the LU factors, the
 * pivots (kept from the forward), the reverse's b-bar.
 * A section of linalg.c's translation unit (its pragmas and RT_CLONES apply).
 */
#ifndef REVTAPE_LINALG_SOLVE_H
#define REVTAPE_LINALG_SOLVE_H

RT_LA_FWD(SOLVE)
{
    const int64_t N = rec[0];
    const int64_t M = rec[1];
    double *S = v + rec[3];
    const int blas = la_blas(rec, RT_BLAS_DGETRF) && rt_blas_has(RT_BLAS_DTRSM);
    memcpy(S, v + a, (size_t)(N * N) * sizeof(double));
    if (lu_factor_x(blas, S, S + N * N, N)) {
        rt_lfill(v + o, NAN, N * M);
        return;
    }
    memcpy(v + o, v + b, (size_t)(N * M) * sizeof(double));
    lu_solve_x(blas, S, S + N * N, v + o, N, M, 0);
}

RT_LA_REV(SOLVE)
{
    const int64_t N = rec[0];
    const int64_t M = rec[1];
    double *S = v + rec[3];
    int64_t i, k;
    /* B-bar = A^-T X-bar; A-bar = -B-bar X^T */
    double *T = S + N * N + N;
    const double *X = v + o;
    const int blas = la_blas(rec, RT_BLAS_DGETRF) && rt_blas_has(RT_BLAS_DTRSM);
    memcpy(T, d + o, (size_t)(N * M) * sizeof(double));
    if (lu_singular(S, N))
        rt_lfill(T, NAN, N * M);
    else
        lu_solve_x(blas, S, S + N * N, T, N, M, 1);
    if (fl & 2)
        for (k = 0; k < N * M; k++)
            d[b + k] += T[k];
    if ((fl & 1) && blas && rt_blas_has(RT_BLAS_DGEMM)) {
        rt_blas_gemm(0, 1, N, N, M, -1.0, T, M, X, M, 1.0, d + a, N);
        return;
    }
    if (fl & 1)
        for (i = 0; i < N; i++)
            for (k = 0; k < N; k++)
                d[a + i * N + k] -= rt_ldot(T + i * M, X + k * M, M);
}

RT_LA_TAN(SOLVE)
{
    const int64_t N = rec[0];
    const int64_t M = rec[1];
    double *S = v + rec[3];
    int64_t i, k;
    /* X-dot = A^-1 (B-dot - A-dot X) */
    const double *X = v + o, *Ad = t + a;
    double *R = t + o;
    const int blas = la_blas(rec, RT_BLAS_DGETRF) && rt_blas_has(RT_BLAS_DTRSM);
    if (fl & 2)
        memcpy(R, t + b, (size_t)(N * M) * sizeof(double));
    else
        rt_lfill(R, 0.0, N * M);
    if (fl & 1)
        for (i = 0; i < N; i++)
            for (k = 0; k < N; k++)
                if (Ad[i * N + k] != 0.0)
                    rt_laxpy(R + i * M, -Ad[i * N + k], X + k * M, M);
    if (lu_singular(S, N))
        rt_lfill(R, NAN, N * M);
    else
        lu_solve_x(blas, S, S + N * N, R, N, M, 0);
}

#endif
