"""Whole-function tapes: record f at x (call_with, record) and the tapes
GradientTape and JacobianTape.

``x`` is a float, an ndarray, or a tuple of them.  With a tuple, f is called
as ``f(*x)`` when its signature takes that many positional arguments
(ReverseDiff's convention) and as ``f(x)`` otherwise; the gradient is then a
tuple shaped like x.  ``x`` may also be a pytree (nested dicts, lists, tuples,
namedtuples of floats and arrays, see pytree.py): each leaf is a tape input,
f is called on the tree of tracked leaves, and gradients come back in x's
structure.
"""

import contextlib
import contextvars
import gc
import inspect
from typing import Any

from ..core import pytree
from ..core.apitypes import Function, PyTree
from ..errors import InputError
from .tape import Tape
from .values import check_out
from .watch import Watcher, warn_tape_draws

# Set while a one-shot rt.gradient/jacobian/hessian/hvp records f: its tape is
# used once, at the recording point, so draws in f are exact there, not frozen.
_ONE_SHOT = contextvars.ContextVar("revtape_one_shot", default=False)


def _once(make, f, x):
    token = _ONE_SHOT.set(True)
    try:
        return make(f, x)
    finally:
        _ONE_SHOT.reset(token)


def call_with(f, targs):
    """Call f on tracked inputs: f(*x) for a tuple when f takes that many arguments."""
    if type(targs) is not tuple:      # a namedtuple is one argument, as a dict is
        return f(targs)
    try:
        inspect.signature(f).bind(*targs)
    except TypeError:
        return f(targs)
    except ValueError:   # no signature (builtins): assume positional
        pass
    return f(*targs)


@contextlib.contextmanager
def gc_paused():
    """Recording allocates a few objects per instruction and frees none, which
    makes CPython's cyclic collector rescan the growing tape again and again
    (half the recording time of a 10^5-instruction tape).  Nothing a tape
    holds needs the collector, so it is paused while f runs."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def record(tape, f, x):
    """Track x on tape, run f, finish with its result."""
    if not callable(f):
        raise InputError(f"expected a function to differentiate (or a tape), got "
                         f"{type(f).__name__} {f!r:.40}")
    leaves, treedef = pytree.input_structure(x)
    if treedef is not None:
        tx = pytree.unflatten(treedef, [tape.track(v) for v in leaves])
        tape._treedef = treedef
    elif isinstance(x, tuple):
        tx = tuple(tape.track(xi) for xi in x)
    else:
        tx = tape.track(x)
    tape._func = f
    watcher = Watcher()
    with gc_paused():
        out = watcher.run_static(f, call_with, f, tx)
    if not _ONE_SHOT.get():
        warn_tape_draws(watcher)
    return tape.finish(out)


class GradientTape(Tape):
    """GradientTape(f, x): f recorded at x; f returns a scalar.

    Parameters
    ----------
    f : callable
        The function, of the tracked x (``f(*x)`` for a tuple x when f takes
        that many arguments); it returns a scalar.
    x : float, ndarray, tuple or pytree
        Where to record: the tape's inputs, in x's structure.

    Raises
    ------
    OutputError
        f's result is not a scalar (use ``rt.JacobianTape``).
    """

    def __init__(self, f: Function, x: PyTree) -> None:
        super().__init__()
        record(self, f, x)
        self._scalar_output()

    def value_and_gradient_recorded(self, out: PyTree = None) -> tuple[float, Any]:
        """Value and gradient at the recording input, without replaying."""
        if out is not None:
            check_out(self._out_leaves(out), [self._vals[t._id] for t in self._inputs])
        value = self._vals[self._output._id]
        return value, self._grads_out(self._reverse(1.0), out)


class JacobianTape(Tape):
    """JacobianTape(f, x): f recorded at x; f returns an array.

    Parameters
    ----------
    f : callable
        The function, of the tracked x; it returns an array (or a scalar).
    x : float, ndarray, tuple or pytree
        Where to record: the tape's inputs, in x's structure.
    """

    def __init__(self, f: Function, x: PyTree) -> None:
        super().__init__()
        record(self, f, x)
