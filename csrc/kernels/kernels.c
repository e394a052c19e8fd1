/* The VM's array kernels: the n > 1 elementwise loops of the forward and
 * reverse sweeps, generated from the X-macro tables of ops_generated.h (the
 * scalar n == 1 paths stay inline in the VM's dispatch, vm/sweeps.c).
 *
 * Why a translation unit of their own: these loops want the vectoriser
 * (-O3's cost model vectorises a loop of unknown length, -O2's does not),
 * while -O3 on the whole VM slows the dispatch of scalar code.  So this
 * file alone is optimised for O3 (the pragma below) and the sweeps call in
 * for arrays only, one call per instruction.
 *
 * Why `restrict` is sound: the verifier refuses an instruction whose output
 * region overlaps an operand region (vm/verify.c, rt_verify_instr), so the written
 * arrays (v + o forward, d + a / d + b reverse) never alias what a loop reads
 * (v + a, v + b, v + o, d + o).  Two operand adjoints may alias each other
 * (x * x, x[1:] - x[:-1]): then they are updated in two passes, ordered so
 * that every slot receives its contributions in the order the one-loop
 * version adds them (bit for bit).
 *
 * The zero-adjoint rule (CppAD's azmul: an exactly-zero adjoint contributes
 * nothing, even through an inf/nan partial) is branch-free: the loop adds
 * `g != 0 ? g * partial : -0.0`, and adding -0.0 leaves every double, -0.0
 * included, unchanged -- the same bits as skipping the element.
 *
 * AVX2 clones (target_clones, chosen at load time by the CPU) give x86-64
 * machines that have it 4-wide loops; AVX2 alone brings no FMA, so the
 * roundings stay those of the scalar code.
 *
 * Sums into a scalar operand's adjoint (the _VS / _SV reverse) stay strict
 * left-to-right loops: the compiler may not reassociate them (no
 * -ffast-math), which keeps them bit-identical to the reference replay.
 */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE 1   /* M_2_SQRTPI */
#endif

#include <math.h>
#include <stdint.h>

#define RT_VECMATH_INLINE 1   /* vecmath.h: rt_log1p inlined into the loops */
#include "kernels/kernels.h"
#include "kernels/specfun.h"

#ifndef M_2_SQRTPI
#define M_2_SQRTPI 1.12837916709551257390
#endif

#if defined(__GNUC__) && !defined(__clang__)
/* fp-contract=off: a fused multiply-add would round differently from the
 * scalar code and the reference replay.  no-trapping-math: lets the
 * vectoriser compute g * partial for every element and select (it changes
 * no value: it only stops gcc from keeping the multiply behind the g != 0
 * branch in case it raises a floating-point trap, which nothing enables). */
#pragma GCC optimize("O3", "fp-contract=off", "no-trapping-math")
#endif

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define RT_KCLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define RT_KCLONES
#endif

/* g * partial, or -0.0 (the additive identity) for an exactly-zero g */
#define RT_AZ(g, D) ((g) != 0.0 ? (g) * (D) : -0.0)

/* Reverse passes into dd[i]: `dd[i] += T`, or, with set (fl's RT_KSET_*
 * bits, which only a tiled block's reverse passes, csrc/instr/block.h),
 * `dd[i] = 0.0 + T`: the same sum as adding T to a slot zeroed just before,
 * without zeroing it or reading it back.  Two loops, so that each
 * vectorises as the plain one does. */
#define RT_KACC(set, n, dd, T)                                                \
    do {                                                                      \
        int64_t i;                                                            \
        if (set) for (i = 0; i < (n); i++) { RT_KLOOP_; (dd)[i] = 0.0 + (T); } \
        else for (i = 0; i < (n); i++) { RT_KLOOP_; (dd)[i] += (T); }          \
    } while (0)

/* ------------------------------------------------------------------ splitting
 * An instruction of rt_par_wants(n) elements runs its loop in pieces over
 * the pool's threads (par.h): each piece is the same kernel over a range
 * of elements, the operands that are arrays moved to the range's start,
 * so every element is computed exactly as in the one loop.  Sums into one
 * slot are not split this way: see rt_krs_chunks below. */
#ifdef RT_WITH_POOL
#include "runtime/par.h"
#define RT_KPAR(n) RT_PAR_WANTS(n)
#else
#define RT_KPAR(n) 0
/* never called (RT_KPAR is 0): the pieces' code stays referenced */
typedef void (*rt_par_fn)(void *ctx, int who, int64_t lo, int64_t hi, int64_t k);
static void rt_par_run(int64_t n, int64_t piece, int maxt, rt_par_fn fn, void *ctx)
{
    int64_t k;
    (void)maxt;
    for (k = 0; k * piece < n; k++)
        fn(ctx, 0, k * piece, k * piece + piece < n ? k * piece + piece : n, k);
}
#endif

/* Elements per piece: 16 KB of each array, a few dozen pieces for the
 * sizes that get split, so a late thread still finds work. */
#define RT_KPIECE 2048
#define RT_KMAXT 64          /* the kernels keep no per-thread state */

typedef void (*rt_kp2)(int64_t, double *restrict, const double *restrict);
typedef void (*rt_kp3)(int64_t, double *restrict, const double *restrict,
                       const double *restrict);
typedef void (*rt_kp5s)(int64_t, double *restrict, const double *restrict,
                        const double *restrict, const double *restrict, int);
typedef void (*rt_kp6s)(int64_t, double *restrict, const double *restrict,
                        const double *restrict, const double *restrict,
                        const double *restrict, int);
typedef void (*rt_kp7)(int64_t, double *restrict, double *restrict, const double *restrict,
                       const double *restrict, const double *restrict,
                       const double *restrict);

/* A kernel call over n elements: its pointers p[0..np) (bit i of `move`:
 * p[i] is an array, moved by the piece's start) and its kind. */
typedef struct {
    int kind, np, set;
    unsigned move;
    void (*f)(void);
    double *p[6];
} rt_kcall;

enum { RT_KC2 = 2, RT_KC3 = 3, RT_KC5S = 5, RT_KC6S = 6, RT_KC7 = 7 };

static void rt_kcall_piece(void *ctx, int who, int64_t lo, int64_t hi, int64_t k)
{
    (void)who;
    const rt_kcall *c = ctx;
    double *q[6];
    int i;
    (void)k;
    for (i = 0; i < c->np; i++)
        q[i] = c->p[i] + (((c->move >> i) & 1) ? lo : 0);
    switch (c->kind) {
    case RT_KC2: ((rt_kp2)c->f)(hi - lo, q[0], q[1]); break;
    case RT_KC3: ((rt_kp3)c->f)(hi - lo, q[0], q[1], q[2]); break;
    case RT_KC5S: ((rt_kp5s)c->f)(hi - lo, q[0], q[1], q[2], q[3], c->set); break;
    case RT_KC6S: ((rt_kp6s)c->f)(hi - lo, q[0], q[1], q[2], q[3], q[4], c->set); break;
    case RT_KC7: ((rt_kp7)c->f)(hi - lo, q[0], q[1], q[2], q[3], q[4], q[5]); break;
    }
}

/* Runs c over n elements in pieces (the caller checked RT_KPAR(n)). */
static void rt_kcall_split(rt_kcall *c, int64_t n)
{
    rt_par_run(n, RT_KPIECE, RT_KMAXT, rt_kcall_piece, c);
}

#define RT_KC_(K, F, MOVE, SET, NP) rt_kcall kc_ = { (K), (NP), (SET), (MOVE), (void (*)(void))(F), {0} }
#define RT_KSPLIT2(F, n, MOVE, P0, P1)                                        \
    do { RT_KC_(RT_KC2, F, MOVE, 0, 2);                                       \
         kc_.p[0] = (double *)(P0); kc_.p[1] = (double *)(P1);                 \
         rt_kcall_split(&kc_, n); } while (0)
#define RT_KSPLIT3(F, n, MOVE, P0, P1, P2)                                    \
    do { RT_KC_(RT_KC3, F, MOVE, 0, 3);                                       \
         kc_.p[0] = (double *)(P0); kc_.p[1] = (double *)(P1); kc_.p[2] = (double *)(P2); \
         rt_kcall_split(&kc_, n); } while (0)
#define RT_KSPLIT5S(F, n, MOVE, SET, P0, P1, P2, P3)                          \
    do { RT_KC_(RT_KC5S, F, MOVE, SET, 4);                                    \
         kc_.p[0] = (double *)(P0); kc_.p[1] = (double *)(P1);                 \
         kc_.p[2] = (double *)(P2); kc_.p[3] = (double *)(P3);                 \
         rt_kcall_split(&kc_, n); } while (0)
#define RT_KSPLIT6S(F, n, MOVE, SET, P0, P1, P2, P3, P4)                      \
    do { RT_KC_(RT_KC6S, F, MOVE, SET, 5);                                    \
         kc_.p[0] = (double *)(P0); kc_.p[1] = (double *)(P1);                 \
         kc_.p[2] = (double *)(P2); kc_.p[3] = (double *)(P3);                 \
         kc_.p[4] = (double *)(P4); rt_kcall_split(&kc_, n); } while (0)
#define RT_KSPLIT7(F, n, MOVE, P0, P1, P2, P3, P4, P5)                        \
    do { RT_KC_(RT_KC7, F, MOVE, 0, 6);                                       \
         kc_.p[0] = (double *)(P0); kc_.p[1] = (double *)(P1);                 \
         kc_.p[2] = (double *)(P2); kc_.p[3] = (double *)(P3);                 \
         kc_.p[4] = (double *)(P4); kc_.p[5] = (double *)(P5);                 \
         rt_kcall_split(&kc_, n); } while (0)

/* ------------------------------------------------------------------ unary */

#define KF_UNARY_(NAME, FX)                                                   \
    RT_KCLONES static void rt_kfp_##NAME##_k(int64_t n, double *restrict out,            \
                              const double *restrict xa)                      \
    {                                                                         \
        int64_t i;                                                            \
        for (i = 0; i < n; i++) {                                             \
            const double x = xa[i];                                           \
            out[i] = FX;                                                      \
        }                                                                     \
    }                                                                         \
    static void rt_kfp_##NAME(int64_t n, double *out, const double *xa)       \
    {                                                                         \
        if (RT_KPAR(n)) RT_KSPLIT2(rt_kfp_##NAME##_k, n, 3u, out, xa);        \
        else rt_kfp_##NAME##_k(n, out, xa);                                   \
    }                                                                         \
    void rt_kf_##NAME(int64_t n, double *v, int64_t o, int64_t a)             \
    {                                                                         \
        rt_kfp_##NAME(n, v + o, v + a);                                       \
    }

#define KR_UNARY_(NAME, DX)                                                   \
    RT_KCLONES static void rt_krp_##NAME##_k(int64_t n, double *restrict da,             \
                              const double *restrict go,                      \
                              const double *restrict xa,                      \
                              const double *restrict fo, int set)             \
    {                                                                         \
        RT_KACC(set, n, da, RT_AZ(g, DX));                                    \
    }                                                                         \
    static void rt_krp_##NAME(int64_t n, double *da, const double *go,        \
                              const double *xa, const double *fo, int set)    \
    {                                                                         \
        if (RT_KPAR(n)) RT_KSPLIT5S(rt_krp_##NAME##_k, n, 15u, set, da, go, xa, fo); \
        else rt_krp_##NAME##_k(n, da, go, xa, fo, set);                       \
    }                                                                         \
    void rt_kr_##NAME(uint32_t fl, int64_t n, double *d, const double *v,     \
                      int64_t o, int64_t a)                                   \
    {                                                                         \
        if (fl & 1)                                                           \
            rt_krp_##NAME(n, d + a, d + o, v + a, v + o, !!(fl & RT_KSET_A)); \
    }

#define K_UNARY(NAME, FX, DX) KF_UNARY_(NAME, FX) KR_UNARY_(NAME, DX)
#define K_UNARY_ND(NAME, FX) KF_UNARY_(NAME, FX)

#define RT_KLOOP_ const double g = go[i], x = xa[i], f = fo[i]; (void)x; (void)f
RT_UNARY(K_UNARY)
#undef RT_KLOOP_
RT_UNARY_ND(K_UNARY_ND)

/* ------------------------------------------------------------------ binary */

/* X, Y: the operands' i-th element (xa[0] / yb[0] for a scalar operand:
 * nothing in the loop writes it, so it is loaded once). */
#define KF_BINARY_(NAME, V, X, Y, FXY, MOVE)                                  \
    RT_KCLONES static void rt_kfp_##NAME##_##V##_k(int64_t n, double *restrict out,      \
                                    const double *restrict xa,                \
                                    const double *restrict yb)                \
    {                                                                         \
        int64_t i;                                                            \
        for (i = 0; i < n; i++) {                                             \
            const double x = (X), y = (Y);                                    \
            out[i] = FXY;                                                     \
        }                                                                     \
    }                                                                         \
    static void rt_kfp_##NAME##_##V(int64_t n, double *out, const double *xa, \
                                    const double *yb)                         \
    {                                                                         \
        if (RT_KPAR(n)) RT_KSPLIT3(rt_kfp_##NAME##_##V##_k, n, MOVE, out, xa, yb); \
        else rt_kfp_##NAME##_##V##_k(n, out, xa, yb);                         \
    }                                                                         \
    void rt_kf_##NAME##_##V(int64_t n, double *v, int64_t o, int64_t a, int64_t b) \
    {                                                                         \
        rt_kfp_##NAME##_##V(n, v + o, v + a, v + b);                          \
    }

/* One pass adding g * D into dd[i]; X and Y as above. */
#define KR_PASS_(FN, X, Y, D, MOVE)                                           \
    RT_KCLONES static void FN##_k(int64_t n, double *restrict dd, const double *restrict go, \
                   const double *restrict xa, const double *restrict yb,      \
                   const double *restrict fo, int set)                        \
    {                                                                         \
        int64_t i;                                                            \
        if (set)                                                              \
            for (i = 0; i < n; i++) {                                         \
                const double g = go[i], x = (X), y = (Y), f = fo[i];          \
                (void)x; (void)y; (void)f;                                    \
                dd[i] = 0.0 + RT_AZ(g, D);                                    \
            }                                                                 \
        else                                                                  \
            for (i = 0; i < n; i++) {                                         \
                const double g = go[i], x = (X), y = (Y), f = fo[i];          \
                (void)x; (void)y; (void)f;                                    \
                dd[i] += RT_AZ(g, D);                                         \
            }                                                                 \
    }                                                                         \
    static void FN(int64_t n, double *dd, const double *go, const double *xa, \
                   const double *yb, const double *fo, int set)               \
    {                                                                         \
        if (RT_KPAR(n)) RT_KSPLIT6S(FN##_k, n, MOVE, set, dd, go, xa, yb, fo); \
        else FN##_k(n, dd, go, xa, yb, fo, set);                              \
    }

/* The sum of g * D over n elements (the scalar operand's adjoint), in a
 * fixed order that depends on n alone: strict left-to-right within chunks
 * of rt_ksum_chunk(n) elements (one chunk, the whole plain loop, up to
 * RT_KSUM_CHUNK), the chunks' sums then added left to right.  The chunks
 * may run on different threads (par.h); on one they run in turn, and the
 * bits are the same either way.  The compiler may not reassociate the
 * loops (no -ffast-math): the clones compute the terms in vector
 * registers and add them in order.  Four whole chunks run as four chains
 * in one loop (FN##_k4): each chain is its chunk's strict sum, bit for
 * bit, and the four hide each other's add latency. */
#define RT_KSUM_CHUNK 8192
#define RT_KSUM_MAXCHUNKS 64

typedef double (*rt_ks4)(int64_t, const double *, const double *, const double *,
                         const double *);

typedef void (*rt_ks4x4)(int64_t, int64_t, const double *, const double *, const double *,
                         const double *, double *);

typedef struct {
    rt_ks4 f;
    rt_ks4x4 f4;
    int64_t chunk;
    unsigned move;                  /* bit i: p[i] is an array (moves by the chunk's start) */
    const double *p[4];
    double part[RT_KSUM_MAXCHUNKS];
} rt_ksum;

/* at most RT_KSUM_MAXCHUNKS chunks, each a multiple of 8 elements */
static int64_t rt_ksum_chunk(int64_t n)
{
    int64_t c;
    if (n <= RT_KSUM_CHUNK)
        return n;
    c = (n + RT_KSUM_MAXCHUNKS - 1) / RT_KSUM_MAXCHUNKS;
    c = (c + 7) & ~(int64_t)7;
    return c < RT_KSUM_CHUNK ? RT_KSUM_CHUNK : c;
}

/* Piece k: chunks 4k .. 4k + 3 (those that exist) over [lo, hi). */
static void rt_ksum_piece(void *ctx, int who, int64_t lo, int64_t hi, int64_t k)
{
    rt_ksum *c = ctx;
    const double *q[4];
    int64_t a;
    int i;
    (void)who;
    if (hi - lo == 4 * c->chunk) {
        for (i = 0; i < 4; i++)
            q[i] = c->p[i] + (((c->move >> i) & 1) ? lo : 0);
        c->f4(c->chunk, c->chunk, q[0], q[1], q[2], q[3], c->part + 4 * k);
        return;
    }
    for (a = lo; a < hi; a += c->chunk) {
        const int64_t b = a + c->chunk < hi ? a + c->chunk : hi;
        for (i = 0; i < 4; i++)
            q[i] = c->p[i] + (((c->move >> i) & 1) ? a : 0);
        c->part[a / c->chunk] = c->f(b - a, q[0], q[1], q[2], q[3]);
    }
}

static double rt_ksum_run(rt_ks4 f, rt_ks4x4 f4, unsigned move, int64_t n, const double *go,
                          const double *xa, const double *yb, const double *fo)
{
    const int64_t chunk = rt_ksum_chunk(n);
    int64_t k, nc;
    rt_ksum c;
    double s;
    if (chunk >= n)
        return f(n, go, xa, yb, fo);
    nc = (n + chunk - 1) / chunk;
    c.f = f;
    c.f4 = f4;
    c.chunk = chunk;
    c.move = move;
    c.p[0] = go; c.p[1] = xa; c.p[2] = yb; c.p[3] = fo;
    c.part[0] = 0.0;                /* (every part is written below) */
    if (RT_KPAR(n))
        rt_par_run(n, 4 * chunk, RT_KMAXT, rt_ksum_piece, &c);
    else
        for (k = 0; k * 4 * chunk < n; k++)
            rt_ksum_piece(&c, 0, k * 4 * chunk, k * 4 * chunk + 4 * chunk < n ? k * 4 * chunk + 4 * chunk : n, k);
    s = c.part[0];
    for (k = 1; k < nc; k++)
        s += c.part[k];
    return s;
}

#define KR_SUM_(FN, X, Y, D, MOVE)                                            \
    RT_KCLONES static double FN##_k(int64_t n, const double *go, const double *xa, \
                         const double *yb, const double *fo)                  \
    {                                                                         \
        int64_t i;                                                            \
        double s = 0.0;                                                       \
        for (i = 0; i < n; i++) {                                             \
            const double g = go[i], x = (X), y = (Y), f = fo[i];              \
            (void)x; (void)y; (void)f;                                        \
            s += RT_AZ(g, D);                                                 \
        }                                                                     \
        return s;                                                             \
    }                                                                         \
    RT_KCLONES static void FN##_k4(int64_t L, int64_t st, const double *go0,  \
                        const double *xa0, const double *yb0,                 \
                        const double *fo0, double *part)                      \
    {                                                                         \
        double s[4] = { 0.0, 0.0, 0.0, 0.0 };                                 \
        const int64_t sx = ((MOVE) >> 1) & 1 ? st : 0, sy = ((MOVE) >> 2) & 1 ? st : 0; \
        int64_t i;                                                            \
        int c;                                                                \
        for (i = 0; i < L; i++)                                               \
            for (c = 0; c < 4; c++) {                                         \
                const double *go = go0 + c * st, *xa = xa0 + c * sx,          \
                             *yb = yb0 + c * sy, *fo = fo0 + c * st;          \
                const double g = go[i], x = (X), y = (Y), f = fo[i];          \
                (void)x; (void)y; (void)f; (void)xa; (void)yb;                \
                s[c] += RT_AZ(g, D);                                          \
            }                                                                 \
        for (c = 0; c < 4; c++)                                               \
            part[c] = s[c];                                                   \
    }                                                                         \
    static double FN(int64_t n, const double *go, const double *xa,           \
                     const double *yb, const double *fo)                      \
    {                                                                         \
        return rt_ksum_run(FN##_k, FN##_k4, MOVE, n, go, xa, yb, fo);         \
    }

#define KR_BINARY_(NAME, DX, DY)                                              \
    KR_PASS_(rt_krp_##NAME##_VV_a, xa[i], yb[i], DX, 31u)                          \
    KR_PASS_(rt_krp_##NAME##_VV_b, xa[i], yb[i], DY, 31u)                          \
    RT_KCLONES static void rt_krp_##NAME##_VV_ab_k(int64_t n, double *restrict da,       \
                                      double *restrict db,                    \
                                      const double *restrict go,              \
                                      const double *restrict xa,              \
                                      const double *restrict yb,              \
                                      const double *restrict fo)              \
    {                                                                         \
        int64_t i;                                                            \
        for (i = 0; i < n; i++) {                                             \
            const double g = go[i], x = xa[i], y = yb[i], f = fo[i];          \
            (void)x; (void)y; (void)f;                                        \
            da[i] += RT_AZ(g, DX);                                            \
            db[i] += RT_AZ(g, DY);                                            \
        }                                                                     \
    }                                                                         \
    static void rt_krp_##NAME##_VV_ab(int64_t n, double *da, double *db,      \
                                      const double *go, const double *xa,     \
                                      const double *yb, const double *fo)     \
    {                                                                         \
        if (RT_KPAR(n)) RT_KSPLIT7(rt_krp_##NAME##_VV_ab_k, n, 63u, da, db, go, xa, yb, fo); \
        else rt_krp_##NAME##_VV_ab_k(n, da, db, go, xa, yb, fo);              \
    }                                                                         \
    void rt_kr_##NAME##_VV(uint32_t fl, int64_t n, double *d, const double *v, \
                           int64_t o, int64_t a, int64_t b)                   \
    {                                                                         \
        const double *go = d + o, *xa = v + a, *yb = v + b, *fo = v + o;      \
        const int sa = !!(fl & RT_KSET_A), sb = !!(fl & RT_KSET_B);           \
        if ((fl & 3) != 3) {                                                  \
            if (fl & 1) rt_krp_##NAME##_VV_a(n, d + a, go, xa, yb, fo, sa);   \
            if (fl & 2) rt_krp_##NAME##_VV_b(n, d + b, go, xa, yb, fo, sb);   \
        } else if ((a + n <= b || b + n <= a) && !sa && !sb) {                \
            rt_krp_##NAME##_VV_ab(n, d + a, d + b, go, xa, yb, fo);           \
        } else if (a >= b) {                                                  \
            /* slot p gets a's term from element p-a before b's from p-b */   \
            rt_krp_##NAME##_VV_a(n, d + a, go, xa, yb, fo, sa);               \
            rt_krp_##NAME##_VV_b(n, d + b, go, xa, yb, fo, sb);               \
        } else {                                                              \
            rt_krp_##NAME##_VV_b(n, d + b, go, xa, yb, fo, sb);               \
            rt_krp_##NAME##_VV_a(n, d + a, go, xa, yb, fo, sa);               \
        }                                                                     \
    }                                                                         \
    KR_PASS_(rt_krp_##NAME##_VS_a, xa[i], yb[0], DX, 23u)                             \
    KR_SUM_(rt_krs_##NAME##_VS_b, xa[i], yb[0], DY, 11u)                              \
    void rt_kr_##NAME##_VS(uint32_t fl, int64_t n, double *d, const double *v, \
                           int64_t o, int64_t a, int64_t b)                   \
    {                                                                         \
        if (fl & 1) rt_krp_##NAME##_VS_a(n, d + a, d + o, v + a, v + b, v + o, \
                                         !!(fl & RT_KSET_A));                 \
        if (fl & 2) d[b] += rt_krs_##NAME##_VS_b(n, d + o, v + a, v + b, v + o); \
    }                                                                         \
    KR_SUM_(rt_krs_##NAME##_SV_a, xa[0], yb[i], DX, 13u)                              \
    KR_PASS_(rt_krp_##NAME##_SV_b, xa[0], yb[i], DY, 27u)                             \
    void rt_kr_##NAME##_SV(uint32_t fl, int64_t n, double *d, const double *v, \
                           int64_t o, int64_t a, int64_t b)                   \
    {                                                                         \
        if (fl & 2) rt_krp_##NAME##_SV_b(n, d + b, d + o, v + a, v + b, v + o, \
                                         !!(fl & RT_KSET_B));                 \
        if (fl & 1) d[a] += rt_krs_##NAME##_SV_a(n, d + o, v + a, v + b, v + o); \
    }

#define KF_BINARY3_(NAME, FXY)                                                \
    KF_BINARY_(NAME, VV, xa[i], yb[i], FXY, 7u)                               \
    KF_BINARY_(NAME, VS, xa[i], yb[0], FXY, 3u)                               \
    KF_BINARY_(NAME, SV, xa[0], yb[i], FXY, 5u)

#define K_BINARY(NAME, FXY, DX, DY) KF_BINARY3_(NAME, FXY) KR_BINARY_(NAME, DX, DY)
#define K_BINARY_ND(NAME, FXY) KF_BINARY3_(NAME, FXY)

RT_BINARY(K_BINARY)
RT_BINARY_ND(K_BINARY_ND)

/* ------------------------------------------------------------------ others */

/* numpy's pairwise summation (pairwise_sum_DOUBLE), so that REDUCE_SUM over a
 * contiguous run is bit-identical to np.sum of that run (checked against
 * numpy 2.4 for n = 1..400 and up to 20000): 8 accumulators up to 128
 * elements, halving (at multiples of 8) above.  Recursion depth is log2(n). */
RT_KCLONES double rt_k_pairwise_sum(const double *x, int64_t n)
{
    if (n < 8) {
        double res = 0.0;
        int64_t i;
        for (i = 0; i < n; i++)
            res += x[i];
        return res;
    } else if (n <= 128) {
        double r[8], res;
        int64_t i, j;
        for (j = 0; j < 8; j++)
            r[j] = x[j];
        for (i = 8; i < n - (n % 8); i += 8)
            for (j = 0; j < 8; j++)
                r[j] += x[i + j];
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += x[i];
        return res;
    } else {
        int64_t n2 = n / 2;
        n2 -= n2 % 8;
        return rt_k_pairwise_sum(x, n2) + rt_k_pairwise_sum(x + n2, n - n2);
    }
}


RT_KCLONES static void rt_k_add_scalar_k(int64_t n, double *dx, double g)
{
    int64_t i;
    for (i = 0; i < n; i++)
        dx[i] += g;
}

typedef struct { double *dx; double g; } rt_kaddsc;

static void rt_k_add_scalar_piece(void *ctx, int who, int64_t lo, int64_t hi, int64_t k)
{
    (void)who;
    const rt_kaddsc *c = ctx;
    (void)k;
    rt_k_add_scalar_k(hi - lo, c->dx + lo, c->g);
}

void rt_k_add_scalar(int64_t n, double *dx, double g)
{
    if (RT_KPAR(n)) {
        rt_kaddsc c = { dx, g };
        rt_par_run(n, RT_KPIECE, RT_KMAXT, rt_k_add_scalar_piece, &c);
    } else
        rt_k_add_scalar_k(n, dx, g);
}

/* ------------------------------------------------------------------ where, clip
 * out = a != 0 ? b : c; the condition is never differentiated.  _VS: c is a
 * scalar, _SV: b is.  The scalar branch's adjoint is a left-to-right sum. */

#define KW_FWD_(V, B, C)                                                      \
    RT_KCLONES static void rt_kwp_##V(int64_t n, double *restrict out,        \
                                      const double *restrict ca,              \
                                      const double *restrict xb,              \
                                      const double *restrict yc)              \
    {                                                                         \
        int64_t i;                                                            \
        for (i = 0; i < n; i++)                                               \
            out[i] = ca[i] != 0.0 ? (B) : (C);                                \
    }
KW_FWD_(VV, xb[i], yc[i])
KW_FWD_(VS, xb[i], yc[0])
KW_FWD_(SV, xb[0], yc[i])

void rt_kf_WHERE_VV(int64_t n, double *v, int64_t o, int64_t a, int64_t b, int64_t c)
{
    rt_kwp_VV(n, v + o, v + a, v + b, v + c);
}
void rt_kf_WHERE_VS(int64_t n, double *v, int64_t o, int64_t a, int64_t b, int64_t c)
{
    rt_kwp_VS(n, v + o, v + a, v + b, v + c);
}
void rt_kf_WHERE_SV(int64_t n, double *v, int64_t o, int64_t a, int64_t b, int64_t c)
{
    rt_kwp_SV(n, v + o, v + a, v + b, v + c);
}

/* dd[i] += g where the condition is `take` (1: true, 0: false); set: the
 * block's first term into a tile-local slot (RT_KACC) */
RT_KCLONES static void rt_kwr_pass(int64_t n, double *restrict dd, const double *restrict go,
                                   const double *restrict ca, int take, int set)
{
#define RT_KLOOP_ (void)0
    if (take)
        RT_KACC(set, n, dd, go[i] != 0.0 && ca[i] != 0.0 ? go[i] : -0.0);
    else
        RT_KACC(set, n, dd, go[i] != 0.0 && ca[i] == 0.0 ? go[i] : -0.0);
#undef RT_KLOOP_
}

static double rt_kwr_sum(int64_t n, const double *go, const double *ca, int take)
{
    int64_t i;
    double s = 0.0;
    for (i = 0; i < n; i++)
        s += go[i] != 0.0 && (ca[i] != 0.0) == take ? go[i] : -0.0;
    return s;
}

void rt_kr_WHERE_VV(uint32_t fl, int64_t n, double *d, const double *v, int64_t o, int64_t a,
                    int64_t b, int64_t c)
{
    /* each element feeds b or c, never both, so only slots that both
     * regions cover need an order: by element, b's term first iff b > c */
    const int sb = !!(fl & RT_KSET_B), sc = !!(fl & RT_KSET_C);
    if (b >= c) {
        if (fl & 2) rt_kwr_pass(n, d + b, d + o, v + a, 1, sb);
        if (fl & 4) rt_kwr_pass(n, d + c, d + o, v + a, 0, sc);
    } else {
        if (fl & 4) rt_kwr_pass(n, d + c, d + o, v + a, 0, sc);
        if (fl & 2) rt_kwr_pass(n, d + b, d + o, v + a, 1, sb);
    }
}
void rt_kr_WHERE_VS(uint32_t fl, int64_t n, double *d, const double *v, int64_t o, int64_t a,
                    int64_t b, int64_t c)
{
    if (fl & 2) rt_kwr_pass(n, d + b, d + o, v + a, 1, !!(fl & RT_KSET_B));
    if (fl & 4) d[c] += rt_kwr_sum(n, d + o, v + a, 0);
}
void rt_kr_WHERE_SV(uint32_t fl, int64_t n, double *d, const double *v, int64_t o, int64_t a,
                    int64_t b, int64_t c)
{
    if (fl & 4) rt_kwr_pass(n, d + c, d + o, v + a, 0, !!(fl & RT_KSET_C));
    if (fl & 2) d[b] += rt_kwr_sum(n, d + o, v + a, 1);
}

/* np.clip = minimum(maximum(x, lo), hi): nan in x or a bound propagates,
 * lo > hi gives hi.  Reverse: zero at the bounds. */
RT_KCLONES static void rt_kcp(int64_t n, double *restrict out, const double *restrict xa,
                              double lo, double hi)
{
    int64_t i;
    for (i = 0; i < n; i++) {
        double t = xa[i];
        t = !(t >= lo || t != t) ? lo : t;
        t = !(t <= hi || t != t) ? hi : t;
        out[i] = t;
    }
}
void rt_kf_CLIP(int64_t n, double *v, int64_t o, int64_t a, int64_t b, int64_t c)
{
    rt_kcp(n, v + o, v + a, v[b], v[c]);
}

RT_KCLONES static void rt_kcr(int64_t n, double *restrict da, const double *restrict go,
                              const double *restrict fo, double lo, double hi, int set)
{
#define RT_KLOOP_ (void)0
    RT_KACC(set, n, da, go[i] != 0.0 && fo[i] != lo && fo[i] != hi ? go[i] : -0.0);
#undef RT_KLOOP_
}
void rt_kr_CLIP(uint32_t fl, int64_t n, double *d, const double *v, int64_t o, int64_t a,
                int64_t b, int64_t c)
{
    if (fl & 1)
        rt_kcr(n, d + a, d + o, v + o, v[b], v[c], !!(fl & RT_KSET_A));
}

/* ------------------------------------------------------------------ tangent
 * Forward mode over arrays (vm/sweeps.c's tangent sweep): out's tangent from the
 * operands' tangents, a zero tangent contributing nothing even through an
 * inf/nan partial.  The same roundings as the scalar path:
 * unary ta * partial (or 0), binary (0 + ta * dx) + tb * dy with absent
 * terms skipped -- an absent term here adds -0.0, which changes nothing. */

#define KT_UNARY_(NAME, FX, DX)                                               \
    RT_KCLONES static void rt_ktp_##NAME(int64_t n, double *restrict to,      \
                                         const double *restrict tav,          \
                                         const double *restrict xa,           \
                                         const double *restrict fo)           \
    {                                                                         \
        int64_t i;                                                            \
        for (i = 0; i < n; i++) {                                             \
            const double ta = tav[i], x = xa[i], f = fo[i];                   \
            (void)x; (void)f;                                                 \
            to[i] = ta != 0.0 ? ta * (DX) : 0.0;                              \
        }                                                                     \
    }                                                                         \
    void rt_kt_##NAME(int64_t n, double *t, const double *v, int64_t o, int64_t a) \
    {                                                                         \
        rt_ktp_##NAME(n, t + o, t + a, v + a, v + o);                         \
    }
RT_UNARY(KT_UNARY_)

#define KT_BINARY1_(NAME, V, X, Y, TA, TB, DX, DY)                            \
    RT_KCLONES static void rt_ktp_##NAME##_##V(uint32_t fl, int64_t n,        \
                                               double *restrict to,           \
                                               const double *restrict tav,    \
                                               const double *restrict tbv,    \
                                               const double *restrict xa,     \
                                               const double *restrict yb,     \
                                               const double *restrict fo)     \
    {                                                                         \
        int64_t i;                                                            \
        for (i = 0; i < n; i++) {                                             \
            const double x = (X), y = (Y), f = fo[i];                         \
            const double ta = (fl & 1) ? (TA) : 0.0, tb = (fl & 2) ? (TB) : 0.0; \
            (void)x; (void)y; (void)f;                                        \
            to[i] = (0.0 + RT_AZ(ta, DX)) + RT_AZ(tb, DY);                    \
        }                                                                     \
    }                                                                         \
    void rt_kt_##NAME##_##V(uint32_t fl, int64_t n, double *t, const double *v, \
                            int64_t o, int64_t a, int64_t b)                  \
    {                                                                         \
        rt_ktp_##NAME##_##V(fl, n, t + o, t + a, t + b, v + a, v + b, v + o); \
    }
#define KT_BINARY_(NAME, FXY, DX, DY)                                         \
    KT_BINARY1_(NAME, VV, xa[i], yb[i], tav[i], tbv[i], DX, DY)               \
    KT_BINARY1_(NAME, VS, xa[i], yb[0], tav[i], tbv[0], DX, DY)               \
    KT_BINARY1_(NAME, SV, xa[0], yb[i], tav[0], tbv[i], DX, DY)
RT_BINARY(KT_BINARY_)

/* ------------------------------------------------------------------ fused pairs
 * The array forms of AXPY (out = a + b*c, b one element) and SQDIFF
 * (out = (a - b)^2) that the compiler forms from MUL+ADD and SUB+SQUARE
 * over whole arrays.  Same arithmetic per element as the two instructions
 * they replace (vm/sweeps.c's n == 1 code documents it), so the same bits:
 * products and differences rounded first, the zero-adjoint rule as RT_AZ. */

RT_KCLONES static void rt_kxp_axpy(int64_t n, double *restrict out, const double *restrict xa,
                                   double t, const double *restrict zc)
{
    int64_t i;
    for (i = 0; i < n; i++) {
        const double prod = t * zc[i];
        out[i] = xa[i] + prod;
    }
}

void rt_kf_AXPY(int64_t n, double *v, int64_t o, int64_t a, int64_t b, int64_t c)
{
    rt_kxp_axpy(n, v + o, v + a, v[b], v + c);
}

/* ADD's reverse then MUL's: a's term, the left-to-right sum into b, c's
 * term, element by element.  One loop: the sum's chain of dependent adds
 * (what bounds it) hides the other two.  The compiler fuses only where a's
 * and c's adjoint regions are disjoint or the same slots, and b's is apart
 * from both, so this order is the pair's for every slot. */
/* AXPY's reverse into u and v (flags 1 and 4) when their adjoint regions
 * do not overlap: one vectorisable loop (the overlapping case, u + s*u,
 * keeps the ordered loop below). */
RT_KCLONES static void rt_kxp_axpy_rev_ac(int64_t n, double *restrict da, double *restrict dc,
                                          const double *restrict go, double t, int sa, int sc)
{
    int64_t i;
    if (sa && sc)
        for (i = 0; i < n; i++) {
            const double g = go[i];
            da[i] = 0.0 + RT_AZ(g, 1.0);
            dc[i] = 0.0 + RT_AZ(g, t);
        }
    else if (sa || sc)                      /* (rare: one slot tile-local) */
        for (i = 0; i < n; i++) {
            const double g = go[i];
            da[i] = (sa ? 0.0 : da[i]) + RT_AZ(g, 1.0);
            dc[i] = (sc ? 0.0 : dc[i]) + RT_AZ(g, t);
        }
    else
        for (i = 0; i < n; i++) {
            const double g = go[i];
            da[i] += RT_AZ(g, 1.0);
            dc[i] += RT_AZ(g, t);
        }
}

void rt_kr_AXPY(uint32_t fl, int64_t n, double *d, const double *v,
                int64_t o, int64_t a, int64_t b, int64_t c)
{
    const double *go = d + o, *zc = v + c;
    double *da = d + a, *dc = d + c;
    const double t = v[b];
    const int sa = !!(fl & RT_KSET_A), sc = !!(fl & RT_KSET_C);
    double sb = 0.0;
    int64_t i;
    if ((fl & 7) == 5 && (a + n <= c || c + n <= a)) {
        rt_kxp_axpy_rev_ac(n, da, dc, go, t, sa, sc);
        return;
    }
    if (sa || sc) {         /* a block's reverse: b has no adjoint there */
        for (i = 0; i < n; i++) {
            const double g = go[i];
            if (fl & 1) da[i] = (sa ? 0.0 : da[i]) + RT_AZ(g, 1.0);
            if (fl & 4) dc[i] = (sc ? 0.0 : dc[i]) + RT_AZ(g, t);
        }
        return;
    }
    switch (fl & 7) {
    case 1:
        for (i = 0; i < n; i++)
            da[i] += RT_AZ(go[i], 1.0);
        return;
    case 3:
        for (i = 0; i < n; i++) {
            const double g = go[i];
            da[i] += RT_AZ(g, 1.0);
            sb += RT_AZ(g, zc[i]);
        }
        break;
    default:
        for (i = 0; i < n; i++) {
            const double g = go[i];
            if (fl & 1) da[i] += RT_AZ(g, 1.0);
            if (fl & 2) sb += RT_AZ(g, zc[i]);
            if (fl & 4) dc[i] += RT_AZ(g, t);
        }
    }
    if (fl & 2)
        d[b] += sb;
}

RT_KCLONES static void rt_kxp_sqdiff(int64_t n, double *restrict out, const double *restrict xa,
                                     const double *restrict yb)
{
    int64_t i;
    for (i = 0; i < n; i++) {
        const double t = xa[i] - yb[i];
        out[i] = t * t;
    }
}

void rt_kf_SQDIFF(int64_t n, double *v, int64_t o, int64_t a, int64_t b)
{
    rt_kxp_sqdiff(n, v + o, v + a, v + b);
}

/* SQUARE's reverse gives the difference gt = g * (2 (a - b)); SUB's passes
 * gt * 1.0 and gt * -1.0 on (nothing for a zero g or gt). */
#define KX_SQDIFF_PASS_(FN, SIGN)                                             \
    RT_KCLONES static void FN(int64_t n, double *restrict dd, const double *restrict go, \
                              const double *restrict xa, const double *restrict yb, int set) \
    {                                                                         \
        RT_KACC(set, n, dd, RT_AZ(gt, SIGN));                                 \
    }
#define RT_KLOOP_ const double g = go[i]; \
    const double gt = g != 0.0 ? g * (2.0 * (xa[i] - yb[i])) : 0.0
KX_SQDIFF_PASS_(rt_kxp_sqdiff_a, 1.0)
KX_SQDIFF_PASS_(rt_kxp_sqdiff_b, -1.0)
#undef RT_KLOOP_
#undef KX_SQDIFF_PASS_

RT_KCLONES static void rt_kxp_sqdiff_ab(int64_t n, double *restrict da, double *restrict db,
                                        const double *restrict go, const double *restrict xa,
                                        const double *restrict yb, int sa, int sb)
{
    int64_t i;
#define RT_SQD_AB_(DA, DB)                                                    \
    for (i = 0; i < n; i++) {                                                 \
        const double g = go[i];                                               \
        const double gt = g != 0.0 ? g * (2.0 * (xa[i] - yb[i])) : 0.0;      \
        da[i] = (DA) + RT_AZ(gt, 1.0);                                        \
        db[i] = (DB) + RT_AZ(gt, -1.0);                                       \
    }
    if (sa && sb)
        RT_SQD_AB_(0.0, 0.0)
    else if (sa)
        RT_SQD_AB_(0.0, db[i])
    else if (sb)
        RT_SQD_AB_(da[i], 0.0)
    else
        RT_SQD_AB_(da[i], db[i])
#undef RT_SQD_AB_
}

void rt_kr_SQDIFF(uint32_t fl, int64_t n, double *d, const double *v,
                  int64_t o, int64_t a, int64_t b)
{
    const double *go = d + o, *xa = v + a, *yb = v + b;
    const int sa = !!(fl & RT_KSET_A), sb = !!(fl & RT_KSET_B);
    if ((fl & 3) != 3) {
        if (fl & 1) rt_kxp_sqdiff_a(n, d + a, go, xa, yb, sa);
        if (fl & 2) rt_kxp_sqdiff_b(n, d + b, go, xa, yb, sb);
    } else if (a + n <= b || b + n <= a) {
        rt_kxp_sqdiff_ab(n, d + a, d + b, go, xa, yb, sa, sb);
    } else if (a >= b) {
        /* overlapping (x[1:] - x[:-1]): ordered as rt_kr_*_VV orders them,
         * which is also the one-loop order of vm/sweeps.c's n == 1 code */
        rt_kxp_sqdiff_a(n, d + a, go, xa, yb, sa);
        rt_kxp_sqdiff_b(n, d + b, go, xa, yb, sb);
    } else {
        rt_kxp_sqdiff_b(n, d + b, go, xa, yb, sb);
        rt_kxp_sqdiff_a(n, d + a, go, xa, yb, sa);
    }
}

/* ------------------------------------------------------------------ SSD
 * out = np.sum((a - b)^2) over n elements: REDUCE_SUM of a whole SQDIFF,
 * fused.  The forward is rt_k_pairwise_sum's algorithm (numpy's pairwise
 * summation, bit for bit) reading (a[i] - b[i])^2 where it reads x[i], so
 * the same partial sums round the same way; the reverse is SQDIFF's with
 * the sum's adjoint g for every element (REDUCE_SUM's reverse gives each
 * square exactly g).  The squares never go through the arena. */

#define RT_SQD_(i) ((xa[i] - yb[i]) * (xa[i] - yb[i]))

RT_KCLONES static double rt_kxp_ssd(const double *xa, const double *yb, int64_t n)
{
    if (n < 8) {
        double res = 0.0;
        int64_t i;
        for (i = 0; i < n; i++)
            res += RT_SQD_(i);
        return res;
    } else if (n <= 128) {
        double r[8], res;
        int64_t i, j;
        for (j = 0; j < 8; j++)
            r[j] = RT_SQD_(j);
        for (i = 8; i < n - (n % 8); i += 8)
            for (j = 0; j < 8; j++)
                r[j] += RT_SQD_(i + j);
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += RT_SQD_(i);
        return res;
    } else {
        int64_t n2 = n / 2;
        n2 -= n2 % 8;
        return rt_kxp_ssd(xa, yb, n2) + rt_kxp_ssd(xa + n2, yb + n2, n - n2);
    }
}
#undef RT_SQD_

void rt_kf_SSD(int64_t n, double *v, int64_t o, int64_t a, int64_t b)
{
    v[o] = 0.0 + rt_kxp_ssd(v + a, v + b, n);    /* 0.0 +: as REDUCE_SUM */
}

#define KX_SSD_PASS_(FN, SIGN)                                                \
    RT_KCLONES static void FN(int64_t n, double *restrict dd, double g,       \
                              const double *restrict xa, const double *restrict yb) \
    {                                                                         \
        int64_t i;                                                            \
        for (i = 0; i < n; i++) {                                             \
            const double gt = g * (2.0 * (xa[i] - yb[i]));                    \
            dd[i] += RT_AZ(gt, SIGN);                                         \
        }                                                                     \
    }
KX_SSD_PASS_(rt_kxp_ssd_a, 1.0)
KX_SSD_PASS_(rt_kxp_ssd_b, -1.0)
#undef KX_SSD_PASS_

RT_KCLONES static void rt_kxp_ssd_ab(int64_t n, double *restrict da, double *restrict db,
                                     double g, const double *restrict xa,
                                     const double *restrict yb)
{
    int64_t i;
    for (i = 0; i < n; i++) {
        const double gt = g * (2.0 * (xa[i] - yb[i]));
        da[i] += RT_AZ(gt, 1.0);
        db[i] += RT_AZ(gt, -1.0);
    }
}

void rt_kr_SSD(uint32_t fl, int64_t n, double *d, const double *v,
               int64_t o, int64_t a, int64_t b)
{
    const double g = d[o], *xa = v + a, *yb = v + b;
    if (g == 0.0)
        return;                          /* REDUCE_SUM's reverse skips it */
    if ((fl & 3) != 3) {
        if (fl & 1) rt_kxp_ssd_a(n, d + a, g, xa, yb);
        if (fl & 2) rt_kxp_ssd_b(n, d + b, g, xa, yb);
    } else if (a + n <= b || b + n <= a) {
        rt_kxp_ssd_ab(n, d + a, d + b, g, xa, yb);
    } else if (a >= b) {                 /* overlapping: as rt_kr_SQDIFF */
        rt_kxp_ssd_a(n, d + a, g, xa, yb);
        rt_kxp_ssd_b(n, d + b, g, xa, yb);
    } else {
        rt_kxp_ssd_b(n, d + b, g, xa, yb);
        rt_kxp_ssd_a(n, d + a, g, xa, yb);
    }
}

/* SQDIFF's tangent per element, then REDUCE_SUM's: a left-to-right sum. */
double rt_kt_SSD(uint32_t fl, int64_t n, const double *t, const double *v, int64_t a, int64_t b)
{
    double r = 0.0;
    int64_t i;
    for (i = 0; i < n; i++) {
        const double dt = ((fl & 1) ? t[a + i] : 0.0) - ((fl & 2) ? t[b + i] : 0.0);
        r += dt != 0.0 ? dt * (2.0 * (v[a + i] - v[b + i])) : 0.0;
    }
    return r;
}

/* ------------------------------------------------------------------ matrix-vector
 * MATMUL with N == 1 (csrc/instr/matmul.h).  The forward's rows are
 * independent dots (rt_k_dot4's order): split by rows as they come. */
RT_KCLONES static void rt_k_matvec_k(double *restrict out, const double *restrict A,
                                     const double *restrict x, int64_t M, int64_t K)
{
    int64_t i;
    for (i = 0; i < M; i++) {
        /* A is streamed once (student-t: 8 MB); a prefetch 4 KB ahead made
         * this loop ~10% faster standalone (memory-bound) */
        RT_K_PREFETCH(A + i * K + 512);
        out[i] = rt_k_dot4(A + i * K, x, K);
    }
}

typedef struct { double *out; const double *A, *x; int64_t K; } rt_kmv;

static void rt_k_matvec_piece(void *ctx, int who, int64_t lo, int64_t hi, int64_t k)
{
    (void)who;
    const rt_kmv *c = ctx;
    (void)k;
    rt_k_matvec_k(c->out + lo, c->A + lo * c->K, c->x, hi - lo, c->K);
}

void rt_k_matvec(double *out, const double *A, const double *x, int64_t M, int64_t K)
{
    if (K > 0 && RT_KPAR(M * K)) {
        rt_kmv c = { out, A, x, K };
        rt_par_run(M, (RT_KPIECE * 4 + K - 1) / K, RT_KMAXT, rt_k_matvec_piece, &c);
    } else
        rt_k_matvec_k(out, A, x, M, K);
}

/* The reverse dB += A^T G: dB[k] receives A[i, k] * G[i] for i = 0, 1, ...
 * in order, added straight in (a -0.0 contribution stays -0.0).  The VM's
 * own file (-O2, no vector ISA) ran that loop one element at a time through memory
 * (each dB[k] stored and reloaded per row); here, for K <= 32, the K
 * running sums stay in a local array the compiler keeps in registers for
 * the whole pass over A (vectorised across k), and wider K keeps the
 * one-pass loop (column chunks would read A once per chunk), vectorised
 * across k by the clones.
 *
 * Over more than RT_KSUM_CHUNK rows (K <= 32) the rows go in the fixed
 * chunks of rt_ksum_chunk(M): chunk 0 runs on from dB, every later chunk
 * from -0.0 (the additive identity), and the chunks' sums are then added
 * to dB in chunk order.  The chunks may run on different threads; the
 * bits depend on M and K only. */
#define RT_MV_W 32
RT_KCLONES static void rt_k_matvec_t_k(double *restrict dB, const double *restrict A,
                                       const double *restrict G, int64_t M, int64_t K)
{
    int64_t i, k;
    if (K <= RT_MV_W) {
        double acc[RT_MV_W];
        for (k = 0; k < K; k++)
            acc[k] = dB[k];
        for (i = 0; i < M; i++) {
            const double gi = G[i];
            const double *ai = A + i * K;
            for (k = 0; k < K; k++)
                acc[k] += ai[k] * gi;
        }
        for (k = 0; k < K; k++)
            dB[k] = acc[k];
        return;
    }
    for (i = 0; i < M; i++) {
        const double gi = G[i];
        const double *ai = A + i * K;
        for (k = 0; k < K; k++)
            dB[k] += ai[k] * gi;
    }
}

typedef struct {
    const double *A, *G, *dB;
    int64_t K;
    double part[RT_KSUM_MAXCHUNKS][RT_MV_W];
} rt_kmvt;

static void rt_k_matvec_t_piece(void *ctx, int who, int64_t lo, int64_t hi, int64_t c)
{
    (void)who;
    rt_kmvt *t = ctx;
    int64_t k;
    for (k = 0; k < t->K; k++)
        t->part[c][k] = c == 0 ? t->dB[k] : -0.0;
    rt_k_matvec_t_k(t->part[c], t->A + lo * t->K, t->G + lo, hi - lo, t->K);
}

void rt_k_matvec_t_acc(double *dB, const double *A, const double *G, int64_t M, int64_t K)
{
    const int64_t chunk = rt_ksum_chunk(M);
    int64_t c, k, nc;
    rt_kmvt t;
    if (K > RT_MV_W || chunk >= M) {
        rt_k_matvec_t_k(dB, A, G, M, K);
        return;
    }
    nc = (M + chunk - 1) / chunk;
    t.A = A; t.G = G; t.dB = dB; t.K = K;
    if (RT_KPAR(M * K))
        rt_par_run(M, chunk, RT_KMAXT, rt_k_matvec_t_piece, &t);
    else
        for (c = 0; c < nc; c++)
            rt_k_matvec_t_piece(&t, 0, c * chunk, c * chunk + chunk < M ? c * chunk + chunk : M, c);
    for (k = 0; k < K; k++) {
        double s = t.part[0][k];
        for (c = 1; c < nc; c++)
            s += t.part[c][k];
        dB[k] = s;
    }
}
