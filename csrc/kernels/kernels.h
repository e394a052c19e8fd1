/* The array kernels of the VM (kernels.c): elementwise loops over n > 1
 * elements, compiled for SIMD in their own translation unit.  Internal to
 * the extension (not part of the cffi ABI in vm.h).
 *
 * Every kernel takes the two arenas and the instruction's offsets; the
 * verifier guarantees that an instruction's output region overlaps none of
 * its operand regions (in values and, the same offsets, in adjoints), which
 * is what lets the kernels qualify their pointers `restrict`.  Operand
 * regions may overlap each other (x * x, x[1:] - x[:-1]).
 *
 *   rt_kf_NAME(n, v, o, a[, b])         forward: v[o..] = F(v[a..][, v[b..]])
 *   rt_kr_NAME(fl, n, d, v, o, a[, b])  reverse: accumulate into d[a..] / d[b..]
 *                                       the adjoint d[o..] times the partials,
 *                                       for the operands whose flag is set
 */
#ifndef REVTAPE_KERNELS_H
#define REVTAPE_KERNELS_H

#include <stdint.h>

#include "generated/ops_generated.h"

/* Beside the adjoint flags (1: a, 2: b, 4: c), a tiled block's reverse
 * (csrc/instr/block.h) may pass these in fl: that operand's adjoint is a
 * tile-local slot this is the first term of, so the kernel writes
 * 0.0 + term instead of adding term to a slot zeroed first (the same bits,
 * without the zeroing pass).  Only rt_kr_* of the instructions a block may
 * hold read them; the sweeps' n == 1 paths do not (a block never passes them
 * for a one-element tile). */
#define RT_KSET_A (1u << 3)
#define RT_KSET_B (1u << 4)
#define RT_KSET_C (1u << 5)

#define RT_KDECL_U_(NAME, ...)                                                \
    void rt_kf_##NAME(int64_t n, double *v, int64_t o, int64_t a);            \
    void rt_kr_##NAME(uint32_t fl, int64_t n, double *d, const double *v,     \
                      int64_t o, int64_t a);
#define RT_KDECL_UND_(NAME, ...)                                              \
    void rt_kf_##NAME(int64_t n, double *v, int64_t o, int64_t a);
#define RT_KDECL_B1_(NAME, V)                                                 \
    void rt_kf_##NAME##_##V(int64_t n, double *v, int64_t o, int64_t a, int64_t b);
#define RT_KDECL_B_(NAME, ...)                                                \
    RT_KDECL_B1_(NAME, VV) RT_KDECL_B1_(NAME, VS) RT_KDECL_B1_(NAME, SV)      \
    void rt_kr_##NAME##_VV(uint32_t fl, int64_t n, double *d, const double *v, \
                           int64_t o, int64_t a, int64_t b);                  \
    void rt_kr_##NAME##_VS(uint32_t fl, int64_t n, double *d, const double *v, \
                           int64_t o, int64_t a, int64_t b);                  \
    void rt_kr_##NAME##_SV(uint32_t fl, int64_t n, double *d, const double *v, \
                           int64_t o, int64_t a, int64_t b);
#define RT_KDECL_BND_(NAME, ...)                                              \
    RT_KDECL_B1_(NAME, VV) RT_KDECL_B1_(NAME, VS) RT_KDECL_B1_(NAME, SV)

RT_UNARY(RT_KDECL_U_)
RT_UNARY_ND(RT_KDECL_UND_)
RT_BINARY(RT_KDECL_B_)
RT_BINARY_ND(RT_KDECL_BND_)

#undef RT_KDECL_U_
#undef RT_KDECL_UND_
#undef RT_KDECL_B1_
#undef RT_KDECL_B_
#undef RT_KDECL_BND_

/* tangent sweep (forward mode) over arrays: t[o..] from t[a..] (, t[b..]) */
#define RT_KDECL_TU_(NAME, ...)                                               \
    void rt_kt_##NAME(int64_t n, double *t, const double *v, int64_t o, int64_t a);
#define RT_KDECL_TB1_(NAME, V)                                                \
    void rt_kt_##NAME##_##V(uint32_t fl, int64_t n, double *t, const double *v, \
                            int64_t o, int64_t a, int64_t b);
#define RT_KDECL_TB_(NAME, ...)                                               \
    RT_KDECL_TB1_(NAME, VV) RT_KDECL_TB1_(NAME, VS) RT_KDECL_TB1_(NAME, SV)
RT_UNARY(RT_KDECL_TU_)
RT_BINARY(RT_KDECL_TB_)
#undef RT_KDECL_TU_
#undef RT_KDECL_TB1_
#undef RT_KDECL_TB_

/* WHERE_VV/VS/SV and CLIP: forward and reverse (operands as in vm.h) */
#define RT_KDECL_W_(NAME)                                                     \
    void rt_kf_##NAME(int64_t n, double *v, int64_t o, int64_t a, int64_t b, int64_t c); \
    void rt_kr_##NAME(uint32_t fl, int64_t n, double *d, const double *v,     \
                      int64_t o, int64_t a, int64_t b, int64_t c);
RT_KDECL_W_(WHERE_VV)
RT_KDECL_W_(WHERE_VS)
RT_KDECL_W_(WHERE_SV)
RT_KDECL_W_(CLIP)
#undef RT_KDECL_W_

/* array forms of the fused pairs AXPY (b one element) and SQDIFF: n > 1 */
void rt_kf_AXPY(int64_t n, double *v, int64_t o, int64_t a, int64_t b, int64_t c);
void rt_kr_AXPY(uint32_t fl, int64_t n, double *d, const double *v,
                int64_t o, int64_t a, int64_t b, int64_t c);
void rt_kf_SQDIFF(int64_t n, double *v, int64_t o, int64_t a, int64_t b);
void rt_kr_SQDIFF(uint32_t fl, int64_t n, double *d, const double *v,
                  int64_t o, int64_t a, int64_t b);

/* SSD: v[o] = np.sum((a - b)^2) over n elements (REDUCE_SUM of SQDIFF) */
void rt_kf_SSD(int64_t n, double *v, int64_t o, int64_t a, int64_t b);
void rt_kr_SSD(uint32_t fl, int64_t n, double *d, const double *v,
               int64_t o, int64_t a, int64_t b);
double rt_kt_SSD(uint32_t fl, int64_t n, const double *t, const double *v, int64_t a, int64_t b);

/* np.sum of x[0..n), bit for bit (REDUCE_SUM's forward, one segment) */
double rt_k_pairwise_sum(const double *x, int64_t n);

/* dx[0..n) += g (REDUCE_SUM's reverse, one segment) */
void rt_k_add_scalar(int64_t n, double *dx, double g);
/* a[0..K) . b[0..K) with four accumulators, combined (s0 + s1) + (s2 + s3):
 * MATMUL's dot (csrc/instr/matmul.h and rt_k_matvec) */
#if defined(__GNUC__)
__attribute__((always_inline))    /* into kernels.c's clones too (a call per row otherwise) */
#endif
static inline double rt_k_dot4(const double *x, const double *y, int64_t K)
{
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int64_t k;
    for (k = 0; k + 4 <= K; k += 4) {
        s0 += x[k] * y[k];
        s1 += x[k + 1] * y[k + 1];
        s2 += x[k + 2] * y[k + 2];
        s3 += x[k + 3] * y[k + 3];
    }
    for (; k < K; k++)
        s0 += x[k] * y[k];
    return (s0 + s1) + (s2 + s3);
}

#if defined(__GNUC__)
#define RT_K_PREFETCH(p) __builtin_prefetch(p)   /* a hint: never faults */
#else
#define RT_K_PREFETCH(p) ((void)0)
#endif

/* out[i] = A[i, :] . x (rt_k_dot4), i = 0..M-1 (MATMUL's forward, N == 1) */
void rt_k_matvec(double *out, const double *A, const double *x, int64_t M, int64_t K);
/* dB[k] += A[i, k] * G[i] over i = 0..M-1 (MATMUL's reverse, N == 1), in
 * the fixed chunk order of kernels.c */
void rt_k_matvec_t_acc(double *dB, const double *A, const double *G, int64_t M, int64_t K);

#endif
