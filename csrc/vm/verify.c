/* The verifier: rt_verify checks every word of a program before any sweep runs it.
 *
 * Table-driven: each opcode's row of RT_INSTRS (src/revtape/core/isa.py) says what
 * its words hold -- which are arena regions and how long, which are
 * parameters, which flags it may carry -- and instructions whose row says so
 * add their own checks (rt_verify_NAME in csrc/instr/).  The sweeps trust
 * everything checked here.
 */
#include <stdint.h>
#include <stdio.h>

#include "vm.h"
#include "generated/ops_generated.h"
#include "instr/instr.h"
#include "vm/verify.h"
#include "vm/internal.h"

#define RT_NAME_(name) #name,
static const char *const rt_op_names[RT_NUM_OPS] = { RT_OPCODES(RT_NAME_) };
#undef RT_NAME_

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

RT_INTERNAL int rt_verify_instr(rt_vctx *vc, const int32_t *w)
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

/* A block's members as its first and its last tile run them: every region
 * any tile touches lies between the two (operands shift by the tile's
 * start, scratch slots do not), so these checks cover all tiles. */
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
