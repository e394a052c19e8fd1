/* Dense linear algebra for the VM (see linalg.h for the instruction records).
 *
 * Written for row-major storage: inner loops run along rows (contiguous), as
 * dot products with four accumulators or as axpys that gcc -O2 vectorises.
 * Unblocked level-2 algorithms: for n up to a few hundred the matrices fit
 * in L2 and the flop counts are the textbook minimum (Cholesky n^3/3, its
 * reverse 2n^3/3).
 *
 * Reverse-mode conventions:
 *   - CHOLESKY and EIGH read A's lower triangle only (as numpy's LAPACK
 *     calls do), so their gradients are the exact ones of that function:
 *     zero above the diagonal, S + S^T below it for Murray's (2016) S (JAX
 *     and autograd symmetrise instead: (S + S^T)/2 on both sides; the two
 *     agree along symmetric perturbations).  The Cholesky reverse runs the
 *     forward algorithm backwards (one pass, 2n^3/3 flops); the tangent
 *     runs it forwards.
 *   - Matrix products use plain multiplies (like MATMUL): a zero adjoint
 *     times an infinite or nan value gives nan.
 *   - Failed factorizations make nan results (see linalg.h); their
 *     adjoints and tangents are nan as well.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* gcc's -O2 cost model (12+: "very cheap") leaves loops that need an alias
 * check or a remainder loop scalar -- every axpy and dot here.  These
 * kernels are all such loops, so this file asks for -O3's vectoriser.  No
 * fast-math: the dot products' four accumulators fix the summation order. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

/* The O(n^3) kernels are also compiled for AVX2 (4 doubles a vector instead
 * of SSE2's 2), chosen at load time by the CPU (gcc's target_clones, an
 * ifunc: x86-64 Linux with glibc).  No FMA: -std=c99 keeps contraction off,
 * so both clones round alike. -DRT_NO_CLONES turns this off. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) \
    && defined(__GLIBC__) && !defined(RT_NO_CLONES)
#define RT_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define RT_CLONES
#endif

#include "instr/linalg/linalg.h"
#include "generated/ops_generated.h"

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

/* ------------------------------------------------------------------ Cholesky */

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

/* ------------------------------------------------------------------ triangular solves */

/* X := op(L)^-1 X in place, X n x m; op(L) = L or L^T; only L's `lower`
 * (else upper) triangle is read, and its diagonal only if !unit. */
RT_CLONES static void tri_solve(const double *L, double *X, int64_t n, int64_t m, int lower, int trans,
                      int unit)
{
    int64_t i, k;
    if (!trans) {
        if (lower) {
            for (i = 0; i < n; i++) {
                const double *li = L + i * n;
                double *xi = X + i * m;
                if (m == 1) {
                    xi[0] -= rt_ldot(li, X, i);
                } else {
                    for (k = 0; k < i; k++)
                        rt_laxpy(xi, -li[k], X + k * m, m);
                }
                if (!unit)
                    for (k = 0; k < m; k++)
                        xi[k] /= li[i];
            }
        } else {
            for (i = n - 1; i >= 0; i--) {
                const double *li = L + i * n;
                double *xi = X + i * m;
                if (m == 1) {
                    xi[0] -= rt_ldot(li + i + 1, X + i + 1, n - i - 1);
                } else {
                    for (k = i + 1; k < n; k++)
                        rt_laxpy(xi, -li[k], X + k * m, m);
                }
                if (!unit)
                    for (k = 0; k < m; k++)
                        xi[k] /= li[i];
            }
        }
    } else {
        /* op(L)[i, k] = L[k, i]: finish row i of X, then take it out of the
         * rows still to come, reading row i of L (contiguous). */
        if (lower) {                        /* L^T is upper: last row first */
            for (i = n - 1; i >= 0; i--) {
                const double *li = L + i * n;
                double *xi = X + i * m;
                if (!unit)
                    for (k = 0; k < m; k++)
                        xi[k] /= li[i];
                if (m == 1) {
                    const double xv = xi[0];
                    for (k = 0; k < i; k++)
                        X[k] -= li[k] * xv;
                } else {
                    for (k = 0; k < i; k++)
                        rt_laxpy(X + k * m, -li[k], xi, m);
                }
            }
        } else {
            for (i = 0; i < n; i++) {
                const double *li = L + i * n;
                double *xi = X + i * m;
                if (!unit)
                    for (k = 0; k < m; k++)
                        xi[k] /= li[i];
                if (m == 1) {
                    const double xv = xi[0];
                    for (k = i + 1; k < n; k++)
                        X[k] -= li[k] * xv;
                } else {
                    for (k = i + 1; k < n; k++)
                        rt_laxpy(X + k * m, -li[k], xi, m);
                }
            }
        }
    }
}

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

static int tri_has_zero_diagonal(const double *L, int64_t n)
{
    int64_t i;
    for (i = 0; i < n; i++)
        if (L[i * n + i] == 0.0)
            return 1;
    return 0;
}

static int in_triangle(int64_t i, int64_t k, int lower, int unit)
{
    if (i == k)
        return !unit;
    return lower ? k < i : k > i;
}

/* ------------------------------------------------------------------ LU with partial pivoting */

/* LU := P A = L U (unit L below the diagonal, U on and above); piv[k] = the
 * row swapped with row k at step k.  Returns 1 when a pivot is exactly 0. */
RT_CLONES static int lu_factor(double *LU, double *piv, int64_t n)
{
    int64_t i, j, k;
    int singular = 0;
    for (k = 0; k < n; k++) {
        int64_t p = k;
        double best = fabs(LU[k * n + k]), pk;
        for (i = k + 1; i < n; i++)
            if (fabs(LU[i * n + k]) > best) {
                best = fabs(LU[i * n + k]);
                p = i;
            }
        piv[k] = (double)p;
        if (p != k)
            for (j = 0; j < n; j++) {
                const double tmp = LU[k * n + j];
                LU[k * n + j] = LU[p * n + j];
                LU[p * n + j] = tmp;
            }
        pk = LU[k * n + k];
        if (pk == 0.0) {
            singular = 1;
            continue;
        }
        for (i = k + 1; i < n; i++) {
            const double l = LU[i * n + k] / pk;
            LU[i * n + k] = l;
            rt_laxpy(LU + i * n + k + 1, -l, LU + k * n + k + 1, n - k - 1);
        }
    }
    return singular;
}

static int lu_singular(const double *LU, int64_t n)
{
    return tri_has_zero_diagonal(LU, n);
}

static void swap_rows(double *X, int64_t r, int64_t s, int64_t m)
{
    int64_t j;
    for (j = 0; j < m; j++) {
        const double tmp = X[r * m + j];
        X[r * m + j] = X[s * m + j];
        X[s * m + j] = tmp;
    }
}

/* The pivots are row numbers kept as doubles in the value arena between the
 * forward and the reverse sweep, where another instruction of a crafted
 * program may overwrite them (the verifier checks offsets, not data): a row
 * is swapped only after its number was checked. */
static int lu_pivots_ok(const double *piv, int64_t n)
{
    int64_t k;
    for (k = 0; k < n; k++)
        if (!(piv[k] >= 0.0 && piv[k] < (double)n))
            return 0;
    return 1;
}

/* X := A^-1 X (trans 0) or A^-T X (trans 1) from lu_factor's result. */
RT_CLONES static void lu_solve(const double *LU, const double *piv, double *X, int64_t n, int64_t m,
                     int trans)
{
    int64_t k;
    if (!lu_pivots_ok(piv, n)) {
        for (k = 0; k < n * m; k++)
            X[k] = NAN;
        return;
    }
    if (!trans) {
        for (k = 0; k < n; k++)
            if ((int64_t)piv[k] != k)
                swap_rows(X, k, (int64_t)piv[k], m);
        tri_solve(LU, X, n, m, 1, 0, 1);
        tri_solve(LU, X, n, m, 0, 0, 0);
    } else {
        tri_solve(LU, X, n, m, 0, 1, 0);    /* U^T */
        tri_solve(LU, X, n, m, 1, 1, 1);    /* L^T, unit */
        for (k = n - 1; k >= 0; k--)
            if ((int64_t)piv[k] != k)
                swap_rows(X, k, (int64_t)piv[k], m);
    }
}

/* Out = A^-1 from the factors; all nan when singular. */
static void lu_inverse(const double *LU, const double *piv, double *Out, int64_t n)
{
    int64_t i;
    if (lu_singular(LU, n)) {
        rt_lfill(Out, NAN, n * n);
        return;
    }
    rt_lfill(Out, 0.0, n * n);
    for (i = 0; i < n; i++)
        Out[i * n + i] = 1.0;
    lu_solve(LU, piv, Out, n, n, 0);
}

/* ------------------------------------------------------------------ symmetric eigenproblem */

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

/* ------------------------------------------------------------------ the instruction records */

int rt_linalg_lengths(int op, const int32_t *rec, int64_t n, int64_t *la, int64_t *lb,
                      int64_t *scratch, int64_t *ls, char *why, int64_t why_len)
{
    const int64_t N = rec[0], M = rec[1], flags = rec[2];
    int64_t out, square, max_flags;
    *scratch = rec[3];
    if (N < 0 || M < 0) {
        snprintf(why, (size_t)why_len, "negative shape (N %lld, M %lld)", (long long)N,
                 (long long)M);
        return 1;
    }
    /* each kernel's lengths are its op row's (ops.Linalg), generated */
    switch (op) {
#define RT_LENGTHS_(NAME, A, B, OUT, SCRATCH, SQUARE, FLAGS) \
    case RT_OP_##NAME: \
        *la = (A); *lb = (B); out = (OUT); *ls = (SCRATCH); \
        square = (SQUARE); max_flags = (FLAGS); \
        break;
    RT_LINALG_LENGTHS(RT_LENGTHS_)
#undef RT_LENGTHS_
    default:
        snprintf(why, (size_t)why_len, "not a linear-algebra opcode");
        return 1;
    }
    if (flags < 0 || flags > max_flags) {
        snprintf(why, (size_t)why_len, "bad flags %lld", (long long)flags);
        return 1;
    }
    if (square && M != N) {
        snprintf(why, (size_t)why_len, "M = %lld must equal N = %lld", (long long)M, (long long)N);
        return 1;
    }
    if (out != n) {
        snprintf(why, (size_t)why_len, "n = %lld, but the shape (N %lld, M %lld) makes %lld",
                 (long long)n, (long long)N, (long long)M, (long long)out);
        return 1;
    }
    return 0;
}

void rt_linalg_forward(int op, double *v, const int32_t *rec, int64_t o, int64_t a, int64_t b)
{
    const int64_t N = rec[0], M = rec[1];
    const int flags = rec[2];
    double *S = v + rec[3];
    int64_t s, i;
    switch (op) {
    case RT_OP_CUMSUM:
        cumsum_rows(v + o, v + a, N, M);
        break;
    case RT_OP_CUMPROD:
        for (s = 0; s < N; s++) {
            const double *x = v + a + s * M;
            double *y = v + o + s * M;
            if (M > 0)
                y[0] = x[0];
            for (i = 1; i < M; i++)
                y[i] = y[i - 1] * x[i];
        }
        break;
    case RT_OP_CHOLESKY:
        chol_forward(v + o, v + a, N);
        break;
    case RT_OP_EIGH:
        eigh_forward(v + o, v + a, S, S + N * N, N);
        break;
    case RT_OP_TRISOLVE:
        if (!(flags & RT_TRI_UNIT) && tri_has_zero_diagonal(v + a, N)) {
            rt_lfill(v + o, NAN, N * M);
            break;
        }
        memcpy(v + o, v + b, (size_t)(N * M) * sizeof(double));
        tri_solve(v + a, v + o, N, M, flags & RT_TRI_LOWER, (flags & RT_TRI_TRANS) != 0,
                  (flags & RT_TRI_UNIT) != 0);
        break;
    case RT_OP_SOLVE:
        memcpy(S, v + a, (size_t)(N * N) * sizeof(double));
        if (lu_factor(S, S + N * N, N)) {
            rt_lfill(v + o, NAN, N * M);
            break;
        }
        memcpy(v + o, v + b, (size_t)(N * M) * sizeof(double));
        lu_solve(S, S + N * N, v + o, N, M, 0);
        break;
    case RT_OP_INV:
        memcpy(S, v + a, (size_t)(N * N) * sizeof(double));
        lu_factor(S, S + N * N, N);
        lu_inverse(S, S + N * N, v + o, N);
        break;
    case RT_OP_SLOGDET: {
        /* numpy: sign 0 and -inf for a zero pivot; otherwise the sign of the
         * permutation times the signs of U's diagonal, and sum log|u_kk|. */
        double sign = 1.0, logdet = 0.0;
        int64_t k;
        memcpy(S, v + a, (size_t)(N * N) * sizeof(double));
        if (lu_factor(S, S + N * N, N)) {
            v[o] = 0.0;
            v[o + 1] = -INFINITY;
            break;
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
        break;
    }
    default:
        break;
    }
}

void rt_linalg_reverse(int op, uint32_t fl, double *v, double *d, const int32_t *rec,
                       int64_t o, int64_t a, int64_t b)
{
    const int64_t N = rec[0], M = rec[1];
    const int flags = rec[2];
    double *S = v + rec[3];
    int64_t i, k, s;
    switch (op) {
    case RT_OP_CUMSUM:
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
        break;
    case RT_OP_CUMPROD:
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
        break;
    case RT_OP_CHOLESKY:
        if (fl & 1)
            chol_reverse(d + a, v + o, d + o, S, N);
        break;
    case RT_OP_EIGH: {
        /* A-bar = V (diag(w-bar) + F o (V^T V-bar)) V^T, F[i, j] = 1/(w[j] - w[i]),
         * folded onto the lower triangle that was read */
        const double *w = v + o, *V = v + o + N;
        double *C = S, *M = S + N * N, *T = S + 2 * N * N;
        if (!(fl & 1))
            break;
        matTmul(C, V, d + o + N, N);
        eigh_weights(M, C, w, d + o, N);
        matmul_nn(T, V, M, N);              /* T = V M; A-bar = T V^T */
        for (i = 0; i < N; i++)         /* lower triangle: A-bar[i,k] + A-bar[k,i] */
            for (k = 0; k <= i; k++) {
                const double aik = rt_ldot(T + i * N, V + k * N, N);
                d[a + i * N + k] += i == k ? aik : aik + rt_ldot(T + k * N, V + i * N, N);
            }
        break;
    }
    case RT_OP_TRISOLVE: {
        /* B-bar = op(L)^-T X-bar; L-bar = -(B-bar X^T) (transposed for op =
         * L^T) on L's triangle. */
        const int lower = flags & RT_TRI_LOWER, trans = (flags & RT_TRI_TRANS) != 0;
        const int unit = (flags & RT_TRI_UNIT) != 0;
        const double *X = v + o;
        memcpy(S, d + o, (size_t)(N * M) * sizeof(double));
        tri_solve(v + a, S, N, M, lower, !trans, unit);
        if (fl & 2)
            for (k = 0; k < N * M; k++)
                d[b + k] += S[k];
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
        break;
    }
    case RT_OP_SOLVE: {
        /* B-bar = A^-T X-bar; A-bar = -B-bar X^T */
        double *T = S + N * N + N;
        const double *X = v + o;
        memcpy(T, d + o, (size_t)(N * M) * sizeof(double));
        if (lu_singular(S, N))
            rt_lfill(T, NAN, N * M);
        else
            lu_solve(S, S + N * N, T, N, M, 1);
        if (fl & 2)
            for (k = 0; k < N * M; k++)
                d[b + k] += T[k];
        if (fl & 1)
            for (i = 0; i < N; i++)
                for (k = 0; k < N; k++)
                    d[a + i * N + k] -= rt_ldot(T + i * M, X + k * M, M);
        break;
    }
    case RT_OP_INV: {
        /* A-bar = -X^T G X^T: T = X^T G, then A-bar[i, k] = -T[i, :] . X[k, :] */
        double *T = S + N * N + N;
        const double *X = v + o, *G = d + o;
        if (!(fl & 1))
            break;
        rt_lfill(T, 0.0, N * N);
        for (k = 0; k < N; k++)
            for (i = 0; i < N; i++)
                rt_laxpy(T + i * N, X[k * N + i], G + k * N, N);
        for (i = 0; i < N; i++)
            for (k = 0; k < N; k++)
                d[a + i * N + k] -= rt_ldot(T + i * N, X + k * N, N);
        break;
    }
    case RT_OP_SLOGDET: {
        /* d logabsdet / dA = A^-T; the sign has no derivative. */
        double *T = S + N * N + N;
        const double g = d[o + 1];
        if (!(fl & 1) || g == 0.0)
            break;
        lu_inverse(S, S + N * N, T, N);
        for (i = 0; i < N; i++)
            for (k = 0; k < N; k++)
                d[a + i * N + k] += g * T[k * N + i];
        break;
    }
    default:
        break;
    }
}

void rt_linalg_tangent(int op, uint32_t fl, double *v, double *t, const int32_t *rec,
                       int64_t o, int64_t a, int64_t b)
{
    const int64_t N = rec[0], M = rec[1];
    const int flags = rec[2];
    double *S = v + rec[3];
    int64_t i, k, s;
    switch (op) {
    case RT_OP_CUMSUM:
        cumsum_rows(t + o, t + a, N, M);     /* linear: the tangent is the cumsum of tangents */
        break;
    case RT_OP_CUMPROD:
        /* T[i] = T[i-1] x[i] + y[i-1] xdot[i] */
        for (s = 0; s < N; s++) {
            const double *tx = t + a + s * M, *x = v + a + s * M, *y = v + o + s * M;
            double *ty = t + o + s * M;
            if (M > 0)
                ty[0] = tx[0];
            for (i = 1; i < M; i++)
                ty[i] = ty[i - 1] * x[i] + y[i - 1] * tx[i];
        }
        break;
    case RT_OP_CHOLESKY:
        if (fl & 1)
            chol_tangent(t + o, v + o, t + a, N);
        else
            rt_lfill(t + o, 0.0, N * N);
        break;
    case RT_OP_EIGH: {
        /* B = V^T As V, As the symmetric matrix of A-dot's lower triangle;
         * w-dot = diag(B), V-dot = V (F o B) */
        const double *w = v + o, *V = v + o + N, *Ad = t + a;
        double *As = S, *T = S + N * N, *B = S + 2 * N * N;
        if (!(fl & 1)) {
            rt_lfill(t + o, 0.0, N + N * N);
            break;
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
        break;
    }
    case RT_OP_TRISOLVE: {
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
        tri_solve(v + a, R, N, M, lower, trans, unit);
        break;
    }
    case RT_OP_SOLVE: {
        /* X-dot = A^-1 (B-dot - A-dot X) */
        const double *X = v + o, *Ad = t + a;
        double *R = t + o;
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
            lu_solve(S, S + N * N, R, N, M, 0);
        break;
    }
    case RT_OP_INV: {
        /* X-dot = -X A-dot X: T = A-dot X, then X-dot = -X T */
        double *T = S + N * N + N, *R = t + o;
        const double *X = v + o, *Ad = t + a;
        rt_lfill(T, 0.0, N * N);
        rt_lfill(R, 0.0, N * N);
        if (!(fl & 1))
            break;
        for (i = 0; i < N; i++)
            for (k = 0; k < N; k++)
                if (Ad[i * N + k] != 0.0)
                    rt_laxpy(T + i * N, Ad[i * N + k], X + k * N, N);
        for (i = 0; i < N; i++)
            for (k = 0; k < N; k++)
                rt_laxpy(R + i * N, -X[i * N + k], T + k * N, N);
        break;
    }
    case RT_OP_SLOGDET: {
        /* d logabsdet = trace(A^-1 A-dot) */
        double *T = S + N * N + N;
        double r = 0.0;
        t[o] = 0.0;
        if (fl & 1) {
            lu_inverse(S, S + N * N, T, N);
            for (i = 0; i < N; i++)
                for (k = 0; k < N; k++)
                    r += T[k * N + i] * t[a + i * N + k];
        }
        t[o + 1] = r;
        break;
    }
    default:
        break;
    }
}
