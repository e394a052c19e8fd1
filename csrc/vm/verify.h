/* The verifier's vocabulary (verify.c's rt_verify_instr and the instructions'
 * own rt_verify_NAME functions in csrc/instr/): every check writes its message
 * through rt_vfail and returns 0; 1 means accepted.  Internal to the
 * extension. */
#ifndef REVTAPE_VERIFY_H
#define REVTAPE_VERIFY_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "vm.h"

typedef struct {
    const rt_program *p;
    char *msg;
    int64_t msg_len;
    int64_t pc;             /* instruction being checked, -1: program header */
    const char *name;
} rt_vctx;

/* Lengths of the arena operands a, b, c and of the region written at out;
 * -1: that word is not an arena region.  The descriptor table sets what it
 * can, an instruction's own verify function the rest. */
typedef struct {
    int64_t a, b, c, o;
} rt_vlens;

static inline int rt_vfail(rt_vctx *vc, const char *fmt, ...)
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
static inline int rt_vregion(rt_vctx *vc, const char *what, int64_t off, int64_t len, int written)
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

/* Side-table entries [off, off+len) inside [0, n_ints). */
static inline int rt_vints(rt_vctx *vc, const char *what, int64_t off, int64_t len)
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
static inline int rt_vindices(rt_vctx *vc, int64_t c, int64_t n, int64_t bound, const char *target)
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

/* The region [o, o+lo) must not overlap [x, x+lx). */
static inline int rt_voverlap(rt_vctx *vc, const char *what, int64_t o, int64_t lo, int64_t x,
                              int64_t lx)
{
    if (lo > 0 && lx > 0 && o < x + lx && x < o + lo)
        return rt_vfail(vc, "output [%lld, %lld) overlaps %s [%lld, %lld)", (long long)o,
                        (long long)(o + lo), what, (long long)x, (long long)(x + lx));
    return 1;
}

/* One instruction's words, checked as the verifier checks every instruction
 * (verify.c): a block's verify runs its closing sum's word through it. */
int rt_verify_instr(rt_vctx *vc, const int32_t *w);

#endif
