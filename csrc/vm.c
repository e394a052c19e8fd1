/* revtape's virtual machine: verifier, forward sweep, reverse and tangent sweeps.
 *
 * The contract (instruction encoding, arena layout, statuses) is in vm.h; the
 * elementwise kernels are generated from the X-macro tables of
 * ops_generated.h, the other families are written here by hand.
 *
 * Design rules:
 *   - no allocation and no written globals: the caller owns every buffer and
 *     a program may be replayed from any thread (one at a time, see `busy`);
 *   - the verifier trusts nothing; the sweeps trust everything the verifier
 *     checked, so they carry no bounds checks of their own;
 *   - an exactly-zero adjoint never becomes nan through an inf/nan partial
 *     (the per-element `if (g != 0.0)` below: CppAD's azmul, as the numpy
 *     reference replay does);
 *   - operand adjoints are accumulated (+=), never assigned: operands may
 *     alias (x * x has a == b).
 */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE 1   /* M_2_SQRTPI and friends in <math.h> */
#endif

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "vm.h"
#include "ops_generated.h"
#include "specfun.h"
#include "kernels.h"
#include "linalg.h"
#include "gaxpy.h"

#ifndef M_2_SQRTPI
#define M_2_SQRTPI 1.12837916709551257390   /* 2 / sqrt(pi), used by ERF */
#endif

/* ------------------------------------------------------------------ dispatch
 * Lua-style dispatch macros.  With GCC/Clang each kernel ends in its own
 * indirect jump to the next kernel (computed goto: gcc duplicates the shared
 * dispatch into every kernel), which predicts far better than one switch
 * for the short scalar kernels that dominate scalar code.  Elsewhere, or
 * with -DRT_NO_COMPUTED_GOTO, the same kernels sit in a switch.  Either way
 * VM_NEXT jumps to `vm_next`, which decodes the next instruction. */
#if defined(__GNUC__) && !defined(RT_NO_COMPUTED_GOTO)
#define RT_COMPUTED_GOTO 1
#define RT_LABEL_(name) &&L_##name,
#define VM_DISPATCH(op) goto *vm_labels[op];
#define VM_CASE(name) L_##name:
#else
#define RT_COMPUTED_GOTO 0
#define VM_DISPATCH(op) switch (op)
#define VM_CASE(name) case RT_OP_##name:
#endif
#define VM_NEXT goto vm_next

/* The forward and reverse sweeps go to .text.hot, which the linker places
 * ahead of the other code: their layout, to which the dispatch's branch
 * prediction is sensitive (growing an unrelated function by 144 bytes once
 * cost Rosenbrock 13%), then no longer moves when other functions change. */
#if defined(__GNUC__)
#define RT_HOT __attribute__((hot))
#else
#define RT_HOT
#endif

/* Compile-time check that the switches below cover every opcode: the cases
 * are generated from the family tables, plus 3 WHERE variants and 5
 * hand-written kernels (GATHER, SCATTER_ADD, SCATTER, MATMUL, CLIP, AXPY, SQDIFF, CSUM).  Case
 * labels are distinct (a duplicate does not compile) and every label is an
 * opcode, so equal counts mean full coverage.  A new family or kernel in
 * ops.py changes RT_NUM_OPS and this array gets a negative size. */
#define RT_COUNT1_(...) + 1
#define RT_COUNT3_(...) + 3
enum {
    RT_N_CASES_ = 0 RT_UNARY(RT_COUNT1_) RT_UNARY_ND(RT_COUNT1_) RT_BINARY(RT_COUNT3_)
                  RT_BINARY_ND(RT_COUNT3_) RT_REDUCE(RT_COUNT1_) RT_GUARDS(RT_COUNT1_)
                  + 3 /* WHERE_VV/VS/SV */ + 11 /* GATHER SCATTER_ADD SCATTER MATMUL CLIP AXPY SQDIFF CSUM PYCALL GAXPY SSD */
                  RT_LINALG(RT_COUNT1_)
};
typedef char rt_every_opcode_has_a_case_[((int)RT_N_CASES_ == (int)RT_NUM_OPS) ? 1 : -1];
/* The reduction kernels are hand-written: exactly these seven. */
typedef char rt_seven_reduction_kernels_[(0 RT_REDUCE(RT_COUNT1_)) == 7 ? 1 : -1];

#define RT_NAME_(name) #name,
static const char *const rt_op_names[RT_NUM_OPS] = { RT_OPCODES(RT_NAME_) };
#undef RT_NAME_

const char *rt_op_table_hash(void) { return RT_OP_TABLE_HASH; }
int32_t rt_num_ops(void) { return RT_NUM_OPS; }

/* One elementwise op of the table on plain arrays (no program): the numpy
 * forward of a special-function row when scipy is not installed, so that
 * the reference replay and the VM compute the same C expression.  Binary ops
 * take their _VV opcode (x and y both n long).  Returns -1 for an opcode
 * that is not elementwise. */
int rt_elementwise(int32_t opcode, int64_t n, const double *xs, const double *ys, double *out)
{
    int64_t i;
    switch (opcode) {
#define EW_UNARY_(NAME, FX, DX)                                               \
    case RT_OP_##NAME:                                                        \
        for (i = 0; i < n; i++) { const double x = xs[i]; out[i] = FX; }      \
        return 0;
#define EW_BINARY_(NAME, FXY, DX, DY)                                         \
    case RT_OP_##NAME##_VV:                                                   \
        for (i = 0; i < n; i++) {                                             \
            const double x = xs[i], y = ys[i];                                \
            out[i] = FXY;                                                     \
        }                                                                     \
        return 0;
    RT_UNARY(EW_UNARY_)
    RT_BINARY(EW_BINARY_)
#undef EW_UNARY_
#undef EW_BINARY_
    default:
        return -1;
    }
}

/* ------------------------------------------------------------------ kernels */

/* numpy's pairwise summation, bit for bit: kernels.c (its 8-accumulator
 * blocks vectorise there). */
#define rt_pairwise_sum rt_k_pairwise_sum

/* np.max / np.min: nan propagates (numpy's `io1 >= in2 || isnan(io1)`). */
static double rt_seg_max(const double *x, int64_t n)
{
    double m = x[0];
    int64_t j;
    for (j = 1; j < n; j++)
        if (!(m >= x[j] || m != m))
            m = x[j];
    return m;
}

static double rt_seg_min(const double *x, int64_t n)
{
    double m = x[0];
    int64_t j;
    for (j = 1; j < n; j++)
        if (!(m <= x[j] || m != m))
            m = x[j];
    return m;
}

/* scipy.special.logsumexp (1.15+): the maximal elements are taken out of the
 * sum, log1p(s / count) + log(count) + max; nan -> nan; a +-inf maximum is
 * the result (+inf present -> inf, all -inf -> -inf); empty -> -inf. */
static double rt_seg_logsumexp(const double *x, int64_t n)
{
    double m, s = 0.0;
    int64_t j, cnt = 0;
    if (n == 0)
        return -INFINITY;
    m = rt_seg_max(x, n);
    if (m != m || isinf(m))
        return m;
    for (j = 0; j < n; j++) {
        if (x[j] == m)
            cnt++;
        else
            s += exp(x[j] - m);
    }
    if (s != 0.0)
        s /= (double)cnt;
    return log1p(s) + log((double)cnt) + m;
}

/* out[M x N] = A[M x K] @ B[K x N], row-major; out does not overlap A or B
 * (verified).  Inner loops are contiguous so that gcc -O2 vectorises the
 * axpy form; the matrix-vector case (N == 1, logistic regression) is a dot
 * per row with four accumulators instead of N-long axpys of length 1. */
static void rt_matmul(double *out, const double *A, const double *B,
                      int64_t M, int64_t K, int64_t N)
{
    int64_t i, j, k;
    if (N == 1) {
        for (i = 0; i < M; i++) {
            const double *ai = A + i * K;
            double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
            for (k = 0; k + 4 <= K; k += 4) {
                s0 += ai[k] * B[k];
                s1 += ai[k + 1] * B[k + 1];
                s2 += ai[k + 2] * B[k + 2];
                s3 += ai[k + 3] * B[k + 3];
            }
            for (; k < K; k++)
                s0 += ai[k] * B[k];
            out[i] = (s0 + s1) + (s2 + s3);
        }
        return;
    }
    for (i = 0; i < M; i++) {
        double *oi = out + i * N;
        for (j = 0; j < N; j++)
            oi[j] = 0.0;
        for (k = 0; k < K; k++) {
            const double aik = A[i * K + k];
            const double *bk = B + k * N;
            for (j = 0; j < N; j++)
                oi[j] += aik * bk[j];
        }
    }
}

/* Reverse of MATMUL: dA += G @ B^T, dB += A^T @ G (G is M x N).  Plain
 * products, like the reference replay's matmul rule: a zero adjoint times an
 * infinite operand does give nan here. */
static void rt_matmul_rev(double *dA, double *dB, const double *G, const double *A,
                          const double *B, int64_t M, int64_t K, int64_t N)
{
    int64_t i, j, k;
    if (dA) {
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
    if (dB) {
        if (N == 1) {
            for (i = 0; i < M; i++) {       /* dB += G[i] * A[i, :] */
                const double gi = G[i];
                const double *ai = A + i * K;
                for (k = 0; k < K; k++)
                    dB[k] += ai[k] * gi;
            }
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

/* ------------------------------------------------------------------ forward */

/* Scalar code is one element per instruction: n == 1 skips the loop. */
#define FWD_UNARY(NAME, FX, DX)                                               \
    VM_CASE(NAME) {                                                           \
        if (n == 1) {                                                         \
            const double x = v[a];                                            \
            v[o] = FX;                                                        \
            VM_NEXT;                                                          \
        }                                                                     \
        rt_kf_##NAME(n, v, o, a);           /* arrays: kernels.c */        \
        VM_NEXT;                                                              \
    }

/* The scalar operand of _VS/_SV is loaded once, before the loop. */
#define FWD_BINARY(NAME, FXY, DX, DY)                                         \
    VM_CASE(NAME##_VV) {                                                      \
        if (n == 1) {                                                         \
            const double x = v[a], y = v[b];                                  \
            v[o] = FXY;                                                       \
            VM_NEXT;                                                          \
        }                                                                     \
        rt_kf_##NAME##_VV(n, v, o, a, b);                                 \
        VM_NEXT;                                                              \
    }                                                                         \
    VM_CASE(NAME##_VS) {                                                      \
        const double y = v[b];                                                \
        if (n == 1) {                                                         \
            const double x = v[a];                                            \
            v[o] = FXY;                                                       \
            VM_NEXT;                                                          \
        }                                                                     \
        rt_kf_##NAME##_VS(n, v, o, a, b);                                 \
        VM_NEXT;                                                              \
    }                                                                         \
    VM_CASE(NAME##_SV) {                                                      \
        const double x = v[a];                                                \
        if (n == 1) {                                                         \
            const double y = v[b];                                            \
            v[o] = FXY;                                                       \
            VM_NEXT;                                                          \
        }                                                                     \
        rt_kf_##NAME##_SV(n, v, o, a, b);                                 \
        VM_NEXT;                                                              \
    }

/* Non-differentiable rows have no partials. */
#define FWD_UNARY_ND(NAME, FX) FWD_UNARY(NAME, FX, 0)
#define FWD_BINARY_ND(NAME, FXY) FWD_BINARY(NAME, FXY, 0, 0)

#define FWD_GUARD(NAME, PRED)                                                 \
    VM_CASE(GUARD_##NAME) {                                                   \
        const double x = v[a], y = v[b];                                      \
        if ((int64_t)(PRED) != n) {                                           \
            p->failed_guard = w[2];                                           \
            p->failed_pc = pc;                                                \
            return RT_GUARD_FAILED;                                           \
        }                                                                     \
        VM_NEXT;                                                              \
    }

RT_HOT static int rt_run_forward(rt_program *p)
{
    const int32_t *const code = p->code;
    const int32_t *const ints = p->ints;
    double *const v = p->vals;
    const int64_t n_instr = p->n_instr;
    const int32_t *w;
    int64_t pc = -1, n, o, a, b, c, i, s;
#if RT_COMPUTED_GOTO
    static const void *const vm_labels[RT_NUM_OPS] = { RT_OPCODES(RT_LABEL_) };
#endif

vm_next:
    if (++pc >= n_instr)
        return RT_OK;
    w = code + pc * RT_WORDS;
    n = w[1]; o = w[2]; a = w[3]; b = w[4]; c = w[5];
    {
        VM_DISPATCH(w[0] & RT_OPCODE_MASK) {
        RT_UNARY(FWD_UNARY)
        RT_UNARY_ND(FWD_UNARY_ND)
        RT_BINARY(FWD_BINARY)
        RT_BINARY_ND(FWD_BINARY_ND)
        RT_GUARDS(FWD_GUARD)

        /* WHERE and CLIP: kernels.c */
        VM_CASE(WHERE_VV) { rt_kf_WHERE_VV(n, v, o, a, b, c); VM_NEXT; }
        VM_CASE(WHERE_VS) { rt_kf_WHERE_VS(n, v, o, a, b, c); VM_NEXT; }
        VM_CASE(WHERE_SV) { rt_kf_WHERE_SV(n, v, o, a, b, c); VM_NEXT; }
        VM_CASE(AXPY) {
            /* out = a + b*c (b one scalar): rounded as the add of a rounded
             * product, exactly like the two instructions it replaces. */
            const double t = v[b];
            if (n > 1) { rt_kf_AXPY(n, v, o, a, b, c); VM_NEXT; }   /* arrays: kernels.c */
            for (i = 0; i < n; i++) {
                const double prod = t * v[c + i];
                v[o + i] = v[a + i] + prod;
            }
            VM_NEXT;
        }
        VM_CASE(SQDIFF) {
            /* out = (a - b)^2, rounded like SUB then SQUARE. */
            if (n > 1) { rt_kf_SQDIFF(n, v, o, a, b); VM_NEXT; }   /* arrays: kernels.c */
            for (i = 0; i < n; i++) {
                const double t = v[a + i] - v[b + i];
                v[o + i] = t * t;
            }
            VM_NEXT;
        }
        VM_CASE(CSUM) {
            /* out = a (+/-) the n terms listed at ints[c..c+n), in order: the
             * partial sums round exactly as the chain of adds they replace.
             * An entry e >= 0 adds v[e], e < 0 subtracts v[~e]. */
            double acc = v[a];
            for (i = 0; i < n; i++) {
                const int32_t e = ints[c + i];
                if (e >= 0)
                    acc = acc + v[e];
                else
                    acc = acc - v[~e];
            }
            v[o] = acc;
            VM_NEXT;
        }
        VM_CASE(CLIP) { rt_kf_CLIP(n, v, o, a, b, c); VM_NEXT; }
        VM_CASE(GAXPY) { rt_gaxpy_forward(n, v, ints, o, a, b, c); VM_NEXT; }   /* gaxpy.h */
        VM_CASE(SSD) { rt_kf_SSD(n, v, o, a, b); VM_NEXT; }                  /* kernels.c */

        VM_CASE(REDUCE_SUM) {
            for (s = 0; s < n; s++)
                v[o + s] = 0.0 + rt_pairwise_sum(v + a + s * b, b);   /* 0.0 +: as numpy, -0.0 sums to 0.0 */
            VM_NEXT;
        }
        VM_CASE(REDUCE_MAX) {
            for (s = 0; s < n; s++)
                v[o + s] = rt_seg_max(v + a + s * b, b);
            VM_NEXT;
        }
        VM_CASE(REDUCE_MIN) {
            for (s = 0; s < n; s++)
                v[o + s] = rt_seg_min(v + a + s * b, b);
            VM_NEXT;
        }
        VM_CASE(REDUCE_PROD) {
            for (s = 0; s < n; s++) {
                const double *x = v + a + s * b;
                double r = 1.0;
                for (i = 0; i < b; i++)
                    r *= x[i];
                v[o + s] = r;
            }
            VM_NEXT;
        }
        VM_CASE(REDUCE_LOGSUMEXP) {
            for (s = 0; s < n; s++)
                v[o + s] = rt_seg_logsumexp(v + a + s * b, b);
            VM_NEXT;
        }
        VM_CASE(REDUCE_ALL) {
            for (s = 0; s < n; s++) {
                const double *x = v + a + s * b;
                double r = 1.0;
                for (i = 0; i < b; i++)
                    if (x[i] == 0.0) {
                        r = 0.0;
                        break;
                    }
                v[o + s] = r;
            }
            VM_NEXT;
        }
        VM_CASE(REDUCE_ANY) {
            for (s = 0; s < n; s++) {
                const double *x = v + a + s * b;
                double r = 0.0;
                for (i = 0; i < b; i++)
                    if (x[i] != 0.0) {      /* nan counts as true, as numpy */
                        r = 1.0;
                        break;
                    }
                v[o + s] = r;
            }
            VM_NEXT;
        }

        VM_CASE(GATHER) {
            for (i = 0; i < n; i++)
                v[o + i] = v[a + ints[c + i]];
            VM_NEXT;
        }
        VM_CASE(SCATTER_ADD) {
            for (i = 0; i < b; i++)
                v[o + i] = 0.0;
            for (i = 0; i < n; i++)
                v[o + ints[c + i]] += v[a + i];
            VM_NEXT;
        }
        VM_CASE(SCATTER) {
            for (i = 0; i < n; i++)
                v[o + ints[c + i]] = v[a + i];
            VM_NEXT;
        }
        VM_CASE(MATMUL) {
            rt_matmul(v + o, v + a, v + b, ints[c], ints[c + 1], ints[c + 2]);
            VM_NEXT;
        }
#define FWD_LINALG(NAME) \
        VM_CASE(NAME) { rt_linalg_forward(RT_OP_##NAME, v, ints + c, o, a, b); VM_NEXT; }
        RT_LINALG(FWD_LINALG)
        VM_CASE(PYCALL) {
            /* The caller's Python computes out from the operands (re-run at
             * every replay) and writes it into the arena itself. */
            if (p->callback(p->callback_ctx, RT_CB_FORWARD, pc) != 0)
                return RT_CALLBACK_FAILED;
            VM_NEXT;
        }

#if !RT_COMPUTED_GOTO
        default:
            /* Unreachable after rt_verify, which rejects unknown opcodes. */
            return RT_UNVERIFIED;
#endif
        }
    }
    return RT_OK;
}

/* ------------------------------------------------------------------ reverse */

#define REV_UNARY(NAME, FX, DX)                                               \
    VM_CASE(NAME) {                                                           \
        if (n == 1) {                                                         \
            const double g = d[o];                                            \
            if (g != 0.0) {                                                   \
                const double x = v[a], f = v[o];                              \
                (void)x; (void)f;                                             \
                d[a] += g * (DX);                                             \
            }                                                                 \
            VM_NEXT;                                                          \
        }                                                                     \
        rt_kr_##NAME(fl, n, d, v, o, a);    /* arrays: kernels.c */        \
        VM_NEXT;                                                              \
    }

/* _VS / _SV: the scalar's adjoint is the sum over the vector, accumulated
 * locally and added once. */
#define REV_BINARY(NAME, FXY, DX, DY)                                         \
    VM_CASE(NAME##_VV) {                                                      \
        if (n == 1) {                                                         \
            const double g = d[o];                                            \
            if (g != 0.0) {                                                   \
                const double x = v[a], y = v[b], f = v[o];                    \
                (void)x; (void)y; (void)f;                                    \
                if (fl & 1) d[a] += g * (DX);                                 \
                if (fl & 2) d[b] += g * (DY);                                 \
            }                                                                 \
            VM_NEXT;                                                          \
        }                                                                     \
        rt_kr_##NAME##_VV(fl, n, d, v, o, a, b);                             \
        VM_NEXT;                                                              \
    }                                                                         \
    VM_CASE(NAME##_VS) {                                                      \
        const double y = v[b];                                                \
        double sy = 0.0;                                                      \
        (void)y;                                                              \
        if (n == 1) {                   /* the loop below, for one element */ \
            const double g = d[o];                                            \
            if (g != 0.0) {                                                   \
                const double x = v[a], f = v[o];                              \
                (void)x; (void)f;                                             \
                if (fl & 1) d[a] += g * (DX);                                 \
                if (fl & 2) sy += g * (DY);                                   \
            }                                                                 \
            if (fl & 2) d[b] += sy;                                           \
            VM_NEXT;                                                          \
        }                                                                     \
        rt_kr_##NAME##_VS(fl, n, d, v, o, a, b);                             \
        VM_NEXT;                                                              \
    }                                                                         \
    VM_CASE(NAME##_SV) {                                                      \
        const double x = v[a];                                                \
        double sx = 0.0;                                                      \
        (void)x;                                                              \
        if (n == 1) {                   /* the loop below, for one element */ \
            const double g = d[o];                                            \
            if (g != 0.0) {                                                   \
                const double y = v[b], f = v[o];                              \
                (void)y; (void)f;                                             \
                if (fl & 1) sx += g * (DX);                                   \
                if (fl & 2) d[b] += g * (DY);                                 \
            }                                                                 \
            if (fl & 1) d[a] += sx;                                           \
            VM_NEXT;                                                          \
        }                                                                     \
        rt_kr_##NAME##_SV(fl, n, d, v, o, a, b);                             \
        VM_NEXT;                                                              \
    }

/* Ops without derivatives (masks, guards, ALL/ANY): nothing to do in the
 * reverse or the tangent sweep. */
#define REV_NONE1(NAME, ...) VM_CASE(NAME)
#define REV_NONE3(NAME, ...) VM_CASE(NAME##_VV) VM_CASE(NAME##_VS) VM_CASE(NAME##_SV)
#define REV_NONE_GUARD(NAME, ...) VM_CASE(GUARD_##NAME)
#define RT_NO_DERIVATIVE                                                      \
        RT_UNARY_ND(REV_NONE1) RT_BINARY_ND(REV_NONE3) RT_GUARDS(REV_NONE_GUARD) \
        VM_CASE(REDUCE_ALL) VM_CASE(REDUCE_ANY) VM_NEXT;

/* One reverse sweep over p; adj must be zeroed and seeded by the caller.
 * Returns RT_OK, or RT_CALLBACK_FAILED when a PYCALL's callback failed. */
RT_HOT static int rt_run_reverse(const rt_program *p)
{
    const int32_t *const code = p->code;
    const int32_t *const ints = p->ints;
    const double *const v = p->vals;
    double *const d = p->adj;
    const int32_t *w;
    uint32_t fl;
    int64_t pc = p->n_instr, n, o, a, b, c, i, s;
#if RT_COMPUTED_GOTO
    static const void *const vm_labels[RT_NUM_OPS] = { RT_OPCODES(RT_LABEL_) };
#endif

vm_next:
    if (pc-- <= 0)
        return RT_OK;
    w = code + pc * RT_WORDS;
    fl = (uint32_t)w[0] >> RT_FLAGS_SHIFT;
    if (fl == 0)
        goto vm_next;                       /* nothing upstream needs an adjoint */
    n = w[1]; o = w[2]; a = w[3]; b = w[4]; c = w[5];
    {
        VM_DISPATCH(w[0] & RT_OPCODE_MASK) {
        RT_UNARY(REV_UNARY)
        RT_BINARY(REV_BINARY)

        RT_NO_DERIVATIVE

        /* WHERE: the condition (a) is never differentiated. */
        VM_CASE(WHERE_VV) { rt_kr_WHERE_VV(fl, n, d, v, o, a, b, c); VM_NEXT; }
        VM_CASE(WHERE_VS) { rt_kr_WHERE_VS(fl, n, d, v, o, a, b, c); VM_NEXT; }
        VM_CASE(WHERE_SV) { rt_kr_WHERE_SV(fl, n, d, v, o, a, b, c); VM_NEXT; }
        VM_CASE(AXPY) {
            /* The add's reverse, then the product's, in the order the two
             * separate instructions would accumulate them. */
            const double t = v[b];
            double sb = 0.0;
            if (n > 1) { rt_kr_AXPY(fl, n, d, v, o, a, b, c); VM_NEXT; }   /* arrays */
            for (i = 0; i < n; i++) {
                const double g = d[o + i];
                if (g != 0.0) {
                    if (fl & 1) d[a + i] += g;
                    if (fl & 2) sb += g * v[c + i];
                    if (fl & 4) d[c + i] += g * t;
                }
            }
            if (fl & 2) d[b] += sb;
            VM_NEXT;
        }
        VM_CASE(SQDIFF) {
            /* SQUARE's reverse gives the difference its adjoint gt; SUB's
             * reverse (skipped when gt is zero) passes gt and -gt on. */
            if (n > 1) { rt_kr_SQDIFF(fl, n, d, v, o, a, b); VM_NEXT; }   /* arrays */
            for (i = 0; i < n; i++) {
                const double g = d[o + i];
                if (g != 0.0) {
                    const double t = v[a + i] - v[b + i], gt = g * (2.0 * t);
                    if (gt != 0.0) {
                        if (fl & 1) d[a + i] += gt * 1.0;
                        if (fl & 2) d[b + i] += gt * -1.0;
                    }
                }
            }
            VM_NEXT;
        }
        VM_CASE(CSUM) {
            /* Every link of the chain passes its adjoint on unchanged, so
             * each term gets g (or g * -1.0, as SUB's reverse gives it); the
             * compiler fuses only terms nothing else reads, so the order of
             * these writes changes no bit.  Terms always need an adjoint. */
            const double g = d[o];
            if (g != 0.0) {
                if (fl & 1) d[a] += g * 1.0;
                for (i = 0; i < n; i++) {
                    const int32_t e = ints[c + i];
                    if (e >= 0)
                        d[e] += g * 1.0;
                    else
                        d[~e] += g * -1.0;
                }
            }
            VM_NEXT;
        }
        VM_CASE(CLIP) {
            /* Zero at the bounds (autograd's convention).  The bounds are
             * constants: flags 2 and 4 are ignored. */
            rt_kr_CLIP(fl, n, d, v, o, a, b, c);
            VM_NEXT;
        }
        VM_CASE(GAXPY) { rt_gaxpy_reverse(fl, n, d, v, ints, o, a, b, c); VM_NEXT; }
        VM_CASE(SSD) { rt_kr_SSD(fl, n, d, v, o, a, b); VM_NEXT; }

        VM_CASE(REDUCE_SUM) {
            if (fl & 1)
                for (s = 0; s < n; s++) {
                    const double g = d[o + s];
                    double *dx = d + a + s * b;
                    if (g != 0.0)
                        rt_k_add_scalar(b, dx, g);
                }
            VM_NEXT;
        }
        VM_CASE(REDUCE_MAX)
        VM_CASE(REDUCE_MIN) {
            /* The elements equal to the result share the adjoint evenly,
             * g * (1 / count) as the reference replay computes it.  A nan
             * result matches no element: count = 0 and, as the reference's
             * 0/0, every element of the segment gets nan. */
            if (fl & 1)
                for (s = 0; s < n; s++) {
                    const double g = d[o + s], f = v[o + s];
                    const double *x = v + a + s * b;
                    double *dx = d + a + s * b;
                    int64_t cnt = 0;
                    if (g == 0.0)
                        continue;
                    for (i = 0; i < b; i++)
                        cnt += x[i] == f;
                    if (cnt == 0) {
                        for (i = 0; i < b; i++)
                            dx[i] += g * NAN;
                    } else {
                        const double share = g * (1.0 / (double)cnt);
                        for (i = 0; i < b; i++)
                            if (x[i] == f)
                                dx[i] += share;
                    }
                }
            VM_NEXT;
        }
        VM_CASE(REDUCE_PROD) {
            /* Zero-safe: no zero -> g * f / x; exactly one zero -> that
             * element gets g * (product of the others), the others 0;
             * two or more zeros -> 0 everywhere. */
            if (fl & 1)
                for (s = 0; s < n; s++) {
                    const double g = d[o + s], f = v[o + s];
                    const double *x = v + a + s * b;
                    double *dx = d + a + s * b;
                    int64_t zeros = 0, iz = 0;
                    if (g == 0.0)
                        continue;
                    for (i = 0; i < b; i++)
                        if (x[i] == 0.0) {
                            zeros++;
                            iz = i;
                        }
                    if (zeros == 0) {
                        for (i = 0; i < b; i++)
                            dx[i] += g * (f / x[i]);
                    } else if (zeros == 1) {
                        double others = 1.0;
                        for (i = 0; i < b; i++)
                            if (i != iz)
                                others *= x[i];
                        dx[iz] += g * others;
                    }
                }
            VM_NEXT;
        }
        VM_CASE(REDUCE_LOGSUMEXP) {
            if (fl & 1)
                for (s = 0; s < n; s++) {
                    const double g = d[o + s], f = v[o + s];
                    const double *x = v + a + s * b;
                    double *dx = d + a + s * b;
                    if (g != 0.0)
                        for (i = 0; i < b; i++)
                            dx[i] += g * exp(x[i] - f);
                }
            VM_NEXT;
        }

        VM_CASE(GATHER) {
            if (fl & 1)
                for (i = 0; i < n; i++)
                    d[a + ints[c + i]] += d[o + i];
            VM_NEXT;
        }
        VM_CASE(SCATTER_ADD)
        VM_CASE(SCATTER) {
            if (fl & 1)
                for (i = 0; i < n; i++)
                    d[a + i] += d[o + ints[c + i]];
            VM_NEXT;
        }
        VM_CASE(MATMUL) {
            rt_matmul_rev((fl & 1) ? d + a : NULL, (fl & 2) ? d + b : NULL,
                          d + o, v + a, v + b, ints[c], ints[c + 1], ints[c + 2]);
            VM_NEXT;
        }
        /* linalg kernels use their scratch in the value arena (p->vals) */
#define REV_LINALG(NAME) \
        VM_CASE(NAME) { rt_linalg_reverse(RT_OP_##NAME, fl, p->vals, d, ints + c, o, a, b); VM_NEXT; }
        RT_LINALG(REV_LINALG)
        VM_CASE(PYCALL) {
            /* An all-zero output adjoint contributes nothing (azmul, as every
             * kernel here): the user's VJP is not called for it. */
            for (i = 0; i < n; i++)
                if (d[o + i] != 0.0)
                    break;
            if (i < n && p->callback(p->callback_ctx, RT_CB_REVERSE, pc) != 0)
                return RT_CALLBACK_FAILED;
            VM_NEXT;
        }

#if !RT_COMPUTED_GOTO
        default:
            return RT_UNVERIFIED;           /* unreachable after rt_verify */
#endif
        }
    }
}

/* ------------------------------------------------------------------ tangent
 * Forward mode: after a forward sweep, one more pass in program order gives
 * every slot's tangent, t[out] = (d out / d operands) . t[operands], from the
 * same partials as the reverse sweep (so a JVP and a VJP see one Jacobian,
 * conventions at kinks included).  Run over the program of a HessianTape
 * (which computes f's gradient), it is forward-over-reverse: H v.
 *
 * The tangent arena is the adjoint arena (a JVP needs no adjoints), zeroed
 * and seeded by the caller.  The compiler writes every slot once (each
 * result gets fresh slots), so a result whose operand tangents are all zero
 * can keep the caller's 0; a program that breaks this gets wrong tangents,
 * never an out-of-bounds access.  An operand whose flag is off does not depend on
 * a differentiated input: its tangent is zero and is not read.  A zero
 * tangent contributes nothing even through an inf/nan partial (the
 * reverse's azmul, mirrored); MATMUL uses plain products as its reverse does. */

#define TAN_UNARY(NAME, FX, DX)                                               \
    VM_CASE(NAME) {                                                           \
        if (n == 1) {                                                         \
            const double ta = t[a];                                           \
            if (ta != 0.0) {                                                  \
                const double x = v[a], f = v[o];                              \
                (void)x; (void)f;                                             \
                t[o] = ta * (DX);                                             \
            }                                                                 \
            VM_NEXT;                          /* else t[o] stays 0 */         \
        }                                                                     \
        rt_kt_##NAME(n, t, v, o, a);        /* arrays: kernels.c */        \
        VM_NEXT;                                                              \
    }

/* An operand's tangent is zero when its flag is off.  A scalar result with
 * two zero tangents is left as the caller zeroed it. */
#define TAN_BINARY_(NAME, V, DX, DY)                                          \
        if (n == 1) {                                                         \
            const double ta = (fl & 1) ? t[a] : 0.0, tb = (fl & 2) ? t[b] : 0.0; \
            if (ta != 0.0 || tb != 0.0) {                                     \
                const double x = v[a], y = v[b], f = v[o];                    \
                double r = 0.0;                                               \
                (void)x; (void)y; (void)f;                                    \
                if (ta != 0.0) r += ta * (DX);                                \
                if (tb != 0.0) r += tb * (DY);                                \
                t[o] = r;                                                     \
            }                                                                 \
            VM_NEXT;                          /* else t[o] stays 0 */         \
        }                                                                     \
        rt_kt_##NAME##_##V(fl, n, t, v, o, a, b);   /* arrays: kernels.c */ \
        VM_NEXT;

#define TAN_BINARY(NAME, FXY, DX, DY)                                         \
    VM_CASE(NAME##_VV) { TAN_BINARY_(NAME, VV, DX, DY) }                      \
    VM_CASE(NAME##_VS) { TAN_BINARY_(NAME, VS, DX, DY) }                      \
    VM_CASE(NAME##_SV) { TAN_BINARY_(NAME, SV, DX, DY) }

/* out += A @ B (M x K times K x N), plain products. */
static void rt_matmul_acc(double *out, const double *A, const double *B,
                          int64_t M, int64_t K, int64_t N)
{
    int64_t i, j, k;
    if (N == 1) {                           /* matrix-vector: as in rt_matmul */
        for (i = 0; i < M; i++) {
            const double *ai = A + i * K;
            double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
            for (k = 0; k + 4 <= K; k += 4) {
                s0 += ai[k] * B[k];
                s1 += ai[k + 1] * B[k + 1];
                s2 += ai[k + 2] * B[k + 2];
                s3 += ai[k + 3] * B[k + 3];
            }
            for (; k < K; k++)
                s0 += ai[k] * B[k];
            out[i] += (s0 + s1) + (s2 + s3);
        }
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

static int rt_run_tangent(const rt_program *p)
{
    const int32_t *const code = p->code;
    const int32_t *const ints = p->ints;
    const double *const v = p->vals;
    double *const t = p->adj;
    const int64_t n_instr = p->n_instr;
    const int32_t *w;
    uint32_t fl;
    int64_t pc = -1, n, o, a, b, c, i, s;
#if RT_COMPUTED_GOTO
    static const void *const vm_labels[RT_NUM_OPS] = { RT_OPCODES(RT_LABEL_) };
#endif

vm_next:
    if (++pc >= n_instr)
        return RT_OK;
    w = code + pc * RT_WORDS;
    fl = (uint32_t)w[0] >> RT_FLAGS_SHIFT;
    if (fl == 0)
        goto vm_next;                       /* no operand has a tangent: out's stays 0 */
    n = w[1]; o = w[2]; a = w[3]; b = w[4]; c = w[5];
    {
        VM_DISPATCH(w[0] & RT_OPCODE_MASK) {
        RT_UNARY(TAN_UNARY)
        RT_BINARY(TAN_BINARY)

        RT_NO_DERIVATIVE

        VM_CASE(WHERE_VV) {
            for (i = 0; i < n; i++)
                t[o + i] = v[a + i] != 0.0 ? ((fl & 2) ? t[b + i] : 0.0)
                                           : ((fl & 4) ? t[c + i] : 0.0);
            VM_NEXT;
        }
        VM_CASE(WHERE_VS) {
            for (i = 0; i < n; i++)
                t[o + i] = v[a + i] != 0.0 ? ((fl & 2) ? t[b + i] : 0.0)
                                           : ((fl & 4) ? t[c] : 0.0);
            VM_NEXT;
        }
        VM_CASE(WHERE_SV) {
            for (i = 0; i < n; i++)
                t[o + i] = v[a + i] != 0.0 ? ((fl & 2) ? t[b] : 0.0)
                                           : ((fl & 4) ? t[c + i] : 0.0);
            VM_NEXT;
        }
        VM_CASE(AXPY) {
            /* out = a + b*c, b one scalar: MUL's tangent, then ADD's, rounded
             * as the pair's ((0 + t1*d1) + t2*d2, a zero tangent adding
             * nothing), so a JVP of the fused program has the pair's bits */
            const double bv = v[b], tb = (fl & 2) ? t[b] : 0.0;
            for (i = 0; i < n; i++) {
                const double ta = (fl & 1) ? t[a + i] : 0.0, tc = (fl & 4) ? t[c + i] : 0.0;
                const double tm = (0.0 + (tb != 0.0 ? tb * v[c + i] : -0.0))
                                  + (tc != 0.0 ? tc * bv : -0.0);
                t[o + i] = (0.0 + (ta != 0.0 ? ta * 1.0 : -0.0)) + (tm != 0.0 ? tm * 1.0 : -0.0);
            }
            VM_NEXT;
        }
        VM_CASE(SQDIFF) {
            for (i = 0; i < n; i++) {
                const double dt = ((fl & 1) ? t[a + i] : 0.0) - ((fl & 2) ? t[b + i] : 0.0);
                t[o + i] = dt != 0.0 ? dt * (2.0 * (v[a + i] - v[b + i])) : 0.0;
            }
            VM_NEXT;
        }
        VM_CASE(CSUM) {
            double r = (fl & 1) ? t[a] : 0.0;
            for (i = 0; i < n; i++) {
                const int32_t e = ints[c + i];
                if (e >= 0)
                    r += t[e];
                else
                    r -= t[~e];
            }
            t[o] = r;
            VM_NEXT;
        }
        VM_CASE(CLIP) {
            const double lo = v[b], hi = v[c];
            for (i = 0; i < n; i++) {
                const double f = v[o + i];
                t[o + i] = (fl & 1) && f != lo && f != hi ? t[a + i] : 0.0;
            }
            VM_NEXT;
        }
        VM_CASE(GAXPY) { rt_gaxpy_tangent(fl, n, t, v, ints, o, a, b, c); VM_NEXT; }
        VM_CASE(SSD) { t[o] = rt_kt_SSD(fl, n, t, v, a, b); VM_NEXT; }

        VM_CASE(REDUCE_SUM) {
            for (s = 0; s < n; s++) {
                const double *tx = t + a + s * b;
                double r = 0.0;
                for (i = 0; i < b; i++)
                    r += tx[i];
                t[o + s] = r;
            }
            VM_NEXT;
        }
        VM_CASE(REDUCE_MAX)
        VM_CASE(REDUCE_MIN) {
            /* The reverse's weights: 1/count on the elements equal to the
             * result; nan when none is (a nan result). */
            for (s = 0; s < n; s++) {
                const double f = v[o + s];
                const double *x = v + a + s * b, *tx = t + a + s * b;
                int64_t cnt = 0;
                double r = 0.0;
                for (i = 0; i < b; i++)
                    cnt += x[i] == f;
                for (i = 0; i < b; i++)
                    if (tx[i] != 0.0 && (cnt == 0 || x[i] == f))
                        r += tx[i] * (cnt == 0 ? NAN : 1.0 / (double)cnt);
                t[o + s] = r;
            }
            VM_NEXT;
        }
        VM_CASE(REDUCE_PROD) {
            /* The reverse's zero-safe partials: f / x without zeros, the
             * product of the others at a single zero, 0 with two or more. */
            for (s = 0; s < n; s++) {
                const double f = v[o + s];
                const double *x = v + a + s * b, *tx = t + a + s * b;
                int64_t zeros = 0, iz = 0;
                double r = 0.0;
                for (i = 0; i < b; i++)
                    if (x[i] == 0.0) {
                        zeros++;
                        iz = i;
                    }
                if (zeros == 0) {
                    for (i = 0; i < b; i++)
                        if (tx[i] != 0.0)
                            r += tx[i] * (f / x[i]);
                } else if (zeros == 1 && tx[iz] != 0.0) {
                    double others = 1.0;
                    for (i = 0; i < b; i++)
                        if (i != iz)
                            others *= x[i];
                    r = tx[iz] * others;
                }
                t[o + s] = r;
            }
            VM_NEXT;
        }
        VM_CASE(REDUCE_LOGSUMEXP) {
            for (s = 0; s < n; s++) {
                const double f = v[o + s];
                const double *x = v + a + s * b, *tx = t + a + s * b;
                double r = 0.0;
                for (i = 0; i < b; i++)
                    if (tx[i] != 0.0)
                        r += tx[i] * exp(x[i] - f);
                t[o + s] = r;
            }
            VM_NEXT;
        }

        VM_CASE(GATHER) {
            for (i = 0; i < n; i++)
                t[o + i] = t[a + ints[c + i]];
            VM_NEXT;
        }
        VM_CASE(SCATTER) {
            for (i = 0; i < n; i++)
                t[o + ints[c + i]] = t[a + i];
            VM_NEXT;
        }
        VM_CASE(SCATTER_ADD) {
            /* out[0..b) is still the caller's 0 (see above): add in place */
            for (i = 0; i < n; i++)
                t[o + ints[c + i]] += t[a + i];
            VM_NEXT;
        }
        VM_CASE(MATMUL) {
            const int64_t M = ints[c], K = ints[c + 1], N = ints[c + 2];
            for (i = 0; i < n; i++)
                t[o + i] = 0.0;
            if (fl & 1)
                rt_matmul_acc(t + o, t + a, v + b, M, K, N);
            if (fl & 2)
                rt_matmul_acc(t + o, v + a, t + b, M, K, N);
            VM_NEXT;
        }
#define TAN_LINALG(NAME) \
        VM_CASE(NAME) { rt_linalg_tangent(RT_OP_##NAME, fl, p->vals, t, ints + c, o, a, b); VM_NEXT; }
        RT_LINALG(TAN_LINALG)
        VM_CASE(PYCALL) {
            if (p->callback(p->callback_ctx, RT_CB_TANGENT, pc) != 0)
                return RT_CALLBACK_FAILED;
            VM_NEXT;
        }

#if !RT_COMPUTED_GOTO
        default:
            return RT_UNVERIFIED;           /* unreachable after rt_verify */
#endif
        }
    }
}

/* ------------------------------------------------------------------ verifier */

typedef struct {
    const rt_program *p;
    char *msg;
    int64_t msg_len;
    int64_t pc;             /* instruction being checked, -1: program header */
    const char *name;
} rt_vctx;

static int rt_vfail(rt_vctx *vc, const char *fmt, ...)
{
    if (vc->msg != NULL && vc->msg_len > 0) {
        const size_t cap = (uint64_t)vc->msg_len > (uint64_t)SIZE_MAX
                               ? SIZE_MAX : (size_t)vc->msg_len;
        int k = 0;
        va_list ap;
        vc->msg[0] = '\0';
        if (vc->pc >= 0 && vc->name != NULL)
            k = snprintf(vc->msg, cap, "instruction %lld (%s): ", (long long)vc->pc, vc->name);
        else if (vc->pc >= 0)
            k = snprintf(vc->msg, cap, "instruction %lld: ", (long long)vc->pc);
        if (k >= 0 && (size_t)k < cap) {
            va_start(ap, fmt);
            vsnprintf(vc->msg + k, cap - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return 0;
}

/* Arena operand [off, off+len) inside [0, n_vals).  All arithmetic is int64
 * on values built from int32 words (|off| < 2^31, |len| <= 2^62): no
 * overflow.  An empty region needs only 0 <= off <= n_vals, so forming the
 * pointer vals + off stays defined.  A written region must also avoid the
 * inputs and constants [0, n_fixed). */
static int rt_vregion(rt_vctx *vc, const char *what, int64_t off, int64_t len, int written)
{
    const rt_program *p = vc->p;
    if (len < 0)
        return rt_vfail(vc, "%s has negative length %lld", what, (long long)len);
    if (off < 0 || off > p->n_vals || len > p->n_vals - off)
        return rt_vfail(vc, "%s [%lld, %lld) is outside the value arena of %lld elements",
                        what, (long long)off, (long long)(off + len), (long long)p->n_vals);
    if (written && len > 0 && off < p->n_fixed)
        return rt_vfail(vc, "%s [%lld, %lld) would overwrite inputs/constants [0, %lld)",
                        what, (long long)off, (long long)(off + len), (long long)p->n_fixed);
    return 1;
}

static int rt_vints(rt_vctx *vc, const char *what, int64_t off, int64_t len)
{
    const rt_program *p = vc->p;
    if (len < 0)
        return rt_vfail(vc, "%s has negative length %lld", what, (long long)len);
    if (off < 0 || off > p->n_ints || len > p->n_ints - off)
        return rt_vfail(vc, "%s [%lld, %lld) is outside the int table of %lld entries",
                        what, (long long)off, (long long)(off + len), (long long)p->n_ints);
    return 1;
}

/* Every index ints[c .. c+n) must lie in [0, bound). */
static int rt_vindices(rt_vctx *vc, int64_t c, int64_t n, int64_t bound, const char *target)
{
    const int32_t *ints = vc->p->ints;
    int64_t k;
    for (k = 0; k < n; k++) {
        const int32_t idx = ints[c + k];
        if (idx < 0 || idx >= bound)
            return rt_vfail(vc, "index %ld (entry %lld of its index map) out of range for %s of %lld elements",
                            (long)idx, (long long)k, target, (long long)bound);
    }
    return 1;
}

static int rt_voverlap(rt_vctx *vc, const char *what, int64_t o, int64_t lo, int64_t x, int64_t lx)
{
    if (lo > 0 && lx > 0 && o < x + lx && x < o + lo)
        return rt_vfail(vc, "output [%lld, %lld) overlaps %s [%lld, %lld)", (long long)o,
                        (long long)(o + lo), what, (long long)x, (long long)(x + lx));
    return 1;
}

#define V_CASE1(NAME, ...) case RT_OP_##NAME:
#define V_CASE_VV(NAME, ...) case RT_OP_##NAME##_VV:
#define V_CASE_VS(NAME, ...) case RT_OP_##NAME##_VS:
#define V_CASE_SV(NAME, ...) case RT_OP_##NAME##_SV:
#define V_CASE_GUARD(NAME, ...) case RT_OP_GUARD_##NAME:

static int rt_verify_instr(rt_vctx *vc, const int32_t *w)
{
    const rt_program *p = vc->p;
    const int32_t op = w[0];
    const int64_t n = w[1], o = w[2], a = w[3], b = w[4], c = w[5];
    int32_t opcode;
    /* Lengths of the arena operands a, b, c and of the written region at o;
     * -1: that word is not an arena operand. */
    int64_t la = -1, lb = -1, lc = -1, lo = n;

    vc->name = NULL;                        /* until the opcode is known */
    if (op < 0 || (op >> RT_FLAGS_SHIFT) > 7)
        return rt_vfail(vc, "op word 0x%08lx has flags beyond bits 0..2",
                        (unsigned long)(uint32_t)op);
    opcode = op & RT_OPCODE_MASK;
    if (opcode >= RT_NUM_OPS)
        return rt_vfail(vc, "unknown opcode %ld (this VM has %d)", (long)opcode, (int)RT_NUM_OPS);
    vc->name = rt_op_names[opcode];

    switch (opcode) {
    RT_GUARDS(V_CASE_GUARD)
        if (n != 0 && n != 1)
            return rt_vfail(vc, "expected result %lld is not 0 or 1", (long long)n);
        if (o < 0)
            return rt_vfail(vc, "negative guard number %lld", (long long)o);
        la = 1; lb = 1; lo = -1;
        break;
    default:
        if (n < 0)
            return rt_vfail(vc, "negative length n = %lld", (long long)n);
        break;
    }

    switch (opcode) {
    RT_GUARDS(V_CASE_GUARD)
        break;
    RT_UNARY(V_CASE1)
    RT_UNARY_ND(V_CASE1)
        la = n;
        break;
    RT_BINARY(V_CASE_VV)
    RT_BINARY_ND(V_CASE_VV)
        la = n; lb = n;
        break;
    RT_BINARY(V_CASE_VS)
    RT_BINARY_ND(V_CASE_VS)
        la = n; lb = 1;
        break;
    RT_BINARY(V_CASE_SV)
    RT_BINARY_ND(V_CASE_SV)
        la = 1; lb = n;
        break;
    case RT_OP_WHERE_VV: la = n; lb = n; lc = n; break;
    case RT_OP_WHERE_VS: la = n; lb = n; lc = 1; break;
    case RT_OP_WHERE_SV: la = n; lb = 1; lc = n; break;
    case RT_OP_CLIP:     la = n; lb = 1; lc = 1; break;
    case RT_OP_AXPY:     la = n; lb = 1; lc = n; break;
    case RT_OP_SQDIFF:   la = n; lb = n; break;
    case RT_OP_SSD:      la = n; lb = n; lo = 1; break;
    case RT_OP_GAXPY: {
        /* gaxpy.h: ints[c] = z's offset, ints[c+1] = a's length, then n indices */
        int64_t zo;
        if (!rt_vints(vc, "gather-axpy record", c, 2) || !rt_vints(vc, "index map", c + 2, n))
            return 0;
        zo = p->ints[c];
        la = p->ints[c + 1];
        if (la < 0)
            return rt_vfail(vc, "negative input length %lld", (long long)la);
        if (!rt_vindices(vc, c + 2, n, la, "input") || !rt_vregion(vc, "operand z", zo, n, 0)
            || !rt_voverlap(vc, "operand z", o, n, zo, n))
            return 0;
        lb = 1;
        break;
    }
    /* Listed by hand, like their kernels: a reduction added to ops.py
     * without a kernel here is rejected (and fails the count check). */
    case RT_OP_REDUCE_MAX:
    case RT_OP_REDUCE_MIN:
        if (b < 1)
            return rt_vfail(vc, "segment length %lld must be >= 1 (max/min of nothing)", (long long)b);
        la = n * b;
        break;
    case RT_OP_REDUCE_SUM:
    case RT_OP_REDUCE_PROD:
    case RT_OP_REDUCE_LOGSUMEXP:
    case RT_OP_REDUCE_ALL:
    case RT_OP_REDUCE_ANY:
        if (b < 0)
            return rt_vfail(vc, "negative segment length %lld", (long long)b);
        la = n * b;
        break;
    case RT_OP_GATHER:
        if (b < 0)
            return rt_vfail(vc, "negative input length %lld", (long long)b);
        if (!rt_vints(vc, "index map", c, n) || !rt_vindices(vc, c, n, b, "input"))
            return 0;
        la = b;
        break;
    case RT_OP_SCATTER_ADD:
    case RT_OP_SCATTER:
        if (b < 0)
            return rt_vfail(vc, "negative output length %lld", (long long)b);
        if (!rt_vints(vc, "index map", c, n) || !rt_vindices(vc, c, n, b, "output"))
            return 0;
        la = n; lo = b;
        if (opcode == RT_OP_SCATTER_ADD && !rt_voverlap(vc, "operand a", o, lo, a, la))
            return 0;
        break;
    case RT_OP_CSUM: {
        int64_t k;
        if (n < 1)
            return rt_vfail(vc, "a cumulative sum needs at least one term (n = %lld)", (long long)n);
        if (!rt_vints(vc, "term list", c, n))
            return 0;
        for (k = 0; k < n; k++) {
            const int32_t e = p->ints[c + k];
            const int64_t off = e >= 0 ? (int64_t)e : (int64_t)~e;
            if (off >= p->n_vals)
                return rt_vfail(vc, "term %lld: offset %lld is outside the value arena of %lld",
                                (long long)k, (long long)off, (long long)p->n_vals);
        }
        la = 1; lo = 1;
        break;
    }
    case RT_OP_PYCALL: {
        int64_t k;
        if (p->callback == NULL)
            return rt_vfail(vc, "the program calls back into Python but has no callback");
        if (a < 0 || a >= p->n_callbacks)
            return rt_vfail(vc, "callback slot %lld is outside [0, %lld)", (long long)a,
                            (long long)p->n_callbacks);
        if (b < 0)
            return rt_vfail(vc, "negative operand count %lld", (long long)b);
        if (!rt_vints(vc, "operand list", c, 3 * b))
            return 0;
        for (k = 0; k < b; k++) {
            const int64_t off = p->ints[c + 3 * k], len = p->ints[c + 3 * k + 1];
            const int32_t need = p->ints[c + 3 * k + 2];
            if (need != 0 && need != 1)
                return rt_vfail(vc, "operand %lld: needs-adjoint word %ld is not 0 or 1",
                                (long long)k, (long)need);
            if (!rt_vregion(vc, "a Python operand", off, len, 0))
                return 0;
            if (!rt_voverlap(vc, "a Python operand", o, n, off, len))
                return 0;
        }
        break;
    }
    case RT_OP_MATMUL: {
        int64_t M, K, N;
        if (!rt_vints(vc, "shape (M, K, N)", c, 3))
            return 0;
        M = p->ints[c]; K = p->ints[c + 1]; N = p->ints[c + 2];
        if (M < 0 || K < 0 || N < 0)
            return rt_vfail(vc, "negative shape (%lld, %lld, %lld)", (long long)M, (long long)K, (long long)N);
        if (M * N != n)
            return rt_vfail(vc, "n = %lld is not M*N = %lld*%lld", (long long)n, (long long)M, (long long)N);
        la = M * K; lb = K * N;
        if (!rt_voverlap(vc, "operand a", o, n, a, la) || !rt_voverlap(vc, "operand b", o, n, b, lb))
            return 0;
        break;
    }
    RT_LINALG(V_CASE1) {
        /* kernels in linalg.c; a scratch region of their own in the arena */
        int64_t so, ls;
        char why[160];
        if (!rt_vints(vc, "linear-algebra record", c, RT_LINALG_RECORD))
            return 0;
        if (rt_linalg_lengths(opcode, p->ints + c, n, &la, &lb, &so, &ls, why, sizeof why))
            return rt_vfail(vc, "%s", why);
        if (!rt_vregion(vc, "scratch", so, ls, 1) || !rt_voverlap(vc, "operand a", o, lo, a, la)
            || (lb >= 0 && !rt_voverlap(vc, "operand b", o, lo, b, lb))
            || !rt_voverlap(vc, "operand a (scratch)", so, ls, a, la)
            || !rt_voverlap(vc, "the output (scratch)", so, ls, o, lo)
            || (lb >= 0 && !rt_voverlap(vc, "operand b (scratch)", so, ls, b, lb)))
            return 0;
        break;
    }
    default:
        return rt_vfail(vc, "opcode has no kernel");   /* unreachable: all covered */
    }

    if (la >= 0 && !rt_vregion(vc, "operand a", a, la, 0))
        return 0;
    if (lb >= 0 && !rt_vregion(vc, "operand b", b, lb, 0))
        return 0;
    if (lc >= 0 && !rt_vregion(vc, "operand c", c, lc, 0))
        return 0;
    if (lo >= 0 && !rt_vregion(vc, "output", o, lo, 1))
        return 0;
    /* No kernel writes over what it reads: the array kernels (kernels.c)
     * qualify their pointers restrict on this guarantee. */
    if (lo >= 0 && ((la >= 0 && !rt_voverlap(vc, "operand a", o, lo, a, la))
                    || (lb >= 0 && !rt_voverlap(vc, "operand b", o, lo, b, lb))
                    || (lc >= 0 && !rt_voverlap(vc, "operand c", o, lo, c, lc))))
        return 0;
    return 1;
}

static int rt_verify_program(rt_vctx *vc)
{
    const rt_program *p = vc->p;
    int64_t pc;

    if (p->n_instr < 0 || p->n_ints < 0 || p->n_vals < 0)
        return rt_vfail(vc, "negative size (n_instr %lld, n_ints %lld, n_vals %lld)",
                        (long long)p->n_instr, (long long)p->n_ints, (long long)p->n_vals);
    if (p->n_instr > INT64_MAX / RT_WORDS)
        return rt_vfail(vc, "n_instr %lld is too large", (long long)p->n_instr);
    if ((uint64_t)p->n_vals > (uint64_t)(SIZE_MAX / sizeof(double)))
        return rt_vfail(vc, "n_vals %lld is too large", (long long)p->n_vals);
    if (p->n_instr > 0 && p->code == NULL)
        return rt_vfail(vc, "code is NULL");
    if (p->n_ints > 0 && p->ints == NULL)
        return rt_vfail(vc, "ints is NULL");
    if ((p->n_vals > 0 || p->n_instr > 0) && (p->vals == NULL || p->adj == NULL))
        return rt_vfail(vc, "vals or adj is NULL");   /* kernels offset them even for n = 0 */
    if (p->n_vals > 0) {
        const uintptr_t v0 = (uintptr_t)p->vals, d0 = (uintptr_t)p->adj;
        const uintptr_t bytes = (uintptr_t)p->n_vals * sizeof(double);
        if (v0 < d0 + bytes && d0 < v0 + bytes)
            return rt_vfail(vc, "vals and adj overlap");
    }
    if (!(0 <= p->n_grad && p->n_grad <= p->n_in && p->n_in <= p->n_fixed
          && p->n_fixed <= p->n_vals))
        return rt_vfail(vc, "need 0 <= n_grad (%lld) <= n_in (%lld) <= n_fixed (%lld) <= n_vals (%lld)",
                        (long long)p->n_grad, (long long)p->n_in, (long long)p->n_fixed,
                        (long long)p->n_vals);
    if (p->out_len < 0 || p->out_off < 0 || p->out_off > p->n_vals
        || p->out_len > p->n_vals - p->out_off)
        return rt_vfail(vc, "output [%lld, +%lld) is outside the value arena of %lld elements",
                        (long long)p->out_off, (long long)p->out_len, (long long)p->n_vals);

    for (pc = 0; pc < p->n_instr; pc++) {
        vc->pc = pc;
        if (!rt_verify_instr(vc, p->code + pc * RT_WORDS))
            return 0;
    }
    return 1;
}

/* 1 if any instruction is a guard (the program can refuse a replay midway). */
static int32_t rt_has_guard(const rt_program *p)
{
    int64_t pc;
    for (pc = 0; pc < p->n_instr; pc++) {
        switch (p->code[pc * RT_WORDS] & RT_OPCODE_MASK) {
        RT_GUARDS(V_CASE_GUARD)
            return 1;
        default:
            break;
        }
    }
    return 0;
}

int rt_verify(rt_program *p, char *msg, int64_t msg_len)
{
    rt_vctx vc;
    int ok;
    if (p == NULL) {
        if (msg != NULL && msg_len > 0)
            snprintf(msg, (size_t)(msg_len > 64 ? 64 : msg_len), "program is NULL");
        return RT_UNVERIFIED;
    }
    vc.p = p; vc.msg = msg; vc.msg_len = msg_len; vc.pc = -1; vc.name = NULL;
    if (msg != NULL && msg_len > 0)
        msg[0] = '\0';
    ok = rt_verify_program(&vc);
    p->guarded = ok ? rt_has_guard(p) : 0;
    __atomic_store_n(&p->verified, ok ? 1 : 0, __ATOMIC_RELEASE);
    return ok ? RT_OK : RT_UNVERIFIED;
}

/* ------------------------------------------------------------------ entry points
 * Protocol: take the program with an atomic exchange on busy (a concurrent
 * replay gets RT_BUSY and touches nothing but status), check verified, run,
 * write status, release busy on every path.  Every entry point sets
 * p->status (not only rt_value_and_grad).  y, g and J are written only when
 * the status is RT_OK.  RT_BADARG: value_and_grad with out_len != 1, or a
 * NULL g / w / J where the corresponding length is > 0 (x and y may always
 * be NULL).  status is stored with a relaxed atomic because the RT_BUSY
 * store races, by design, with the replay that holds the program. */

static int rt_acquire(rt_program *p)
{
    if (__atomic_exchange_n(&p->busy, 1, __ATOMIC_ACQUIRE) != 0) {
        __atomic_store_n(&p->status, RT_BUSY, __ATOMIC_RELAXED);
        return 0;
    }
    return 1;
}

static int rt_release(rt_program *p, int status)
{
    __atomic_store_n(&p->status, status, __ATOMIC_RELAXED);
    __atomic_store_n(&p->busy, 0, __ATOMIC_RELEASE);
    return status;
}

/* Copies x in (unless NULL) and runs the forward sweep; the caller holds busy
 * and has checked `verified` (rt_begin). */
static int rt_forward_locked(rt_program *p, const double *x)
{
    /* nan and +-inf are values (they replay as numpy computes them), so x
     * is copied in as it is, unchecked. */
    if (x != NULL && p->n_in > 0)
        memcpy(p->vals, x, (size_t)p->n_in * sizeof(double));
    return rt_run_forward(p);
}

/* A guard can refuse a replay after x was copied in and part of the program
 * ran.  So that the arena still holds one complete replay afterwards (what
 * rt_read_io reports), guarded programs keep the previous inputs and output
 * in the adjoint arena, which is scratch until a reverse or tangent sweep
 * zeroes it, and put them back on refusal.  Same offsets: an output that
 * aliases an input is saved and restored consistently. */
static void rt_save_io(rt_program *p, int restore)
{
    double *from = restore ? p->adj : p->vals, *to = restore ? p->vals : p->adj;
    if (p->n_in > 0)
        memcpy(to, from, (size_t)p->n_in * sizeof(double));
    if (p->out_len > 0)
        memcpy(to + p->out_off, from + p->out_off, (size_t)p->out_len * sizeof(double));
}

/* The start every entry point shares: take the program, check that it was
 * verified and that the caller passed every buffer it needs (`missing`),
 * copy x in and run the forward sweep.  On RT_BUSY the program was not
 * taken: return at once, without rt_release.  A refused replay fills r (if
 * not NULL) before the previous replay's values are put back. */
static int rt_begin_report(rt_program *p, const double *x, int missing, rt_report *r)
{
    int st;
    if (!rt_acquire(p))
        return RT_BUSY;
    if (!__atomic_load_n(&p->verified, __ATOMIC_ACQUIRE))
        return RT_UNVERIFIED;
    if (missing)
        return RT_BADARG;
    if (p->guarded)
        rt_save_io(p, 0);
    st = rt_forward_locked(p, x);
    if (st != RT_OK && p->guarded) {
        if (st == RT_GUARD_FAILED && r != NULL) {
            const int32_t *w = p->code + p->failed_pc * RT_WORDS;
            r->guard = w[2];
            r->operands[0] = p->vals[w[3]];
            r->operands[1] = p->vals[w[4]];
        }
        rt_save_io(p, 1);
    }
    return st;
}

static int rt_begin(rt_program *p, const double *x, int missing)
{
    return rt_begin_report(p, x, missing, NULL);
}

static void rt_copy_out(const rt_program *p, double *y)
{
    if (y != NULL && p->out_len > 0)
        memcpy(y, p->vals + p->out_off, (size_t)p->out_len * sizeof(double));
}

static void rt_zero_adj(const rt_program *p)
{
    if (p->n_vals > 0)
        memset(p->adj, 0, (size_t)p->n_vals * sizeof(double));
}

/* Before a reverse sweep: the constants' adjoints are never written (their
 * operands' flags are off, and no instruction's output is a constant) nor
 * read (a sweep reads the adjoints of outputs and the gradient of inputs),
 * so only the inputs and the intermediates are zeroed -- data arrays such as
 * a regression's design matrix are most of some arenas. */
static void rt_zero_adj_rev(const rt_program *p)
{
    if (p->n_in > 0)
        memset(p->adj, 0, (size_t)p->n_in * sizeof(double));
    if (p->n_vals > p->n_fixed)
        memset(p->adj + p->n_fixed, 0, (size_t)(p->n_vals - p->n_fixed) * sizeof(double));
    if (p->out_off >= p->n_in && p->out_off < p->n_fixed)
        memset(p->adj + p->out_off, 0, (size_t)p->out_len * sizeof(double));   /* a constant output's seed */
}

static void rt_copy_grad(const rt_program *p, double *g)
{
    if (p->n_grad > 0)
        memcpy(g, p->adj, (size_t)p->n_grad * sizeof(double));
}

int rt_forward(rt_program *p, const double *x, double *y)
{
    int st;
    if (p == NULL)
        return RT_BADARG;
    if ((st = rt_begin(p, x, 0)) == RT_BUSY)
        return st;
    if (st == RT_OK)
        rt_copy_out(p, y);
    return rt_release(p, st);
}

int rt_forward_report(rt_program *p, const double *x, double *y, int64_t pick, rt_report *r)
{
    int st;
    if (p == NULL)
        return RT_BADARG;
    if ((st = rt_begin_report(p, x, pick >= p->n_vals || (pick >= 0 && r == NULL), r)) == RT_BUSY)
        return st;
    if (st == RT_OK) {
        rt_copy_out(p, y);
        if (pick >= 0)
            r->picked = p->vals[pick];
    }
    return rt_release(p, st);
}

int rt_read_io(rt_program *p, double *x, double *y)
{
    int st = RT_OK;
    if (p == NULL)
        return RT_BADARG;
    if (!rt_acquire(p))
        return RT_BUSY;
    if (!__atomic_load_n(&p->verified, __ATOMIC_ACQUIRE))
        st = RT_UNVERIFIED;
    else {
        if (x != NULL && p->n_in > 0)
            memcpy(x, p->vals, (size_t)p->n_in * sizeof(double));
        rt_copy_out(p, y);
    }
    return rt_release(p, st);
}

int rt_value_and_grad(rt_program *p, const double *x, double *value, double *g)
{
    int st;
    if (p == NULL || value == NULL)
        return RT_BADARG;
    if ((st = rt_begin(p, x, p->out_len != 1 || (g == NULL && p->n_grad > 0))) == RT_BUSY)
        return st;
    if (st == RT_OK) {
        rt_zero_adj_rev(p);
        p->adj[p->out_off] = 1.0;
        st = rt_run_reverse(p);
        if (st == RT_OK) {
            rt_copy_grad(p, g);
            *value = p->vals[p->out_off];
        }
    }
    return rt_release(p, st);
}

int rt_vjp(rt_program *p, const double *x, const double *w, double *y, double *g)
{
    int st;
    int64_t i;
    if (p == NULL)
        return RT_BADARG;
    if ((st = rt_begin(p, x, (w == NULL && p->out_len > 0) || (g == NULL && p->n_grad > 0)))
        == RT_BUSY)
        return st;
    if (st == RT_OK) {
        rt_copy_out(p, y);
        rt_zero_adj_rev(p);
        for (i = 0; i < p->out_len; i++)
            p->adj[p->out_off + i] = w[i];
        st = rt_run_reverse(p);
        if (st == RT_OK)
            rt_copy_grad(p, g);
    }
    return rt_release(p, st);
}

int rt_jacobian(rt_program *p, const double *x, double *y, double *J)
{
    int st;
    int64_t i;
    if (p == NULL)
        return RT_BADARG;
    if ((st = rt_begin(p, x, J == NULL && p->out_len > 0 && p->n_grad > 0)) == RT_BUSY)
        return st;
    if (st == RT_OK) {
        rt_copy_out(p, y);
        /* One forward, then one reverse sweep per output: row i of J. */
        for (i = 0; i < p->out_len; i++) {
            rt_zero_adj_rev(p);
            p->adj[p->out_off + i] = 1.0;
            if ((st = rt_run_reverse(p)) != RT_OK)
                break;
            if (p->n_grad > 0)              /* J may be NULL when it has no columns */
                rt_copy_grad(p, J + i * p->n_grad);
        }
    }
    return rt_release(p, st);
}

/* Seeds the tangent arena with xdot on the differentiated inputs (nan/inf
 * tangents included: they flow through the sweep as numpy would). */
static int rt_seed_tangent(rt_program *p, const double *xdot)
{
    rt_zero_adj(p);
    if (p->n_grad > 0)
        memcpy(p->adj, xdot, (size_t)p->n_grad * sizeof(double));
    return RT_OK;
}

int rt_jvp(rt_program *p, const double *x, const double *xdot, double *y, double *ydot)
{
    int st;
    if (p == NULL)
        return RT_BADARG;
    if ((st = rt_begin(p, x, (xdot == NULL && p->n_grad > 0) || (ydot == NULL && p->out_len > 0)))
        == RT_BUSY)
        return st;
    if (st == RT_OK)
        st = rt_seed_tangent(p, xdot);
    if (st == RT_OK) {
        rt_copy_out(p, y);
        st = rt_run_tangent(p);
        if (st == RT_OK && p->out_len > 0)
            memcpy(ydot, p->adj + p->out_off, (size_t)p->out_len * sizeof(double));
    }
    return rt_release(p, st);
}

int rt_jacobian_fwd(rt_program *p, const double *x, double *y, double *J)
{
    int st;
    int64_t i, j;
    if (p == NULL)
        return RT_BADARG;
    if ((st = rt_begin(p, x, J == NULL && p->out_len > 0 && p->n_grad > 0)) == RT_BUSY)
        return st;
    if (st == RT_OK) {
        rt_copy_out(p, y);
        /* One forward, then one tangent sweep per input: column j of J. */
        for (j = 0; j < p->n_grad; j++) {
            rt_zero_adj(p);
            p->adj[j] = 1.0;
            if ((st = rt_run_tangent(p)) != RT_OK)
                break;
            for (i = 0; i < p->out_len; i++)
                J[i * p->n_grad + j] = p->adj[p->out_off + i];
        }
    }
    return rt_release(p, st);
}

/* ------------------------------------------------------------------ batched replay
 * One call for k points: the per-row work is exactly rt_value_and_grad's
 * (copy the row in, forward, zero and seed the adjoints, reverse, copy out),
 * so every row's results are bit-identical to a single replay at that row.
 * Rows are copied in without the finiteness check: a batch of sampler
 * proposals may hold nan/inf points, which give nan/inf results. */

static int rt_batch_begin(rt_program *p, int64_t k, const double *X, int64_t *row, int missing)
{
    if (row != NULL)
        *row = 0;
    if (!rt_acquire(p))
        return RT_BUSY;
    if (!__atomic_load_n(&p->verified, __ATOMIC_ACQUIRE))
        return RT_UNVERIFIED;
    if (missing || k < 0 || (k > 0 && X == NULL && p->n_in > 0))
        return RT_BADARG;
    return RT_OK;
}

int rt_batch_value_and_grad(rt_program *p, int64_t k, const double *X, double *values,
                            double *G, int64_t *row)
{
    int st;
    int64_t r = 0;
    if (p == NULL)
        return RT_BADARG;
    st = rt_batch_begin(p, k, X, row, p->out_len != 1 || (k > 0 && values == NULL)
                        || (k > 0 && G == NULL && p->n_grad > 0));
    if (st == RT_BUSY)
        return st;
    for (; st == RT_OK && r < k; r++) {
        if (p->guarded)                 /* a refused row leaves the last complete one */
            rt_save_io(p, 0);
        if (p->n_in > 0)
            memcpy(p->vals, X + r * p->n_in, (size_t)p->n_in * sizeof(double));
        if ((st = rt_run_forward(p)) != RT_OK)
            break;
        rt_zero_adj_rev(p);
        p->adj[p->out_off] = 1.0;
        if ((st = rt_run_reverse(p)) != RT_OK)
            break;
        if (p->n_grad > 0)
            memcpy(G + r * p->n_grad, p->adj, (size_t)p->n_grad * sizeof(double));
        values[r] = p->vals[p->out_off];
    }
    if (st != RT_OK && st != RT_UNVERIFIED && st != RT_BADARG && p->guarded)
        rt_save_io(p, 1);
    if (row != NULL)
        *row = r;
    return rt_release(p, st);
}

int rt_batch_forward(rt_program *p, int64_t k, const double *X, double *Y, int64_t *row)
{
    int st;
    int64_t r = 0;
    if (p == NULL)
        return RT_BADARG;
    st = rt_batch_begin(p, k, X, row, k > 0 && Y == NULL && p->out_len > 0);
    if (st == RT_BUSY)
        return st;
    for (; st == RT_OK && r < k; r++) {
        if (p->guarded)
            rt_save_io(p, 0);
        if (p->n_in > 0)
            memcpy(p->vals, X + r * p->n_in, (size_t)p->n_in * sizeof(double));
        if ((st = rt_run_forward(p)) != RT_OK)
            break;
        if (p->out_len > 0)
            memcpy(Y + r * p->out_len, p->vals + p->out_off, (size_t)p->out_len * sizeof(double));
    }
    if (st != RT_OK && st != RT_UNVERIFIED && st != RT_BADARG && p->guarded)
        rt_save_io(p, 1);
    if (row != NULL)
        *row = r;
    return rt_release(p, st);
}

int rt_batch_wide(rt_program *pw, int64_t B, int64_t n_in, int64_t n_grad, int64_t out_off,
                  int32_t with_grad, int64_t k, const double *X, double *values, double *G,
                  int64_t *row)
{
    int st;
    int64_t r0 = 0, r, s, m;
    if (pw == NULL)
        return RT_BADARG;
    /* the scalar layout must be the wide one's, lane for lane: then every
     * index below lies inside regions the verifier checked */
    st = rt_batch_begin(pw, k, X, row,
                        B < 1 || n_in < 0 || n_grad < 0 || n_grad > n_in || out_off < 0
                        || n_in > INT64_MAX / B || out_off > INT64_MAX / B
                        || pw->n_in != n_in * B || pw->n_grad != n_grad * B
                        || pw->out_off != out_off * B || pw->out_len != B
                        || (k > 0 && values == NULL)
                        || (with_grad && k > 0 && n_grad > 0 && G == NULL));
    if (st == RT_BUSY)
        return st;
    for (; st == RT_OK && r0 < k; r0 += B) {
        double *const v = pw->vals, *const d = pw->adj;
        m = k - r0 < B ? k - r0 : B;
        for (s = 0; s < n_in; s++)
            for (r = 0; r < B; r++)
                v[s * B + r] = X[(r0 + (r < m ? r : 0)) * n_in + s];
        if ((st = rt_run_forward(pw)) != RT_OK)
            break;
        if (with_grad) {
            rt_zero_adj(pw);
            for (r = 0; r < B; r++)
                d[out_off * B + r] = 1.0;
            if ((st = rt_run_reverse(pw)) != RT_OK)
                break;
            for (r = 0; r < m; r++)
                for (s = 0; s < n_grad; s++)
                    G[(r0 + r) * n_grad + s] = d[s * B + r];
        }
        for (r = 0; r < m; r++)
            values[r0 + r] = v[out_off * B + r];
    }
    if (row != NULL)
        *row = r0 < k ? r0 : k;
    return rt_release(pw, st);
}

int rt_call_native(rt_native_fn fn, rt_program *p, const double *x, double *a, double *b)
{
    if (fn == NULL || p == NULL)
        return RT_BADARG;
    return fn(p, x, a, b);
}
