"""The C extension as the runtime sees it: revtape._vm's ffi and lib (refused
when built from another op table), the VM's statuses, the buffer types every
replay path converts to, revtape._checked linked to this process's VM, and
the VM's process-wide array threads (array_threads)."""

import time

import numpy as np

from .. import config
from ..core import isa
from ..core import ops
from ..core import primitives as _prim
from ..errors import BuildMismatchError, InputError, VerificationError

try:
    from .._vm import ffi, lib
except ImportError as e:  # pragma: no cover - only without a built extension
    raise ImportError("revtape's C extension is not built; reinstall with "
                      "`pip install -e .` (it needs a C compiler)") from e

_prim._install_callback(ffi)

if ffi.string(lib.rt_op_table_hash()).decode() != ops.OP_TABLE_HASH:  # pragma: no cover
    raise BuildMismatchError("the built C extension comes from another op table; rebuild it "
                             "with `pip install -e .`")

# The VM's statuses as the extension defines them (generated from isa.STATUSES).
(RT_OK, RT_GUARD_FAILED, RT_BUSY, RT_UNVERIFIED, RT_BADARG, RT_NONFINITE, RT_CALLBACK_FAILED,
 RT_BAD_INDEX, RT_OK_HOT) = (getattr(lib, "RT_" + _name) for _name, _ in isa.STATUSES)
_F64 = np.dtype(np.float64)
_ND = np.ndarray
_empty = np.empty
_DOUBLES = ffi.typeof("double[]")
_from_buffer = ffi.from_buffer
_ffi_new = ffi.new
_DOUBLE_P = ffi.typeof("double *")


def _new_double(_new=ffi.new, _t=ffi.typeof("double *")):
    return _new(_t)


def _link_checked():
    """revtape._checked (csrc/pyext/checked.c): value_and_gradient's checks in
    C, linked to this process's rt_value_and_grad; its value_and_grad, or a
    stand-in that accepts nothing when the module is missing (a build without
    it, a platform without dlopen) or was built from another rt_program."""
    try:
        from .. import _checked, _vm
    except ImportError:                                   # pragma: no cover
        return None, lambda state, x, out: None
    layout = (ffi.sizeof("rt_program"),) + tuple(
        ffi.offsetof("rt_program", f) for f in ("n_in", "n_grad", "out_len", "busy", "native"))
    if _checked.layout() != layout or not _checked.link(_vm.__file__):   # pragma: no cover
        return None, lambda state, x, out: None
    return _checked, _checked.value_and_grad


_checked, _checked_vg = _link_checked()


def _retry_busy(call, budget=2.0):
    """call() until it does not return RT_BUSY (a concurrent replay holds the
    program for one replay's time), for at most `budget` seconds."""
    st = call()
    deadline = None
    while st == RT_BUSY:
        now = time.monotonic()
        if deadline is None:
            deadline = now + budget
        elif now > deadline:
            break
        time.sleep(0.0002)
        st = call()
    return st


def verify(p, refused):
    """rt_verify(p), raising VerificationError(refused + the verifier's
    reason) when it refuses the program."""
    msg = ffi.new("char[]", 512)
    if lib.rt_verify(p, msg, 512) != RT_OK:
        raise VerificationError(refused + ffi.string(msg).decode(errors="replace"))


def array_threads(threads=None, min_elements=None):
    """Threads for the large array instructions of one replay, process-wide.

    An elementwise instruction, a scalar operand's adjoint sum or a
    matrix-vector product over at least ``min_elements`` elements (default
    32768) splits over the calling thread and the C worker pool, with the
    same bits as on one thread (csrc/runtime/par.h).  ``threads`` caps the threads
    (1: never split; default: $REVTAPE_THREADS, else the CPUs the process
    may use).  None leaves a setting unchanged.  Returns the settings now in
    force, ``(threads, min_elements)``."""
    for name, val in (("threads", threads), ("min_elements", min_elements)):
        if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < 1):
            raise InputError(f"array_threads: {name} must be an int >= 1 or None, not {val!r}")
    if threads is not None and threads > 64:
        raise InputError(f"array_threads: at most 64 threads, not {threads}")
    mn = ffi.new("int64_t *")
    n = lib.rt_par_config(threads or 0, min_elements or 0, mn)
    return int(n), int(mn[0])


def _threads_from_environment():
    """$REVTAPE_THREADS, read once per process as the C side reads it
    (csrc/runtime/par.c), but parsed here and handed over: junk C would pass over
    silently is a ConfigError."""
    n = config.get("REVTAPE_THREADS")
    if n is not None:
        lib.rt_par_config(min(n, 64), 0, ffi.NULL)


_threads_from_environment()
