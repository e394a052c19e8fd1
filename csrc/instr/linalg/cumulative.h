/* CUMSUM, CUMPROD: N segments of M, out[s, :] = cumsum/cumprod(a[s, :]) in
 * numpy's sequential order.  Record (N, M, 0, scratch); no scratch.
 * A section of linalg.c's translation unit (its pragmas and RT_CLONES apply).
 */
#ifndef REVTAPE_LINALG_CUMULATIVE_H
#define REVTAPE_LINALG_CUMULATIVE_H

/* N rows of M, each summed in numpy's order: y[0] = x[0], y[i] = y[i-1] + x[i]. */
static void cumsum_rows(double *y, const double *x, int64_t N, int64_t M)
{
    int64_t s, i;
    for (s = 0; s < N; s++, x += M, y += M) {
        if (M > 0)
            y[0] = x[0];
        for (i = 1; i < M; i++)
            y[i] = y[i - 1] + x[i];
    }
}

RT_LA_FWD(CUMSUM)
{
    const int64_t N = rec[0];
    const int64_t M = rec[1];
    cumsum_rows(v + o, v + a, N, M);
}

RT_LA_REV(CUMSUM)
{
    const int64_t N = rec[0];
    const int64_t M = rec[1];
    int64_t i, s;
    /* dx[i] += g[i] + g[i+1] + ... + g[M-1], summed from the end */
    if (fl & 1)
        for (s = 0; s < N; s++) {
            const double *g = d + o + s * M;
            double *dx = d + a + s * M, acc;
            if (M == 0)
                continue;
            acc = g[M - 1];
            dx[M - 1] += acc;
            for (i = M - 2; i >= 0; i--) {
                acc = acc + g[i];
                dx[i] += acc;
            }
        }
}

RT_LA_TAN(CUMSUM)
{
    const int64_t N = rec[0];
    const int64_t M = rec[1];
    cumsum_rows(t + o, t + a, N, M);     /* linear: the tangent is the cumsum of tangents */
}

RT_LA_FWD(CUMPROD)
{
    const int64_t N = rec[0];
    const int64_t M = rec[1];
    int64_t i, s;
    for (s = 0; s < N; s++) {
        const double *x = v + a + s * M;
        double *y = v + o + s * M;
        if (M > 0)
            y[0] = x[0];
        for (i = 1; i < M; i++)
            y[i] = y[i - 1] * x[i];
    }
}

RT_LA_REV(CUMPROD)
{
    const int64_t N = rec[0];
    const int64_t M = rec[1];
    int64_t i, s;
    /* Zero-safe: dx[i] = y[i-1] * r[i], r[i] = g[i] + x[i+1] r[i+1]
     * (y the output, y[-1] = 1): no division by x. */
    if (fl & 1)
        for (s = 0; s < N; s++) {
            const double *g = d + o + s * M, *x = v + a + s * M, *y = v + o + s * M;
            double *dx = d + a + s * M, r;
            if (M == 0)
                continue;
            r = g[M - 1];
            for (i = M - 1; i >= 0; i--) {
                dx[i] += (i > 0 ? y[i - 1] : 1.0) * r;
                if (i > 0)
                    r = g[i - 1] + x[i] * r;
            }
        }
}

RT_LA_TAN(CUMPROD)
{
    const int64_t N = rec[0];
    const int64_t M = rec[1];
    int64_t i, s;
    /* T[i] = T[i-1] x[i] + y[i-1] xdot[i] */
    for (s = 0; s < N; s++) {
        const double *tx = t + a + s * M, *x = v + a + s * M, *y = v + o + s * M;
        double *ty = t + o + s * M;
        if (M > 0)
            ty[0] = tx[0];
        for (i = 1; i < M; i++)
            ty[i] = ty[i - 1] * x[i] + y[i - 1] * tx[i];
    }
}

#endif
