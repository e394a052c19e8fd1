/* A persistent pool of worker threads for batched replay (pool.c).
 * Internal to the extension: rt_batch_soa_par (vm.h, vm/batch.c) uses it.
 *
 * Why not Python's thread pool: a batch of ~1000 points takes ~90 us, and
 * waking a sleeping Python worker (futex, GIL, an idle core coming out of a
 * halt on a VM) cost more than the half of it the worker took over (2
 * threads gave 0.72x one thread's throughput at k = 1000).  Here a worker
 * that finished spins briefly for the next offer before it sleeps, and an
 * offer no worker has taken by the time the caller's own share is done is
 * withdrawn, so a late worker never delays the call. */
#ifndef REVTAPE_POOL_H
#define REVTAPE_POOL_H

typedef void (*rt_pool_fn)(void *ctx, int who);

/* fn(ctx, 0) on the calling thread; fn(ctx, i), i = 1 .. n-1, offered to
 * worker threads (created on first use).  Returns once fn(ctx, 0) has
 * returned and every offered call has either returned or been withdrawn
 * (never started).  fn must share its work dynamically (each call takes
 * pieces from a shared counter until none are left), so that any subset
 * of the calls does all of it.  With no threads available (another caller
 * holds the pool, thread creation failed, no pthreads) only fn(ctx, 0)
 * runs.  Returns how many worker calls ran. */
int rt_pool_run(int n, rt_pool_fn fn, void *ctx);

#endif
