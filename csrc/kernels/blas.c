/* The BLAS/LAPACK slots and their row-major wrappers (blas.h). */
#include <stdlib.h>
#include "kernels/blas.h"
#include "vm.h"

typedef void (*rt_dgemm_t)(char *, char *, int *, int *, int *, double *, double *, int *,
                           double *, int *, double *, double *, int *);
typedef void (*rt_dtrxm_t)(char *, char *, char *, char *, int *, int *, double *, double *,
                           int *, double *, int *);
typedef void (*rt_dpotrf_t)(char *, int *, double *, int *, int *);
typedef void (*rt_dgetrf_t)(int *, int *, double *, int *, int *, int *);
typedef void (*rt_dsygst_t)(int *, char *, int *, double *, int *, double *, int *, int *);
typedef void (*rt_dsyevd_t)(char *, char *, int *, double *, int *, double *, double *, int *,
                            int *, int *, int *);

/* Filled once by rt_blas_set before any program that uses them is
 * compiled; never cleared (a replay reads a slot that does not change). */
static void *rt_blas_slots[RT_BLAS_NSLOTS];

int rt_blas_set(int32_t slot, void *fn)
{
    if (slot < 0 || slot >= RT_BLAS_NSLOTS || fn == NULL)
        return RT_BADARG;
    if (rt_blas_slots[slot] != NULL && rt_blas_slots[slot] != fn)
        return RT_BADARG;               /* one routine per slot for the process */
    __atomic_store_n(&rt_blas_slots[slot], fn, __ATOMIC_RELEASE);
    return RT_OK;
}

int rt_blas_has(int s)
{
    return s >= 0 && s < RT_BLAS_NSLOTS && __atomic_load_n(&rt_blas_slots[s], __ATOMIC_ACQUIRE) != NULL;
}

int32_t rt_blas_slot_count(void)
{
    return RT_BLAS_NSLOTS;
}

void rt_blas_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha,
                  const double *A, int64_t lda, const double *B, int64_t ldb, double beta,
                  double *C, int64_t ldc)
{
    /* row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T:
     * the operands swap, the transposition flags stay */
    char ca = ta ? 'T' : 'N', cb = tb ? 'T' : 'N';
    int m = (int)N, n = (int)M, k = (int)K, la = (int)lda, lb = (int)ldb, lc = (int)ldc;
    ((rt_dgemm_t)rt_blas_slots[RT_BLAS_DGEMM])(&cb, &ca, &m, &n, &k, &alpha, (double *)B, &lb,
                                               (double *)A, &la, &beta, C, &lc);
}

/* Row-major X op= op(T)^(+-1) on one side is the column-major X^T on the
 * other side with T^T: side and triangle swap, the transposition stays. */
static void rt_blas_trxm(int slot, int left, int lower, int trans, int unit, int64_t m,
                         int64_t n, const double *T, int64_t ldt, double *X, int64_t ldx)
{
    char side = left ? 'R' : 'L', uplo = lower ? 'U' : 'L', tr = trans ? 'T' : 'N';
    char diag = unit ? 'U' : 'N';
    int mm = (int)n, nn = (int)m, lt = (int)ldt, lx = (int)ldx;
    double one = 1.0;
    ((rt_dtrxm_t)rt_blas_slots[slot])(&side, &uplo, &tr, &diag, &mm, &nn, &one, (double *)T,
                                      &lt, X, &lx);
}

void rt_blas_trsm(int left, int lower, int trans, int unit, int64_t m, int64_t n,
                  const double *T, int64_t ldt, double *X, int64_t ldx)
{
    rt_blas_trxm(RT_BLAS_DTRSM, left, lower, trans, unit, m, n, T, ldt, X, ldx);
}

void rt_blas_trmm(int left, int lower, int trans, int unit, int64_t m, int64_t n,
                  const double *T, int64_t ldt, double *X, int64_t ldx)
{
    rt_blas_trxm(RT_BLAS_DTRMM, left, lower, trans, unit, m, n, T, ldt, X, ldx);
}

int rt_blas_potrf_lower(double *A, int64_t n)
{
    /* the row-major lower triangle is the column-major upper one, and
     * A = U^T U there is A = L L^T with L = U^T here */
    char uplo = 'U';
    int nn = (int)n, info = 0;
    ((rt_dpotrf_t)rt_blas_slots[RT_BLAS_DPOTRF])(&uplo, &nn, A, &nn, &info);
    return info;
}

int rt_blas_getrf_t(double *A, int64_t n, int *ipiv)
{
    int nn = (int)n, info = 0, k;
    ((rt_dgetrf_t)rt_blas_slots[RT_BLAS_DGETRF])(&nn, &nn, A, &nn, ipiv, &info);
    for (k = 0; k < nn; k++)
        ipiv[k] -= 1;
    return info;
}

int rt_blas_sygst_lower(double *A, const double *L, int64_t n)
{
    char uplo = 'L';
    int itype = 1, nn = (int)n, info = 0;
    ((rt_dsygst_t)rt_blas_slots[RT_BLAS_DSYGST])(&itype, &uplo, &nn, A, &nn, (double *)L, &nn,
                                                 &info);
    return info;
}

int rt_blas_syevd_lower(double *A, double *w, int64_t n)
{
    char jobz = 'V', uplo = 'U';
    int nn = (int)n, info = 0;
    /* the documented minimum work spaces for jobz = 'V' */
    int lwork = (int)(1 + 6 * n + 2 * n * n), liwork = (int)(3 + 5 * n);
    double *work = malloc(sizeof(double) * (size_t)lwork);
    int *iwork = malloc(sizeof(int) * (size_t)liwork);
    if (work == NULL || iwork == NULL) {
        free(work);
        free(iwork);
        return -1000;
    }
    ((rt_dsyevd_t)rt_blas_slots[RT_BLAS_DSYEVD])(&jobz, &uplo, &nn, A, &nn, w, work, &lwork,
                                                 iwork, &liwork, &info);
    free(work);
    free(iwork);
    return info;
}
