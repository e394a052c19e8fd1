/* Tiled blocks at run time: BLOCK ... ENDBLOCK (csrc/instr/block.h, formed
 * by src/revtape/lower/blocks.py) run as the VM's own sweep over the member
 * words of one tile at a time (w: the BLOCK's words).  Members are
 * elementwise instructions that return no status.  The general sweeps
 * (sweeps.c) call in here when they meet a block; these run the sweeps
 * over each tile's words.
 */
#include <stdint.h>
#include <string.h>

#include "vm.h"
#include "generated/ops_generated.h"
#include "kernels/kernels.h"
#include "instr/instr.h"
#include "runtime/par.h"
#include "vm/internal.h"

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
RT_NOINLINE RT_INTERNAL int64_t rt_block_forward_at(rt_program *p, int64_t pc, int64_t hi)
{
    const int32_t *w = p->code + pc * RT_WORDS;
    if (pc + w[2] + 1 >= hi)
        return pc;
    rt_block_forward(p, w);
    return pc + w[2] + 1;
}

RT_NOINLINE RT_INTERNAL int64_t rt_block_tangent_at(const rt_program *p, int64_t pc)
{
    const int32_t *w = p->code + pc * RT_WORDS;
    rt_block_tangent(p, w);
    return pc + w[2] + 1;
}

/* The reverse sweep's ENDBLOCK at pc: the block's reverse when the whole
 * block is in the sweep's range [lo, ..); returns the pc to continue from
 * (its BLOCK's, which the sweep then steps past). */
RT_NOINLINE RT_INTERNAL int64_t rt_block_reverse_at(const rt_program *p, int64_t pc, int64_t lo)
{
    const int32_t *w = p->code + pc * RT_WORDS;
    const int64_t m = w[2];
    if (pc - m - 1 < lo)
        return pc;
    rt_block_reverse(p, w - (m + 1) * RT_WORDS);
    return pc - m - 1;
}

/* 1 when [lo, hi) does not cut a block (a range entry point's check). */
RT_INTERNAL int rt_range_whole(const rt_program *p, int64_t lo, int64_t hi)
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
