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

/* Scalar lowering (compiler.py, _Lowering.lower_c): the scalar fusion
 * searches and the emission of scalar instruction words, over the same
 * columns plus, per instruction, its op's index (opidx) into the per-op
 * tables opbits (RT_LB_* below) and opcode (the opcode of its scalar form).
 * The Python lowering keeps everything else (arrays, structure, linear
 * algebra, guards, the array fusions); the program it and this code build
 * together is the one the Python lowering alone builds, word for word, and
 * goes through the VM's verifier like any other.
 *
 * Per node: adj (carries an adjoint), uses (tapeflow's counts), nflags
 * (RT_LN_*: in FLOAT and ROOT; rt_tape_fuse adds OWNED).  Per kept
 * instruction (k counts kept instructions): role (RT_LR_*), link, aux. */
enum {
    RT_LB_ADD = 1, RT_LB_MUL = 2, RT_LB_SUB = 4, RT_LB_SQUARE = 8,
    RT_LB_VIEW = 16,        /* the result is an offset into its operand */
    RT_LB_MAYBE_VIEW = 32,  /* ... or may be (a gather of a contiguous run) */
    RT_LB_OWNS = 64,        /* not a structure or guard row */
    RT_LB_SCALAR = 128      /* unary/binary family: one word on floats */
};
enum { RT_LN_FLOAT = 1, RT_LN_ROOT = 2, RT_LN_OWNED = 4 };
enum {
    RT_LR_INNER = 1,     /* absorbed into a later fused instruction */
    RT_LR_AXPY = 2,      /* a + b*c: link, aux = the product's operands */
    RT_LR_SQDIFF = 4,    /* (a - b)**2: link, aux = the difference's operands */
    RT_LR_OTHER_B = 8,   /* AXPY: the addend is args[1] (else args[0]) */
    RT_LR_LINK = 16,     /* a link of a sum chain: aux = its term; link = the previous
                            link's k, or -1-(start node) for the first */
    RT_LR_NEG = 32,      /* ... a subtraction */
    RT_LR_ABSORBED = 64, /* ... a later link continues it */
    RT_LR_PY = 128       /* the Python lowering emits it */
};

/* The scalar AXPY/SQDIFF pairs and the sum chains (CSUM), as
 * compiler.fusions (its scalar part) and compiler.sum_chains find them.
 * Fills role, link, aux (zeroed by the caller) and nflags' OWNED.  Returns
 * the number of CSUM terms, or -1 when out of memory. */
int64_t rt_tape_fuse(int64_t n_instr, const int64_t *out, const int32_t *nargs,
                     const int64_t *args, const uint8_t *keep, const uint16_t *opidx,
                     const uint8_t *opbits, int64_t n_nodes, const uint8_t *adj,
                     const int32_t *uses, uint8_t *nflags,
                     uint8_t *role, int32_t *link, int32_t *aux);

/* Emit the words of the kept instructions from state's position on, until
 * the end or the first one the Python lowering emits (roles PY, and any
 * row that is not scalar, a view or fused).  Views take link[k] as their
 * first element.  state: [0] tape index, [1] position in args, [2] k,
 * [3] next free arena slot, [4] words written to `words` (6 each, from its
 * start), [5] ints written to `ints` (from its start), [6] the ints table's
 * length before this call (CSUM's c refers to it).  offset (per node) is
 * read and written.  Returns 0 at the end, 1 at an instruction for Python
 * (state at it), -1 when an offset passes int32. */
int32_t rt_tape_emit(int64_t *state, int64_t n_instr, const int64_t *out,
                     const int32_t *nargs, const int64_t *args, const uint8_t *keep,
                     const uint16_t *opidx, const uint8_t *opbits, const uint8_t *opdiff,
                     const int32_t *opcode, const uint8_t *adj, const uint8_t *nflags,
                     const uint8_t *role, const int32_t *link, const int32_t *aux,
                     int32_t *offset, int32_t *words, int32_t *ints,
                     int32_t op_axpy, int32_t op_sqdiff, int32_t op_csum, int32_t flags_shift);

#endif
