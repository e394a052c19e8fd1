/* MATMUL: ints[c..c+3) = (M, K, N); out[M*N] = a[M*K] @ b[K*N], row-major,
 * n = M*N.  out overlaps neither operand (verified).  Inner loops are
 * contiguous so that gcc -O2 vectorises the axpy form; the matrix-vector
 * case (N == 1, logistic regression) is a dot per row with four
 * accumulators instead of N-long axpys of length 1.  Plain products, like
 * the reference replay's matmul rule: a zero adjoint or tangent times an
 * infinite operand does give nan here. */

/* a[0..K) . b[0..K) with four accumulators (kernels.h) */
#define rt_dot4 rt_k_dot4

/* out += A @ B (M x K times K x N); the forward zeroes out first. */
static inline void rt_matmul_acc(double *out, const double *A, const double *B,
                                 int64_t M, int64_t K, int64_t N)
{
    int64_t i, j, k;
    if (N == 1) {
        for (i = 0; i < M; i++)
            out[i] += rt_dot4(A + i * K, B, K);
        return;
    }
    for (i = 0; i < M; i++)
        for (k = 0; k < K; k++) {
            const double aik = A[i * K + k];
            const double *bk = B + k * N;
            double *oi = out + i * N;
            for (j = 0; j < N; j++)
                oi[j] += aik * bk[j];
        }
}

RT_FWD(MATMUL)
{
    const int64_t M = ints[c], K = ints[c + 1], N = ints[c + 2];
    int64_t i;
    if (N == 1) {           /* = 0.0 + dot: a dot started at +0.0 is never -0.0 */
        rt_k_matvec(v + o, v + a, v + b, M, K);     /* kernels.c: rows split over threads */
        return;
    }
    for (i = 0; i < n; i++)
        v[o + i] = 0.0;
    rt_matmul_acc(v + o, v + a, v + b, M, K, N);
}

/* dA += G @ B^T, dB += A^T @ G (G is M x N).  The N == 1 loops add each
 * product straight in (the general loops' 0.0 + product would turn a -0.0
 * contribution into +0.0). */
RT_REV(MATMUL)
{
    const int64_t M = ints[c], K = ints[c + 1], N = ints[c + 2];
    const double *G = d + o, *A = v + a, *B = v + b;
    int64_t i, j, k;
    if (fl & 1) {
        double *dA = d + a;
        if (N == 1) {
            for (i = 0; i < M; i++) {       /* dA[i, :] += G[i] * B */
                const double gi = G[i];
                double *dai = dA + i * K;
                for (k = 0; k < K; k++)
                    dai[k] += gi * B[k];
            }
        } else {
            for (i = 0; i < M; i++) {       /* dA[i, k] += G[i, :] . B[k, :] */
                const double *gi = G + i * N;
                for (k = 0; k < K; k++) {
                    const double *bk = B + k * N;
                    double s = 0.0;
                    for (j = 0; j < N; j++)
                        s += gi[j] * bk[j];
                    dA[i * K + k] += s;
                }
            }
        }
    }
    if (fl & 2) {
        double *dB = d + b;
        if (N == 1) {                       /* dB += G[i] * A[i, :], kernels.c */
            rt_k_matvec_t_acc(dB, A, G, M, K);
        } else {
            for (i = 0; i < M; i++) {       /* dB[k, :] += A[i, k] * G[i, :] */
                const double *gi = G + i * N;
                for (k = 0; k < K; k++) {
                    const double aik = A[i * K + k];
                    double *dbk = dB + k * N;
                    for (j = 0; j < N; j++)
                        dbk[j] += aik * gi[j];
                }
            }
        }
    }
}

RT_TAN(MATMUL)
{
    const int64_t M = ints[c], K = ints[c + 1], N = ints[c + 2];
    int64_t i;
    for (i = 0; i < n; i++)
        t[o + i] = 0.0;
    if (fl & 1)
        rt_matmul_acc(t + o, t + a, v + b, M, K, N);
    if (fl & 2)
        rt_matmul_acc(t + o, v + a, t + b, M, K, N);
}

/* The shape record, and operand lengths M*K and K*N. */
RT_VERIFY_FN(MATMUL)
{
    const rt_program *p = vc->p;
    const int64_t n = w[1], c = w[5];
    int64_t M, K, N;
    if (!rt_vints(vc, "shape (M, K, N)", c, 3))
        return 0;
    M = p->ints[c]; K = p->ints[c + 1]; N = p->ints[c + 2];
    if (M < 0 || K < 0 || N < 0)
        return rt_vfail(vc, "negative shape (%lld, %lld, %lld)", (long long)M, (long long)K, (long long)N);
    if (M * N != n)
        return rt_vfail(vc, "n = %lld is not M*N = %lld*%lld", (long long)n, (long long)M, (long long)N);
    len->a = M * K;
    len->b = K * N;
    return 1;
}
