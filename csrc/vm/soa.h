/* Batched replay of scalar programs as array code over lanes (soa.c).
 * Internal to the extension: rt_batch_soa (vm.h, vm/batch.c) is the entry point.
 *
 * A SoA program is a verified WIDE program (src/revtape/lower/wide.py): the
 * scalar program with slot s widened to the lanes vals[s*L .. s*L+L), L =
 * RT_SOA_LANES, every instruction n = L.  Two side tables come with it:
 *   first[pc]  bit 1 / 2 / 4: in the reverse sweep, the adjoint of operand
 *              a / b / c receives its first contribution here, so it is
 *              assigned (0.0 + term: the bits of adding into a zeroed slot)
 *              instead of accumulated, and needs no zeroing beforehand;
 *   zero[j]    the lane offsets of the adjoint slots that no instruction
 *              assigns first but that are read (zeroed before each sweep).
 * Wrong side tables give wrong numbers, never an access outside the arenas
 * (rt_soa_check bounds the zero list; `first` only picks = or +=).
 */
#ifndef REVTAPE_BATCH_H
#define REVTAPE_BATCH_H

#include <stdint.h>

#include "vm.h"

/* RT_OK if pw (verified) can run here: every instruction has n = L and an
 * opcode this file implements, a scalar (_VS/_SV) operand needs no adjoint,
 * and every zero entry is a lane-aligned slot inside the arena. */
int rt_soa_check(const rt_program *pw, const int32_t *zero, int64_t n_zero);

/* Rows [0, k) of X (n_in values each) through pw, L at a time (a short last
 * block repeats its first row in the unused lanes): values[r] and, with
 * with_grad, G + r*n_grad.  pw must have passed rt_soa_check. */
void rt_soa_run(const rt_program *pw, int64_t n_in, int64_t n_grad, int64_t out_off,
                int32_t with_grad, const uint8_t *first, const int32_t *zero, int64_t n_zero,
                int64_t k, const double *X, double *values, double *G);

#endif
