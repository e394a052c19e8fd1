"""Plain values: a tape's value normalisation, the forward of one instruction,
and the checks of replay inputs and out= arrays (shared by the reference
replay and the compiled tape)."""

import numpy as np

from ..errors import InputError, UnsupportedError


def as_value(v):
    """A plain operand as a tape value: Python float for scalars, float64 ndarray else."""
    if type(v) is float:
        return v
    if isinstance(v, (int, float, np.floating, np.integer, bool, np.bool_)):
        return float(v)
    arr = np.array(v, dtype=None)
    if arr.dtype == object:
        raise UnsupportedError(
            "an object array (e.g. np.array of tracked values) cannot be recorded; "
            "build arrays of tracked values with np.stack or np.concatenate")
    if arr.dtype.kind not in "biuf":
        raise InputError(f"revtape records float64 math; got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if arr.ndim == 0:
        return float(arr)
    arr.setflags(write=False)
    return arr


def _norm(value):
    """An op's result as a tape value (np.float64 and 0-d arrays become floats)."""
    if type(value) is np.ndarray:
        if value.ndim == 0:
            return float(value)
        if value.dtype != np.float64:
            return value.astype(np.float64)
        return value
    return float(value)


def evaluate(op, vals, params):
    """Forward of one instruction on plain values."""
    sf = op.sfwd
    if sf is not None and not params and all(type(v) is float for v in vals):
        try:
            return sf(*vals)
        except (ArithmeticError, ValueError):
            pass
    return _norm(op.fwd(*vals, **params))


def shape_of(v):
    return () if type(v) is float else np.shape(v)



# ---------------------------------------------------------------- input and out= checks

def check_input(x, shape, float_input=False):
    """x as a float64 value of the recorded shape, or an InputError that says why."""
    if getattr(x, "_is_tracked", False):
        raise InputError("replay inputs are plain floats or arrays, not tracked values")
    try:
        arr = np.asarray(x)
    except Exception as e:  # e.g. ragged lists
        raise InputError(f"replay input could not be read as an array: {e}") from None
    if arr.dtype.kind not in "biuf":
        raise InputError(f"replay input must be real numbers, got dtype {arr.dtype}")
    if tuple(arr.shape) != tuple(shape):
        raise InputError(f"replay input has shape {arr.shape}, but the tape was recorded "
                         f"with shape {tuple(shape)}; record a new tape for this shape")
    # nan and +-inf are values: they replay as numpy computes them (optimizers
    # and samplers hand such points over on purpose and expect nan/-inf back).
    if float_input or arr.ndim == 0:
        return float(arr)
    out = np.array(arr, dtype=np.float64)
    out.setflags(write=False)
    return out


def check_out(out, templates):
    """Validate an out= argument (an array, or a tuple for several inputs)."""
    if len(templates) == 1:
        outs = (out,)
    else:
        if not isinstance(out, (tuple, list)) or len(out) != len(templates):
            raise InputError(f"out= must be a tuple of {len(templates)} arrays, one per input")
        outs = tuple(out)
    for o, t in zip(outs, templates):
        shape = shape_of(t)
        if not isinstance(o, np.ndarray):
            raise InputError("out= must be a float64 numpy array "
                             f"of shape {tuple(shape)}" + (" (scalar inputs have no out=)"
                                                           if shape == () else ""))
        if o.dtype != np.float64 or o.shape != tuple(shape):
            raise InputError(f"out= must be a float64 array of shape {tuple(shape)}, "
                             f"got {o.dtype} {o.shape}")
        if not o.flags.writeable:
            raise InputError("out= must be writeable")
    return outs


def write_out(out, results, templates):
    outs = check_out(out, templates)
    for o, r in zip(outs, results):
        o[...] = r
