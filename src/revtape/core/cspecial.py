"""The numpy forward of special-function rows when scipy is not installed:
the row's own C expression, run by the extension on plain arrays
(``rt_elementwise``), so that the reference replay and the VM agree."""

import numpy as np


def evaluate(code, *args):
    """Run the VM's elementwise opcode `code` (a unary or binary _VV opcode,
    ops.py passes it: this module imports nothing of revtape's) on arrays."""
    from .._vm import ffi, lib
    arrays = np.broadcast_arrays(*[np.asarray(a, dtype=np.float64) for a in args])
    shape = arrays[0].shape
    flat = [np.ascontiguousarray(a).ravel() for a in arrays]
    out = np.empty(shape, dtype=np.float64)
    n = out.size
    ptr = lambda a: ffi.from_buffer("double[]", a)
    y = ptr(flat[1]) if len(flat) == 2 else ffi.NULL
    if lib.rt_elementwise(code, n, ptr(flat[0]), y, ptr(out.reshape(-1))) != 0:
        raise AssertionError(f"opcode {code} has no elementwise C kernel")  # pragma: no cover
    return out[()]
