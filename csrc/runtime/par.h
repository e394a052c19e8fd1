/* Large array instructions split over the worker pool (par.c, pool.h).
 * Internal to the extension: kernels.c calls it when built with
 * RT_WITH_POOL (the VM's own build); the native tier compiles kernels.c
 * without it and runs the same pieces one after another.
 *
 * What may be split, and why the bits never depend on the thread count:
 *   - elementwise work (every output element computed by the same
 *     operations as in one loop) is cut into ranges anyhow;
 *   - sums into one slot (a scalar operand's adjoint, MATMUL's A^T G) are
 *     defined by the kernels in fixed chunks, a function of the length
 *     only (rt_par_chunk), whose partial sums are combined in chunk order
 *     afterwards; one thread computes the same chunks in the same way.
 * Pieces go to threads by a fixed first assignment (thread j starts on the
 * j-th contiguous share, so consecutive instructions of one replay find
 * their share of the arrays in the same core's cache), then any thread
 * takes what is left (a worker the pool withdrew, or a slow one). */
#ifndef REVTAPE_PAR_H
#define REVTAPE_PAR_H

#include <stdint.h>

/* fn(ctx, who, lo, hi, k): elements [lo, hi), the k-th piece (lo = k *
 * piece), on participant `who` (0: the calling thread; who < the maxt of
 * rt_par_run, so per-thread scratch can be indexed by it) */
typedef void (*rt_par_fn)(void *ctx, int who, int64_t lo, int64_t hi, int64_t k);

/* Worth splitting: n elements (or the work of n elements) at or above the
 * threshold, with more than one thread allowed.  RT_PAR_WANTS tests the
 * threshold inline first: a small instruction pays one load and compare. */
extern int64_t rt_par_min_elems;
int rt_par_wants(int64_t n);
#define RT_PAR_WANTS(n) ((n) >= __atomic_load_n(&rt_par_min_elems, __ATOMIC_RELAXED) \
                         && rt_par_wants(n))

/* Every piece of [0, n) in pieces of `piece` elements, on up to
 * min(maxt, the allowed number) threads (the calling thread and pool
 * workers; alone when the pool is busy with another caller).  Returns when
 * all are done. */
void rt_par_run(int64_t n, int64_t piece, int maxt, rt_par_fn fn, void *ctx);

/* memset(x, 0, n doubles), split like an elementwise instruction */
void rt_par_zero(double *x, int64_t n);

/* The setting (vm.h: rt_par_config). */
int rt_par_threads(void);

#endif
