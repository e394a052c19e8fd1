/* What the files of the VM (csrc/vm/) share: the functions one of them
 * calls in another, and the attributes they are compiled with.  Internal to
 * the extension.
 *
 * RT_INTERNAL gives them hidden visibility: a call between two files is a
 * direct call inside the extension (never through the PLT) and the names
 * are not exported.  Hot paths stay within one file where inlining matters:
 * each sweep inlines its own kernels (csrc/instr/, kernels/scalar.h); what
 * crosses files here is one call per sweep, per block or per run.
 */
#ifndef REVTAPE_VM_INTERNAL_H
#define REVTAPE_VM_INTERNAL_H

#include <stdint.h>

#include "vm.h"

#if defined(__GNUC__)
#define RT_INTERNAL __attribute__((visibility("hidden")))
#else
#define RT_INTERNAL
#endif

/* The forward and reverse sweeps go to .text.hot, which the linker places
 * ahead of the other code: their layout, to which the dispatch's branch
 * prediction is sensitive (growing an unrelated function once slowed scalar
 * code measurably), then no longer moves when other functions change. */
#if defined(__GNUC__)
#define RT_HOT __attribute__((hot, aligned(64)))
#else
#define RT_HOT
#endif

/* Out of line: inlined, their stack buffers and loops would change the
 * sweeps' register allocation, which scalar code's dispatch is sensitive to. */
#if defined(__GNUC__)
#define RT_NOINLINE __attribute__((noinline))
#else
#define RT_NOINLINE
#endif

/* sweeps.c: the general sweeps over instructions [lo, hi) (the whole
 * program, a run of the scalar path, a block's tile, or a range the native
 * tier leaves to the VM).  The reverse's adjoints and the tangent's
 * tangents are zeroed and seeded by the caller. */
RT_HOT RT_INTERNAL int rt_run_forward_range(rt_program *p, int64_t lo, int64_t hi);
RT_HOT RT_INTERNAL int rt_run_reverse_range(const rt_program *p, int64_t lo, int64_t hi);
RT_INTERNAL int rt_run_tangent_range(const rt_program *p, int64_t lo, int64_t hi);

/* scalar_path.c: the dispatch index rt_verify builds (1: the program has a
 * one-element instruction), and the two sweeps that run from it. */
RT_INTERNAL int32_t rt_scalar_index_build(const rt_program *p);
RT_HOT RT_INTERNAL int rt_scalar_forward(rt_program *p);
RT_HOT RT_INTERNAL int rt_scalar_reverse(const rt_program *p);

/* blocks.c: a BLOCK met by a sweep at pc, run tile by tile; each returns the
 * pc the sweep continues from.  rt_range_whole: 1 when [lo, hi) cuts no
 * block (the range entry points' check). */
RT_INTERNAL int64_t rt_block_forward_at(rt_program *p, int64_t pc, int64_t hi);
RT_INTERNAL int64_t rt_block_reverse_at(const rt_program *p, int64_t pc, int64_t lo);
RT_INTERNAL int64_t rt_block_tangent_at(const rt_program *p, int64_t pc);
RT_INTERNAL int rt_range_whole(const rt_program *p, int64_t lo, int64_t hi);

/* entry.c: the sweeps a replay runs (the native tier's or the VM's), and
 * the arena chores every replay shares (batch.c's rows too). */
RT_INTERNAL int rt_run_forward(rt_program *p);
RT_INTERNAL int rt_run_reverse(rt_program *p);
RT_INTERNAL void rt_save_io(rt_program *p, int restore);
RT_INTERNAL void rt_zero_adj_rev(const rt_program *p);

/* hot.c: native="auto"'s counting around a replay (rt_hot_start before the
 * call takes the program, rt_release_hot instead of rt_release). */
RT_INTERNAL int64_t rt_hot_start(const rt_program *p);
RT_INTERNAL int rt_release_hot(rt_program *p, int status, int64_t t0);

/* The native tier's table, if one is installed: read once per sweep with an
 * acquire load, so that a swap on another thread is seen whole. */
static inline const rt_native *rt_native_of(const rt_program *p)
{
    return __atomic_load_n(&p->native, __ATOMIC_ACQUIRE);
}

#endif
