/* BLAS and LAPACK reached through function pointers that the Python side
 * hands over once (src/revtape/lower/blas.py: scipy.linalg.cython_blas and
 * cython_lapack's capsules).  The VM links no BLAS: a slot left NULL (no
 * scipy, REVTAPE_BLAS=off, a crafted program whose record asks for BLAS)
 * makes the caller run its own kernel.  An instruction uses these only when
 * its record says so (MATMUL's fourth int, the linear-algebra flags bit
 * RT_LA_BLAS), which the compiler sets only after the slots it needs are
 * filled: a program's path is fixed when it is compiled.
 *
 * The wrappers take row-major operands (the arenas' layout) and call the
 * column-major Fortran routines on the transposed problem, so no copy is
 * made.  LP64: the routines take int; every length here fits one (an arena
 * region is at most INT32_MAX values, checked by the verifier).
 * Only the VM's own build (-DRT_VM_BLAS) calls these; the native tier's
 * libraries leave every BLAS-flagged instruction to the VM's sweep. */
#ifndef REVTAPE_BLAS_H
#define REVTAPE_BLAS_H

#include <stdint.h>

/* the slots, as rt_blas_set numbers them (vm.h) */
enum { RT_BLAS_DGEMM = 0, RT_BLAS_DTRSM = 1, RT_BLAS_DTRMM = 2, RT_BLAS_DPOTRF = 3,
       RT_BLAS_DGETRF = 4, RT_BLAS_DSYEVD = 5, RT_BLAS_DSYGST = 6, RT_BLAS_NSLOTS = 7 };

/* 1 when slot s holds a routine */
int rt_blas_has(int s);

/* C (M x N) = alpha op(A) op(B) + beta C, row-major; ta/tb: 0 or 1
 * (transposed); lda/ldb/ldc row strides. */
void rt_blas_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha,
                  const double *A, int64_t lda, const double *B, int64_t ldb, double beta,
                  double *C, int64_t ldc);
/* X (m x n) := op(T)^-1 X (left) or X op(T)^-1 (right), row-major; T
 * lower (else upper) triangular, unit diagonal if unit. */
void rt_blas_trsm(int left, int lower, int trans, int unit, int64_t m, int64_t n,
                  const double *T, int64_t ldt, double *X, int64_t ldx);
/* X (m x n) := op(T) X (left) or X op(T) (right), row-major. */
void rt_blas_trmm(int left, int lower, int trans, int unit, int64_t m, int64_t n,
                  const double *T, int64_t ldt, double *X, int64_t ldx);
/* In place: the lower Cholesky factor of the row-major A (its lower
 * triangle read and written, the upper left alone); LAPACK's info. */
int rt_blas_potrf_lower(double *A, int64_t n);
/* In place LU of the row-major A's transpose (LAPACK's P A^T = L U on the
 * column-major view): ipiv gets the 0-based rows swapped; LAPACK's info. */
int rt_blas_getrf_t(double *A, int64_t n, int *ipiv);
/* A := inv(L) A inv(L^T) on the column-major lower triangles of A and L
 * (LAPACK's dsygst, itype 1, uplo 'L'); LAPACK's info. */
int rt_blas_sygst_lower(double *A, const double *L, int64_t n);
/* Eigen-decomposition of the symmetric A read from its row-major lower
 * triangle: w ascending, A overwritten by the eigenvectors as rows
 * (column-major columns).  Returns LAPACK's info, or -1000 when the work
 * space could not be allocated. */
int rt_blas_syevd_lower(double *A, double *w, int64_t n);

#endif
