/* revtape's virtual machine: the general sweeps -- forward, reverse and
 * tangent -- over a verified program's instructions.
 *
 * The contract (instruction encoding, arena layout, statuses) is in vm.h.
 * Every opcode has a row in generated/ops_generated.h (generated from
 * src/revtape/core/isa.py and ops.py): the elementwise kernels are generated
 * from the op rows' C expressions (kernels/scalar.h for one element,
 * kernels/kernels.c for arrays); every other instruction has one home in
 * csrc/instr/ holding its forward, reverse and tangent kernels (and its own
 * verify checks), to which the sweeps below dispatch through the generated
 * lists -- a new instruction adds no line here.  The rest of the VM sits
 * beside this file: the scalar path (scalar_path.c), tiled blocks
 * (blocks.c), the verifier (verify.c), the entry points (entry.c, hot.c,
 * lock.h) and batched replay (batch.c, soa.c).
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
#include <stdint.h>

#include "vm.h"
#include "generated/ops_generated.h"
#include "kernels/scalar.h"
#include "kernels/kernels.h"
#include "instr/linalg/linalg.h"
#include "instr/instr.h"
#include "vm/dispatch.h"
#include "vm/internal.h"

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
/* Instructions [lo, hi): the whole program, or a range the native tier
 * leaves to the VM (rt_vm_forward_range). */
RT_HOT RT_INTERNAL int rt_run_forward_range(rt_program *p, int64_t lo, int64_t hi)
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
RT_HOT RT_INTERNAL int rt_run_reverse_range(const rt_program *p, int64_t lo, int64_t hi)
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
RT_INTERNAL int rt_run_tangent_range(const rt_program *p, int64_t lo, int64_t hi)
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
