/* The dense linear-algebra family (CHOLESKY ... CUMPROD): kernels in
 * instr/linalg/ (one file per instruction), which the sweeps (vm/sweeps.c)
 * call through rt_linalg_forward/reverse/tangent by opcode (RT_LINALG).
 * Here: their shared verify.  The ints record at c is (N, M, flags,
 * scratch); rt_linalg_lengths derives the operand lengths and the
 * instruction's own scratch region in the arena. */
#include "instr/linalg/linalg.h"

RT_VERIFY_FN(LINALG)
{
    const rt_program *p = vc->p;
    const int64_t n = w[1], o = w[2], a = w[3], b = w[4], c = w[5];
    int64_t so, ls;
    char why[160];
    if (!rt_vints(vc, "linear-algebra record", c, RT_LINALG_RECORD))
        return 0;
    if (rt_linalg_lengths(w[0] & RT_OPCODE_MASK, p->ints + c, n, &len->a, &len->b, &so, &ls,
                          why, sizeof why))
        return rt_vfail(vc, "%s", why);
    return rt_vregion(vc, "scratch", so, ls, 1)
           && rt_voverlap(vc, "operand a (scratch)", so, ls, a, len->a)
           && rt_voverlap(vc, "the output (scratch)", so, ls, o, len->o)
           && (len->b < 0 || rt_voverlap(vc, "operand b (scratch)", so, ls, b, len->b));
}
