/* native="auto" counts calls and samples replay time (one call in 32 is
 * timed, its time counted 32 times): cheap enough for every call.  Both run
 * while the caller owns the program.  A program whose count or time passes
 * its budget (vm.h: hot_max_calls, hot_max_ns) reports RT_OK_HOT once, and
 * the caller starts the native compile.
 */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE 1   /* clock_gettime in <time.h> */
#endif

#include <stdint.h>
#include <time.h>

#include "vm.h"
#include "vm/lock.h"
#include "vm/internal.h"

#define RT_HOT_SAMPLE 32

static int64_t rt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

RT_INTERNAL int64_t rt_hot_start(const rt_program *p)
{
    /* read before the call owns p: relaxed loads, a stale value costs one sample */
    return (__atomic_load_n(&p->hot_max_calls, __ATOMIC_RELAXED) > 0
            && __atomic_load_n(&p->hot_calls, __ATOMIC_RELAXED) % RT_HOT_SAMPLE == 0)
        ? rt_now_ns() : -1;
}

static int rt_hot_tick(rt_program *p, int st, int64_t t0)
{
    if (p->hot_max_calls <= 0)
        return st;
    __atomic_store_n(&p->hot_calls, p->hot_calls + 1, __ATOMIC_RELAXED);
    if (t0 >= 0)
        p->hot_ns += (rt_now_ns() - t0) * RT_HOT_SAMPLE;
    if (p->hot_calls >= p->hot_max_calls || p->hot_ns >= p->hot_max_ns) {
        /* once: the caller starts the compile */
        __atomic_store_n(&p->hot_max_calls, 0, __ATOMIC_RELAXED);
        if (st == RT_OK)
            return RT_OK_HOT;
    }
    return st;
}

/* rt_release for the two entry points native="auto" counts. */
RT_INTERNAL int rt_release_hot(rt_program *p, int status, int64_t t0)
{
    int ret = rt_hot_tick(p, status, t0);
    rt_release(p, status);
    return ret;
}
