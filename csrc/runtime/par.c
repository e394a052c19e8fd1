/* Large array instructions over the worker pool: see par.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1        /* sched_getaffinity, CPU_COUNT */
#endif

#include "runtime/par.h"
#include "runtime/pool.h"
#include "vm.h"

#include <stdlib.h>
#include <string.h>

#if !defined(_WIN32)
#include <sched.h>
#include <unistd.h>
#endif

#define RT_PAR_MAX 64                     /* pool.c's RT_POOL_MAX */
/* From how many elements an instruction is split.  An instruction of 32k
 * elements takes ~10-40 us alone, the hand-off to a spinning worker
 * ~1 us; below that, and for every small or scalar program, the kernels
 * run as before (one compare more per array instruction). */
#define RT_PAR_MIN_DEFAULT 32768

static int par_threads;                   /* 0: not read yet (atomic) */
int64_t rt_par_min_elems = RT_PAR_MIN_DEFAULT;

static int par_cpus(void)
{
#if defined(_WIN32)
    return 1;
#else
    int n = 0;
#if defined(CPU_COUNT)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        n = CPU_COUNT(&set);
#endif
    if (n < 1) {
        long m = sysconf(_SC_NPROCESSORS_ONLN);
        n = m > 0 ? (int)m : 1;
    }
    return n;
#endif
}

/* REVTAPE_THREADS (a positive integer) caps the threads; else as many as
 * the process may run on. */
static int par_default(void)
{
    const char *s = getenv("REVTAPE_THREADS");
    int n = 0;
    if (s && *s) {
        char *end;
        long x = strtol(s, &end, 10);
        if (*end == '\0' && x >= 1)
            n = x > RT_PAR_MAX ? RT_PAR_MAX : (int)x;
    }
    if (n < 1)
        n = par_cpus();
    return n > RT_PAR_MAX ? RT_PAR_MAX : n;
}

int rt_par_threads(void)
{
    int n = __atomic_load_n(&par_threads, __ATOMIC_RELAXED);
    if (n == 0) {
        int expect = 0;
        n = par_default();
        if (!__atomic_compare_exchange_n(&par_threads, &expect, n, 0, __ATOMIC_RELAXED,
                                         __ATOMIC_RELAXED))
            n = expect;                   /* rt_par_config or another thread won */
    }
    return n;
}

int32_t rt_par_config(int32_t threads, int64_t min_elements, int64_t *min_out)
{
    if (threads > 0)
        __atomic_store_n(&par_threads, threads > RT_PAR_MAX ? RT_PAR_MAX : threads,
                         __ATOMIC_RELAXED);
    if (min_elements > 0)
        __atomic_store_n(&rt_par_min_elems, min_elements, __ATOMIC_RELAXED);
    if (min_out)
        *min_out = __atomic_load_n(&rt_par_min_elems, __ATOMIC_RELAXED);
    return rt_par_threads();
}

int rt_par_wants(int64_t n)
{
    return n >= __atomic_load_n(&rt_par_min_elems, __ATOMIC_RELAXED) && rt_par_threads() > 1;
}

typedef struct {
    rt_par_fn fn;
    void *ctx;
    int64_t n, piece;
    int nt;
    int64_t next[RT_PAR_MAX];             /* thread j's share: pieces next[j] .. end[j] */
    int64_t end[RT_PAR_MAX];
} par_job;

static void par_body(void *vctx, int who)
{
    par_job *j = vctx;
    int r;
    for (r = 0; r < j->nt; r++) {          /* its own share first, then the others' */
        const int t = (who + r) % j->nt;
        for (;;) {
            const int64_t k = __atomic_fetch_add(&j->next[t], 1, __ATOMIC_RELAXED);
            int64_t lo, hi;
            if (k >= j->end[t])
                break;
            lo = k * j->piece;
            hi = lo + j->piece < j->n ? lo + j->piece : j->n;
            j->fn(j->ctx, who, lo, hi, k);
        }
    }
}

void rt_par_run(int64_t n, int64_t piece, int maxt, rt_par_fn fn, void *ctx)
{
    const int64_t np = piece > 0 ? (n + piece - 1) / piece : 0;
    int64_t nt = rt_par_threads(), k;
    par_job j;
    if (nt > maxt)
        nt = maxt;
    if (nt > np)
        nt = np;
    if (nt <= 1) {
        for (k = 0; k < np; k++)
            fn(ctx, 0, k * piece, k * piece + piece < n ? k * piece + piece : n, k);
        return;
    }
    j.fn = fn;
    j.ctx = ctx;
    j.n = n;
    j.piece = piece;
    j.nt = (int)nt;
    for (k = 0; k < nt; k++) {
        j.next[k] = k * np / nt;
        j.end[k] = (k + 1) * np / nt;
    }
    (void)rt_pool_run((int)nt, par_body, &j);
}

static void par_zero_piece(void *ctx, int who, int64_t lo, int64_t hi, int64_t k)
{
    (void)who;
    (void)k;
    memset((double *)ctx + lo, 0, (size_t)(hi - lo) * sizeof(double));
}

void rt_par_zero(double *x, int64_t n)
{
    if (n <= 0)
        return;
    if (RT_PAR_WANTS(n))
        rt_par_run(n, 16384, RT_PAR_MAX, par_zero_piece, x);
    else
        memset(x, 0, (size_t)n * sizeof(double));
}
