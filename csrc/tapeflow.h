/* The compiler's data-flow pass over a recorded tape (compiler.py, _Lowering.analyse).
 *
 * Plain arrays in, plain arrays out: no program, no Python objects.  The tape
 * is given as columns -- instruction i writes node out[i] (-1: a guard) from
 * its nargs[i] operands, which follow one another in args.  Node ids are
 * checked by the caller to lie in [0, number of nodes).
 *
 * In:  dep/adj mark the inputs (all / the differentiated ones), live the roots.
 * Out: dep[v]  -- node v depends on an input (recomputed per replay);
 *      adj[v]  -- v leads back to a differentiated input through
 *                 differentiable instructions (it carries an adjoint);
 *      keep[i] -- instruction i reaches a root or is a guard on dependent
 *                 values (with guards_on); live marks what the kept read;
 *      uses[v] -- how many operands of kept instructions are v.
 * Returns the number of kept instructions.  Linear in the tape's length: a
 * Python version of this pass with sets cost ~1 us and ~150 bytes an
 * instruction at a million instructions. */
#ifndef RT_TAPEFLOW_H
#define RT_TAPEFLOW_H
#include <stdint.h>

int64_t rt_tape_flow(int64_t n_instr, const int64_t *out, const int32_t *nargs,
                     const int64_t *args, const uint8_t *diff, int32_t guards_on,
                     uint8_t *dep, uint8_t *adj, uint8_t *live, uint8_t *keep, int32_t *uses);

#endif
