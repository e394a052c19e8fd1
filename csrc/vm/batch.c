/* Batched replay: the entry points that replay one program at k points.
 *
 * One call for k points: the per-row work is exactly rt_value_and_grad's
 * (copy the row in, forward, zero and seed the adjoints, reverse, copy out),
 * so every row's results are bit-identical to a single replay at that row.
 * Rows are copied in without the finiteness check: a batch of sampler
 * proposals may hold nan/inf points, which give nan/inf results.
 * rt_batch_soa and rt_batch_soa_par run a scalar program's wide form as
 * array code over lanes instead (soa.c), rt_batch_soa_par on the worker
 * pool (runtime/pool.h), one wide program per participant.
 */
#include <stdint.h>
#include <string.h>

#include "vm.h"
#include "vm/soa.h"
#include "runtime/pool.h"
#include "vm/lock.h"
#include "vm/internal.h"

static int rt_batch_begin(rt_program *p, int64_t k, const double *X, int64_t *row, int missing)
{
    if (row != NULL)
        *row = 0;
    if (!rt_acquire(p))
        return RT_BUSY;
    if (!__atomic_load_n(&p->verified, __ATOMIC_ACQUIRE))
        return RT_UNVERIFIED;
    if (missing || k < 0 || (k > 0 && X == NULL && p->n_in > 0))
        return RT_BADARG;
    return RT_OK;
}

int rt_batch_value_and_grad(rt_program *p, int64_t k, const double *X, double *values,
                            double *G, int64_t *row)
{
    int st;
    int64_t r = 0;
    if (p == NULL)
        return RT_BADARG;
    st = rt_batch_begin(p, k, X, row, p->out_len != 1 || (k > 0 && values == NULL)
                        || (k > 0 && G == NULL && p->n_grad > 0));
    if (st == RT_BUSY)
        return st;
    for (; st == RT_OK && r < k; r++) {
        /* a native value_and_grad (the fused scalar code) when installed:
         * read per row, as every sweep reads p->native */
        const rt_native *nat = rt_native_of(p);
        if (p->guarded)                 /* a refused row leaves the last complete one */
            rt_save_io(p, 0);
        if (p->n_in > 0)
            memcpy(p->vals, X + r * p->n_in, (size_t)p->n_in * sizeof(double));
        if (nat != NULL && nat->value_and_grad != NULL) {
            if ((st = nat->value_and_grad(p)) != RT_OK)
                break;
        } else {
            if (!p->guarded)                /* before the forward: rt_begin_sweep */
                rt_zero_adj_rev(p);
            if ((st = rt_run_forward(p)) != RT_OK)
                break;
            if (p->guarded)
                rt_zero_adj_rev(p);
            p->adj[p->out_off] = 1.0;
            if ((st = rt_run_reverse(p)) != RT_OK)
                break;
        }
        if (p->n_grad > 0)
            memcpy(G + r * p->n_grad, p->adj, (size_t)p->n_grad * sizeof(double));
        values[r] = p->vals[p->out_off];
    }
    if (st != RT_OK && st != RT_UNVERIFIED && st != RT_BADARG && p->guarded)
        rt_save_io(p, 1);
    if (row != NULL)
        *row = r;
    return rt_release(p, st);
}

int rt_batch_forward(rt_program *p, int64_t k, const double *X, double *Y, int64_t *row)
{
    int st;
    int64_t r = 0;
    if (p == NULL)
        return RT_BADARG;
    st = rt_batch_begin(p, k, X, row, k > 0 && Y == NULL && p->out_len > 0);
    if (st == RT_BUSY)
        return st;
    for (; st == RT_OK && r < k; r++) {
        if (p->guarded)
            rt_save_io(p, 0);
        if (p->n_in > 0)
            memcpy(p->vals, X + r * p->n_in, (size_t)p->n_in * sizeof(double));
        if ((st = rt_run_forward(p)) != RT_OK)
            break;
        if (p->out_len > 0)
            memcpy(Y + r * p->out_len, p->vals + p->out_off, (size_t)p->out_len * sizeof(double));
    }
    if (st != RT_OK && st != RT_UNVERIFIED && st != RT_BADARG && p->guarded)
        rt_save_io(p, 1);
    if (row != NULL)
        *row = r;
    return rt_release(p, st);
}

/* the scalar layout must be the wide one's, lane for lane: then every
 * index soa.c computes lies inside regions the verifier checked */
static int rt_soa_args_bad(const rt_program *pw, int64_t n_in, int64_t n_grad, int64_t out_off,
                           int32_t with_grad, const uint8_t *first, int64_t k,
                           const double *values, const double *G)
{
    const int64_t B = RT_SOA_LANES;
    return n_in < 0 || n_grad < 0 || n_grad > n_in || out_off < 0
           || n_in > INT64_MAX / B || out_off > INT64_MAX / B
           || pw->n_in != n_in * B || pw->n_grad != n_grad * B
           || pw->out_off != out_off * B || pw->out_len != B
           || (k > 0 && values == NULL)
           || (with_grad && k > 0 && n_grad > 0 && G == NULL)
           || (with_grad && pw->n_instr > 0 && first == NULL);
}

int rt_batch_soa(rt_program *pw, int64_t n_in, int64_t n_grad, int64_t out_off,
                 int32_t with_grad, const uint8_t *first, const int32_t *zero, int64_t n_zero,
                 int64_t k, const double *X, double *values, double *G, int64_t *row)
{
    int st;
    if (pw == NULL)
        return RT_BADARG;
    st = rt_batch_begin(pw, k, X, row,
                        rt_soa_args_bad(pw, n_in, n_grad, out_off, with_grad, first, k, values, G));
    if (st == RT_BUSY)
        return st;
    if (st == RT_OK)
        st = rt_soa_check(pw, zero, n_zero);
    if (st == RT_OK)
        rt_soa_run(pw, n_in, n_grad, out_off, with_grad, first, zero, n_zero, k, X, values, G);
    if (row != NULL)
        *row = st == RT_OK ? k : 0;
    return rt_release(pw, st);
}

/* rt_batch_soa_par: one participant (pool.h) on its own wide program pws[who]. */
typedef struct {
    rt_program *const *pws;
    int64_t n_in, n_grad, out_off;
    int32_t with_grad;
    const uint8_t *first;
    const int32_t *zero;
    int64_t n_zero, k, piece;     /* piece: a participant takes 1/piece of the rows left */
    const double *X;
    double *values, *G;
    int64_t next;                 /* the first row no participant has taken (atomic) */
    int *status;                  /* one per participant */
} rt_soa_job;

static void rt_soa_part(void *ctx, int who)
{
    rt_soa_job *j = ctx;
    rt_program *pw = j->pws[who];
    int64_t r0;
    int st;
    if (pw == NULL) {
        j->status[who] = RT_BADARG;
        return;
    }
    st = rt_batch_begin(pw, j->k, j->X, NULL,
                        rt_soa_args_bad(pw, j->n_in, j->n_grad, j->out_off, j->with_grad,
                                        j->first, j->k, j->values, j->G));
    if (st == RT_BUSY) {
        j->status[who] = st;
        return;
    }
    if (st == RT_OK)
        st = rt_soa_check(pw, j->zero, j->n_zero);
    r0 = __atomic_load_n(&j->next, __ATOMIC_RELAXED);
    while (st == RT_OK && r0 < j->k) {
        /* guided: a share of what is left, in whole lane blocks, at least
         * one block; the last pieces are one block each, so participants
         * finish within about one block of each other */
        int64_t m = (j->k - r0) / j->piece / RT_SOA_LANES * RT_SOA_LANES;
        if (m < RT_SOA_LANES)
            m = RT_SOA_LANES;
        if (m > j->k - r0)
            m = j->k - r0;
        if (!__atomic_compare_exchange_n(&j->next, &r0, r0 + m, 0, __ATOMIC_RELAXED,
                                         __ATOMIC_RELAXED))
            continue;                           /* r0 now holds the new value */
        rt_soa_run(pw, j->n_in, j->n_grad, j->out_off, j->with_grad, j->first, j->zero,
                   j->n_zero, m, j->X + r0 * j->n_in, j->values + r0,
                   j->with_grad && j->G != NULL ? j->G + r0 * j->n_grad : NULL);
        r0 = __atomic_load_n(&j->next, __ATOMIC_RELAXED);
    }
    j->status[who] = rt_release(pw, st);
}

int rt_batch_soa_par(rt_program *const *pws, int32_t n_par, int64_t n_in, int64_t n_grad,
                     int64_t out_off, int32_t with_grad, const uint8_t *first,
                     const int32_t *zero, int64_t n_zero, int64_t k, const double *X,
                     double *values, double *G)
{
    int status[RT_SOA_MAX_PAR];
    rt_soa_job job;
    int i;
    if (pws == NULL || n_par < 1 || n_par > RT_SOA_MAX_PAR || k < 0)
        return RT_BADARG;
    job.pws = pws;
    job.n_in = n_in;
    job.n_grad = n_grad;
    job.out_off = out_off;
    job.with_grad = with_grad;
    job.first = first;
    job.zero = zero;
    job.n_zero = n_zero;
    job.k = k;
    job.X = X;
    job.values = values;
    job.G = G;
    job.next = 0;
    job.status = status;
    /* each take is 1/(2 n_par) of the rows left: few takes of the shared
     * counter, and small ones at the end */
    job.piece = 2 * (int64_t)n_par;
    for (i = 0; i < n_par; i++)
        status[i] = RT_OK;
    rt_pool_run(n_par, rt_soa_part, &job);
    for (i = 0; i < n_par; i++)
        if (status[i] != RT_OK)
            return status[i];
    /* every participant that ran took pieces until none were left; a refusal
     * (busy, bad arguments) is reported above, so all rows were run */
    return RT_OK;
}
