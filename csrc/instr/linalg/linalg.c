/* Dense linear algebra for the VM: the dispatcher of the family's
 * instructions (see linalg.h for their records).  Each instruction is one
 * file here holding its forward, reverse and tangent (cholesky.h,
 * trisolve.h, solve.h, inv.h, slogdet.h, eigh.h, cumulative.h); their
 * operand and scratch lengths are their op rows' (ops.Linalg), generated
 * into RT_LINALG_LENGTHS.  The kernels they share: dense.h, tri.h, lu.h.
 *
 * Written for row-major storage: inner loops run along rows (contiguous), as
 * dot products with four accumulators or as axpys that gcc -O2 vectorises.
 * Unblocked level-2 algorithms: for n up to a few hundred the matrices fit
 * in L2 and the flop counts are the textbook minimum (Cholesky n^3/3, its
 * reverse 2n^3/3).
 *
 * With the flags bit RT_LA_BLAS the O(n^3) steps call LAPACK/BLAS instead
 * (lapack.h): the same functions, other roundings.
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

/* One instruction's kernels: forward, reverse (accumulating into the
 * operands' adjoints whose flag is set) and tangent, on its record rec. */
#define RT_LA_FWD(NAME) \
    static void rt_la_fwd_##NAME(double *v, const int32_t *rec, int64_t o, int64_t a, int64_t b)
#define RT_LA_REV(NAME) \
    static void rt_la_rev_##NAME(uint32_t fl, double *v, double *d, const int32_t *rec, \
                                 int64_t o, int64_t a, int64_t b)
#define RT_LA_TAN(NAME) \
    static void rt_la_tan_##NAME(uint32_t fl, double *v, double *t, const int32_t *rec, \
                                 int64_t o, int64_t a, int64_t b)

#include "instr/linalg/dense.h"
#include "instr/linalg/tri.h"
#include "instr/linalg/lu.h"
#include "instr/linalg/lapack.h"
#include "instr/linalg/cholesky.h"
#include "instr/linalg/trisolve.h"
#include "instr/linalg/solve.h"
#include "instr/linalg/inv.h"
#include "instr/linalg/slogdet.h"
#include "instr/linalg/eigh.h"
#include "instr/linalg/cumulative.h"

/* ------------------------------------------------------------------ the instruction records */

/* The table's lengths evaluated in double first: 1 when each fits an arena
 * (offsets are int32 words, so no region is longer than INT32_MAX).  The
 * record comes from an untrusted program (a pickle): with N and M up to
 * 2^31 a length such as EIGH's 3*N*N overflows int64, so the int64
 * evaluation below runs only on shapes this accepts (a double holds these
 * degree-2 polynomials of int32 values without overflow and close enough
 * to compare against 2^31). */
static int rt_linalg_fits(int op, double N, double M)
{
    const double lim = (double)INT32_MAX;
    (void)M;
    switch (op) {
#define RT_FITS_(NAME, A, B, OUT, SCRATCH, SQUARE, FLAGS) \
    case RT_OP_##NAME: \
        return (A) <= lim && (B) <= lim && (OUT) <= lim && (SCRATCH) <= lim;
    RT_LINALG_LENGTHS(RT_FITS_)
#undef RT_FITS_
    default:
        return 1;                /* not a linear-algebra opcode: refused below */
    }
}

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
    if (!rt_linalg_fits(op, (double)N, (double)M)) {
        snprintf(why, (size_t)why_len, "shape (N %lld, M %lld) makes a region longer than "
                 "any arena (%ld values)", (long long)N, (long long)M, (long)INT32_MAX);
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
    if (flags < 0 || (flags & ~RT_LA_BLAS) > max_flags
        || ((flags & RT_LA_BLAS) && (op == RT_OP_CUMSUM || op == RT_OP_CUMPROD))) {
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

/* ------------------------------------------------------------------ dispatch (RT_LINALG) */

void rt_linalg_forward(int op, double *v, const int32_t *rec, int64_t o, int64_t a, int64_t b)
{
    switch (op) {
#define RT_LA_CASE_(NAME) case RT_OP_##NAME: rt_la_fwd_##NAME(v, rec, o, a, b); break;
    RT_LINALG(RT_LA_CASE_)
#undef RT_LA_CASE_
    default:
        break;
    }
}

void rt_linalg_reverse(int op, uint32_t fl, double *v, double *d, const int32_t *rec,
                       int64_t o, int64_t a, int64_t b)
{
    switch (op) {
#define RT_LA_CASE_(NAME) case RT_OP_##NAME: rt_la_rev_##NAME(fl, v, d, rec, o, a, b); break;
    RT_LINALG(RT_LA_CASE_)
#undef RT_LA_CASE_
    default:
        break;
    }
}

void rt_linalg_tangent(int op, uint32_t fl, double *v, double *t, const int32_t *rec,
                       int64_t o, int64_t a, int64_t b)
{
    switch (op) {
#define RT_LA_CASE_(NAME) case RT_OP_##NAME: rt_la_tan_##NAME(fl, v, t, rec, o, a, b); break;
    RT_LINALG(RT_LA_CASE_)
#undef RT_LA_CASE_
    default:
        break;
    }
}
