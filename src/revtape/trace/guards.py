"""Guards: where a branch was recorded (the user's source line) and the
error a replay raises when a recorded comparison comes out the other way."""

import linecache
import sys

from ..core import ops
from ..errors import BranchChanged


class _Where(tuple):
    """(filename, lineno) of a guard recorded in this process.  Only these name
    a source file revtape reads (to quote the line in BranchChanged): a
    location from a pickle arrives as a plain tuple, and a path named by a
    pickle is never opened.  Copies in this process stay trusted."""

    __slots__ = ()

    def __reduce__(self):
        return (tuple, (tuple(self),))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


def _caller():
    """(filename, lineno) of the first frame outside revtape: the user's source line."""
    f = sys._getframe(2)
    while f is not None and f.f_globals.get("__name__", "").startswith("revtape"):
        f = f.f_back
    if f is None:
        return _Where(("<unknown>", 0))
    return _Where((f.f_code.co_filename, f.f_lineno))


def describe_where(where):
    if type(where) is not _Where:            # from a pickle: shown, never opened
        if isinstance(where, tuple) and len(where) == 2:
            return f"{where[0]}:{where[1]}"
        return repr(where)
    filename, lineno = where
    line = linecache.getline(filename, lineno).strip()
    return f"{filename}:{lineno}" + (f": {line}" if line else "")



# ---------------------------------------------------------------- guards

def _check_guard(params, x, y):
    seen = bool(ops.GUARD_PREDICATES[params["pred"]][1](x, y))
    if seen != params["expected"]:
        raise branch_changed(params, x, y)


def branch_changed(params, x, y):
    sym = ops.GUARD_PREDICATES[params["pred"]][0]
    # guards that revtape records itself (sort order, argmax) say what they guard
    what = f" ({params['what']})" if "what" in params else ""
    return BranchChanged(
        f"the replay took another branch than the recording{what}: `{x!r} {sym} {y!r}` is now "
        f"{not params['expected']} (it was {params['expected']} when recorded) at "
        f"{describe_where(params['where'])}. Record a new tape at this input, use rt.grad(f) "
        f"(it re-records), or write the branch with np.where (compile(tape, guards=False) "
        f"replays the recorded branch)", guard=params["index"], where=params["where"],
        operands=(x, y))
