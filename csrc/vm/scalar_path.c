/* The scalar path.
 *
 * Scalar code (one element per instruction: a Python loop over floats) is
 * all of some programs, and there the general sweeps (sweeps.c) spend most of an
 * instruction's time around its one add or multiply: decoding six words,
 * the n == 1 and flag tests, one shared indirect jump, and registers spilled
 * around the array kernels' calls.  The scalar path runs such programs from
 * a dispatch index (p->scalar_index, which rt_verify builds from the words
 * it accepted): entry 1 + pc holds instruction pc's forward handler in bits
 * 0..7 and its reverse handler in bits 16..31 (one reverse handler per
 * adjoint-flag combination, so no flag is tested; SKIP without flags).
 * Any other instruction belongs to a run of them that the general sweep
 * runs in one call: the run's length is in bits 8..15 of its first entry
 * (the forward's RUN) and of its last (the reverse's RUN); a run holds
 * whole blocks.  Entries 0 and n_instr + 1 end the reverse and the forward.
 *
 * A handler computes what the general sweep's n == 1 case computes, with
 * the same expressions in the same order (the op table's scalar functions,
 * the hand instructions' rt_sfwd_ / rt_srev_), so results are bit-identical
 * whichever path runs.  With GCC/Clang every handler ends in its own
 * indirect jump (each jump site learns its own successors); elsewhere a
 * switch in a loop.
 */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE 1   /* M_2_SQRTPI and friends in <math.h> */
#endif

#include <math.h>
#include <stdint.h>

#include "vm.h"
#include "generated/ops_generated.h"
#include "kernels/scalar.h"
#include "instr/instr.h"
#include "vm/dispatch.h"
#include "vm/internal.h"

/* Pairs.  In the forward sweep, two adjacent one-element instructions whose
 * handlers are both in this list (plain arithmetic, what Python loops over
 * floats are made of) run as one handler, one after the other, with the
 * single handlers' bodies: one dispatch instead of two, which measured ~1 ns
 * (about an instruction's own work) each on eight-schools.  Pairs are taken
 * greedily from the start.  (The reverse has its own pairs, below.)
 * X(handler, op-table name, U unary / B binary / H hand). */
#define RT_PAIR_OPS(X) \
    X(SQUARE, SQUARE, U) \
    X(NEG, NEG, U) \
    X(ADD_VV, ADD, B) \
    X(SUB_VV, SUB, B) \
    X(MUL_VV, MUL, B) \
    X(DIV_VV, DIV, B) \
    X(AXPY, AXPY, H) \
    X(SQDIFF, SQDIFF, H)
#define RT_PAIR_ROW(X, H1, N1, K1) \
    X(H1, N1, K1, SQUARE, SQUARE, U) \
    X(H1, N1, K1, NEG, NEG, U) \
    X(H1, N1, K1, ADD_VV, ADD, B) \
    X(H1, N1, K1, SUB_VV, SUB, B) \
    X(H1, N1, K1, MUL_VV, MUL, B) \
    X(H1, N1, K1, DIV_VV, DIV, B) \
    X(H1, N1, K1, AXPY, AXPY, H) \
    X(H1, N1, K1, SQDIFF, SQDIFF, H)
#define RT_PAIRS(X) \
    RT_PAIR_ROW(X, SQUARE, SQUARE, U) \
    RT_PAIR_ROW(X, NEG, NEG, U) \
    RT_PAIR_ROW(X, ADD_VV, ADD, B) \
    RT_PAIR_ROW(X, SUB_VV, SUB, B) \
    RT_PAIR_ROW(X, MUL_VV, MUL, B) \
    RT_PAIR_ROW(X, DIV_VV, DIV, B) \
    RT_PAIR_ROW(X, AXPY, AXPY, H) \
    RT_PAIR_ROW(X, SQDIFF, SQDIFF, H)
#define RT_PAIR_N 8
#define RT_PP_ENUM_(H, ...) RT_PP_##H,
enum { RT_PAIR_OPS(RT_PP_ENUM_) RT_PP_COUNT_ };
typedef char rt_pair_list_has_rt_pair_n_entries_[RT_PP_COUNT_ == RT_PAIR_N ? 1 : -1];

#define RT_SF_ENUM1_(NAME, ...) RT_SF_##NAME,
#define RT_SF_ENUM2_(NAME, ...) RT_SF_##NAME##_VV,
#define RT_SF_ENUMG_(NAME, ...) RT_SF_GUARD_##NAME,
#define RT_SF_ENUMP_(H1, N1, K1, H2, ...) RT_SF_P_##H1##__##H2,
enum {
    RT_SF_END = 0, RT_SF_RUN,
    RT_UNARY(RT_SF_ENUM1_) RT_UNARY_ND(RT_SF_ENUM1_) RT_BINARY(RT_SF_ENUM2_)
    RT_BINARY_ND(RT_SF_ENUM2_) RT_GUARDS(RT_SF_ENUMG_) RT_SCALAR_HAND(RT_SF_ENUM1_)
    RT_SF_PAIRS_,                       /* the first pair's number */
    RT_SF_PAIRS_AT_ = RT_SF_PAIRS_ - 1, /* (so that it is RT_SF_PAIRS_) */
    RT_PAIRS(RT_SF_ENUMP_)
    RT_SF_COUNT
};
#define RT_SR_ENUM1_(NAME, ...) RT_SR_##NAME,
#define RT_SR_ENUM3_(NAME, ...) RT_SR_##NAME##_1, RT_SR_##NAME##_2, RT_SR_##NAME##_3,
#define RT_SR_ENUM7_(NAME, ...) RT_SR_##NAME##_1, RT_SR_##NAME##_2, RT_SR_##NAME##_3, \
    RT_SR_##NAME##_4, RT_SR_##NAME##_5, RT_SR_##NAME##_6, RT_SR_##NAME##_7,
/* Reverse pairs.  In the reverse sweep, two adjacent one-element
 * instructions whose reverse handlers are both in this list run as one
 * handler: the later instruction's body, then the earlier's, as two
 * handlers would.  Each entry is one op with one flag combination, so a
 * pair tests no flag: an earlier version whose pairs tested their flags at
 * run time was slower than single handlers; these made rosenbrock-loop's
 * replay ~6% faster.  eight-schools' reverse waits on its adjoint chains
 * rather than on dispatch: there the pair's second body taking its
 * adjoint from the first's register (SR_R1BODY_) made the replay ~9%
 * faster.  Pairs are taken greedily from the end; the pair's handler sits
 * on the later instruction's entry.
 * 18 entries, 324 pairs: the ops Python loops over floats are made of with
 * the flag combinations they take (a constant operand has no flag).
 * X(handler, op-table name, U unary / B binary / H hand, adjoint flags). */
#define RT_RPAIR_OPS(X) \
    X(SQUARE, SQUARE, U, 1) \
    X(NEG, NEG, U, 1) \
    X(EXP, EXP, U, 1) \
    X(LOG, LOG, U, 1) \
    X(ADD_1, ADD, B, 1) \
    X(ADD_2, ADD, B, 2) \
    X(ADD_3, ADD, B, 3) \
    X(SUB_1, SUB, B, 1) \
    X(SUB_2, SUB, B, 2) \
    X(SUB_3, SUB, B, 3) \
    X(MUL_1, MUL, B, 1) \
    X(MUL_2, MUL, B, 2) \
    X(MUL_3, MUL, B, 3) \
    X(DIV_1, DIV, B, 1) \
    X(AXPY_5, AXPY, H, 5) \
    X(AXPY_7, AXPY, H, 7) \
    X(SQDIFF_2, SQDIFF, H, 2) \
    X(SQDIFF_3, SQDIFF, H, 3)
#define RT_RPAIR_ROW(X, H1, N1, K1, F1) \
    X(H1, N1, K1, F1, SQUARE, SQUARE, U, 1) \
    X(H1, N1, K1, F1, NEG, NEG, U, 1) \
    X(H1, N1, K1, F1, EXP, EXP, U, 1) \
    X(H1, N1, K1, F1, LOG, LOG, U, 1) \
    X(H1, N1, K1, F1, ADD_1, ADD, B, 1) \
    X(H1, N1, K1, F1, ADD_2, ADD, B, 2) \
    X(H1, N1, K1, F1, ADD_3, ADD, B, 3) \
    X(H1, N1, K1, F1, SUB_1, SUB, B, 1) \
    X(H1, N1, K1, F1, SUB_2, SUB, B, 2) \
    X(H1, N1, K1, F1, SUB_3, SUB, B, 3) \
    X(H1, N1, K1, F1, MUL_1, MUL, B, 1) \
    X(H1, N1, K1, F1, MUL_2, MUL, B, 2) \
    X(H1, N1, K1, F1, MUL_3, MUL, B, 3) \
    X(H1, N1, K1, F1, DIV_1, DIV, B, 1) \
    X(H1, N1, K1, F1, AXPY_5, AXPY, H, 5) \
    X(H1, N1, K1, F1, AXPY_7, AXPY, H, 7) \
    X(H1, N1, K1, F1, SQDIFF_2, SQDIFF, H, 2) \
    X(H1, N1, K1, F1, SQDIFF_3, SQDIFF, H, 3)
#define RT_RPAIRS(X) \
    RT_RPAIR_ROW(X, SQUARE, SQUARE, U, 1) \
    RT_RPAIR_ROW(X, NEG, NEG, U, 1) \
    RT_RPAIR_ROW(X, EXP, EXP, U, 1) \
    RT_RPAIR_ROW(X, LOG, LOG, U, 1) \
    RT_RPAIR_ROW(X, ADD_1, ADD, B, 1) \
    RT_RPAIR_ROW(X, ADD_2, ADD, B, 2) \
    RT_RPAIR_ROW(X, ADD_3, ADD, B, 3) \
    RT_RPAIR_ROW(X, SUB_1, SUB, B, 1) \
    RT_RPAIR_ROW(X, SUB_2, SUB, B, 2) \
    RT_RPAIR_ROW(X, SUB_3, SUB, B, 3) \
    RT_RPAIR_ROW(X, MUL_1, MUL, B, 1) \
    RT_RPAIR_ROW(X, MUL_2, MUL, B, 2) \
    RT_RPAIR_ROW(X, MUL_3, MUL, B, 3) \
    RT_RPAIR_ROW(X, DIV_1, DIV, B, 1) \
    RT_RPAIR_ROW(X, AXPY_5, AXPY, H, 5) \
    RT_RPAIR_ROW(X, AXPY_7, AXPY, H, 7) \
    RT_RPAIR_ROW(X, SQDIFF_2, SQDIFF, H, 2) \
    RT_RPAIR_ROW(X, SQDIFF_3, SQDIFF, H, 3)
#define RT_RPAIR_N 18
#define RT_RP_ENUM_(H, ...) RT_RP_##H,
enum { RT_RPAIR_OPS(RT_RP_ENUM_) RT_RP_COUNT_ };
typedef char rt_rpair_list_has_rt_rpair_n_entries_[RT_RP_COUNT_ == RT_RPAIR_N ? 1 : -1];
#define RT_SR_ENUMP_(H1, N1, K1, F1, H2, ...) RT_SR_P_##H1##__##H2,
enum {
    RT_SR_END = 0, RT_SR_RUN, RT_SR_SKIP,
    RT_UNARY(RT_SR_ENUM1_) RT_BINARY(RT_SR_ENUM3_) RT_SCALAR_HAND(RT_SR_ENUM7_)
    RT_SR_PAIRS_,
    RT_SR_PAIRS_AT_ = RT_SR_PAIRS_ - 1,
    RT_RPAIRS(RT_SR_ENUMP_)
    RT_SR_COUNT
};
#define RT_RPAIR_CHECK_(H1, N1, K1, F1, H2, ...)                              \
    typedef char rt_rpair_at_##H1##__##H2[                                    \
        (RT_SR_P_##H1##__##H2 == RT_SR_PAIRS_ + RT_RPAIR_N * RT_RP_##H1 + RT_RP_##H2) ? 1 : -1];
RT_RPAIRS(RT_RPAIR_CHECK_)
/* Pair (H1, H2) is handler RT_SF_PAIRS_ + RT_PAIR_N * position(H1) + position(H2)
 * (rt_scalar_pair computes it so). */
#define RT_PAIR_CHECK_(H1, N1, K1, H2, ...)                                   \
    typedef char rt_pair_at_##H1##__##H2[                                     \
        (RT_SF_P_##H1##__##H2 == RT_SF_PAIRS_ + RT_PAIR_N * RT_PP_##H1 + RT_PP_##H2) ? 1 : -1];
RT_PAIRS(RT_PAIR_CHECK_)
/* An entry's fields: forward handler in bits 0..7, a run's length in bits
 * 8..15, reverse handler in bits 16..31 (each handler field one load). */
#define RT_SX_REV_SHIFT 16
#define RT_SX_RUN_SHIFT 8
#define RT_SX_REV(e) ((e) >> RT_SX_REV_SHIFT)
#define RT_SX_RUN(e) (((e) >> RT_SX_RUN_SHIFT) & 0xff)
#define RT_SCALAR_RUN_MAX 0xff
typedef char rt_scalar_handlers_fit_their_fields_[
    (RT_SF_COUNT <= 256 && RT_SR_COUNT <= 0x10000) ? 1 : -1];
typedef char rt_scalar_run_holds_a_block_[(RT_BLOCK_MAX + 2 <= RT_SCALAR_RUN_MAX) ? 1 : -1];

/* Instruction w's forward handler, or -1: not a one-element instruction. */
static int rt_scalar_fwd_handler(const int32_t *w)
{
    const int64_t n = w[1];
    switch (w[0] & RT_OPCODE_MASK) {
#define RT_SFH1_(NAME, ...) case RT_OP_##NAME: return n == 1 ? RT_SF_##NAME : -1;
#define RT_SFH2_(NAME, ...) case RT_OP_##NAME##_VV: return n == 1 ? RT_SF_##NAME##_VV : -1;
#define RT_SFHG_(NAME, ...) case RT_OP_GUARD_##NAME: return RT_SF_GUARD_##NAME;
#define RT_SFHH_(NAME, FLAGS, ONE) case RT_OP_##NAME: return n == 1 || (ONE) ? RT_SF_##NAME : -1;
    RT_UNARY(RT_SFH1_) RT_UNARY_ND(RT_SFH1_) RT_BINARY(RT_SFH2_) RT_BINARY_ND(RT_SFH2_)
    RT_GUARDS(RT_SFHG_) RT_SCALAR_HAND(RT_SFHH_)
#undef RT_SFH1_
#undef RT_SFH2_
#undef RT_SFHG_
#undef RT_SFHH_
    default:
        return -1;
    }
}

/* The reverse handler of a one-element instruction w, whose flags the
 * verifier checked (unary: 1; binary: 1..3; a hand row's: its own). */
static int rt_scalar_rev_handler(const int32_t *w)
{
    const int fl = (int)((uint32_t)w[0] >> RT_FLAGS_SHIFT);
    if (fl == 0)
        return RT_SR_SKIP;
    switch (w[0] & RT_OPCODE_MASK) {
#define RT_SRH1_(NAME, ...) case RT_OP_##NAME: return RT_SR_##NAME;
#define RT_SRH3_(NAME, ...) case RT_OP_##NAME##_VV: return RT_SR_##NAME##_1 + fl - 1;
#define RT_SRH7_(NAME, ...) case RT_OP_##NAME: return RT_SR_##NAME##_1 + fl - 1;
    RT_UNARY(RT_SRH1_) RT_BINARY(RT_SRH3_) RT_SCALAR_HAND(RT_SRH7_)
#undef RT_SRH1_
#undef RT_SRH3_
#undef RT_SRH7_
    default:
        return RT_SR_SKIP;              /* no derivative: flags are 0 */
    }
}

/* The position in RT_PAIR_OPS of forward handler h, or -1. */
static int rt_pair_pos(int h)
{
#define RT_PP_POS_(H, ...) if (h == RT_SF_##H) return RT_PP_##H;
    RT_PAIR_OPS(RT_PP_POS_)
#undef RT_PP_POS_
    return -1;
}

/* Marks the forward pairs in a filled index, on the first instruction's
 * entry. */
static void rt_scalar_pair(const rt_program *p)
{
    uint32_t *const ix = p->scalar_index + 1;     /* ix[pc]: instruction pc */
    const int64_t N = p->n_instr;
    int64_t pc;
    int p1, p2;
    for (pc = 0; pc + 1 < N; pc++) {
        if ((p1 = rt_pair_pos((int)(ix[pc] & 0xff))) >= 0
            && (p2 = rt_pair_pos((int)(ix[pc + 1] & 0xff))) >= 0) {
            ix[pc] = (ix[pc] & ~(uint32_t)0xff) | (uint32_t)(RT_SF_PAIRS_ + RT_PAIR_N * p1 + p2);
            pc++;
        }
    }
}

/* The position in RT_RPAIR_OPS of reverse handler h, or -1. */
static int rt_rpair_pos(int h)
{
#define RT_RP_POS_(H, ...) if (h == RT_SR_##H) return RT_RP_##H;
    RT_RPAIR_OPS(RT_RP_POS_)
#undef RT_RP_POS_
    return -1;
}

/* Marks the reverse pairs in a filled index, on the later instruction's
 * entry. */
static void rt_scalar_rpair(const rt_program *p)
{
    uint32_t *const ix = p->scalar_index + 1;
    int64_t pc;
    int p1, p2;
    for (pc = p->n_instr - 1; pc >= 1; pc--) {
        if ((p1 = rt_rpair_pos((int)RT_SX_REV(ix[pc]))) >= 0
            && (p2 = rt_rpair_pos((int)RT_SX_REV(ix[pc - 1]))) >= 0) {
            ix[pc] = (ix[pc] & 0xffff)
                     | (uint32_t)(RT_SR_PAIRS_ + RT_RPAIR_N * p1 + p2) << RT_SX_REV_SHIFT;
            pc--;
        }
    }
}

/* Fills p->scalar_index from p's verified words; returns 1 when the
 * program has a one-element instruction (else the general sweeps run). */
RT_INTERNAL int32_t rt_scalar_index_build(const rt_program *p)
{
    uint32_t *const ix = p->scalar_index;
    const int64_t N = p->n_instr;
    int64_t pc = 0, n_scalar = 0;
    ix[0] = (uint32_t)RT_SR_END << RT_SX_REV_SHIFT;
    ix[N + 1] = RT_SF_END;
    while (pc < N) {
        const int32_t *w = p->code + pc * RT_WORDS;
        const int h = rt_scalar_fwd_handler(w);
        int64_t start, m;
        if (h >= 0) {
            ix[pc + 1] = (uint32_t)h | (uint32_t)rt_scalar_rev_handler(w) << RT_SX_REV_SHIFT;
            n_scalar++;
            pc++;
            continue;
        }
        start = pc;
        do {
            const int64_t step = (w[0] & RT_OPCODE_MASK) == RT_OP_BLOCK ? w[2] + 2 : 1;
            if (pc - start + step > RT_SCALAR_RUN_MAX)
                break;
            for (m = 0; m < step; m++)
                ix[pc + 1 + m] = 0;     /* inside a run: never read */
            pc += step;
            w = p->code + pc * RT_WORDS;
        } while (pc < N && rt_scalar_fwd_handler(w) < 0);
        m = pc - start;
        ix[start + 1] = RT_SF_RUN | (uint32_t)m << RT_SX_RUN_SHIFT;
        ix[pc] |= (uint32_t)RT_SR_RUN << RT_SX_REV_SHIFT | (uint32_t)m << RT_SX_RUN_SHIFT;
    }
    rt_scalar_pair(p);
    rt_scalar_rpair(p);
    return n_scalar > 0;
}

#if defined(__GNUC__) && !defined(__clang__)
#define RT_THREADED __attribute__((optimize("no-crossjumping", "no-gcse")))
#else
#define RT_THREADED
#endif
#if RT_COMPUTED_GOTO
#define SF_CASE(H) L_SF_##H:
#define SF_GO goto *sf_labels[*k & 0xff]
#define SR_CASE(H) L_SR_##H:
#define SR_GO goto *sr_labels[RT_SX_REV(*k)]
#else
#define SF_CASE(H) case RT_SF_##H:
#define SF_GO continue
#define SR_CASE(H) case RT_SR_##H:
#define SR_GO continue
#endif
#define SF_NEXT { w += RT_WORDS; k++; SF_GO; }
#define SR_NEXT { w -= RT_WORDS; k--; SR_GO; }

#define SF_UNARY_(NAME, ...) SF_CASE(NAME) { v[w[2]] = rt_sf_##NAME(v[w[3]]); SF_NEXT }
#define SF_BINARY_(NAME, ...) \
    SF_CASE(NAME##_VV) { v[w[2]] = rt_sf_##NAME(v[w[3]], v[w[4]]); SF_NEXT }
#define SF_GUARD_(NAME, PRED)                                                 \
    SF_CASE(GUARD_##NAME) {                                                   \
        const double x = v[w[3]], y = v[w[4]];                                \
        if ((int64_t)(PRED) != (int64_t)w[1]) {                               \
            p->failed_guard = w[2];                                           \
            p->failed_pc = k - k0;                                            \
            return RT_GUARD_FAILED;                                           \
        }                                                                     \
        SF_NEXT                                                               \
    }
#define SF_HAND_(NAME, ...) \
    SF_CASE(NAME) { rt_sfwd_##NAME(v, ints, w[1], w[2], w[3], w[4], w[5]); SF_NEXT }
/* A pair's bodies: the words of its first instruction at w, its second's at
 * w + RT_WORDS. */
#define SF_PBODY_U(NAME, W) v[(W)[2]] = rt_sf_##NAME(v[(W)[3]]);
#define SF_PBODY_B(NAME, W) v[(W)[2]] = rt_sf_##NAME(v[(W)[3]], v[(W)[4]]);
#define SF_PBODY_H(NAME, W) rt_sfwd_##NAME(v, ints, (W)[1], (W)[2], (W)[3], (W)[4], (W)[5]);
#define SF_PAIR_(H1, N1, K1, H2, N2, K2)                                      \
    SF_CASE(P_##H1##__##H2) {                                                 \
        SF_PBODY_##K1(N1, w)                                                  \
        SF_PBODY_##K2(N2, w + RT_WORDS)                                       \
        w += 2 * RT_WORDS;                                                    \
        k += 2;                                                               \
        SF_GO;                                                                \
    }
#define SF_LABELP_(H1, N1, K1, H2, ...) [RT_SF_P_##H1##__##H2] = &&L_SF_P_##H1##__##H2,
#define SF_LABEL1_(NAME, ...) [RT_SF_##NAME] = &&L_SF_##NAME,
#define SF_LABEL2_(NAME, ...) [RT_SF_##NAME##_VV] = &&L_SF_##NAME##_VV,
#define SF_LABELG_(NAME, ...) [RT_SF_GUARD_##NAME] = &&L_SF_GUARD_##NAME,

/* The forward sweep over a program whose scalar_path rt_verify set. */
RT_HOT RT_THREADED RT_INTERNAL int rt_scalar_forward(rt_program *p)
{
    const uint32_t *const k0 = p->scalar_index + 1;
    const uint32_t *k = k0;
    const int32_t *w = p->code;
    const int32_t *const ints = p->ints;
    double *const v = p->vals;
#if RT_COMPUTED_GOTO
    static const void *const sf_labels[RT_SF_COUNT] = {
        [RT_SF_END] = &&L_SF_END, [RT_SF_RUN] = &&L_SF_RUN,
        RT_UNARY(SF_LABEL1_) RT_UNARY_ND(SF_LABEL1_) RT_BINARY(SF_LABEL2_)
        RT_BINARY_ND(SF_LABEL2_) RT_GUARDS(SF_LABELG_) RT_SCALAR_HAND(SF_LABEL1_)
        RT_PAIRS(SF_LABELP_)
    };
    SF_GO;
#else
    for (;;) switch (*k & 0xff) {
#endif
    SF_CASE(END) return RT_OK;
    SF_CASE(RUN) {
        const int64_t pc = k - k0, m = (int64_t)RT_SX_RUN(*k);
        const int st = rt_run_forward_range(p, pc, pc + m);
        if (st != RT_OK)
            return st;
        w += m * RT_WORDS;
        k += m;
        SF_GO;
    }
    RT_UNARY(SF_UNARY_)
    RT_UNARY_ND(SF_UNARY_)
    RT_BINARY(SF_BINARY_)
    RT_BINARY_ND(SF_BINARY_)
    RT_GUARDS(SF_GUARD_)
    RT_SCALAR_HAND(SF_HAND_)
    RT_PAIRS(SF_PAIR_)
#if !RT_COMPUTED_GOTO
    default:
        return RT_UNVERIFIED;           /* unreachable: rt_verify built the index */
    }
#endif
}

/* Reverse: w is one instruction past the current one (so that it stays
 * inside the words down to instruction 0): its words start at
 * w - RT_WORDS. */
/* The reverse handlers' bodies, also a reverse pair's: P is the
 * instruction's own words. */
#define SR_RBODY_U(NAME, FL, P) {                                             \
        const int64_t o = (P)[2];                                             \
        const double g = d[o];                                                \
        if (RT_LIKELY(g != 0.0)) {                                            \
            const int64_t a = (P)[3];                                         \
            d[a] += g * rt_sd_##NAME(v[a], v[o]);                             \
        }                                                                     \
    }
#define SR_RBODY_B(NAME, FL, P) {                                             \
        const int64_t o = (P)[2];                                             \
        const double g = d[o];                                                \
        if (RT_LIKELY(g != 0.0)) {                                            \
            const int64_t a = (P)[3], b = (P)[4];                             \
            const double x = v[a], y = v[b], f = v[o];                        \
            (void)x; (void)y; (void)f;                                        \
            if ((FL) & 1) d[a] += g * rt_sdx_##NAME(x, y, f);                 \
            if ((FL) & 2) d[b] += g * rt_sdy_##NAME(x, y, f);                 \
        }                                                                     \
    }
#define SR_RBODY_H(NAME, FL, P) \
    rt_srev_##NAME(FL, v, d, ints, (P)[1], (P)[2], (P)[3], (P)[4], (P)[5]);
#define SR_UNARY_(NAME, ...) SR_CASE(NAME) { SR_RBODY_U(NAME, 1, w - RT_WORDS) SR_NEXT }
#define SR_BINARY_FL_(NAME, FL) \
    SR_CASE(NAME##_##FL) { SR_RBODY_B(NAME, FL, w - RT_WORDS) SR_NEXT }
#define SR_BINARY_(NAME, ...) SR_BINARY_FL_(NAME, 1) SR_BINARY_FL_(NAME, 2) SR_BINARY_FL_(NAME, 3)
#define SR_HAND_FL_(NAME, FL) \
    SR_CASE(NAME##_##FL) { SR_RBODY_H(NAME, FL, w - RT_WORDS) SR_NEXT }
#define SR_HAND_(NAME, ...)                                                   \
    SR_HAND_FL_(NAME, 1) SR_HAND_FL_(NAME, 2) SR_HAND_FL_(NAME, 3) SR_HAND_FL_(NAME, 4) \
    SR_HAND_FL_(NAME, 5) SR_HAND_FL_(NAME, 6) SR_HAND_FL_(NAME, 7)
/* In a pair, the later instruction's body also leaves the slot it wrote
 * last and the value it stored there in li, lv (li = -1: none, or a hand
 * instruction's body), and the earlier one takes its g from lv when its
 * output is that slot: the same value, without waiting for the store to
 * reach the load (the two are usually a producer and its consumer). */
#define SR_R1BODY_U(NAME, FL, P) {                                            \
        const int64_t o = (P)[2];                                             \
        const double g = d[o];                                                \
        li = -1;                                                              \
        if (RT_LIKELY(g != 0.0)) {                                            \
            const int64_t a = (P)[3];                                         \
            lv = (d[a] += g * rt_sd_##NAME(v[a], v[o]));                      \
            li = a;                                                           \
        }                                                                     \
    }
#define SR_R1BODY_B(NAME, FL, P) {                                            \
        const int64_t o = (P)[2];                                             \
        const double g = d[o];                                                \
        li = -1;                                                              \
        if (RT_LIKELY(g != 0.0)) {                                            \
            const int64_t a = (P)[3], b = (P)[4];                             \
            const double x = v[a], y = v[b], f = v[o];                        \
            (void)x; (void)y; (void)f;                                        \
            if ((FL) & 1) { lv = (d[a] += g * rt_sdx_##NAME(x, y, f)); li = a; } \
            if ((FL) & 2) { lv = (d[b] += g * rt_sdy_##NAME(x, y, f)); li = b; } \
        }                                                                     \
    }
#define SR_R1BODY_H(NAME, FL, P) { li = -1; SR_RBODY_H(NAME, FL, P) }
#define SR_R2G_(o) (o == li ? lv : d[o])
#define SR_R2BODY_U(NAME, FL, P) {                                            \
        const int64_t o = (P)[2];                                             \
        const double g = SR_R2G_(o);                                          \
        if (RT_LIKELY(g != 0.0)) {                                            \
            const int64_t a = (P)[3];                                         \
            d[a] += g * rt_sd_##NAME(v[a], v[o]);                             \
        }                                                                     \
    }
#define SR_R2BODY_B(NAME, FL, P) {                                            \
        const int64_t o = (P)[2];                                             \
        const double g = SR_R2G_(o);                                          \
        if (RT_LIKELY(g != 0.0)) {                                            \
            const int64_t a = (P)[3], b = (P)[4];                             \
            const double x = v[a], y = v[b], f = v[o];                        \
            (void)x; (void)y; (void)f;                                        \
            if ((FL) & 1) d[a] += g * rt_sdx_##NAME(x, y, f);                 \
            if ((FL) & 2) d[b] += g * rt_sdy_##NAME(x, y, f);                 \
        }                                                                     \
    }
#define SR_R2BODY_H(NAME, FL, P) SR_RBODY_H(NAME, FL, P)
#define SR_RPAIR_(H1, N1, K1, F1, H2, N2, K2, F2)                             \
    SR_CASE(P_##H1##__##H2) {                                                 \
        int64_t li;                                                           \
        double lv = 0.0;                                                      \
        SR_R1BODY_##K1(N1, F1, w - RT_WORDS)                                  \
        SR_R2BODY_##K2(N2, F2, w - 2 * RT_WORDS)                              \
        (void)li; (void)lv;                                                   \
        w -= 2 * RT_WORDS;                                                    \
        k -= 2;                                                               \
        SR_GO;                                                                \
    }
#define SR_LABELP_(H1, N1, K1, F1, H2, ...) [RT_SR_P_##H1##__##H2] = &&L_SR_P_##H1##__##H2,
#define SR_LABEL1_(NAME, ...) [RT_SR_##NAME] = &&L_SR_##NAME,
#define SR_LABEL3_(NAME, ...) [RT_SR_##NAME##_1] = &&L_SR_##NAME##_1,                \
    [RT_SR_##NAME##_2] = &&L_SR_##NAME##_2, [RT_SR_##NAME##_3] = &&L_SR_##NAME##_3,
#define SR_LABEL7_(NAME, ...) SR_LABEL3_(NAME)                                      \
    [RT_SR_##NAME##_4] = &&L_SR_##NAME##_4, [RT_SR_##NAME##_5] = &&L_SR_##NAME##_5,  \
    [RT_SR_##NAME##_6] = &&L_SR_##NAME##_6, [RT_SR_##NAME##_7] = &&L_SR_##NAME##_7,

/* The reverse sweep over a program whose scalar_path rt_verify set; adj
 * zeroed and seeded by the caller, as for rt_run_reverse_range. */
RT_HOT RT_THREADED RT_INTERNAL int rt_scalar_reverse(const rt_program *p)
{
    const uint32_t *const k0 = p->scalar_index + 1;
    const uint32_t *k = k0 + p->n_instr - 1;
    const int32_t *w = p->code + p->n_instr * RT_WORDS;
    const int32_t *const ints = p->ints;
    const double *const v = p->vals;
    double *const d = p->adj;
#if RT_COMPUTED_GOTO
    static const void *const sr_labels[RT_SR_COUNT] = {
        [RT_SR_END] = &&L_SR_END, [RT_SR_RUN] = &&L_SR_RUN, [RT_SR_SKIP] = &&L_SR_SKIP,
        RT_UNARY(SR_LABEL1_) RT_BINARY(SR_LABEL3_) RT_SCALAR_HAND(SR_LABEL7_)
        RT_RPAIRS(SR_LABELP_)
    };
    SR_GO;
#else
    for (;;) switch (RT_SX_REV(*k)) {
#endif
    SR_CASE(END) return RT_OK;
    SR_CASE(RUN) {
        const int64_t hi = k - k0 + 1, m = (int64_t)RT_SX_RUN(*k);
        const int st = rt_run_reverse_range(p, hi - m, hi);
        if (st != RT_OK)
            return st;
        w -= m * RT_WORDS;
        k -= m;
        SR_GO;
    }
    SR_CASE(SKIP) SR_NEXT
    RT_UNARY(SR_UNARY_)
    RT_BINARY(SR_BINARY_)
    RT_SCALAR_HAND(SR_HAND_)
    RT_RPAIRS(SR_RPAIR_)
#if !RT_COMPUTED_GOTO
    default:
        return RT_UNVERIFIED;           /* unreachable: rt_verify built the index */
    }
#endif
}
