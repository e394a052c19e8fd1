/* EIGH: out[N + N*N] = (w ascending, V row-major) of a's lower triangle,
 * each column's largest-magnitude entry positive.  Record (N, N, 0,
 * scratch); scratch 3 N*N: the forward's work matrices, then the reverse's
 * and tangent's products.
 * A section of linalg.c's translation unit (its pragmas and RT_CLONES apply).
 */
#ifndef REVTAPE_LINALG_EIGH_H
#define REVTAPE_LINALG_EIGH_H

/* Cyclic Jacobi on S (n x n, symmetric, overwritten), accumulating V: S ->
 * diag(w), A = V diag(w) V^T.  Slower than tridiagonal QL for large n but
 * short, and accurate to high relative precision.  Row-major throughout:
 * a rotation rewrites rows p and q of S (contiguous) and mirrors them into
 * columns p and q (S stays symmetric), and rotates rows p and q of V^T,
 * transposed into V at the end -- one strided pass per rotation instead of
 * three (about 2x at n = 200). */
static void jacobi_eigh(double *S, double *V, int64_t n)
{
    int64_t i, k, p, q, sweep;
    double norm = 0.0;
    rt_lfill(V, 0.0, n * n);
    for (i = 0; i < n; i++) {
        V[i * n + i] = 1.0;
        for (k = 0; k < n; k++)
            norm += S[i * n + k] * S[i * n + k];
    }
    if (!(norm < INFINITY))
        return;                             /* nan/inf: the caller fills nan */
    for (sweep = 0; sweep < 100; sweep++) {
        double off = 0.0;
        for (p = 0; p < n; p++)
            for (q = p + 1; q < n; q++)
                off += S[p * n + q] * S[p * n + q];
        if (off <= 1e-32 * norm || off == 0.0)
            break;
        for (p = 0; p < n; p++)
            for (q = p + 1; q < n; q++) {
                const double apq = S[p * n + q];
                double theta, t, c, sn;
                if (apq == 0.0)
                    continue;
                theta = (S[q * n + q] - S[p * n + p]) / (2.0 * apq);
                t = (theta >= 0.0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
                if (!(fabs(theta) < 1e150))
                    t = 0.5 / theta;            /* theta^2 would overflow */
                c = 1.0 / sqrt(t * t + 1.0);
                sn = t * c;
                {
                    double *Sp = S + p * n, *Sq = S + q * n, *Vp = V + p * n, *Vq = V + q * n;
                    const double app = Sp[p], aqq = Sq[q];
                    for (k = 0; k < n; k++) {   /* J^T S J off the (p, q) block */
                        const double apk = Sp[k], aqk = Sq[k];
                        Sp[k] = c * apk - sn * aqk;
                        Sq[k] = sn * apk + c * aqk;
                    }
                    for (k = 0; k < n; k++) {   /* symmetry: columns p, q */
                        S[k * n + p] = Sp[k];
                        S[k * n + q] = Sq[k];
                    }
                    Sp[p] = app - t * apq;      /* the 2x2 block, diagonalised */
                    Sq[q] = aqq + t * apq;
                    Sp[q] = Sq[p] = 0.0;
                    for (k = 0; k < n; k++) {   /* (V J)^T: rows p, q of V^T */
                        const double vpk = Vp[k], vqk = Vq[k];
                        Vp[k] = c * vpk - sn * vqk;
                        Vq[k] = sn * vpk + c * vqk;
                    }
                }
            }
    }
    for (p = 0; p < n; p++)                 /* V^T -> V */
        for (q = p + 1; q < n; q++) {
            const double tv = V[p * n + q];
            V[p * n + q] = V[q * n + p];
            V[q * n + p] = tv;
        }
}

/* out = [w (ascending) | V (columns, row-major)], reading A's lower
 * triangle; each eigenvector's largest-magnitude component (the first of
 * equal ones) is made positive -- the convention the reference replay
 * applies to numpy's result too.  Non-finite A -> all nan. */
static void eigh_forward(double *out, const double *A, double *S, double *Vt, int64_t n)
{
    double *w = out, *V = out + n;
    int64_t i, j, k;
    for (i = 0; i < n; i++)
        for (j = 0; j <= i; j++)
            S[i * n + j] = S[j * n + i] = A[i * n + j];
    jacobi_eigh(S, Vt, n);
    for (i = 0; i < n * n; i++)
        if (!(fabs(Vt[i]) < INFINITY) || !(fabs(S[i]) < INFINITY)) {
            rt_lfill(out, NAN, n + n * n);
            return;
        }
    /* selection sort of the eigenvalues (stable, ascending), columns along */
    for (j = 0; j < n; j++)
        w[j] = S[j * n + j];
    for (j = 0; j < n; j++) {
        int64_t m = j;
        for (k = j + 1; k < n; k++)
            if (w[k] < w[m])
                m = k;
        if (m != j) {
            const double tw = w[j];
            w[j] = w[m];
            w[m] = tw;
            for (i = 0; i < n; i++) {
                const double tv = Vt[i * n + j];
                Vt[i * n + j] = Vt[i * n + m];
                Vt[i * n + m] = tv;
            }
        }
    }
    for (j = 0; j < n; j++) {
        int64_t m = 0;
        for (i = 1; i < n; i++)
            if (fabs(Vt[i * n + j]) > fabs(Vt[m * n + j]))
                m = i;
        for (i = 0; i < n; i++)
            V[i * n + j] = Vt[m * n + j] < 0.0 ? -Vt[i * n + j] : Vt[i * n + j];
    }
}

/* M[i, j] = B[i, j] / (w[j] - w[i]) off the diagonal, diag[i] on it; an
 * exactly zero B[i, j] gives 0 even for equal eigenvalues (azmul), so
 * functions of the eigenvalues alone have finite gradients at degenerate
 * points (the identity) */
static void eigh_weights(double *M, const double *B, const double *w, const double *diag,
                         int64_t n)
{
    int64_t i, j;
    for (i = 0; i < n; i++)
        for (j = 0; j < n; j++)
            M[i * n + j] = i == j ? (diag ? diag[i] : 0.0)
                                  : B[i * n + j] == 0.0 ? 0.0 : B[i * n + j] / (w[j] - w[i]);
}

RT_LA_FWD(EIGH)
{
    const int64_t N = rec[0];
    double *S = v + rec[3];
    if (la_blas(rec, RT_BLAS_DSYEVD) && eigh_forward_blas(v + o, v + a, S, N) == 0)
        return;
    eigh_forward(v + o, v + a, S, S + N * N, N);   /* (also when dsyevd had no memory) */
}

RT_LA_REV(EIGH)
{
    const int64_t N = rec[0];
    double *S = v + rec[3];
    int64_t i, k;
    /* A-bar = V (diag(w-bar) + F o (V^T V-bar)) V^T, F[i, j] = 1/(w[j] - w[i]),
     * folded onto the lower triangle that was read */
    const double *w = v + o, *V = v + o + N;
    double *C = S, *M = S + N * N, *T = S + 2 * N * N;
    if (!(fl & 1))
        return;
    if (la_blas(rec, RT_BLAS_DGEMM)) {
        rt_blas_gemm(1, 0, N, N, N, 1.0, V, N, d + o + N, N, 0.0, C, N);
        eigh_weights(M, C, w, d + o, N);
        rt_blas_gemm(0, 0, N, N, N, 1.0, V, N, M, N, 0.0, T, N);
        rt_blas_gemm(0, 1, N, N, N, 1.0, T, N, V, N, 0.0, C, N);     /* A-bar = V M V^T */
        for (i = 0; i < N; i++)
            for (k = 0; k <= i; k++)
                d[a + i * N + k] += i == k ? C[i * N + k] : C[i * N + k] + C[k * N + i];
        return;
    }
    matTmul(C, V, d + o + N, N);
    eigh_weights(M, C, w, d + o, N);
    matmul_nn(T, V, M, N);              /* T = V M; A-bar = T V^T */
    for (i = 0; i < N; i++)         /* lower triangle: A-bar[i,k] + A-bar[k,i] */
        for (k = 0; k <= i; k++) {
            const double aik = rt_ldot(T + i * N, V + k * N, N);
            d[a + i * N + k] += i == k ? aik : aik + rt_ldot(T + k * N, V + i * N, N);
        }
}

RT_LA_TAN(EIGH)
{
    const int64_t N = rec[0];
    double *S = v + rec[3];
    int64_t i, k;
    /* B = V^T As V, As the symmetric matrix of A-dot's lower triangle;
     * w-dot = diag(B), V-dot = V (F o B) */
    const double *w = v + o, *V = v + o + N, *Ad = t + a;
    double *As = S, *T = S + N * N, *B = S + 2 * N * N;
    if (!(fl & 1)) {
        rt_lfill(t + o, 0.0, N + N * N);
        return;
    }
    for (i = 0; i < N; i++)
        for (k = 0; k < N; k++)
            As[i * N + k] = i >= k ? Ad[i * N + k] : Ad[k * N + i];
    matmul_nn(T, As, V, N);
    matTmul(B, V, T, N);
    for (i = 0; i < N; i++)
        t[o + i] = B[i * N + i];
    eigh_weights(T, B, w, NULL, N);
    matmul_nn(t + o + N, V, T, N);
}

#endif
