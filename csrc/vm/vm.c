/* revtape's virtual machine: verifier, forward sweep, reverse and tangent sweeps.
 *
 * The contract (instruction encoding, arena layout, statuses) is in vm.h.
 * Every opcode has a row in ops_generated.h (generated from src/revtape/core/isa.py
 * and ops.py): the elementwise kernels are generated from the op rows' C
 * expressions (scalar.h for one element, kernels.c for arrays); every other
 * instruction has one home in csrc/instr/ holding its forward, reverse and
 * tangent kernels (and its own verify checks), to which the sweeps below
 * dispatch through the generated lists -- a new instruction adds no line here.
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
#include <time.h>
#include <sched.h>

#include "vm.h"
#include "generated/ops_generated.h"
#include "kernels/scalar.h"
#include "kernels/kernels.h"
#include "instr/linalg/linalg.h"
#include "vm/verify.h"
#include "instr/instr.h"
#include "vm/soa.h"
#include "runtime/pool.h"
#include "runtime/par.h"

/* ------------------------------------------------------------------ dispatch
 * Lua-style dispatch macros.  With GCC/Clang the kernels are labels reached
 * by computed goto; gcc -O2 keeps one shared indirect jump per sweep (the
 * disassembly shows a single `jmp *`), it does not copy the dispatch into
 * every kernel.  Copying it by hand (branch h5-threaded: decode and jump
 * spelled out per kernel) made rosenbrock-loop 8% and eight-schools 4.5%
 * faster but logreg 2.5% slower, so it is not in.  Elsewhere, or with
 * -DRT_NO_COMPUTED_GOTO, the same kernels sit in a switch.  Either way
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
 * prediction is sensitive (growing an unrelated function once slowed scalar
 * code measurably), then no longer moves when other functions change. */
#if defined(__GNUC__)
#define RT_HOT __attribute__((hot, aligned(64)))
#else
#define RT_HOT
#endif

/* Compile-time check that the sweeps cover every opcode: each takes its
 * cases from the generated family lists (PYCALL, which calls back through
 * the program, is the one case written out).  Case labels are distinct (a
 * duplicate does not compile) and every label is an opcode, so equal counts
 * mean full coverage; the computed-goto build also needs every label. */
#define RT_COUNT1_(...) + 1
#define RT_COUNT3_(...) + 3
enum {
    RT_N_CASES_ = 0 RT_UNARY(RT_COUNT1_) RT_UNARY_ND(RT_COUNT1_) RT_BINARY(RT_COUNT3_)
                  RT_BINARY_ND(RT_COUNT3_) RT_GUARDS(RT_COUNT1_) RT_HAND(RT_COUNT1_)
                  RT_HAND_ND(RT_COUNT1_) RT_CHECKED(RT_COUNT1_) RT_LINALG(RT_COUNT1_)
                  + 1 /* PYCALL */ + 2 /* BLOCK, ENDBLOCK */
};
typedef char rt_every_opcode_has_a_case_[((int)RT_N_CASES_ == (int)RT_NUM_OPS) ? 1 : -1];
typedef char rt_every_opcode_has_a_layout_[(0 RT_INSTRS(RT_COUNT1_)) == RT_NUM_OPS ? 1 : -1];

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
        for (i = 0; i < n; i++) out[i] = rt_sf_##NAME(xs[i]);                 \
        return 0;
#define EW_BINARY_(NAME, FXY, DX, DY)                                         \
    case RT_OP_##NAME##_VV:                                                   \
        for (i = 0; i < n; i++) out[i] = rt_sf_##NAME(xs[i], ys[i]);          \
        return 0;
    RT_UNARY(EW_UNARY_)
    RT_BINARY(EW_BINARY_)
#undef EW_UNARY_
#undef EW_BINARY_
    default:
        return -1;
    }
}

/* ------------------------------------------------------------------ forward */

/* Scalar code is one element per instruction: n == 1 skips the call into
 * kernels.c.  (The compiler emits _VS and _SV forms only for n > 1.) */
#define FWD_UNARY(NAME, ...)                                                  \
    VM_CASE(NAME) {                                                           \
        if (n == 1) { v[o] = rt_sf_##NAME(v[a]); VM_NEXT; }                   \
        rt_kf_##NAME(n, v, o, a);                                             \
        VM_NEXT;                                                              \
    }
#define FWD_BINARY(NAME, ...)                                                 \
    VM_CASE(NAME##_VV) {                                                      \
        if (n == 1) { v[o] = rt_sf_##NAME(v[a], v[b]); VM_NEXT; }             \
        rt_kf_##NAME##_VV(n, v, o, a, b);                                     \
        VM_NEXT;                                                              \
    }                                                                         \
    VM_CASE(NAME##_VS) { rt_kf_##NAME##_VS(n, v, o, a, b); VM_NEXT; }         \
    VM_CASE(NAME##_SV) { rt_kf_##NAME##_SV(n, v, o, a, b); VM_NEXT; }

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
#define FWD_HAND(NAME) VM_CASE(NAME) { rt_fwd_##NAME(v, ints, n, o, a, b, c); VM_NEXT; }
#define FWD_CHECKED(NAME)                                                     \
    VM_CASE(NAME) {                                                           \
        const int st_ = rt_fwd_##NAME(v, ints, n, o, a, b, c);                \
        if (st_ != RT_OK)                                                     \
            return st_;                                                       \
        VM_NEXT;                                                              \
    }
#define FWD_LINALG(NAME) VM_CASE(NAME) { rt_linalg_forward(RT_OP_##NAME, v, ints + c, o, a, b); VM_NEXT; }

/* Out of line: inlined, their stack buffers and loops would change the
 * sweeps' register allocation, which scalar code's dispatch is sensitive to. */
#if defined(__GNUC__)
#define RT_NOINLINE __attribute__((noinline))
#else
#define RT_NOINLINE
#endif
RT_NOINLINE static void rt_block_forward(rt_program *p, const int32_t *w);
RT_NOINLINE static void rt_block_reverse(const rt_program *p, const int32_t *w);
static int rt_run_tangent_range(const rt_program *p, int64_t lo, int64_t hi);
RT_NOINLINE static void rt_block_tangent(const rt_program *p, const int32_t *w);
RT_NOINLINE static int64_t rt_block_reverse_at(const rt_program *p, int64_t pc, int64_t lo);
RT_NOINLINE static int64_t rt_block_forward_at(rt_program *p, int64_t pc, int64_t hi);
RT_NOINLINE static int64_t rt_block_tangent_at(const rt_program *p, int64_t pc);

/* Instructions [lo, hi): the whole program, or a range the native tier
 * leaves to the VM (rt_vm_forward_range). */
RT_HOT static int rt_run_forward_range(rt_program *p, int64_t lo, int64_t hi)
{
    const int32_t *const code = p->code;
    const int32_t *const ints = p->ints;
    double *const v = p->vals;
    const int64_t n_instr = hi;
    const int32_t *w;
    int64_t pc = lo - 1, n, o, a, b, c;
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
        RT_UNARY_ND(FWD_UNARY)
        RT_BINARY(FWD_BINARY)
        RT_BINARY_ND(FWD_BINARY)
        RT_GUARDS(FWD_GUARD)
        RT_HAND(FWD_HAND)
        RT_CHECKED(FWD_CHECKED)
        RT_HAND_ND(FWD_HAND)
        RT_LINALG(FWD_LINALG)
        VM_CASE(PYCALL) {
            if (rt_pycall_forward(p, pc))
                return RT_CALLBACK_FAILED;
            VM_NEXT;
        }
        VM_CASE(BLOCK) {
            /* the members, tile by tile (csrc/instr/block.h); the range
             * entry points refuse a range that cuts a block */
            pc = rt_block_forward_at(p, pc, n_instr);   /* its ENDBLOCK's pc */
            VM_NEXT;
        }
        VM_CASE(ENDBLOCK) { VM_NEXT; }
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

#define REV_UNARY(NAME, ...)                                                  \
    VM_CASE(NAME) {                                                           \
        if (n == 1) {                                                         \
            const double g = d[o];                                            \
            if (g != 0.0)                                                     \
                d[a] += g * rt_sd_##NAME(v[a], v[o]);                         \
            VM_NEXT;                                                          \
        }                                                                     \
        rt_kr_##NAME(fl, n, d, v, o, a);                                      \
        VM_NEXT;                                                              \
    }

/* _VS / _SV (kernels.c): the scalar's adjoint is the sum over the vector,
 * accumulated locally and added once. */
#define REV_BINARY(NAME, ...)                                                 \
    VM_CASE(NAME##_VV) {                                                      \
        if (n == 1) {                                                         \
            const double g = d[o];                                            \
            if (g != 0.0) {                                                   \
                const double x = v[a], y = v[b], f = v[o];                    \
                if (fl & 1) d[a] += g * rt_sdx_##NAME(x, y, f);               \
                if (fl & 2) d[b] += g * rt_sdy_##NAME(x, y, f);               \
            }                                                                 \
            VM_NEXT;                                                          \
        }                                                                     \
        rt_kr_##NAME##_VV(fl, n, d, v, o, a, b);                              \
        VM_NEXT;                                                              \
    }                                                                         \
    VM_CASE(NAME##_VS) { rt_kr_##NAME##_VS(fl, n, d, v, o, a, b); VM_NEXT; }  \
    VM_CASE(NAME##_SV) { rt_kr_##NAME##_SV(fl, n, d, v, o, a, b); VM_NEXT; }

#define REV_HAND(NAME) VM_CASE(NAME) { rt_rev_##NAME(fl, v, d, ints, n, o, a, b, c); VM_NEXT; }
#define REV_CHECKED(NAME)                                                     \
    VM_CASE(NAME) {                                                           \
        const int st_ = rt_rev_##NAME(fl, v, d, ints, n, o, a, b, c);         \
        if (st_ != RT_OK)                                                     \
            return st_;                                                       \
        VM_NEXT;                                                              \
    }
/* linalg kernels use their scratch in the value arena (p->vals) */
#define REV_LINALG(NAME) \
    VM_CASE(NAME) { rt_linalg_reverse(RT_OP_##NAME, fl, p->vals, d, ints + c, o, a, b); VM_NEXT; }

/* Instructions without derivatives (masks, guards, ALL/ANY): the verifier
 * allows them no flags, so the sweeps skip them before dispatch; the labels
 * exist for the dispatch table. */
#define REV_NONE1(NAME, ...) VM_CASE(NAME)
#define REV_NONE3(NAME, ...) VM_CASE(NAME##_VV) VM_CASE(NAME##_VS) VM_CASE(NAME##_SV)
#define REV_NONE_GUARD(NAME, ...) VM_CASE(GUARD_##NAME)
#define RT_NO_DERIVATIVE                                                      \
        RT_UNARY_ND(REV_NONE1) RT_BINARY_ND(REV_NONE3) RT_GUARDS(REV_NONE_GUARD) \
        RT_HAND_ND(REV_NONE1) VM_NEXT;

/* One reverse sweep over p; adj must be zeroed and seeded by the caller.
 * Returns RT_OK, or RT_CALLBACK_FAILED when a PYCALL's callback failed. */
RT_HOT static int rt_run_reverse_range(const rt_program *p, int64_t lo, int64_t hi)
{
    const int32_t *const code = p->code;
    const int32_t *const ints = p->ints;
    const double *const v = p->vals;
    double *const d = p->adj;
    const int32_t *w;
    uint32_t fl;
    int64_t pc = hi, n, o, a, b, c;
#if RT_COMPUTED_GOTO
    static const void *const vm_labels[RT_NUM_OPS] = { RT_OPCODES(RT_LABEL_) };
#endif

vm_next:
    if (pc-- <= lo)
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
        RT_HAND(REV_HAND)
        RT_CHECKED(REV_CHECKED)
        RT_LINALG(REV_LINALG)
        VM_CASE(PYCALL) {
            if (rt_pycall_reverse(p, pc, d, n, o))
                return RT_CALLBACK_FAILED;
            VM_NEXT;
        }
        VM_CASE(ENDBLOCK) {
            pc = rt_block_reverse_at(p, pc, lo);    /* the pc of its BLOCK */
            VM_NEXT;
        }
        VM_CASE(BLOCK) { VM_NEXT; }
#if !RT_COMPUTED_GOTO
        default:
            return RT_UNVERIFIED;           /* unreachable after rt_verify */
#endif
        }
    }
}

/* ------------------------------------------------------------------ blocks
 * BLOCK's sweeps (csrc/instr/block.h): the VM's own sweep over the member
 * words of one tile at a time (w: the BLOCK's words).  Members are
 * elementwise instructions that return no status. */
/* A sum block's forward over the subtree [lo, lo + n) of the pairwise
 * summation (block.h): its tiles in ascending order, the tiles' sums added
 * as rt_k_pairwise_sum adds its halves (left, then right, then the add). */
typedef struct {
    rt_program *q;
    const rt_block *bk;
    const rt_block_plan *pl;
    int32_t *buf;
    int64_t src;                /* the summed member's result */
    int shift;                  /* it is an arena region (moves with the tile), not a slot */
} rt_block_sum_run;

static double rt_block_sum_forward(const rt_block_sum_run *r, int64_t lo, int64_t n)
{
    double left;
    if (n <= r->bk->T) {
        rt_block_plan_at(r->pl, lo, n, r->buf);
        (void)rt_run_forward_range(r->q, 0, r->pl->cnt);
        return rt_k_pairwise_sum(r->q->vals + r->src + (r->shift ? lo : 0), n);
    }
    left = rt_block_sum_forward(r, lo, rt_block_split(n));
    return left + rt_block_sum_forward(r, lo + rt_block_split(n), n - rt_block_split(n));
}

static int rt_block_par(const rt_program *p, const rt_block *bk, int kind);

RT_NOINLINE static void rt_block_forward(rt_program *p, const int32_t *w)
{
    int32_t buf[RT_BLOCK_MAX * RT_WORDS];
    rt_block_plan pl;
    rt_program q = *p;
    rt_block bk;
    int64_t t;
    rt_block_init(&bk, w);
    if (rt_block_par(p, &bk, 0))
        return;
    rt_block_plan_init(&bk, ~0u, &pl);
    q.code = buf;
    q.n_instr = pl.cnt;
    if (bk.sum != NULL) {           /* 0.0 +: as REDUCE_SUM's forward (-0.0 sums to 0.0) */
        const rt_block_sum_run r = { &q, &bk, &pl, buf, bk.sum[3],
                                     !(bk.sum[3] >= bk.s0 && bk.sum[3] < bk.s1) };
        p->vals[bk.sum[2]] = 0.0 + rt_block_sum_forward(&r, 0, bk.n);
        return;
    }
    for (t = 0; t < bk.n; t += bk.T) {
        rt_block_plan_at(&pl, t, bk.n - t < bk.T ? bk.n - t : bk.T, buf);
        (void)rt_run_forward_range(&q, 0, q.n_instr);
    }
}

/* Which values a member's reverse and tangent read, per adjoint flag (a, b,
 * c): bit 0 its own result, bits 1-3 its operands a, b, c.  Unary and
 * binary rows read what their partials' C expressions name (x: a, y: b,
 * f: the result), found by scanning the expressions' text once at load
 * time, so the table follows ops.py's rows; the hand instructions'
 * reverses and tangents (kernels.c, instr/fused.h, instr/select.h) are
 * listed.  Until it is filled (a compiler without constructors) every
 * member counts as read: all tile-local results are recomputed. */
static uint8_t rt_block_reads[RT_NUM_OPS][3];
static int rt_block_reads_ready;

static uint8_t rt_block_expr_reads(const char *s)
{
    uint8_t r = 0;
    while (*s) {
        if ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_') {
            const char *b = s;
            while ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_'
                   || (*s >= '0' && *s <= '9'))
                s++;
            if (s - b == 1)
                r |= *b == 'f' ? 1 : *b == 'x' ? 2 : *b == 'y' ? 4 : 0;
        } else if (*s >= '0' && *s <= '9') {     /* a number, exponent included */
            while ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '.'
                   || (*s >= '0' && *s <= '9'))
                s++;
        } else
            s++;
    }
    return r;
}

#if defined(__GNUC__)
__attribute__((constructor)) static void rt_block_reads_init(void)
{
#define RD_UNARY_(NAME, FX, DX) rt_block_reads[RT_OP_##NAME][0] = rt_block_expr_reads(#DX);
#define RD_BINARY1_(OP, DX, DY)                                               \
    rt_block_reads[OP][0] = rt_block_expr_reads(#DX);                         \
    rt_block_reads[OP][1] = rt_block_expr_reads(#DY);
#define RD_BINARY_(NAME, FXY, DX, DY)                                         \
    RD_BINARY1_(RT_OP_##NAME##_VV, DX, DY) RD_BINARY1_(RT_OP_##NAME##_VS, DX, DY) \
    RD_BINARY1_(RT_OP_##NAME##_SV, DX, DY)
    RT_UNARY(RD_UNARY_)
    RT_BINARY(RD_BINARY_)
#undef RD_UNARY_
#undef RD_BINARY1_
#undef RD_BINARY_
    /* SQDIFF: the difference a - b for either adjoint; WHERE: the
     * condition a; CLIP: its result (zero at the bounds); AXPY: c for the
     * scalar b's adjoint only (never in a block). */
    rt_block_reads[RT_OP_SQDIFF][0] = rt_block_reads[RT_OP_SQDIFF][1] = 2 | 4;
    rt_block_reads[RT_OP_WHERE_VV][1] = rt_block_reads[RT_OP_WHERE_VV][2] = 2;
    rt_block_reads[RT_OP_WHERE_VS][1] = rt_block_reads[RT_OP_WHERE_VS][2] = 2;
    rt_block_reads[RT_OP_WHERE_SV][1] = rt_block_reads[RT_OP_WHERE_SV][2] = 2;
    rt_block_reads[RT_OP_CLIP][0] = 1;
    rt_block_reads[RT_OP_AXPY][1] = 8;
    rt_block_reads_ready = 1;
}
#endif

/* The tile-local members the reverse and tangent sweeps must recompute
 * per tile: those whose results some member's reverse or tangent reads,
 * and, recursively, the tile-local results those read.  The others'
 * scratch values are stale in later tiles and nobody reads them. */
static uint32_t rt_block_recompute(const rt_block *bk)
{
    uint32_t need = 0;
    int64_t k, i, j, f;
    if (!rt_block_reads_ready)
        return bk->mask;
    for (k = 0; k < bk->m; k++) {
        const int32_t *u = bk->mem + k * RT_WORDS;
        const uint32_t fl = (uint32_t)u[0] >> RT_FLAGS_SHIFT;
        uint8_t rd = 0;
        for (f = 0; f < 3; f++)
            if ((fl >> f) & 1)
                rd |= rt_block_reads[u[0] & RT_OPCODE_MASK][f];
        for (j = 0; j < 4; j++)
            if ((rd >> j) & 1)
                for (i = 0; i <= k; i++)
                    if (bk->mem[i * RT_WORDS + 2] == u[2 + j])
                        need |= 1u << i;
    }
    need &= bk->mask;
    for (k = bk->m - 1; k >= 0; k--) {          /* what the recomputed members read */
        const int32_t *u = bk->mem + k * RT_WORDS;
        if (!((need >> k) & 1))
            continue;
        for (j = 1; j < 4; j++)
            if ((rt_block_used[u[0] & RT_OPCODE_MASK] >> j) & 1)
                for (i = 0; i < k; i++)
                    if (bk->mem[i * RT_WORDS + 2] == u[2 + j])
                        need |= (1u << i) & bk->mask;
    }
    return need;
}

/* Per opcode, the operands (bit 1: a, 2: b, 3: c) whose reverse kernel
 * honours RT_KSET_* (kernels.h): the array operands of the instructions a
 * block holds. */
#define RT_BSET_U_(NAME, ...) [RT_OP_##NAME] = 2,
#define RT_BSET_B_(NAME, ...) [RT_OP_##NAME##_VV] = 6, [RT_OP_##NAME##_VS] = 2, [RT_OP_##NAME##_SV] = 4,
static const uint8_t rt_block_settable[RT_NUM_OPS] = {
    RT_UNARY(RT_BSET_U_) RT_BINARY(RT_BSET_B_)
    [RT_OP_WHERE_VV] = 12, [RT_OP_WHERE_VS] = 4, [RT_OP_WHERE_SV] = 8, [RT_OP_CLIP] = 2,
    [RT_OP_AXPY] = 10, [RT_OP_SQDIFF] = 6,
};
#undef RT_BSET_U_
#undef RT_BSET_B_

/* The reverse sweep's first term into each tile-local adjoint slot, in the
 * sweep's order (last member first): that member's operand gets its
 * RT_KSET_* bit in the plan's op word, so the slot needs no zeroing.
 * Returns the tile-local members whose slots still need it: no term at all
 * (a member whose result's adjoint nobody writes reads zeros), or a first
 * term from a member naming the slot twice (x * x: its kernel's two passes
 * would both write) or from a kernel without the bits. */
static uint32_t rt_block_first_terms(const rt_block *bk, rt_block_plan *pl, uint32_t touched)
{
    uint32_t zero = 0;
    int64_t k, j, j2, i;
    for (k = bk->m - 1; k >= 0; k--) {
        const int32_t *u = bk->mem + k * RT_WORDS;
        const int32_t op = u[0] & RT_OPCODE_MASK;
        const uint32_t fl = (uint32_t)u[0] >> RT_FLAGS_SHIFT;
        for (j = 1; j < 4; j++) {
            int twice = 0;
            if (!((fl >> (j - 1)) & 1) || !((rt_block_shift[op] >> j) & 1))
                continue;
            for (i = 0; i < k; i++)
                if (((bk->mask >> i) & 1) && bk->mem[i * RT_WORDS + 2] == u[2 + j])
                    break;
            if (i == k || ((touched >> i) & 1))
                continue;                   /* not a tile-local slot, or not its first term */
            touched |= 1u << i;
            for (j2 = 1; j2 < 4; j2++)
                if (j2 != j && ((fl >> (j2 - 1)) & 1) && u[2 + j2] == u[2 + j])
                    twice = 1;
            if (twice || !((rt_block_settable[op] >> j) & 1))
                zero |= 1u << i;
            else
                pl->base[k * RT_WORDS] |= (int32_t)(RT_KSET_A << (j - 1)) << RT_FLAGS_SHIFT;
        }
    }
    return (zero | ~touched) & bk->mask;
}

/* Zeroes the adjoint slots of the tile-local members in `which`. */
static void rt_block_zero_slots(const rt_program *p, const rt_block *bk, uint32_t which)
{
    int64_t k, r;
    if (which == bk->mask) {
        memset(p->adj + bk->s0, 0, (size_t)(bk->s1 - bk->s0) * sizeof(double));
        return;
    }
    for (k = 0, r = 0; k < bk->m; k++)
        if ((bk->mask >> k) & 1) {
            if ((which >> k) & 1)
                memset(p->adj + bk->s0 + r * bk->T, 0, (size_t)bk->T * sizeof(double));
            r++;
        }
}

/* Tiles in ascending order (the order blocks.py checks), each running its
 * members' reverses (or tangents) through `sweep`, the VM's range sweep:
 * reverses last member first, so every slot receives one member's
 * contributions in element order, as the member's own loop adds them.
 * Tile-local results some member's reverse reads are recomputed first.
 * Tile-local adjoints start at 0: zeroed, or (reverse, tiles of 2+
 * elements) written by their first term (rt_block_first_terms).  The
 * tangent sweep's q shares p's native table, hence the VM's range sweep
 * and never the native one. */
static void rt_block_fill(double *d, int64_t n, double g)
{
    int64_t i;
    for (i = 0; i + 4 <= n; i += 4) {
        d[i] = g;
        d[i + 1] = g;
        d[i + 2] = g;
        d[i + 3] = g;
    }
    for (; i < n; i++)
        d[i] = g;
}

static void rt_block_backward(const rt_program *p, const int32_t *w,
                              int (*sweep)(const rt_program *, int64_t, int64_t), int reverse)
{
    int32_t buf[RT_BLOCK_MAX * RT_WORDS];
    rt_block_plan all, loc, rev;
    rt_program q = *p;
    rt_block bk;
    rt_block_tiles tiles;
    uint32_t zero = 0, sum_slot = 0;
    int64_t t, len, i, j, src = 0;
    int sum_on = 0, shift = 0, refill = 0;
    double g = 0.0, tsum = 0.0;
    rt_block_init(&bk, w);
    if (rt_block_par(p, &bk, reverse ? 1 : 2))
        return;
    if (bk.sum != NULL) {
        /* the closing sum's reverse runs first in each tile: the summed
         * result's adjoint gets g (REDUCE_SUM's reverse: += g unless g is 0;
         * into a slot: written as 0.0 + g, its first term); its tangent
         * adds the result's tangents left to right over the tiles */
        sum_on = ((uint32_t)bk.sum[0] >> RT_FLAGS_SHIFT) & 1;
        src = bk.sum[3];
        shift = !(src >= bk.s0 && src < bk.s1);
        for (i = 0; i < bk.m; i++) {
            const int32_t *u = bk.mem + i * RT_WORDS;
            if (!shift && u[2] == src)
                sum_slot = 1u << i;
            for (j = 1; j < 4; j++)
                if (((rt_block_used[u[0] & RT_OPCODE_MASK] >> j) & 1) && u[2 + j] == src)
                    refill = 1;
        }
        if (reverse)
            g = 0.0 + p->adj[bk.sum[2]];
        /* a slot nobody else adds to keeps g from tile to tile */
        if (reverse && sum_on && !shift && !refill)
            rt_block_fill(p->adj + src, bk.T, g);
    }
    rt_block_plan_init(&bk, ~0u, &all);
    rt_block_plan_init(&bk, rt_block_recompute(&bk), &loc);
    if (reverse) {
        rev = all;
        zero = rt_block_first_terms(&bk, &rev, reverse && sum_on ? sum_slot : 0);
    }
    q.code = buf;
    rt_block_tiles_init(&bk, &tiles);
    for (t = 0; (len = rt_block_tiles_next(&bk, &tiles, t)) > 0; t += len) {
        const rt_block_plan *pl = reverse && bk.n - t > 1 ? &rev : &all;
        if (loc.cnt) {
            rt_block_plan_at(&loc, t, len, buf);
            q.n_instr = loc.cnt;
            (void)rt_run_forward_range(&q, 0, loc.cnt);
        }
        if (bk.mask)
            rt_block_zero_slots(p, &bk, pl == &rev ? zero : bk.mask);
        if (reverse && sum_on) {
            if (shift) {
                if (g != 0.0)
                    rt_k_add_scalar(len, p->adj + src + t, g);
            } else if (refill || pl != &rev)
                rt_block_fill(p->adj + src, len, g);
        }
        rt_block_plan_at(pl, t, len, buf);
        q.n_instr = pl->cnt;
        (void)sweep(&q, 0, pl->cnt);
        if (!reverse && sum_on) {
            const double *ts = p->adj + src + (shift ? t : 0);
            for (i = 0; i < len; i++)
                tsum += ts[i];
        }
    }
    if (!reverse && sum_on)
        p->adj[bk.sum[2]] = tsum;
}

/* Zeroes the adjoint sub-slots [sub, sub + len) of the tile-local members in `which`
 * (a thread's share of each slot: rt_block_par). */
static void rt_block_zero_sub(const rt_program *p, const rt_block *bk, uint32_t which,
                              int64_t sub, int64_t len)
{
    int64_t k, r;
    for (k = 0, r = 0; k < bk->m; k++)
        if ((bk->mask >> k) & 1) {
            if ((which >> k) & 1)
                memset(p->adj + bk->s0 + r * bk->T + sub, 0, (size_t)len * sizeof(double));
            r++;
        }
}

/* Elements [lo, hi) of the block's reverse (or tangent) in tiles of Ts
 * elements whose tile-local slots start `sub` into each T-slot: a thread's
 * share of a block without a closing sum (rt_block_par). */
static void rt_block_backward_span(const rt_program *p, const rt_block *bk,
                                   int (*sweep)(const rt_program *, int64_t, int64_t),
                                   int reverse, int64_t lo, int64_t hi, int64_t Ts, int64_t sub)
{
    int32_t buf[RT_BLOCK_MAX * RT_WORDS];
    rt_block_plan all, loc, rev;
    rt_program q = *p;
    uint32_t zero = 0;
    int64_t t, len;
    rt_block_plan_init(bk, ~0u, &all);
    rt_block_plan_init(bk, rt_block_recompute(bk), &loc);
    if (reverse) {
        rev = all;
        zero = rt_block_first_terms(bk, &rev, 0);
        rt_block_plan_sub(bk, &rev, sub);
    }
    rt_block_plan_sub(bk, &all, sub);
    rt_block_plan_sub(bk, &loc, sub);
    q.code = buf;
    for (t = lo; t < hi; t += Ts) {
        const rt_block_plan *pl = reverse && bk->n - t > 1 ? &rev : &all;
        len = hi - t < Ts ? hi - t : Ts;
        if (loc.cnt) {
            rt_block_plan_at(&loc, t, len, buf);
            q.n_instr = loc.cnt;
            (void)rt_run_forward_range(&q, 0, loc.cnt);
        }
        if (bk->mask) {
            if (sub == 0 && Ts == bk->T)
                rt_block_zero_slots(p, bk, pl == &rev ? zero : bk->mask);
            else
                rt_block_zero_sub(p, bk, pl == &rev ? zero : bk->mask, sub, Ts);
        }
        rt_block_plan_at(pl, t, len, buf);
        q.n_instr = pl->cnt;
        (void)sweep(&q, 0, pl->cnt);
    }
}

/* ---- a block over threads (par.h)
 * A block without a closing sum: thread `who` of P runs whole pieces of the element range in tiles of
 * Ts = T / P (a multiple of 8) elements, its tile-local results and
 * adjoints in the sub-slots [who * Ts, who * Ts + Ts) of each T-slot of
 * the scratch, so the threads share no scratch.  Every member is
 * elementwise and reads an earlier member's output only at the same
 * element (the verifier's rules), so the forward and tangent compute each
 * element as one thread would, whatever the tiles.  The reverse adds into
 * operand adjoints: it splits only when the regions the members' reverses
 * write (outside the scratch) are pairwise the same region or disjoint
 * (rt_block_par_ok), so that a slot receives contributions from one
 * element index only, in member order within its tile, as the one-thread
 * tiles give them; x[1:] - x[:-1] in a block stays on one thread. */
#define RT_BLOCK_PAR_MAX 8

static int rt_block_par_ok(const rt_block *bk)
{
    int64_t k, j, k2, j2;
    for (k = 0; k < bk->m; k++) {
        const int32_t *u = bk->mem + k * RT_WORDS;
        const uint8_t sh = rt_block_shift[u[0] & RT_OPCODE_MASK];
        const uint32_t fl = (uint32_t)u[0] >> RT_FLAGS_SHIFT;
        for (j = 1; j < 4; j++) {
            const int64_t x = u[2 + j];
            if (!((fl >> (j - 1)) & 1) || !((sh >> j) & 1) || (x >= bk->s0 && x < bk->s1))
                continue;
            for (k2 = 0; k2 < bk->m; k2++) {
                const int32_t *u2 = bk->mem + k2 * RT_WORDS;
                const uint8_t sh2 = rt_block_shift[u2[0] & RT_OPCODE_MASK];
                const uint32_t fl2 = (uint32_t)u2[0] >> RT_FLAGS_SHIFT;
                for (j2 = 1; j2 < 4; j2++) {
                    const int64_t y = u2[2 + j2];
                    if (!((fl2 >> (j2 - 1)) & 1) || !((sh2 >> j2) & 1) || y == x)
                        continue;
                    if (rt_block_overlaps(x, bk->n, y, bk->n))
                        return 0;
                }
            }
        }
    }
    return 1;
}

typedef struct {
    const rt_program *p;
    const rt_block *bk;
    int kind;                   /* 0 forward, 1 reverse, 2 tangent */
    int64_t Ts;
} rt_block_job;

static void rt_block_piece(void *ctx, int who, int64_t lo, int64_t hi, int64_t k)
{
    const rt_block_job *j = ctx;
    const int64_t sub = (int64_t)who * j->Ts;
    (void)k;
    if (j->kind == 0) {
        int32_t buf[RT_BLOCK_MAX * RT_WORDS];
        rt_block_plan pl;
        rt_program q = *j->p;
        int64_t t;
        rt_block_plan_init(j->bk, ~0u, &pl);
        rt_block_plan_sub(j->bk, &pl, sub);
        q.code = buf;
        q.n_instr = pl.cnt;
        for (t = lo; t < hi; t += j->Ts) {
            rt_block_plan_at(&pl, t, hi - t < j->Ts ? hi - t : j->Ts, buf);
            (void)rt_run_forward_range(&q, 0, q.n_instr);
        }
    } else
        rt_block_backward_span(j->p, j->bk, j->kind == 1 ? rt_run_reverse_range
                                                          : rt_run_tangent_range,
                               j->kind == 1, lo, hi, j->Ts, sub);
}

/* Runs the whole block over threads and returns 1, or returns 0 (too
 * short, one thread, a tile too small to share, or a reverse that may not
 * split): the caller runs it on its own. */
static int rt_block_par(const rt_program *p, const rt_block *bk, int kind)
{
    rt_block_job j;
    int64_t P;
    if (bk->sum != NULL || !RT_PAR_WANTS(bk->n))
        return 0;               /* a sum block's tiles follow the pairwise tree: one thread */
    P = rt_par_threads();
    if (P > RT_BLOCK_PAR_MAX)
        P = RT_BLOCK_PAR_MAX;
    if (P > bk->T / 8)
        P = bk->T / 8;
    if (P < 2 || (kind == 1 && !rt_block_par_ok(bk)))
        return 0;
    j.p = p;
    j.bk = bk;
    j.kind = kind;
    j.Ts = (bk->T / P) & ~(int64_t)7;
    /* pieces of 16 tiles: 16 KB of each array per piece at Ts = 128 */
    rt_par_run(bk->n, j.Ts * 16, (int)P, rt_block_piece, &j);
    return 1;
}

RT_NOINLINE static void rt_block_reverse(const rt_program *p, const int32_t *w)
{
    rt_block_backward(p, w, rt_run_reverse_range, 1);
}

RT_NOINLINE static void rt_block_tangent(const rt_program *p, const int32_t *w)
{
    rt_block_backward(p, w, rt_run_tangent_range, 0);
}

/* The forward sweep's BLOCK at pc: the block, when it ends before hi (the
 * range entry points refuse a range that cuts one); returns the pc to
 * continue from (its ENDBLOCK's).  Called, not inlined, so that the sweeps'
 * dispatch code stays as it was (scalar code is sensitive to it). */
RT_NOINLINE static int64_t rt_block_forward_at(rt_program *p, int64_t pc, int64_t hi)
{
    const int32_t *w = p->code + pc * RT_WORDS;
    if (pc + w[2] + 1 >= hi)
        return pc;
    rt_block_forward(p, w);
    return pc + w[2] + 1;
}

RT_NOINLINE static int64_t rt_block_tangent_at(const rt_program *p, int64_t pc)
{
    const int32_t *w = p->code + pc * RT_WORDS;
    rt_block_tangent(p, w);
    return pc + w[2] + 1;
}

/* The reverse sweep's ENDBLOCK at pc: the block's reverse when the whole
 * block is in the sweep's range [lo, ..); returns the pc to continue from
 * (its BLOCK's, which the sweep then steps past). */
RT_NOINLINE static int64_t rt_block_reverse_at(const rt_program *p, int64_t pc, int64_t lo)
{
    const int32_t *w = p->code + pc * RT_WORDS;
    const int64_t m = w[2];
    if (pc - m - 1 < lo)
        return pc;
    rt_block_reverse(p, w - (m + 1) * RT_WORDS);
    return pc - m - 1;
}


/* A block's members as its first and its last tile run them: every region
 * any tile touches lies between the two (operands shift by the tile's
 * start, scratch slots do not), so these checks cover all tiles. */
static int rt_verify_instr(rt_vctx *vc, const int32_t *w);

static int rt_verify_block_members(rt_vctx *vc, const int32_t *w)
{
    int32_t buf[RT_BLOCK_MAX * RT_WORDS];
    const int64_t pc = vc->pc;
    rt_block bk;
    int64_t k, len, pass, t;
    rt_block_init(&bk, w);
    len = bk.n < bk.T ? bk.n : bk.T;
    for (pass = 0; pass < 2; pass++) {
        t = pass ? bk.n - len : 0;
        if (bk.sum != NULL) {           /* a sum block's first and last subtree */
            t = pass ? rt_block_last_tile(&bk) : 0;
            len = rt_block_tile_len(&bk, t);
        }
        (void)rt_block_tile(&bk, t, len, ~0u, buf);
        for (k = 0; k < bk.m; k++) {
            vc->pc = pc + 1 + k;
            if (!rt_verify_instr(vc, buf + k * RT_WORDS))
                return 0;
        }
    }
    vc->pc = pc;
    return 1;
}

/* 1 when [lo, hi) does not cut a block (a range entry point's check). */
static int rt_range_whole(const rt_program *p, int64_t lo, int64_t hi)
{
    int64_t k, edge, i;
    for (i = 0; i < 2; i++) {
        edge = i ? hi : lo;
        for (k = edge - 1; k >= 0 && k >= edge - RT_BLOCK_MAX - 1; k--) {
            const int32_t *w = p->code + k * RT_WORDS;
            if ((w[0] & RT_OPCODE_MASK) == RT_OP_BLOCK && k + w[2] + 1 >= edge)
                return 0;
        }
    }
    return 1;
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

#define TAN_UNARY(NAME, ...)                                                  \
    VM_CASE(NAME) {                                                           \
        if (n == 1) {                                                         \
            const double ta = t[a];                                           \
            if (ta != 0.0)                                                    \
                t[o] = ta * rt_sd_##NAME(v[a], v[o]);                         \
            VM_NEXT;                          /* else t[o] stays 0 */         \
        }                                                                     \
        rt_kt_##NAME(n, t, v, o, a);                                          \
        VM_NEXT;                                                              \
    }

/* An operand's tangent is zero when its flag is off.  A scalar result with
 * two zero tangents is left as the caller zeroed it. */
#define TAN_BINARY(NAME, ...)                                                 \
    VM_CASE(NAME##_VV) {                                                      \
        if (n == 1) {                                                         \
            const double ta = (fl & 1) ? t[a] : 0.0, tb = (fl & 2) ? t[b] : 0.0; \
            if (ta != 0.0 || tb != 0.0) {                                     \
                const double x = v[a], y = v[b], f = v[o];                    \
                double r = 0.0;                                               \
                if (ta != 0.0) r += ta * rt_sdx_##NAME(x, y, f);              \
                if (tb != 0.0) r += tb * rt_sdy_##NAME(x, y, f);              \
                t[o] = r;                                                     \
            }                                                                 \
            VM_NEXT;                          /* else t[o] stays 0 */         \
        }                                                                     \
        rt_kt_##NAME##_VV(fl, n, t, v, o, a, b);                              \
        VM_NEXT;                                                              \
    }                                                                         \
    VM_CASE(NAME##_VS) { rt_kt_##NAME##_VS(fl, n, t, v, o, a, b); VM_NEXT; }  \
    VM_CASE(NAME##_SV) { rt_kt_##NAME##_SV(fl, n, t, v, o, a, b); VM_NEXT; }

#define TAN_HAND(NAME) VM_CASE(NAME) { rt_tan_##NAME(fl, v, t, ints, n, o, a, b, c); VM_NEXT; }
#define TAN_CHECKED(NAME)                                                     \
    VM_CASE(NAME) {                                                           \
        const int st_ = rt_tan_##NAME(fl, v, t, ints, n, o, a, b, c);         \
        if (st_ != RT_OK)                                                     \
            return st_;                                                       \
        VM_NEXT;                                                              \
    }
#define TAN_LINALG(NAME) \
    VM_CASE(NAME) { rt_linalg_tangent(RT_OP_##NAME, fl, p->vals, t, ints + c, o, a, b); VM_NEXT; }

/* Instructions [lo, hi): the whole program, or a range the native tier
 * leaves to the VM (rt_vm_tangent_range). */
static int rt_run_tangent_range(const rt_program *p, int64_t lo, int64_t hi)
{
    const int32_t *const code = p->code;
    const int32_t *const ints = p->ints;
    const double *const v = p->vals;
    double *const t = p->adj;
    const int64_t n_instr = hi;
    const int32_t *w;
    uint32_t fl;
    int64_t pc = lo - 1, n, o, a, b, c;
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
        RT_HAND(TAN_HAND)
        RT_CHECKED(TAN_CHECKED)
        RT_LINALG(TAN_LINALG)
        VM_CASE(PYCALL) {
            if (rt_pycall_tangent(p, pc))
                return RT_CALLBACK_FAILED;
            VM_NEXT;
        }
        VM_CASE(BLOCK) {
            pc = rt_block_tangent_at(p, pc);
            VM_NEXT;
        }
        VM_CASE(ENDBLOCK) { VM_NEXT; }
#if !RT_COMPUTED_GOTO
        default:
            return RT_UNVERIFIED;           /* unreachable after rt_verify */
#endif
        }
    }
}

/* ------------------------------------------------------------------ scalar path
 * Scalar code (one element per instruction: a Python loop over floats) is
 * all of some programs, and there the general sweeps above spend most of an
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
 * switch in a loop. */

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
static int32_t rt_scalar_index_build(const rt_program *p)
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
RT_HOT RT_THREADED static int rt_scalar_forward(rt_program *p)
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
RT_HOT RT_THREADED static int rt_scalar_reverse(const rt_program *p)
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

/* ------------------------------------------------------------------ verifier
 * Table-driven: each opcode's row of RT_INSTRS (src/revtape/core/isa.py) says what
 * its words hold -- which are arena regions and how long, which are
 * parameters, which flags it may carry -- and instructions whose row says so
 * add their own checks (rt_verify_NAME in csrc/instr/). */

typedef struct {
    uint8_t n, out, a, b, c;    /* RT_W_* */
    uint8_t flags;              /* allowed adjoint flags */
    uint8_t verify;             /* has rt_verify_NAME */
    const char *b_label;        /* what a parameter word b is */
} rt_layout;

#define RT_LAYOUT_(NAME, N, OUT, A, B, C, FLAGS, VERIFY, BLABEL)              \
    [RT_OP_##NAME] = { RT_W_##N, RT_W_##OUT, RT_W_##A, RT_W_##B, RT_W_##C, FLAGS, VERIFY, BLABEL },
static const rt_layout rt_layouts[RT_NUM_OPS] = { RT_INSTRS(RT_LAYOUT_) };
#undef RT_LAYOUT_

/* The length of a region word of kind `kind`; -1: not a region, or one the
 * instruction's verify function measures (RT_W_CUSTOM). */
static int64_t rt_vlength(int kind, int64_t n, int64_t b)
{
    switch (kind) {
    case RT_W_N: return n;
    case RT_W_ONE: return 1;
    case RT_W_NB: return n * b;         /* int32 words: no overflow in int64 */
    case RT_W_B: return b;
    default: return -1;
    }
}

#define V_CASE_GUARD(NAME, ...) case RT_OP_GUARD_##NAME:

static int rt_verify_instr(rt_vctx *vc, const int32_t *w)
{
    const int32_t op = w[0];
    const int64_t n = w[1], o = w[2], a = w[3], b = w[4], c = w[5];
    const rt_layout *ly;
    uint32_t fl;
    int32_t opcode;
    rt_vlens len;

    vc->name = NULL;                        /* until the opcode is known */
    if (op < 0 || (op >> RT_FLAGS_SHIFT) > RT_MAX_FLAGS)
        return rt_vfail(vc, "op word 0x%08lx has flags beyond bits 0..2",
                        (unsigned long)(uint32_t)op);
    opcode = op & RT_OPCODE_MASK;
    if (opcode >= RT_NUM_OPS)
        return rt_vfail(vc, "unknown opcode %ld (this VM has %d)", (long)opcode, (int)RT_NUM_OPS);
    vc->name = rt_op_names[opcode];
    ly = &rt_layouts[opcode];
    fl = (uint32_t)op >> RT_FLAGS_SHIFT;
    if (fl & ~(uint32_t)ly->flags)
        return rt_vfail(vc, "adjoint flags %u are not allowed (this opcode takes flags within %u)",
                        (unsigned)fl, (unsigned)ly->flags);

    /* the parameter words */
    if (ly->n == RT_W_EXPECT) {
        if (n != 0 && n != 1)
            return rt_vfail(vc, "expected result %lld is not 0 or 1", (long long)n);
    } else if (n < (ly->n == RT_W_COUNT1 ? 1 : 0)) {
        return rt_vfail(vc, "length n = %lld must be >= %d", (long long)n,
                        ly->n == RT_W_COUNT1 ? 1 : 0);
    }
    if (ly->out == RT_W_GUARD && o < 0)
        return rt_vfail(vc, "negative guard number %lld", (long long)o);
    if (ly->b == RT_W_LEN && b < 0)
        return rt_vfail(vc, "negative %s %lld", ly->b_label, (long long)b);
    if (ly->b == RT_W_LEN1 && b < 1)
        return rt_vfail(vc, "%s %lld must be >= 1", ly->b_label, (long long)b);

    /* the regions: the table's lengths, then the instruction's own checks */
    len.a = rt_vlength(ly->a, n, b);
    len.b = rt_vlength(ly->b, n, b);
    len.c = rt_vlength(ly->c, n, b);
    len.o = rt_vlength(ly->out, n, b);
    if (ly->verify) {
        int ok = 1;
        switch (opcode) {
#define V_OWN_(NAME, FN) case RT_OP_##NAME: ok = rt_verify_##FN(vc, w, &len); break;
        RT_VERIFY(V_OWN_)
#undef V_OWN_
        default:
            return rt_vfail(vc, "opcode has no verify function");   /* unreachable */
        }
        if (!ok)
            return 0;
    }
    if (len.a >= 0 && !rt_vregion(vc, "operand a", a, len.a, 0))
        return 0;
    if (len.b >= 0 && !rt_vregion(vc, "operand b", b, len.b, 0))
        return 0;
    if (len.c >= 0 && !rt_vregion(vc, "operand c", c, len.c, 0))
        return 0;
    if (len.o >= 0 && !rt_vregion(vc, "output", o, len.o, 1))
        return 0;
    /* No kernel writes over what it reads: the array kernels (kernels.c)
     * qualify their pointers restrict on this guarantee. */
    if (len.o >= 0 && ((len.a >= 0 && !rt_voverlap(vc, "operand a", o, len.o, a, len.a))
                       || (len.b >= 0 && !rt_voverlap(vc, "operand b", o, len.o, b, len.b))
                       || (len.c >= 0 && !rt_voverlap(vc, "operand c", o, len.o, c, len.c))))
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
        const int32_t *w = p->code + pc * RT_WORDS;
        vc->pc = pc;
        if (!rt_verify_instr(vc, w))
            return 0;
        if ((w[0] & RT_OPCODE_MASK) == RT_OP_BLOCK) {   /* members run only through it */
            if (!rt_verify_block_members(vc, w))
                return 0;
            pc += w[2];
        }
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
    p->scalar_path = ok && p->scalar_index != NULL ? rt_scalar_index_build(p) : 0;
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

static int rt_hot_tick(rt_program *p, int st, int64_t t0);

/* rt_release for the two entry points native="auto" counts. */
static int rt_release_hot(rt_program *p, int status, int64_t t0)
{
    int ret = rt_hot_tick(p, status, t0);
    rt_release(p, status);
    return ret;
}

/* ------------------------------------------------------------------ native tier
 * The sweeps every entry point runs: the native tier's when one is
 * installed (p->native, read once per sweep with an acquire load, so a swap
 * on another thread is seen whole), else the VM's. */

static const rt_native *rt_native_of(const rt_program *p)
{
    return __atomic_load_n(&p->native, __ATOMIC_ACQUIRE);
}

static int rt_run_forward(rt_program *p)
{
    const rt_native *nat = rt_native_of(p);
    if (nat != NULL && nat->forward != NULL)
        return nat->forward(p);
    if (p->scalar_path)
        return rt_scalar_forward(p);
    return rt_run_forward_range(p, 0, p->n_instr);
}

static int rt_run_reverse(rt_program *p)
{
    const rt_native *nat = rt_native_of(p);
    if (nat != NULL && nat->reverse != NULL)
        return nat->reverse(p);
    if (p->scalar_path)
        return rt_scalar_reverse(p);
    return rt_run_reverse_range(p, 0, p->n_instr);
}

static int rt_run_tangent(rt_program *p)
{
    const rt_native *nat = rt_native_of(p);
    if (nat != NULL && nat->tangent != NULL)
        return nat->tangent(p);
    return rt_run_tangent_range(p, 0, p->n_instr);
}

void rt_set_native(rt_program *p, const rt_native *n)
{
    if (p != NULL)
        __atomic_store_n(&p->native, n, __ATOMIC_RELEASE);
}

int rt_vm_forward_range(rt_program *p, int64_t lo, int64_t hi)
{
    if (p == NULL || lo < 0 || hi < lo || hi > p->n_instr
        || !__atomic_load_n(&p->verified, __ATOMIC_ACQUIRE))
        return RT_BADARG;
    if (!rt_range_whole(p, lo, hi))
        return RT_BADARG;
    return rt_run_forward_range(p, lo, hi);
}

int rt_vm_reverse_range(rt_program *p, int64_t lo, int64_t hi)
{
    if (p == NULL || lo < 0 || hi < lo || hi > p->n_instr
        || !__atomic_load_n(&p->verified, __ATOMIC_ACQUIRE))
        return RT_BADARG;
    if (!rt_range_whole(p, lo, hi))
        return RT_BADARG;
    return rt_run_reverse_range(p, lo, hi);
}

int rt_vm_tangent_range(rt_program *p, int64_t lo, int64_t hi)
{
    if (p == NULL || lo < 0 || hi < lo || hi > p->n_instr
        || !__atomic_load_n(&p->verified, __ATOMIC_ACQUIRE))
        return RT_BADARG;
    if (!rt_range_whole(p, lo, hi))
        return RT_BADARG;
    return rt_run_tangent_range(p, lo, hi);
}

/* native="auto" counts calls and samples replay time (one call in 32 is
 * timed, its time counted 32 times): cheap enough for every call.  Both run
 * while the caller owns the program. */
#define RT_HOT_SAMPLE 32

static int64_t rt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t rt_hot_start(const rt_program *p)
{
    /* read before the call owns p: relaxed loads, a stale value costs one sample */
    return (__atomic_load_n(&p->hot_max_calls, __ATOMIC_RELAXED) > 0
            && __atomic_load_n(&p->hot_calls, __ATOMIC_RELAXED) % RT_HOT_SAMPLE == 0)
        ? rt_now_ns() : -1;
}

static int rt_hot_tick(rt_program *p, int st, int64_t t0)
{
    if (p->hot_max_calls <= 0)
        return st;
    __atomic_store_n(&p->hot_calls, p->hot_calls + 1, __ATOMIC_RELAXED);
    if (t0 >= 0)
        p->hot_ns += (rt_now_ns() - t0) * RT_HOT_SAMPLE;
    if (p->hot_calls >= p->hot_max_calls || p->hot_ns >= p->hot_max_ns) {
        /* once: the caller starts the compile */
        __atomic_store_n(&p->hot_max_calls, 0, __ATOMIC_RELAXED);
        if (st == RT_OK)
            return RT_OK_HOT;
    }
    return st;
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
static void rt_zero_adj_rev(const rt_program *p);

static int rt_begin_sweep(rt_program *p, const double *x, int missing, rt_report *r,
                          int (*fused)(rt_program *), int *zeroed)
{
    int st;
    if (!rt_acquire(p))
        return RT_BUSY;
    if (!__atomic_load_n(&p->verified, __ATOMIC_ACQUIRE))
        return RT_UNVERIFIED;
    if (missing)
        return RT_BADARG;
    /* A reverse sweep follows: its adjoints are zeroed before the forward
     * sweep, whose work hides the stores (not with guards: the adjoint
     * arena keeps the last replay's inputs and output until the forward
     * sweep has passed them). */
    if (zeroed != NULL && fused == NULL && !p->guarded) {
        rt_zero_adj_rev(p);
        *zeroed = 1;
    }
    if (p->guarded)
        rt_save_io(p, 0);
    if (fused != NULL) {                    /* a native value_and_grad: forward and reverse */
        if (x != NULL && p->n_in > 0)
            memcpy(p->vals, x, (size_t)p->n_in * sizeof(double));
        st = fused(p);
    } else
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

static int rt_begin_report(rt_program *p, const double *x, int missing, rt_report *r)
{
    return rt_begin_sweep(p, x, missing, r, NULL, NULL);
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
    if (p->n_vals > p->n_fixed && RT_PAR_WANTS(p->n_vals - p->n_fixed))
        rt_par_zero(p->adj + p->n_fixed, p->n_vals - p->n_fixed);   /* over threads (par.h) */
    else if (p->n_vals > p->n_fixed)
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
    int64_t t0;
    if (p == NULL)
        return RT_BADARG;
    t0 = rt_hot_start(p);
    if ((st = rt_begin(p, x, 0)) == RT_BUSY)
        return st;
    if (st == RT_OK)
        rt_copy_out(p, y);
    return rt_release_hot(p, st, t0);
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
    int st, zeroed = 0;
    int64_t t0;
    const rt_native *nat;
    int (*fused)(rt_program *);
    if (p == NULL || value == NULL)
        return RT_BADARG;
    t0 = rt_hot_start(p);
    nat = rt_native_of(p);
    fused = nat != NULL ? nat->value_and_grad : NULL;
    if ((st = rt_begin_sweep(p, x, p->out_len != 1 || (g == NULL && p->n_grad > 0), NULL, fused,
                             &zeroed))
        == RT_BUSY)
        return st;
    if (st == RT_OK && fused == NULL) {
        if (!zeroed)
            rt_zero_adj_rev(p);
        p->adj[p->out_off] = 1.0;
        st = rt_run_reverse(p);
    }
    if (st == RT_OK) {
        rt_copy_grad(p, g);
        *value = p->vals[p->out_off];
    }
    return rt_release_hot(p, st, t0);
}

/* ctape.bind's one-call path (vm.h: rt_bound).  Waiting on RT_BUSY instead
 * of reporting it: the bound call has no Python frame to raise from, and the
 * replay holding the program is C that finishes (programs with PYCALL, whose
 * replays could wait on Python, are never bound this way). */
double rt_bound_value_and_grad(rt_bound *b)
{
    double value = 0.0;
    int st, spins = 0;
    while ((st = rt_value_and_grad(b->p, b->x, &value, b->g)) == RT_BUSY)
        if (++spins > 100)
            sched_yield();
    if (st == RT_OK_HOT) {
        st = RT_OK;
        if (b->on_hot != NULL)
            b->on_hot(b->hot_ctx);
    }
    if (st != RT_OK) {
        b->status = st;
        return NAN;
    }
    if (b->mark != NULL)
        __atomic_store_n(b->mark, b->mark_id, __ATOMIC_RELAXED);
    return value;
}

int rt_vjp(rt_program *p, const double *x, const double *w, double *y, double *g)
{
    int st;
    int64_t t0;
    int64_t i;
    if (p == NULL)
        return RT_BADARG;
    t0 = rt_hot_start(p);
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
    return rt_release_hot(p, st, t0);
}

int rt_jacobian(rt_program *p, const double *x, double *y, double *J)
{
    int st;
    int64_t t0;
    int64_t i;
    if (p == NULL)
        return RT_BADARG;
    t0 = rt_hot_start(p);
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
    return rt_release_hot(p, st, t0);
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
    int64_t t0;
    if (p == NULL)
        return RT_BADARG;
    t0 = rt_hot_start(p);
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
    return rt_release_hot(p, st, t0);
}

int rt_jacobian_fwd(rt_program *p, const double *x, double *y, double *J)
{
    int st;
    int64_t t0;
    int64_t i, j;
    if (p == NULL)
        return RT_BADARG;
    t0 = rt_hot_start(p);
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
    return rt_release_hot(p, st, t0);
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
        /* a native value_and_grad (the fused scalar code) when installed:
         * read per row, as every sweep reads p->native */
        const rt_native *nat = rt_native_of(p);
        if (p->guarded)                 /* a refused row leaves the last complete one */
            rt_save_io(p, 0);
        if (p->n_in > 0)
            memcpy(p->vals, X + r * p->n_in, (size_t)p->n_in * sizeof(double));
        if (nat != NULL && nat->value_and_grad != NULL) {
            if ((st = nat->value_and_grad(p)) != RT_OK)
                break;
        } else {
            if (!p->guarded)                /* before the forward: rt_begin_sweep */
                rt_zero_adj_rev(p);
            if ((st = rt_run_forward(p)) != RT_OK)
                break;
            if (p->guarded)
                rt_zero_adj_rev(p);
            p->adj[p->out_off] = 1.0;
            if ((st = rt_run_reverse(p)) != RT_OK)
                break;
        }
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

/* the scalar layout must be the wide one's, lane for lane: then every
 * index batch.c computes lies inside regions the verifier checked */
static int rt_soa_args_bad(const rt_program *pw, int64_t n_in, int64_t n_grad, int64_t out_off,
                           int32_t with_grad, const uint8_t *first, int64_t k,
                           const double *values, const double *G)
{
    const int64_t B = RT_SOA_LANES;
    return n_in < 0 || n_grad < 0 || n_grad > n_in || out_off < 0
           || n_in > INT64_MAX / B || out_off > INT64_MAX / B
           || pw->n_in != n_in * B || pw->n_grad != n_grad * B
           || pw->out_off != out_off * B || pw->out_len != B
           || (k > 0 && values == NULL)
           || (with_grad && k > 0 && n_grad > 0 && G == NULL)
           || (with_grad && pw->n_instr > 0 && first == NULL);
}

int rt_batch_soa(rt_program *pw, int64_t n_in, int64_t n_grad, int64_t out_off,
                 int32_t with_grad, const uint8_t *first, const int32_t *zero, int64_t n_zero,
                 int64_t k, const double *X, double *values, double *G, int64_t *row)
{
    int st;
    if (pw == NULL)
        return RT_BADARG;
    st = rt_batch_begin(pw, k, X, row,
                        rt_soa_args_bad(pw, n_in, n_grad, out_off, with_grad, first, k, values, G));
    if (st == RT_BUSY)
        return st;
    if (st == RT_OK)
        st = rt_soa_check(pw, zero, n_zero);
    if (st == RT_OK)
        rt_soa_run(pw, n_in, n_grad, out_off, with_grad, first, zero, n_zero, k, X, values, G);
    if (row != NULL)
        *row = st == RT_OK ? k : 0;
    return rt_release(pw, st);
}

/* rt_batch_soa_par: one participant (pool.h) on its own wide program pws[who]. */
typedef struct {
    rt_program *const *pws;
    int64_t n_in, n_grad, out_off;
    int32_t with_grad;
    const uint8_t *first;
    const int32_t *zero;
    int64_t n_zero, k, piece;     /* piece: a participant takes 1/piece of the rows left */
    const double *X;
    double *values, *G;
    int64_t next;                 /* the first row no participant has taken (atomic) */
    int *status;                  /* one per participant */
} rt_soa_job;

static void rt_soa_part(void *ctx, int who)
{
    rt_soa_job *j = ctx;
    rt_program *pw = j->pws[who];
    int64_t r0;
    int st;
    if (pw == NULL) {
        j->status[who] = RT_BADARG;
        return;
    }
    st = rt_batch_begin(pw, j->k, j->X, NULL,
                        rt_soa_args_bad(pw, j->n_in, j->n_grad, j->out_off, j->with_grad,
                                        j->first, j->k, j->values, j->G));
    if (st == RT_BUSY) {
        j->status[who] = st;
        return;
    }
    if (st == RT_OK)
        st = rt_soa_check(pw, j->zero, j->n_zero);
    r0 = __atomic_load_n(&j->next, __ATOMIC_RELAXED);
    while (st == RT_OK && r0 < j->k) {
        /* guided: a share of what is left, in whole lane blocks, at least
         * one block; the last pieces are one block each, so participants
         * finish within about one block of each other */
        int64_t m = (j->k - r0) / j->piece / RT_SOA_LANES * RT_SOA_LANES;
        if (m < RT_SOA_LANES)
            m = RT_SOA_LANES;
        if (m > j->k - r0)
            m = j->k - r0;
        if (!__atomic_compare_exchange_n(&j->next, &r0, r0 + m, 0, __ATOMIC_RELAXED,
                                         __ATOMIC_RELAXED))
            continue;                           /* r0 now holds the new value */
        rt_soa_run(pw, j->n_in, j->n_grad, j->out_off, j->with_grad, j->first, j->zero,
                   j->n_zero, m, j->X + r0 * j->n_in, j->values + r0,
                   j->with_grad && j->G != NULL ? j->G + r0 * j->n_grad : NULL);
        r0 = __atomic_load_n(&j->next, __ATOMIC_RELAXED);
    }
    j->status[who] = rt_release(pw, st);
}

int rt_batch_soa_par(rt_program *const *pws, int32_t n_par, int64_t n_in, int64_t n_grad,
                     int64_t out_off, int32_t with_grad, const uint8_t *first,
                     const int32_t *zero, int64_t n_zero, int64_t k, const double *X,
                     double *values, double *G)
{
    int status[RT_SOA_MAX_PAR];
    rt_soa_job job;
    int i;
    if (pws == NULL || n_par < 1 || n_par > RT_SOA_MAX_PAR || k < 0)
        return RT_BADARG;
    job.pws = pws;
    job.n_in = n_in;
    job.n_grad = n_grad;
    job.out_off = out_off;
    job.with_grad = with_grad;
    job.first = first;
    job.zero = zero;
    job.n_zero = n_zero;
    job.k = k;
    job.X = X;
    job.values = values;
    job.G = G;
    job.next = 0;
    job.status = status;
    /* each take is 1/(2 n_par) of the rows left: few takes of the shared
     * counter, and small ones at the end */
    job.piece = 2 * (int64_t)n_par;
    for (i = 0; i < n_par; i++)
        status[i] = RT_OK;
    rt_pool_run(n_par, rt_soa_part, &job);
    for (i = 0; i < n_par; i++)
        if (status[i] != RT_OK)
            return status[i];
    /* every participant that ran took pieces until none were left; a refusal
     * (busy, bad arguments) is reported above, so all rows were run */
    return RT_OK;
}
