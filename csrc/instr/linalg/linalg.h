/* Dense linear-algebra kernels of the VM: CHOLESKY, TRISOLVE, SOLVE, INV,
 * SLOGDET -- forward, reverse and tangent, hand-written in plain C99 (no
 * LAPACK: numpy stays the only run-time dependency).  Internal to the
 * extension; the sweeps (vm/sweeps.c) dispatch here (linalg.c) and the
 * verifier asks rt_linalg_lengths for the operand lengths.
 *
 * Every instruction's ints record at c is (N, M, flags, scratch):
 *   CHOLESKY  out[N*N] = cholesky(a[N*N]) (lower; reads a's lower triangle;
 *             not positive definite -> every element of out is nan)
 *   TRISOLVE  out[N*M] = op(a)^-1 b[N*M], flags: 1 lower, 2 transposed,
 *             4 unit diagonal (a's diagonal is not read); a zero on the
 *             diagonal -> out is all nan
 *   SOLVE     out[N*M] = a^-1 b (LU with partial pivoting; singular -> nan)
 *   INV       out[N*N] = a^-1 (singular -> nan)
 *   SLOGDET   out[2] = (sign, log|det a|) (singular -> (0, -inf))
 *   EIGH      out[N + N*N] = (w ascending, V row-major) of a's lower triangle,
 *             each column's largest-magnitude entry positive; scratch 3 N*N
 *   CUMSUM, CUMPROD  N segments of M: out[s, :] = cumsum/cumprod(a[s, :])
 *             (numpy's sequential order; no scratch)
 * Flags bit RT_LA_BLAS (any of them but CUMSUM/CUMPROD): the kernels call
 * LAPACK and BLAS (instr/linalg/lapack.h) where the VM holds the routines.
 * `scratch` is an offset into the value arena owned by the instruction
 * (factorizations kept from the forward sweep for the reverse and tangent
 * sweeps, and work space); its length is given by rt_linalg_lengths.
 */
#ifndef REVTAPE_LINALG_H
#define REVTAPE_LINALG_H

#include <stdint.h>

#define RT_LINALG_RECORD 4          /* ints per instruction record */
#define RT_TRI_LOWER 1
#define RT_TRI_TRANS 2
#define RT_TRI_UNIT 4
/* flags bit: run through LAPACK/BLAS where the VM holds the routines
 * (kernels/blas.h; set by the compiler for n >= a threshold, instr/linalg/lapack.h) */
#define RT_LA_BLAS 8

/* Lengths of operands a and b (-1: unused), the scratch offset and length,
 * from the record rec (RT_LINALG_RECORD ints) and the output length n.
 * Returns 0, or 1 with a message in why. */
int rt_linalg_lengths(int op, const int32_t *rec, int64_t n, int64_t *la, int64_t *lb,
                      int64_t *scratch, int64_t *ls, char *why, int64_t why_len);

void rt_linalg_forward(int op, double *v, const int32_t *rec, int64_t o, int64_t a, int64_t b);
void rt_linalg_reverse(int op, uint32_t fl, double *v, double *d, const int32_t *rec,
                       int64_t o, int64_t a, int64_t b);
void rt_linalg_tangent(int op, uint32_t fl, double *v, double *t, const int32_t *rec,
                       int64_t o, int64_t a, int64_t b);

#endif
