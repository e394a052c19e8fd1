/* The hand-written instructions of the VM: one home per instruction.
 *
 * Each instruction that is not generated from an op row's C expressions has
 * one section in one family file below, holding all of it:
 *
 *   RT_FWD(NAME)     forward:  out from the operands (vals arena v)
 *   RT_REV(NAME)     reverse:  accumulate (+=) the operands' adjoints in d
 *                    from the output's, for the operands whose flag is set
 *   RT_TAN(NAME)     tangent:  t[out] from the operands' tangents (the same
 *                    partials as the reverse; flags as in the reverse)
 *   RT_SFWD(NAME), RT_SREV(NAME)  only if its isa.py row says scalar=True:
 *                    forward and reverse of one element (n == 1, or any n
 *                    when the output is one element), with the bits of the
 *                    kernels above: vm/scalar_path.c runs them
 *   RT_VERIFY_FN(NAME)  only if its isa.py row says verify=True: the checks
 *                    the descriptor table cannot express (index maps,
 *                    shapes, term lists); it may set the operand lengths
 *                    the table marks `custom`.
 *
 * The sweeps in vm/sweeps.c dispatch to these through the generated lists
 * (RT_HAND, RT_HAND_ND, RT_VERIFY in ops_generated.h): adding an instruction
 * adds no line to csrc/vm/.  Arguments are the instruction's words; the
 * functions are static inline and each is called once, so they compile to
 * the code a case written inside the sweep would.  They trust what the
 * verifier checked: no bounds checks of their own.
 *
 * The dense linear-algebra family has the same layout, one file per
 * instruction under instr/linalg/ with its forward, reverse and tangent,
 * reached through one dispatcher (instr/linalg.h, instr/linalg/linalg.c).
 *
 * Rules every kernel keeps (see vm/sweeps.c's header): no allocation, no
 * globals; operand adjoints are accumulated, never assigned (operands may
 * alias); an exactly-zero adjoint or tangent contributes nothing even
 * through an inf/nan partial (CppAD's azmul), except where a comment says
 * otherwise.
 * Internal to the extension.
 */
#ifndef REVTAPE_INSTR_H
#define REVTAPE_INSTR_H

#include <math.h>
#include <stdint.h>

#include "vm.h"
#include "vm/verify.h"
#include "kernels/kernels.h"
#include "kernels/gaxpy.h"

#define RT_FWD(NAME)                                                          \
    static inline void rt_fwd_##NAME(double *v, const int32_t *ints, int64_t n, \
                                     int64_t o, int64_t a, int64_t b, int64_t c)
#define RT_REV(NAME)                                                          \
    static inline void rt_rev_##NAME(uint32_t fl, const double *v, double *d, \
                                     const int32_t *ints, int64_t n, int64_t o, \
                                     int64_t a, int64_t b, int64_t c)
#define RT_TAN(NAME)                                                          \
    static inline void rt_tan_##NAME(uint32_t fl, const double *v, double *t, \
                                     const int32_t *ints, int64_t n, int64_t o, \
                                     int64_t a, int64_t b, int64_t c)
/* Kernels of isa.py's "checked" instructions check data the verifier cannot
 * see (it arrives with each replay) and return RT_OK or the status that
 * stops the sweep. */
#define RT_FWD_CHECKED(NAME)                                                  \
    static inline int rt_fwd_##NAME(double *v, const int32_t *ints, int64_t n, \
                                    int64_t o, int64_t a, int64_t b, int64_t c)
#define RT_REV_CHECKED(NAME)                                                  \
    static inline int rt_rev_##NAME(uint32_t fl, const double *v, double *d,  \
                                    const int32_t *ints, int64_t n, int64_t o, \
                                    int64_t a, int64_t b, int64_t c)
#define RT_TAN_CHECKED(NAME)                                                  \
    static inline int rt_tan_##NAME(uint32_t fl, const double *v, double *t,  \
                                    const int32_t *ints, int64_t n, int64_t o, \
                                    int64_t a, int64_t b, int64_t c)
#define RT_SFWD(NAME)                                                         \
    static inline void rt_sfwd_##NAME(double *v, const int32_t *ints, int64_t n, \
                                      int64_t o, int64_t a, int64_t b, int64_t c)
#define RT_SREV(NAME)                                                         \
    static inline void rt_srev_##NAME(uint32_t fl, const double *v, double *d, \
                                      const int32_t *ints, int64_t n, int64_t o, \
                                      int64_t a, int64_t b, int64_t c)
#if defined(__GNUC__)
#define RT_LIKELY(x) __builtin_expect(!!(x), 1)
#else
#define RT_LIKELY(x) (x)
#endif
#define RT_VERIFY_FN(NAME)                                                    \
    static inline int rt_verify_##NAME(rt_vctx *vc, const int32_t *w, rt_vlens *len)

#include "instr/select.h" /* WHERE_VV/VS/SV, CLIP */
#include "instr/fused.h"  /* AXPY, SQDIFF, SSD, GAXPY, CSUM */
#include "instr/reduce.h" /* REDUCE_* */
#include "instr/index.h"  /* GATHER, GATHER_IDX, SCATTER_ADD, SCATTER */
#include "instr/matmul.h" /* MATMUL */
#include "instr/linalg.h" /* CHOLESKY ... CUMPROD: the family's verify (kernels in instr/linalg/) */
#include "instr/pycall.h" /* PYCALL: calls back into Python */
#include "instr/block.h"  /* BLOCK, ENDBLOCK: tiled elementwise runs (run by vm/blocks.c) */

#endif
