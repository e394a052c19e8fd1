/* Dense kernels the linear-algebra instructions share: dot products with
 * four accumulators (a fixed summation order), axpy, fill, square products.
 * A section of linalg.c's translation unit (its pragmas and RT_CLONES apply).
 */
#ifndef REVTAPE_LINALG_DENSE_H
#define REVTAPE_LINALG_DENSE_H

static double rt_ldot(const double *restrict x, const double *restrict y, int64_t n)
{
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int64_t k;
    for (k = 0; k + 4 <= n; k += 4) {
        s0 += x[k] * y[k];
        s1 += x[k + 1] * y[k + 1];
        s2 += x[k + 2] * y[k + 2];
        s3 += x[k + 3] * y[k + 3];
    }
    for (; k < n; k++)
        s0 += x[k] * y[k];
    return (s0 + s1) + (s2 + s3);
}

static void rt_laxpy(double *restrict y, double alpha, const double *restrict x, int64_t n)
{
    int64_t k;
    for (k = 0; k < n; k++)
        y[k] += alpha * x[k];
}

static void rt_lfill(double *x, double value, int64_t n)
{
    int64_t k;
    for (k = 0; k < n; k++)
        x[k] = value;
}

/* C = X^T Y (n x n) */
static void matTmul(double *C, const double *X, const double *Y, int64_t n)
{
    int64_t i, k;
    rt_lfill(C, 0.0, n * n);
    for (k = 0; k < n; k++)
        for (i = 0; i < n; i++)
            rt_laxpy(C + i * n, X[k * n + i], Y + k * n, n);
}

/* C = X Y (n x n) */
static void matmul_nn(double *C, const double *X, const double *Y, int64_t n)
{
    int64_t i, k;
    rt_lfill(C, 0.0, n * n);
    for (i = 0; i < n; i++)
        for (k = 0; k < n; k++)
            rt_laxpy(C + i * n, X[i * n + k], Y + k * n, n);
}

#endif
