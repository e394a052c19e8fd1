/* The worker pool of pool.h. */
#include "runtime/pool.h"

#if defined(_WIN32)

int rt_pool_run(int n, rt_pool_fn fn, void *ctx)
{
    (void)n;
    fn(ctx, 0);
    return 0;
}

#else

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <time.h>

#define RT_POOL_MAX 64
/* How long a worker that finished spins for the next offer before it
 * sleeps: long enough to cover the Python between two batch calls of a
 * sampler or benchmark loop, short enough not to hold a shared core. */
#define RT_POOL_SPIN_NS 200000

enum { W_IDLE = 0, W_OFFERED = 1, W_RUNNING = 2 };

typedef struct {
    pthread_mutex_t mu;          /* guards the sleep only */
    pthread_cond_t cv;
    int state;                   /* W_*, atomic */
    rt_pool_fn fn;               /* written before state = W_OFFERED (release) */
    void *ctx;
    int who;
} rt_worker;

static rt_worker workers[RT_POOL_MAX];
static int n_workers;            /* under pool_mu */
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static int atfork_done;

static void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void *worker_main(void *arg)
{
    rt_worker *w = arg;
    for (;;) {
        int64_t t0 = now_ns();
        unsigned spins = 0;
        while (__atomic_load_n(&w->state, __ATOMIC_ACQUIRE) != W_OFFERED) {
            relax();
            if ((++spins & 255) == 0 && now_ns() - t0 > RT_POOL_SPIN_NS) {
                pthread_mutex_lock(&w->mu);
                while (__atomic_load_n(&w->state, __ATOMIC_ACQUIRE) != W_OFFERED)
                    pthread_cond_wait(&w->cv, &w->mu);
                pthread_mutex_unlock(&w->mu);
                break;
            }
        }
        int expect = W_OFFERED;
        /* the caller withdraws an offer with the same exchange: exactly one wins */
        if (__atomic_compare_exchange_n(&w->state, &expect, W_RUNNING, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            w->fn(w->ctx, w->who);
            __atomic_store_n(&w->state, W_IDLE, __ATOMIC_RELEASE);
        }
    }
    return NULL;
}

/* A forked child has none of the parent's threads: it starts a pool of its
 * own (the parent's mutexes may have been held at the fork). */
static void pool_after_fork_in_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    pool_mu = fresh;
    n_workers = 0;
}

/* At least want workers (as many as can be made); pool_mu held. */
static int grow(int want)
{
    pthread_attr_t attr;
    if (want > RT_POOL_MAX)
        want = RT_POOL_MAX;
    if (n_workers >= want)
        return want;
    if (!atfork_done) {
        if (pthread_atfork(NULL, NULL, pool_after_fork_in_child) != 0)
            return 0;
        atfork_done = 1;
    }
    if (pthread_attr_init(&attr) != 0)
        return n_workers;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    while (n_workers < want) {
        rt_worker *w = &workers[n_workers];
        pthread_t th;
        if (pthread_mutex_init(&w->mu, NULL) != 0)
            break;
        if (pthread_cond_init(&w->cv, NULL) != 0) {
            pthread_mutex_destroy(&w->mu);
            break;
        }
        w->state = W_IDLE;
        if (pthread_create(&th, &attr, worker_main, w) != 0) {
            pthread_cond_destroy(&w->cv);
            pthread_mutex_destroy(&w->mu);
            break;
        }
        n_workers++;
    }
    pthread_attr_destroy(&attr);
    return n_workers < want ? n_workers : want;
}

int rt_pool_run(int n, rt_pool_fn fn, void *ctx)
{
    int m = 0, i, ran = 0, locked = 0;
    if (n > 1 && pthread_mutex_trylock(&pool_mu) == 0) {
        locked = 1;
        m = grow(n - 1);
        for (i = 0; i < m; i++) {
            rt_worker *w = &workers[i];
            w->fn = fn;
            w->ctx = ctx;
            w->who = i + 1;
            __atomic_store_n(&w->state, W_OFFERED, __ATOMIC_RELEASE);
            /* a sleeping worker re-checks state under mu before it waits:
             * signalling under mu cannot be lost */
            pthread_mutex_lock(&w->mu);
            pthread_cond_signal(&w->cv);
            pthread_mutex_unlock(&w->mu);
        }
    }
    fn(ctx, 0);
    for (i = 0; i < m; i++) {
        rt_worker *w = &workers[i];
        int expect = W_OFFERED;
        unsigned spins = 0;
        if (__atomic_compare_exchange_n(&w->state, &expect, W_IDLE, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            continue;                            /* withdrawn: never started */
        ran++;
        while (__atomic_load_n(&w->state, __ATOMIC_ACQUIRE) != W_IDLE) {
            relax();
            if ((++spins & 1023) == 0)
                sched_yield();                   /* its share is one piece at most */
        }
    }
    if (locked)
        pthread_mutex_unlock(&pool_mu);
    return ran;
}

#endif
