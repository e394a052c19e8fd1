/* revtape's virtual machine: the narrow C ABI.
 *
 * A program is plain data: one flat array of int32 instruction words, one
 * int32 side table (index maps, matmul shapes) and two float64 arenas (values
 * and adjoints) of the same length.  Every operand is an OFFSET into the
 * arenas, never a pointer, so a program is relocatable and serialisable.
 *
 * Arena layout:  [ inputs | constants | intermediates ]
 *                  0 ... n_in ... n_fixed ............ n_vals
 * Inputs and constants are never written by an instruction (the verifier
 * enforces it), so replays cannot corrupt the constant pool.
 *
 * Instruction = RT_WORDS int32 words: { op, n, out, a, b, c }
 *   op  = opcode | (adjoint flags << RT_FLAGS_SHIFT); flag 1: a needs an
 *         adjoint, 2: b needs one, 4: c needs one.  flags == 0: no reverse
 *         work at all.  Which flags an opcode may carry, and what each word
 *         holds, is its row in ops_generated.h's RT_INSTRS (src/revtape/core/isa.py),
 *         which the verifier checks.  In words (n is the element count of
 *         `out` unless said otherwise):
 *   UNARY         out[n] = F(a[n])
 *   BINARY _VV    out[n] = F(a[n], b[n]);  _VS: b is one scalar;  _SV: a is one scalar
 *   the others    (selections, reductions, index maps, MATMUL, the fused and the
 *                 linear-algebra instructions): described at their homes in
 *                 csrc/instr/ and instr/linalg/linalg.h, next to their kernels
 *   GUARD_*       n = expected result (0 or 1), out = guard number (not an offset),
 *                 a, b: scalar operands.  Forward stops at the first guard whose
 *                 predicate differs from n.
 *   PYCALL        out[n] = a user's Python function of b operands; a = its slot in
 *                 the caller's callback table; ints[c + 3k .. c + 3k + 3) = (offset,
 *                 length, needs-adjoint 0/1) of operand k.  Every sweep calls
 *                 p->callback(p->callback_ctx, mode, pc) (mode RT_CB_FORWARD,
 *                 RT_CB_REVERSE or RT_CB_TANGENT), which reads and writes the arenas
 *                 itself; a non-zero return stops the sweep with RT_CALLBACK_FAILED.
 *                 Flag 1: some operand needs an adjoint.
 */
#ifndef REVTAPE_VM_H
#define REVTAPE_VM_H

#include <stdint.h>

/* RT_WORDS, RT_OPCODE_MASK, RT_FLAGS_SHIFT and the statuses RT_OK,
 * RT_GUARD_FAILED (failed_guard holds the guard number), RT_BUSY,
 * RT_UNVERIFIED, RT_BADARG, RT_NONFINITE (reserved), RT_CALLBACK_FAILED,
 * RT_BAD_INDEX, RT_OK_HOT are
 * generated from src/revtape/core/isa.py, like each opcode's operand layout. */
#include "generated/ops_generated.h"

enum { RT_CB_FORWARD = 0, RT_CB_REVERSE = 1, RT_CB_TANGENT = 2 };

/* A PYCALL callback: a plain C function pointer and an opaque context (the
 * VM never looks inside it); returns 0 on success. */
typedef int (*rt_callback)(void *ctx, int32_t mode, int64_t pc);

struct rt_program;

/* The native tier (src/revtape/runtime/native.py): sweeps of one program translated
 * to C and compiled into a shared library, installed with rt_set_native.
 * Every sweep has the VM's contract over the same arenas, and gives the VM's
 * bits.  NULL members are run by the VM.
 *   forward:        rt_forward's sweep (inputs already in vals); sets
 *                   failed_guard / failed_pc on RT_GUARD_FAILED
 *   reverse:        one reverse sweep, adj zeroed and seeded by the caller
 *   value_and_grad: forward, then the reverse sweep seeded with 1 on the
 *                   scalar output; leaves the gradient in adj[0, n_grad) (the
 *                   other adjoints are scratch).  It writes adj only after
 *                   the forward sweep succeeded. */
typedef struct rt_native {
    int (*forward)(struct rt_program *p);
    int (*reverse)(struct rt_program *p);
    int (*value_and_grad)(struct rt_program *p);
    /* tangent:        rt_jvp's sweep (vals hold a forward replay, adj the
     *                 seeded tangents: the caller zeroed and seeded it) */
    int (*tangent)(struct rt_program *p);
} rt_native;

typedef struct rt_program {
    const int32_t *code;  int64_t n_instr;
    const int32_t *ints;  int64_t n_ints;
    double *vals;         double *adj;     int64_t n_vals;
    int64_t n_in;         /* inputs: vals[0, n_in) */
    int64_t n_grad;       /* gradients are reported for vals[0, n_grad), n_grad <= n_in */
    int64_t n_fixed;      /* inputs and constants: vals[0, n_fixed), read-only */
    int64_t out_off;      int64_t out_len;
    int32_t verified;     /* written by rt_verify only */
    int32_t busy;         /* 1 while a replay runs */
    int32_t status;       /* status of the last call (diagnostics only: a call's
                             own status is its return value, which no other
                             thread can overwrite) */
    int32_t failed_guard; /* guard number when status == RT_GUARD_FAILED */
    rt_callback callback; /* PYCALL instructions call this (NULL: a program with */
    void *callback_ctx;   /*   PYCALLs fails verification) */
    int64_t n_callbacks;  /* PYCALL slots are 0 .. n_callbacks - 1 */
    int32_t guarded;      /* written by rt_verify: the program has a guard */
    int64_t failed_pc;    /* instruction of the failed guard (diagnostics only) */
    const rt_native *native; /* NULL: the VM runs every sweep; set with rt_set_native */
    /* native="auto": while hot_max_calls > 0, the entry points listed at
     * RT_OK_HOT count calls in hot_calls and, every 32nd call, measure the replay
     * (hot_ns estimates the time spent replaying); the call that reaches
     * hot_max_calls or hot_max_ns returns RT_OK_HOT and disarms the count.
     * Written only by the thread that owns the program (busy). */
    int64_t hot_calls;    int64_t hot_max_calls;
    int64_t hot_ns;       int64_t hot_max_ns;
    /* The scalar path (vm/scalar_path.c): a caller-owned buffer of n_instr + 2 entries
     * (NULL: none), which rt_verify fills from the words it accepted -- one
     * dispatch entry per instruction, a one-element instruction's own
     * handler, any other run of instructions one call of the general sweep.
     * rt_verify sets scalar_path to 1 when the value_and_grad, forward and
     * reverse sweeps use it (the program has one-element instructions); the
     * buffer must not change while scalar_path is 1. */
    uint32_t *scalar_index;
    int32_t scalar_path;  /* written by rt_verify only */
} rt_program;

/* ctape.bind(x, g) as one C call (rt_bound_value_and_grad): compiled.py
 * builds one for a program whose value_and_grad can only end RT_OK, RT_OK_HOT
 * or RT_BUSY (no guard, no PYCALL, no checked kernel), so that no Python
 * frame runs around the replay.  After each replay it stores mark_id into
 * *mark (a cell shared by the bound calls of one tape: which arena holds the
 * tape's last replay, compiled.py _FastMarks). */
typedef struct rt_bound {
    rt_program *p;
    const double *x;      double *g;
    int64_t *mark;        int64_t mark_id;
    void (*on_hot)(void *ctx);  /* RT_OK_HOT: start the native build (may be NULL) */
    void *hot_ctx;
    int32_t status;       /* a status other than RT_OK the call could not raise (diagnostics) */
} rt_bound;

/* What a caller must read while its call still owns the program (once busy
 * is released another thread may overwrite the arena): see rt_forward_report. */
typedef struct rt_report {
    int32_t guard;        /* RT_GUARD_FAILED: the failed guard's number ... */
    double operands[2];   /* ... and its two operand values as the guard saw them */
    double picked;        /* RT_OK: vals[pick] after the forward sweep */
} rt_report;

/* Checks every opcode, offset, length and index map of p; sets p->verified.
 * Returns RT_OK or RT_UNVERIFIED with a message in msg. */
int rt_verify(rt_program *p, char *msg, int64_t msg_len);

/* Copies x (n_in values; NULL: vals already hold the inputs) into the arena
 * and runs the forward sweep; copies the output into y unless y is NULL. */
int rt_forward(rt_program *p, const double *x, double *y);

/* rt_forward, and while the call still owns the program: on RT_OK copies
 * vals[pick] into r->picked (pick < 0: nothing; pick >= n_vals: RT_BADARG,
 * nothing run), on RT_GUARD_FAILED writes the guard's number and operand
 * values into r.  r may be NULL.
 *
 * Every entry point leaves the arena holding one complete replay: when a
 * guard refuses a replay, the inputs and output of the previous replay are
 * put back (the forward sweep saves them first in guarded programs). */
int rt_forward_report(rt_program *p, const double *x, double *y, int64_t pick, rt_report *r);

/* Copies the inputs (n_in values) and the output (out_len values) of the
 * last replay into x and y (either may be NULL), while owning the program so
 * that no concurrent replay is half-read.  RT_BUSY while another runs. */
int rt_read_io(rt_program *p, double *x, double *y);

/* Forward, then one reverse sweep seeded with 1 on the scalar output; writes
 * the value to *value and n_grad gradient values to g; returns the status. */
int rt_value_and_grad(rt_program *p, const double *x, double *value, double *g);

/* Forward at x, then one reverse sweep seeded with w (out_len values):
 * g = w^T J.  y receives the output (may be NULL). */
int rt_vjp(rt_program *p, const double *x, const double *w, double *y, double *g);

/* Forward at x, then out_len reverse sweeps: J is out_len x n_grad, row-major. */
int rt_jacobian(rt_program *p, const double *x, double *y, double *J);

/* Forward at x, then one tangent sweep seeded with xdot (n_grad values):
 * ydot = J xdot (out_len values); y receives the output (may be NULL).  On a
 * HessianTape's program (out = f's gradient) this is H xdot. */
int rt_jvp(rt_program *p, const double *x, const double *xdot, double *y, double *ydot);

/* Forward at x, then n_grad tangent sweeps: J is out_len x n_grad, row-major. */
int rt_jacobian_fwd(rt_program *p, const double *x, double *y, double *J);

/* Batched replay: rows r = 0 .. k-1 of X (row r at X + r*n_in), each replayed
 * exactly as rt_value_and_grad / rt_forward would (bit for bit), in one call.
 * values[r] (rt_batch_value_and_grad: the scalar output) and G + r*n_grad;
 * rt_batch_forward writes Y + r*out_len.  Rows are not checked for
 * finiteness: nan and inf flow through as values.  Stops at the first row
 * that fails (guard, callback): *row is that row (k when all succeeded). */
int rt_batch_value_and_grad(rt_program *p, int64_t k, const double *X, double *values,
                            double *G, int64_t *row);
int rt_batch_forward(rt_program *p, int64_t k, const double *X, double *Y, int64_t *row);

/* Batched replay of a scalar program as array code (csrc/vm/soa.c), through
 * its WIDE form (src/revtape/lower/wide.py): the scalar program with every slot
 * widened to L = RT_SOA_LANES lanes (slot s -> vals[s*L .. s*L+L)) and every
 * instruction n = L, built and verified by the caller, so that one dispatch
 * replays L rows.  n_in, n_grad and out_off are the scalar program's (pw
 * must have n_in*L, n_grad*L, out_off*L and out_len L).  Rows go in L at a
 * time (a short last block repeats its first row in the unused lanes);
 * with_grad = 0 runs the forward sweep only (G unused).  `first` (n_instr
 * bytes) and `zero` (n_zero lane offsets) tell the reverse sweep which
 * adjoint contributions are a slot's first and which slots to zero
 * (csrc/vm/soa.h).  Bit for bit the rows' single replays.  RT_BADARG if pw
 * has an instruction vm/soa.c does not run, or a zero entry is outside it. */
#define RT_SOA_LANES 24
int rt_batch_soa(rt_program *pw, int64_t n_in, int64_t n_grad, int64_t out_off,
                 int32_t with_grad, const uint8_t *first, const int32_t *zero, int64_t n_zero,
                 int64_t k, const double *X, double *values, double *G, int64_t *row);

/* rt_batch_soa over rows [0, k) with up to n_par participants: the calling
 * thread and n_par - 1 threads of a persistent pool (csrc/runtime/pool.h), each on
 * its own wide program pws[i] (same code, same side tables, own arenas),
 * taking whole lane blocks from a shared counter.  A worker that has not
 * started when the caller has run out of rows is not waited for, so the call
 * is never much slower than n_par = 1.  Bit for bit rt_batch_soa (each row's
 * lanes are independent of which rows share its block).  Returns the first
 * participant's refusal (RT_BUSY, RT_BADARG, ...) or RT_OK. */
#define RT_SOA_MAX_PAR 64
int rt_batch_soa_par(rt_program *const *pws, int32_t n_par, int64_t n_in, int64_t n_grad,
                     int64_t out_off, int32_t with_grad, const uint8_t *first,
                     const int32_t *zero, int64_t n_zero, int64_t k, const double *X,
                     double *values, double *G);

/* Installs a native tier (NULL: back to the VM) with an atomic release
 * store: a replay running on another thread finishes with the sweeps it
 * started with, the next one uses n.  n must stay valid while p lives. */
void rt_set_native(rt_program *p, const rt_native *n);

/* value_and_grad at b->x into b->g, returning the value: a concurrent
 * replay of b->p (RT_BUSY) is waited for, not reported; RT_OK_HOT calls
 * b->on_hot.  Any other status (compiled.py never binds a program that can
 * return one) is left in b->status and the value is nan. */
double rt_bound_value_and_grad(rt_bound *b);

/* The VM's sweeps over instructions [lo, hi) of a verified program, for
 * generated code that leaves some instructions to the VM: forward runs lo ..
 * hi-1, reverse hi-1 .. lo.  The caller owns the program.  RT_BADARG when
 * the range is not inside the program, cuts a tiled block (BLOCK ..
 * ENDBLOCK, csrc/instr/block.h: it runs whole or not at all) or p was not
 * verified. */
int rt_vm_forward_range(rt_program *p, int64_t lo, int64_t hi);
int rt_vm_reverse_range(rt_program *p, int64_t lo, int64_t hi);
/* The VM's tangent sweep over instructions [lo, hi), in program order. */
int rt_vm_tangent_range(rt_program *p, int64_t lo, int64_t hi);

/* Hash of the op table this VM was generated from (see ops_generated.h). */
const char *rt_op_table_hash(void);
int32_t rt_num_ops(void);

/* out[i] = op(xs[i] (, ys[i])) for an elementwise opcode (binary: its _VV
 * form); no program needed.  Returns 0, or -1 for any other opcode. */
int rt_elementwise(int32_t opcode, int64_t n, const double *xs, const double *ys, double *out);

/* Threads for large array instructions (csrc/runtime/par.h): the elementwise
 * kernels, scalar-operand adjoint sums and matrix-vector products of one
 * replay split over the calling thread and pool workers, bit for bit the
 * one-thread result.  threads > 0 sets the most threads (1: never split;
 * default $REVTAPE_THREADS, else the CPUs this process may use),
 * min_elements > 0 the instruction length from which to split; 0 leaves a
 * setting as it is.  Returns the threads now allowed; *min_out (if not
 * NULL) gets the length. */
int32_t rt_par_config(int32_t threads, int64_t min_elements, int64_t *min_out);

/* BLAS and LAPACK for the large matrix instructions (csrc/kernels/blas.h):
 * slot (0 dgemm, 1 dtrsm, 2 dtrmm, 3 dpotrf, 4 dgetrf, 5 dsyevd, 6 dsygst;
 * rt_blas_slot_count() of them) gets fn, a routine with the LP64 Fortran
 * signature of scipy.linalg.cython_blas / cython_lapack.  Set once per
 * process before a program that asks for it is compiled: RT_BADARG for an
 * unknown slot, a NULL fn, or a slot already holding another routine. */
int rt_blas_set(int32_t slot, void *fn);
int32_t rt_blas_slot_count(void);

#endif
