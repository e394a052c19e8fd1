/* MATMUL: ints[c..c+4) = (M, K, N, blas); out[M*N] = a[M*K] @ b[K*N],
 * row-major, n = M*N.  out overlaps neither operand (verified).  blas = 1:
 * the products run through BLAS's dgemm where the VM holds it (the
 * compiler sets it for large products, kernels/blas.h), else through the
 * loops below; the native tier leaves such an instruction to the VM.
 * Inner loops are
 * contiguous so that gcc -O2 vectorises the axpy form; the matrix-vector
 * case (N == 1, logistic regression) is a dot per row with four
 * accumulators instead of N-long axpys of length 1.  Plain products, like
 * the reference replay's matmul rule: a zero adjoint or tangent times an
 * infinite operand does give nan here. */

/* a[0..K) . b[0..K) with four accumulators (kernels.h) */
#define rt_dot4 rt_k_dot4

/* 1: this instruction's products go to dgemm (only in the VM's own build) */
#ifdef RT_VM_BLAS
#include "kernels/blas.h"
static inline int rt_matmul_blas(const int32_t *ints, int64_t c)
{
    return ints[c + 3] == 1 && ints[c] > 0 && ints[c + 1] > 0 && ints[c + 2] > 0
           && rt_blas_has(RT_BLAS_DGEMM);
}
#else
#define rt_matmul_blas(ints, c) 0
#endif

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
    if (rt_matmul_blas(ints, c)) {
        rt_blas_gemm(0, 0, M, N, K, 1.0, v + a, K, v + b, N, 0.0, v + o, N);
        return;
    }
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
    if (rt_matmul_blas(ints, c)) {
        if (fl & 1)
            rt_blas_gemm(0, 1, M, K, N, 1.0, G, N, B, N, 1.0, d + a, K);
        if (fl & 2)
            rt_blas_gemm(1, 0, K, N, M, 1.0, A, K, G, N, 1.0, d + b, N);
        return;
    }
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
    if (rt_matmul_blas(ints, c)) {
        double beta = 0.0;
        if (fl & 1) {
            rt_blas_gemm(0, 0, M, N, K, 1.0, t + a, K, v + b, N, 0.0, t + o, N);
            beta = 1.0;
        }
        if (fl & 2)
            rt_blas_gemm(0, 0, M, N, K, 1.0, v + a, K, t + b, N, beta, t + o, N);
        else if (!(fl & 1))
            for (i = 0; i < n; i++)
                t[o + i] = 0.0;
        return;
    }
    for (i = 0; i < n; i++)
        t[o + i] = 0.0;
    if (fl & 1)
        rt_matmul_acc(t + o, t + a, v + b, M, K, N);
    if (fl & 2)
        rt_matmul_acc(t + o, v + a, t + b, M, K, N);
}

/* The shape record and its BLAS word, and operand lengths M*K and K*N. */
RT_VERIFY_FN(MATMUL)
{
    const rt_program *p = vc->p;
    const int64_t n = w[1], c = w[5];
    int64_t M, K, N;
    if (!rt_vints(vc, "shape (M, K, N) and BLAS word", c, 4))
        return 0;
    M = p->ints[c]; K = p->ints[c + 1]; N = p->ints[c + 2];
    if (p->ints[c + 3] != 0 && p->ints[c + 3] != 1)
        return rt_vfail(vc, "BLAS word %lld is neither 0 nor 1", (long long)p->ints[c + 3]);
    if (M < 0 || K < 0 || N < 0)
        return rt_vfail(vc, "negative shape (%lld, %lld, %lld)", (long long)M, (long long)K, (long long)N);
    if (M * N != n)
        return rt_vfail(vc, "n = %lld is not M*N = %lld*%lld", (long long)n, (long long)M, (long long)N);
    len->a = M * K;
    len->b = K * N;
    return 1;
}
