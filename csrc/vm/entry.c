/* The VM's entry points (vm.h): every replay -- forward, value and
 * gradient, VJP, Jacobians, JVP, the range sweeps the native tier calls --
 * takes the program (lock.h), runs the native tier's sweeps or the VM's, and
 * releases it; the two that native="auto" counts go through hot.c.  Batched
 * replay is in batch.c.
 */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE 1   /* M_2_SQRTPI in <math.h>, sched_yield in <sched.h> */
#endif

#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>

#include "vm.h"
#include "generated/ops_generated.h"
#include "kernels/scalar.h"
#include "runtime/par.h"
#include "vm/lock.h"
#include "vm/internal.h"

const char *rt_op_table_hash(void) { return RT_OP_TABLE_HASH; }
int32_t rt_num_ops(void) { return RT_NUM_OPS; }

/* One elementwise op of the table on plain arrays (no program): the numpy
 * forward of a special-function row when scipy is not installed, so that
 * the reference replay and the VM compute the same C expression.  Binary ops
 * take their _VV opcode (x and y both n long).  Returns -1 for an opcode
 * that is not elementwise. */
int rt_elementwise(int32_t opcode, int64_t n, const double *xs, const double *ys, double *out)
{
    int64_t i;
    switch (opcode) {
#define EW_UNARY_(NAME, FX, DX)                                               \
    case RT_OP_##NAME:                                                        \
        for (i = 0; i < n; i++) out[i] = rt_sf_##NAME(xs[i]);                 \
        return 0;
#define EW_BINARY_(NAME, FXY, DX, DY)                                         \
    case RT_OP_##NAME##_VV:                                                   \
        for (i = 0; i < n; i++) out[i] = rt_sf_##NAME(xs[i], ys[i]);          \
        return 0;
    RT_UNARY(EW_UNARY_)
    RT_BINARY(EW_BINARY_)
#undef EW_UNARY_
#undef EW_BINARY_
    default:
        return -1;
    }
}

/* ------------------------------------------------------------------ native tier
 * The sweeps every entry point runs: the native tier's when one is
 * installed (rt_native_of: p->native, read once per sweep), else the VM's. */

RT_INTERNAL int rt_run_forward(rt_program *p)
{
    const rt_native *nat = rt_native_of(p);
    if (nat != NULL && nat->forward != NULL)
        return nat->forward(p);
    if (p->scalar_path)
        return rt_scalar_forward(p);
    return rt_run_forward_range(p, 0, p->n_instr);
}

RT_INTERNAL int rt_run_reverse(rt_program *p)
{
    const rt_native *nat = rt_native_of(p);
    if (nat != NULL && nat->reverse != NULL)
        return nat->reverse(p);
    if (p->scalar_path)
        return rt_scalar_reverse(p);
    return rt_run_reverse_range(p, 0, p->n_instr);
}

static int rt_run_tangent(rt_program *p)
{
    const rt_native *nat = rt_native_of(p);
    if (nat != NULL && nat->tangent != NULL)
        return nat->tangent(p);
    return rt_run_tangent_range(p, 0, p->n_instr);
}

void rt_set_native(rt_program *p, const rt_native *n)
{
    if (p != NULL)
        __atomic_store_n(&p->native, n, __ATOMIC_RELEASE);
}

int rt_vm_forward_range(rt_program *p, int64_t lo, int64_t hi)
{
    if (p == NULL || lo < 0 || hi < lo || hi > p->n_instr
        || !__atomic_load_n(&p->verified, __ATOMIC_ACQUIRE))
        return RT_BADARG;
    if (!rt_range_whole(p, lo, hi))
        return RT_BADARG;
    return rt_run_forward_range(p, lo, hi);
}

int rt_vm_reverse_range(rt_program *p, int64_t lo, int64_t hi)
{
    if (p == NULL || lo < 0 || hi < lo || hi > p->n_instr
        || !__atomic_load_n(&p->verified, __ATOMIC_ACQUIRE))
        return RT_BADARG;
    if (!rt_range_whole(p, lo, hi))
        return RT_BADARG;
    return rt_run_reverse_range(p, lo, hi);
}

int rt_vm_tangent_range(rt_program *p, int64_t lo, int64_t hi)
{
    if (p == NULL || lo < 0 || hi < lo || hi > p->n_instr
        || !__atomic_load_n(&p->verified, __ATOMIC_ACQUIRE))
        return RT_BADARG;
    if (!rt_range_whole(p, lo, hi))
        return RT_BADARG;
    return rt_run_tangent_range(p, lo, hi);
}

/* Copies x in (unless NULL) and runs the forward sweep; the caller holds busy
 * and has checked `verified` (rt_begin). */
static int rt_forward_locked(rt_program *p, const double *x)
{
    /* nan and +-inf are values (they replay as numpy computes them), so x
     * is copied in as it is, unchecked. */
    if (x != NULL && p->n_in > 0)
        memcpy(p->vals, x, (size_t)p->n_in * sizeof(double));
    return rt_run_forward(p);
}

/* A guard can refuse a replay after x was copied in and part of the program
 * ran.  So that the arena still holds one complete replay afterwards (what
 * rt_read_io reports), guarded programs keep the previous inputs and output
 * in the adjoint arena, which is scratch until a reverse or tangent sweep
 * zeroes it, and put them back on refusal.  Same offsets: an output that
 * aliases an input is saved and restored consistently. */
RT_INTERNAL void rt_save_io(rt_program *p, int restore)
{
    double *from = restore ? p->adj : p->vals, *to = restore ? p->vals : p->adj;
    if (p->n_in > 0)
        memcpy(to, from, (size_t)p->n_in * sizeof(double));
    if (p->out_len > 0)
        memcpy(to + p->out_off, from + p->out_off, (size_t)p->out_len * sizeof(double));
}

/* The start every entry point shares: take the program, check that it was
 * verified and that the caller passed every buffer it needs (`missing`),
 * copy x in and run the forward sweep.  On RT_BUSY the program was not
 * taken: return at once, without rt_release.  A refused replay fills r (if
 * not NULL) before the previous replay's values are put back. */
static int rt_begin_sweep(rt_program *p, const double *x, int missing, rt_report *r,
                          int (*fused)(rt_program *), int *zeroed)
{
    int st;
    if (!rt_acquire(p))
        return RT_BUSY;
    if (!__atomic_load_n(&p->verified, __ATOMIC_ACQUIRE))
        return RT_UNVERIFIED;
    if (missing)
        return RT_BADARG;
    /* A reverse sweep follows: its adjoints are zeroed before the forward
     * sweep, whose work hides the stores (not with guards: the adjoint
     * arena keeps the last replay's inputs and output until the forward
     * sweep has passed them). */
    if (zeroed != NULL && fused == NULL && !p->guarded) {
        rt_zero_adj_rev(p);
        *zeroed = 1;
    }
    if (p->guarded)
        rt_save_io(p, 0);
    if (fused != NULL) {                    /* a native value_and_grad: forward and reverse */
        if (x != NULL && p->n_in > 0)
            memcpy(p->vals, x, (size_t)p->n_in * sizeof(double));
        st = fused(p);
    } else
        st = rt_forward_locked(p, x);
    if (st != RT_OK && p->guarded) {
        if (st == RT_GUARD_FAILED && r != NULL) {
            const int32_t *w = p->code + p->failed_pc * RT_WORDS;
            r->guard = w[2];
            r->operands[0] = p->vals[w[3]];
            r->operands[1] = p->vals[w[4]];
        }
        rt_save_io(p, 1);
    }
    return st;
}

static int rt_begin_report(rt_program *p, const double *x, int missing, rt_report *r)
{
    return rt_begin_sweep(p, x, missing, r, NULL, NULL);
}

static int rt_begin(rt_program *p, const double *x, int missing)
{
    return rt_begin_report(p, x, missing, NULL);
}

static void rt_copy_out(const rt_program *p, double *y)
{
    if (y != NULL && p->out_len > 0)
        memcpy(y, p->vals + p->out_off, (size_t)p->out_len * sizeof(double));
}

static void rt_zero_adj(const rt_program *p)
{
    if (p->n_vals > 0)
        memset(p->adj, 0, (size_t)p->n_vals * sizeof(double));
}

/* Before a reverse sweep: the constants' adjoints are never written (their
 * operands' flags are off, and no instruction's output is a constant) nor
 * read (a sweep reads the adjoints of outputs and the gradient of inputs),
 * so only the inputs and the intermediates are zeroed -- data arrays such as
 * a regression's design matrix are most of some arenas. */
RT_INTERNAL void rt_zero_adj_rev(const rt_program *p)
{
    if (p->n_in > 0)
        memset(p->adj, 0, (size_t)p->n_in * sizeof(double));
    if (p->n_vals > p->n_fixed && RT_PAR_WANTS(p->n_vals - p->n_fixed))
        rt_par_zero(p->adj + p->n_fixed, p->n_vals - p->n_fixed);   /* over threads (par.h) */
    else if (p->n_vals > p->n_fixed)
        memset(p->adj + p->n_fixed, 0, (size_t)(p->n_vals - p->n_fixed) * sizeof(double));
    if (p->out_off >= p->n_in && p->out_off < p->n_fixed)
        memset(p->adj + p->out_off, 0, (size_t)p->out_len * sizeof(double));   /* a constant output's seed */
}

static void rt_copy_grad(const rt_program *p, double *g)
{
    if (p->n_grad > 0)
        memcpy(g, p->adj, (size_t)p->n_grad * sizeof(double));
}

int rt_forward(rt_program *p, const double *x, double *y)
{
    int st;
    int64_t t0;
    if (p == NULL)
        return RT_BADARG;
    t0 = rt_hot_start(p);
    if ((st = rt_begin(p, x, 0)) == RT_BUSY)
        return st;
    if (st == RT_OK)
        rt_copy_out(p, y);
    return rt_release_hot(p, st, t0);
}

int rt_forward_report(rt_program *p, const double *x, double *y, int64_t pick, rt_report *r)
{
    int st;
    if (p == NULL)
        return RT_BADARG;
    if ((st = rt_begin_report(p, x, pick >= p->n_vals || (pick >= 0 && r == NULL), r)) == RT_BUSY)
        return st;
    if (st == RT_OK) {
        rt_copy_out(p, y);
        if (pick >= 0)
            r->picked = p->vals[pick];
    }
    return rt_release(p, st);
}

int rt_read_io(rt_program *p, double *x, double *y)
{
    int st = RT_OK;
    if (p == NULL)
        return RT_BADARG;
    if (!rt_acquire(p))
        return RT_BUSY;
    if (!__atomic_load_n(&p->verified, __ATOMIC_ACQUIRE))
        st = RT_UNVERIFIED;
    else {
        if (x != NULL && p->n_in > 0)
            memcpy(x, p->vals, (size_t)p->n_in * sizeof(double));
        rt_copy_out(p, y);
    }
    return rt_release(p, st);
}

int rt_value_and_grad(rt_program *p, const double *x, double *value, double *g)
{
    int st, zeroed = 0;
    int64_t t0;
    const rt_native *nat;
    int (*fused)(rt_program *);
    if (p == NULL || value == NULL)
        return RT_BADARG;
    t0 = rt_hot_start(p);
    nat = rt_native_of(p);
    fused = nat != NULL ? nat->value_and_grad : NULL;
    if ((st = rt_begin_sweep(p, x, p->out_len != 1 || (g == NULL && p->n_grad > 0), NULL, fused,
                             &zeroed))
        == RT_BUSY)
        return st;
    if (st == RT_OK && fused == NULL) {
        if (!zeroed)
            rt_zero_adj_rev(p);
        p->adj[p->out_off] = 1.0;
        st = rt_run_reverse(p);
    }
    if (st == RT_OK) {
        rt_copy_grad(p, g);
        *value = p->vals[p->out_off];
    }
    return rt_release_hot(p, st, t0);
}

/* ctape.bind's one-call path (vm.h: rt_bound).  Waiting on RT_BUSY instead
 * of reporting it: the bound call has no Python frame to raise from, and the
 * replay holding the program is C that finishes (programs with PYCALL, whose
 * replays could wait on Python, are never bound this way). */
double rt_bound_value_and_grad(rt_bound *b)
{
    double value = 0.0;
    int st, spins = 0;
    while ((st = rt_value_and_grad(b->p, b->x, &value, b->g)) == RT_BUSY)
        if (++spins > 100)
            sched_yield();
    if (st == RT_OK_HOT) {
        st = RT_OK;
        if (b->on_hot != NULL)
            b->on_hot(b->hot_ctx);
    }
    if (st != RT_OK) {
        b->status = st;
        return NAN;
    }
    if (b->mark != NULL)
        __atomic_store_n(b->mark, b->mark_id, __ATOMIC_RELAXED);
    return value;
}

int rt_vjp(rt_program *p, const double *x, const double *w, double *y, double *g)
{
    int st;
    int64_t t0;
    int64_t i;
    if (p == NULL)
        return RT_BADARG;
    t0 = rt_hot_start(p);
    if ((st = rt_begin(p, x, (w == NULL && p->out_len > 0) || (g == NULL && p->n_grad > 0)))
        == RT_BUSY)
        return st;
    if (st == RT_OK) {
        rt_copy_out(p, y);
        rt_zero_adj_rev(p);
        for (i = 0; i < p->out_len; i++)
            p->adj[p->out_off + i] = w[i];
        st = rt_run_reverse(p);
        if (st == RT_OK)
            rt_copy_grad(p, g);
    }
    return rt_release_hot(p, st, t0);
}

int rt_jacobian(rt_program *p, const double *x, double *y, double *J)
{
    int st;
    int64_t t0;
    int64_t i;
    if (p == NULL)
        return RT_BADARG;
    t0 = rt_hot_start(p);
    if ((st = rt_begin(p, x, J == NULL && p->out_len > 0 && p->n_grad > 0)) == RT_BUSY)
        return st;
    if (st == RT_OK) {
        rt_copy_out(p, y);
        /* One forward, then one reverse sweep per output: row i of J. */
        for (i = 0; i < p->out_len; i++) {
            rt_zero_adj_rev(p);
            p->adj[p->out_off + i] = 1.0;
            if ((st = rt_run_reverse(p)) != RT_OK)
                break;
            if (p->n_grad > 0)              /* J may be NULL when it has no columns */
                rt_copy_grad(p, J + i * p->n_grad);
        }
    }
    return rt_release_hot(p, st, t0);
}

/* Seeds the tangent arena with xdot on the differentiated inputs (nan/inf
 * tangents included: they flow through the sweep as numpy would). */
static int rt_seed_tangent(rt_program *p, const double *xdot)
{
    rt_zero_adj(p);
    if (p->n_grad > 0)
        memcpy(p->adj, xdot, (size_t)p->n_grad * sizeof(double));
    return RT_OK;
}

int rt_jvp(rt_program *p, const double *x, const double *xdot, double *y, double *ydot)
{
    int st;
    int64_t t0;
    if (p == NULL)
        return RT_BADARG;
    t0 = rt_hot_start(p);
    if ((st = rt_begin(p, x, (xdot == NULL && p->n_grad > 0) || (ydot == NULL && p->out_len > 0)))
        == RT_BUSY)
        return st;
    if (st == RT_OK)
        st = rt_seed_tangent(p, xdot);
    if (st == RT_OK) {
        rt_copy_out(p, y);
        st = rt_run_tangent(p);
        if (st == RT_OK && p->out_len > 0)
            memcpy(ydot, p->adj + p->out_off, (size_t)p->out_len * sizeof(double));
    }
    return rt_release_hot(p, st, t0);
}

int rt_jacobian_fwd(rt_program *p, const double *x, double *y, double *J)
{
    int st;
    int64_t t0;
    int64_t i, j;
    if (p == NULL)
        return RT_BADARG;
    t0 = rt_hot_start(p);
    if ((st = rt_begin(p, x, J == NULL && p->out_len > 0 && p->n_grad > 0)) == RT_BUSY)
        return st;
    if (st == RT_OK) {
        rt_copy_out(p, y);
        /* One forward, then one tangent sweep per input: column j of J. */
        for (j = 0; j < p->n_grad; j++) {
            rt_zero_adj(p);
            p->adj[j] = 1.0;
            if ((st = rt_run_tangent(p)) != RT_OK)
                break;
            for (i = 0; i < p->out_len; i++)
                J[i * p->n_grad + j] = p->adj[p->out_off + i];
        }
    }
    return rt_release_hot(p, st, t0);
}
