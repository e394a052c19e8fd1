/* Batched replay of scalar code as array code (structure of arrays).
 *
 * Replaying a program of scalar instructions at k points one point at a time
 * pays the dispatch of every instruction k times.  Here every slot holds L =
 * RT_SOA_LANES points side by side (slot s is vals[s*L .. s*L+L)), so one
 * dispatch runs an instruction at L points: a loop of fixed length L that
 * the compiler unrolls and vectorises.  Each lane computes exactly what the
 * scalar VM computes for its point -- the same expression from the op table
 * (ops_generated.h), the same operand order, the same zero-adjoint rule --
 * so every row's value and gradient are bit for bit those of a single
 * replay (tests/test_batch.py).
 *
 * What the lanes change, and why it is safe:
 *   - A constant operand that needs no adjoint is read as one scalar (the
 *     _VS / _SV form, which the compiler of the wide program picks); its
 *     L copies in the arena hold the same value.
 *   - `restrict`: the verifier refuses an instruction whose output region
 *     overlaps an operand region, so a written lane array never aliases
 *     what the loop reads.  Two operands may be one slot (x * x); their
 *     adjoints are then updated by a separate loop, a's term then b's, the
 *     order of the scalar VM.
 *   - The zero-adjoint rule (azmul) is branch-free as in kernels.c: the
 *     term is `g != 0 ? g * partial : -0.0`, and adding -0.0 changes no bit.
 *   - No zeroing of the adjoint arena: the first contribution to a slot is
 *     assigned as `0.0 + term`, the bits that adding it to a zeroed slot
 *     gives (see soa.h for the side tables that say which one is first).
 *
 * The sweeps are compiled for AVX-512, AVX2 and baseline x86-64
 * (target_clones, chosen at load time); no FMA contraction (the pragma), so
 * every clone rounds as the scalar VM does.  Functions without a vector form
 * (exp, log1p, the special functions) are called once per lane.
 */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE 1   /* M_2_SQRTPI */
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "vm/soa.h"
#include "generated/ops_generated.h"
#include "kernels/specfun.h"

#ifndef M_2_SQRTPI
#define M_2_SQRTPI 1.12837916709551257390
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "fp-contract=off", "no-trapping-math")
#endif

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define RT_SCLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define RT_SCLONES
#endif

#define L RT_SOA_LANES

/* Every kernel is inlined into the sweeps, which are the cloned functions:
 * an out-of-line kernel would be compiled for baseline x86-64 only. */
#if defined(__GNUC__)
#define RT_SK static inline __attribute__((always_inline))
#else
#define RT_SK static inline
#endif
/* The loop over the lanes.  No complete unrolling: gcc would peel a short
 * loop (L <= 16) into scalar copies before the vectoriser sees it. */
#if defined(__GNUC__) && !defined(__clang__)
#define RT_LANES(i) for (i = 0; i < L; i++)
#else
#define RT_LANES(i) for (i = 0; i < L; i++)
#endif
#define RT_AZ(g, D) ((g) != 0.0 ? (g) * (D) : -0.0)
/* the adjoint update: assigned on a slot's first contribution, else added */
#define RT_UPD(FST, dst, term) ((dst) = ((FST) ? 0.0 : (dst)) + (term))

/* ------------------------------------------------------------------ forward */

#define SF_UNARY_(NAME, FX, ...)                                              \
    RT_SK void sf_##NAME(double *restrict out, const double *restrict xa) \
    {                                                                         \
        int i;                                                                \
        RT_LANES(i) {                                             \
            const double x = xa[i];                                           \
            out[i] = FX;                                                      \
        }                                                                     \
    }

#define SF_BINARY_(NAME, FXY, ...)                                            \
    RT_SK void sf_##NAME##_VV(double *restrict out, const double *restrict xa, \
                                      const double *restrict yb)              \
    {                                                                         \
        int i;                                                                \
        RT_LANES(i) {                                             \
            const double x = xa[i], y = yb[i];                                \
            out[i] = FXY;                                                     \
        }                                                                     \
    }                                                                         \
    RT_SK void sf_##NAME##_VS(double *restrict out, const double *restrict xa, \
                                      const double *restrict yb)              \
    {                                                                         \
        const double y = yb[0];                                               \
        int i;                                                                \
        RT_LANES(i) {                                             \
            const double x = xa[i];                                           \
            out[i] = FXY;                                                     \
        }                                                                     \
    }                                                                         \
    RT_SK void sf_##NAME##_SV(double *restrict out, const double *restrict xa, \
                                      const double *restrict yb)              \
    {                                                                         \
        const double x = xa[0];                                               \
        int i;                                                                \
        RT_LANES(i) {                                             \
            const double y = yb[i];                                           \
            out[i] = FXY;                                                     \
        }                                                                     \
    }

RT_UNARY(SF_UNARY_)
RT_UNARY_ND(SF_UNARY_)
RT_BINARY(SF_BINARY_)
RT_BINARY_ND(SF_BINARY_)

RT_SK void sf_where(double *restrict out, const double *restrict ca,
                            const double *restrict xb, const double *restrict yc)
{
    int i;
    RT_LANES(i)
        out[i] = ca[i] != 0.0 ? xb[i] : yc[i];
}

RT_SK void sf_sqdiff(double *restrict out, const double *restrict xa,
                             const double *restrict yb)
{
    int i;
    RT_LANES(i) {
        const double t = xa[i] - yb[i];
        out[i] = t * t;
    }
}

#define SF_CASE1_(NAME, ...) case RT_OP_##NAME: sf_##NAME(out, xa); break;
#define SF_CASE3_(NAME, ...)                                                  \
    case RT_OP_##NAME##_VV: sf_##NAME##_VV(out, xa, yb); break;               \
    case RT_OP_##NAME##_VS: sf_##NAME##_VS(out, xa, yb); break;               \
    case RT_OP_##NAME##_SV: sf_##NAME##_SV(out, xa, yb); break;

RT_SCLONES static void rt_soa_forward(const int32_t *code, int64_t n_instr, double *v)
{
    int64_t pc;
    for (pc = 0; pc < n_instr; pc++) {
        const int32_t *w = code + pc * RT_WORDS;
        double *out = v + w[2];
        const double *xa = v + w[3], *yb = v + w[4];
        switch (w[0] & RT_OPCODE_MASK) {
        RT_UNARY(SF_CASE1_)
        RT_UNARY_ND(SF_CASE1_)
        RT_BINARY(SF_CASE3_)
        RT_BINARY_ND(SF_CASE3_)
        case RT_OP_WHERE_VV: sf_where(out, xa, yb, v + w[5]); break;
        case RT_OP_SQDIFF: sf_sqdiff(out, xa, yb); break;
        default: break;                     /* unreachable after rt_soa_check */
        }
    }
}

/* ------------------------------------------------------------------ reverse */

#define SR_UNARY_(NAME, FX, DX)                                               \
    RT_SK void sr_##NAME(int fst, double *restrict da, const double *restrict go, \
                                 const double *restrict xa, const double *restrict fo) \
    {                                                                         \
        int i;                                                                \
        RT_LANES(i) {                                             \
            const double g = go[i], x = xa[i], f = fo[i];                     \
            (void)x; (void)f;                                                 \
            RT_UPD(fst, da[i], RT_AZ(g, DX));                                 \
        }                                                                     \
    }

/* _VV: distinct slots in one loop, one slot (x op x) in a loop that adds
 * a's term before b's; _VS / _SV: only the vector operand has an adjoint. */
#define SR_BINARY_(NAME, FXY, DX, DY)                                         \
    RT_SK void sr_##NAME##_a(int fst, double *restrict da, const double *restrict go, \
                                     const double *restrict xa, const double *restrict yb, \
                                     const double *restrict fo, int sx, int sy) \
    {                                                                         \
        int i;                                                                \
        RT_LANES(i) {                                             \
            const double g = go[i], x = xa[i * sx], y = yb[i * sy], f = fo[i]; \
            (void)x; (void)y; (void)f;                                        \
            RT_UPD(fst, da[i], RT_AZ(g, DX));                                 \
        }                                                                     \
    }                                                                         \
    RT_SK void sr_##NAME##_b(int fst, double *restrict db, const double *restrict go, \
                                     const double *restrict xa, const double *restrict yb, \
                                     const double *restrict fo, int sx, int sy) \
    {                                                                         \
        int i;                                                                \
        RT_LANES(i) {                                             \
            const double g = go[i], x = xa[i * sx], y = yb[i * sy], f = fo[i]; \
            (void)x; (void)y; (void)f;                                        \
            RT_UPD(fst, db[i], RT_AZ(g, DY));                                 \
        }                                                                     \
    }                                                                         \
    RT_SK void sr_##NAME##_ab(int fa, int fb, double *restrict da,    \
                                      double *restrict db, const double *restrict go, \
                                      const double *restrict xa, const double *restrict yb, \
                                      const double *restrict fo)              \
    {                                                                         \
        int i;                                                                \
        RT_LANES(i) {                                             \
            const double g = go[i], x = xa[i], y = yb[i], f = fo[i];          \
            (void)x; (void)y; (void)f;                                        \
            RT_UPD(fa, da[i], RT_AZ(g, DX));                                  \
            RT_UPD(fb, db[i], RT_AZ(g, DY));                                  \
        }                                                                     \
    }                                                                         \
    RT_SK void sr_##NAME##_same(int fa, double *restrict dx,          \
                                        const double *restrict go,            \
                                        const double *restrict xa,            \
                                        const double *restrict fo)            \
    {                                                                         \
        int i;                                                                \
        RT_LANES(i) {                                             \
            const double g = go[i], x = xa[i], y = x, f = fo[i];              \
            const double t = (fa ? 0.0 : dx[i]) + RT_AZ(g, DX);               \
            (void)x; (void)y; (void)f;                                        \
            dx[i] = t + RT_AZ(g, DY);                                         \
        }                                                                     \
    }                                                                         \
    RT_SK void sr_##NAME##_VV(uint32_t fl, uint32_t fst, double *d,   \
                                      const double *v, int64_t o, int64_t a, int64_t b) \
    {                                                                         \
        if ((fl & 3) == 3) {                                                  \
            if (a != b)                                                       \
                sr_##NAME##_ab(fst & 1, fst & 2, d + a, d + b, d + o, v + a, v + b, v + o); \
            else                                                              \
                sr_##NAME##_same(fst & 1, d + a, d + o, v + a, v + o);        \
        } else if (fl & 1) {                                                  \
            sr_##NAME##_a(fst & 1, d + a, d + o, v + a, v + b, v + o, 1, 1);  \
        } else {                                                              \
            sr_##NAME##_b(fst & 2, d + b, d + o, v + a, v + b, v + o, 1, 1);  \
        }                                                                     \
    }

RT_UNARY(SR_UNARY_)
RT_BINARY(SR_BINARY_)

/* where: each lane's adjoint goes to b or to c (the condition a is never
 * differentiated); b and c are distinct slots or one, b's pass first */
RT_SK void sr_where(int fst, double *restrict dd, const double *restrict go,
                            const double *restrict ca, int take)
{
    int i;
    RT_LANES(i) {
        const double g = go[i];
        RT_UPD(fst, dd[i], g != 0.0 && (ca[i] != 0.0) == take ? g : -0.0);
    }
}

/* (a - b)^2 as SQUARE's reverse then SUB's: gt = g * (2t), passed on when
 * g and gt are non-zero (SQDIFF in instr/fused.h) */
RT_SK void sr_sqdiff(uint32_t fl, uint32_t fst, double *restrict da,
                             double *restrict db, const double *restrict go,
                             const double *restrict xa, const double *restrict yb)
{
    int i;
    RT_LANES(i) {
        const double g = go[i], t = xa[i] - yb[i], gt = g * (2.0 * t);
        const int on = g != 0.0 && gt != 0.0;
        if (fl & 1) RT_UPD(fst & 1, da[i], on ? gt * 1.0 : -0.0);
        if (fl & 2) RT_UPD(fst & 2, db[i], on ? gt * -1.0 : -0.0);
    }
}

RT_SK void sr_sqdiff_same(uint32_t fst, double *restrict dx, const double *restrict go,
                                  const double *restrict xa)
{
    int i;
    RT_LANES(i) {
        const double g = go[i], t = xa[i] - xa[i], gt = g * (2.0 * t);
        const int on = g != 0.0 && gt != 0.0;
        const double s = ((fst & 1) ? 0.0 : dx[i]) + (on ? gt * 1.0 : -0.0);
        dx[i] = s + (on ? gt * -1.0 : -0.0);
    }
}

#define SR_CASE1_(NAME, ...)                                                  \
    case RT_OP_##NAME:                                                        \
        if (fl & 1) sr_##NAME(fst & 1, d + a, d + o, v + a, v + o);           \
        break;
#define SR_CASE3_(NAME, ...)                                                  \
    case RT_OP_##NAME##_VV: sr_##NAME##_VV(fl, fst, d, v, o, a, b); break;    \
    case RT_OP_##NAME##_VS:                                                   \
        sr_##NAME##_a(fst & 1, d + a, d + o, v + a, v + b, v + o, 1, 0); break; \
    case RT_OP_##NAME##_SV:                                                   \
        sr_##NAME##_b(fst & 2, d + b, d + o, v + a, v + b, v + o, 0, 1); break;

RT_SCLONES static void rt_soa_reverse(const int32_t *code, int64_t n_instr, const uint8_t *first,
                                      const double *v, double *d)
{
    int64_t pc;
    for (pc = n_instr - 1; pc >= 0; pc--) {
        const int32_t *w = code + pc * RT_WORDS;
        const uint32_t fl = (uint32_t)w[0] >> RT_FLAGS_SHIFT, fst = first[pc];
        const int64_t o = w[2], a = w[3], b = w[4], c = w[5];
        if (fl == 0)
            continue;                       /* nothing upstream needs an adjoint */
        switch (w[0] & RT_OPCODE_MASK) {
        RT_UNARY(SR_CASE1_)
        RT_BINARY(SR_CASE3_)
        case RT_OP_WHERE_VV:
            if (fl & 2) sr_where(fst & 2, d + b, d + o, v + a, 1);
            if (fl & 4) sr_where(fst & 4, d + c, d + o, v + a, 0);
            break;
        case RT_OP_SQDIFF:
            if ((fl & 3) == 3 && a == b)
                sr_sqdiff_same(fst, d + a, d + o, v + a);
            else
                sr_sqdiff(fl, fst, d + a, d + b, d + o, v + a, v + b);
            break;
        default: break;                     /* no derivative (or unreachable) */
        }
    }
}

/* ------------------------------------------------------------------ entry */

#define SC_OK1_(NAME, ...) case RT_OP_##NAME:
#define SC_VV_(NAME, ...) case RT_OP_##NAME##_VV:
#define SC_VS_(NAME, ...) case RT_OP_##NAME##_VS:
#define SC_SV_(NAME, ...) case RT_OP_##NAME##_SV:

int rt_soa_check(const rt_program *pw, const int32_t *zero, int64_t n_zero)
{
    int64_t pc, j;
    if (pw->n_vals % L != 0 || n_zero < 0 || (n_zero > 0 && zero == NULL))
        return RT_BADARG;
    for (j = 0; j < n_zero; j++)
        if (zero[j] < 0 || zero[j] % L != 0 || zero[j] > pw->n_vals - L)
            return RT_BADARG;
    for (pc = 0; pc < pw->n_instr; pc++) {
        const int32_t *w = pw->code + pc * RT_WORDS;
        const uint32_t fl = (uint32_t)w[0] >> RT_FLAGS_SHIFT;
        if (w[1] != L)
            return RT_BADARG;
        switch (w[0] & RT_OPCODE_MASK) {
        RT_UNARY(SC_OK1_)
        RT_UNARY_ND(SC_OK1_)
        RT_BINARY(SC_VV_)
        RT_BINARY_ND(SC_VV_)
        RT_BINARY_ND(SC_VS_)
        RT_BINARY_ND(SC_SV_)
        case RT_OP_WHERE_VV:
        case RT_OP_SQDIFF:
            break;
        /* one scalar for all lanes: it must not need an adjoint (its sum
         * over the lanes would mix the points) */
        RT_BINARY(SC_VS_)
            if (fl & 2)
                return RT_BADARG;
            break;
        RT_BINARY(SC_SV_)
            if (fl & 1)
                return RT_BADARG;
            break;
        default:
            return RT_BADARG;
        }
    }
    return RT_OK;
}

/* A full block of rows in and gradients out: lane r of slot s is row r's
 * s-th value, a transpose, done 4 x 4 in vector registers (plain copies:
 * no arithmetic, so nothing to round). */
#if defined(__GNUC__) && !defined(__clang__)
typedef double rt_v4d __attribute__((vector_size(32)));
typedef int64_t rt_v4i __attribute__((vector_size(32)));

RT_SK void rt_t4(double *dst, int64_t ds, const double *src, int64_t ss)
{
    /* dst[j*ds + i] = src[i*ss + j], i, j < 4 */
    rt_v4d a0, a1, a2, a3, t0, t1, t2, t3, c0, c1, c2, c3;
    const rt_v4i lo = {0, 4, 2, 6}, hi = {1, 5, 3, 7}, l2 = {0, 1, 4, 5}, h2 = {2, 3, 6, 7};
    memcpy(&a0, src, 32);
    memcpy(&a1, src + ss, 32);
    memcpy(&a2, src + 2 * ss, 32);
    memcpy(&a3, src + 3 * ss, 32);
    t0 = __builtin_shuffle(a0, a1, lo);
    t1 = __builtin_shuffle(a0, a1, hi);
    t2 = __builtin_shuffle(a2, a3, lo);
    t3 = __builtin_shuffle(a2, a3, hi);
    c0 = __builtin_shuffle(t0, t2, l2);
    c1 = __builtin_shuffle(t1, t3, l2);
    c2 = __builtin_shuffle(t0, t2, h2);
    c3 = __builtin_shuffle(t1, t3, h2);
    memcpy(dst, &c0, 32);
    memcpy(dst + ds, &c1, 32);
    memcpy(dst + 2 * ds, &c2, 32);
    memcpy(dst + 3 * ds, &c3, 32);
}
#define RT_T4_ 1
#else
#define RT_T4_ 0
#endif

/* dst[j*ds + i] = src[i*ss + j] for i < L, j < n */
RT_SCLONES static void rt_soa_transpose(double *restrict dst, int64_t ds,
                                        const double *restrict src, int64_t ss, int64_t n)
{
    int64_t j = 0, i;
#if RT_T4_
    for (; j + 4 <= n; j += 4)
        for (i = 0; i < L; i += 4)
            rt_t4(dst + j * ds + i, ds, src + i * ss + j, ss);
#endif
    for (; j < n; j++)
        RT_LANES(i)
            dst[j * ds + i] = src[i * ss + j];
}

/* dst[i*ds + j] = src[j*ss + i] for i < L, j < n (the other way) */
RT_SCLONES static void rt_soa_untranspose(double *restrict dst, int64_t ds,
                                          const double *restrict src, int64_t ss, int64_t n)
{
    int64_t j = 0, i;
#if RT_T4_
    for (; j + 4 <= n; j += 4)
        for (i = 0; i < L; i += 4)
            rt_t4(dst + i * ds + j, ds, src + j * ss + i, ss);
#endif
    for (; j < n; j++)
        RT_LANES(i)
            dst[i * ds + j] = src[j * ss + i];
}

void rt_soa_run(const rt_program *pw, int64_t n_in, int64_t n_grad, int64_t out_off,
                int32_t with_grad, const uint8_t *first, const int32_t *zero, int64_t n_zero,
                int64_t k, const double *X, double *values, double *G)
{
    double *const v = pw->vals, *const d = pw->adj;
    int64_t r0, r, s, j, m;
    for (r0 = 0; r0 < k; r0 += L) {
        m = k - r0 < L ? k - r0 : L;
        /* rows in: row r0 + r goes to lane r of the input slots */
        if (m == L)
            rt_soa_transpose(v, L, X + r0 * n_in, n_in, n_in);
        else
            for (r = 0; r < L; r++) {
                const double *x = X + (r0 + (r < m ? r : 0)) * n_in;
                for (s = 0; s < n_in; s++)
                    v[s * L + r] = x[s];
            }
        rt_soa_forward(pw->code, pw->n_instr, v);
        if (with_grad) {
            for (j = 0; j < n_zero; j++)
                memset(d + zero[j], 0, L * sizeof(double));
            for (r = 0; r < L; r++)
                d[out_off * L + r] = 1.0;
            rt_soa_reverse(pw->code, pw->n_instr, first, v, d);
            if (m == L)
                rt_soa_untranspose(G + r0 * n_grad, n_grad, d, L, n_grad);
            else
                for (r = 0; r < m; r++)
                    for (s = 0; s < n_grad; s++)
                        G[(r0 + r) * n_grad + s] = d[s * L + r];
        }
        for (r = 0; r < m; r++)
            values[r0 + r] = v[out_off * L + r];
    }
}
