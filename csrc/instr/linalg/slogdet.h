/* SLOGDET: out[2] = (sign, log|det a|) (singular -> (0, -inf)).  Record
 * (N, N, 0, scratch); scratch 2 N*N + N: the LU factors, the pivots (kept
 * from the forward), a^-1 for the reverse and tangent.
 * A section of linalg.c's translation unit (its pragmas and RT_CLONES apply).
 */
#ifndef REVTAPE_LINALG_SLOGDET_H
#define REVTAPE_LINALG_SLOGDET_H

RT_LA_FWD(SLOGDET)
{
    const int64_t N = rec[0];
    double *S = v + rec[3];
    /* numpy: sign 0 and -inf for a zero pivot; otherwise the sign of the
     * permutation times the signs of U's diagonal, and sum log|u_kk|. */
    double sign = 1.0, logdet = 0.0;
    int64_t k;
    memcpy(S, v + a, (size_t)(N * N) * sizeof(double));
    if (lu_factor_x(la_blas(rec, RT_BLAS_DGETRF) && rt_blas_has(RT_BLAS_DTRSM), S, S + N * N, N)) {
        v[o] = 0.0;
        v[o + 1] = -INFINITY;
        return;
    }
    for (k = 0; k < N; k++) {
        const double u = S[k * N + k];
        if ((int64_t)S[N * N + k] != k)
            sign = -sign;
        if (u < 0.0)
            sign = -sign;
        else if (u != u)
            sign = NAN;
        logdet += log(fabs(u));
    }
    v[o] = sign;
    v[o + 1] = logdet;
}

RT_LA_REV(SLOGDET)
{
    const int64_t N = rec[0];
    double *S = v + rec[3];
    int64_t i, k;
    /* d logabsdet / dA = A^-T; the sign has no derivative. */
    double *T = S + N * N + N;
    const double g = d[o + 1];
    if (!(fl & 1) || g == 0.0)
        return;
    lu_inverse_x(la_blas(rec, RT_BLAS_DGETRF) && rt_blas_has(RT_BLAS_DTRSM), S, S + N * N, T, N);
    for (i = 0; i < N; i++)
        for (k = 0; k < N; k++)
            d[a + i * N + k] += g * T[k * N + i];
}

RT_LA_TAN(SLOGDET)
{
    const int64_t N = rec[0];
    double *S = v + rec[3];
    int64_t i, k;
    /* d logabsdet = trace(A^-1 A-dot) */
    double *T = S + N * N + N;
    double r = 0.0;
    t[o] = 0.0;
    if (fl & 1) {
        lu_inverse_x(la_blas(rec, RT_BLAS_DGETRF) && rt_blas_has(RT_BLAS_DTRSM), S, S + N * N, T, N);
        for (i = 0; i < N; i++)
            for (k = 0; k < N; k++)
                r += T[k * N + i] * t[a + i * N + k];
    }
    t[o + 1] = r;
}

#endif
