"""State a forked child must not inherit as taken.

A program's busy flag (csrc/vm/lock.h) and a CompiledTape's batch lock are
taken by the thread that replays; fork copies them taken while that thread
does not exist in the child, which would then see ConcurrentUseError (or
the batch's sequential fallback) forever.  After a fork the child marks
every live program free and gives every tape fresh locks: no replay runs
in the child at that moment (only the forking thread survives, and it is
in os.fork).  The C thread pool resets itself (pthread_atfork, pool.c)."""

import os
import threading
import weakref

_programs = weakref.WeakSet()     # every rt_program cdata a tape owns
_owners = weakref.WeakSet()       # objects with a _batch_lock


def track_program(p):
    """Remember p (an owning rt_program * cdata) to free it after a fork."""
    _programs.add(p)
    return p


def track_locks(obj):
    """Remember obj, whose _batch_lock is renewed after a fork."""
    _owners.add(obj)


def _in_child():
    for p in list(_programs):
        p.busy = 0
    for obj in list(_owners):
        obj._batch_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_child)
