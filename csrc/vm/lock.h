/* Taking and releasing a program: the protocol every entry point follows
 * (entry.c, batch.c).  Internal to the extension.
 *
 * Take the program with an atomic exchange on busy (a concurrent replay gets
 * RT_BUSY and touches nothing but status), check verified, run, write
 * status, release busy on every path.  Every entry point sets p->status (not
 * only rt_value_and_grad).  y, g and J are written only when the status is
 * RT_OK.  RT_BADARG: value_and_grad with out_len != 1, or a NULL g / w / J
 * where the corresponding length is > 0 (x and y may always be NULL).
 * status is stored with a relaxed atomic because the RT_BUSY store races,
 * by design, with the replay that holds the program.
 */
#ifndef REVTAPE_VM_LOCK_H
#define REVTAPE_VM_LOCK_H

#include "vm.h"

static inline int rt_acquire(rt_program *p)
{
    if (__atomic_exchange_n(&p->busy, 1, __ATOMIC_ACQUIRE) != 0) {
        __atomic_store_n(&p->status, RT_BUSY, __ATOMIC_RELAXED);
        return 0;
    }
    return 1;
}

static inline int rt_release(rt_program *p, int status)
{
    __atomic_store_n(&p->status, status, __ATOMIC_RELAXED);
    __atomic_store_n(&p->busy, 0, __ATOMIC_RELEASE);
    return status;
}

#endif
