"""revtape: reverse-mode AD for Python and numpy; tapes compile to a flat C
instruction buffer replayed by a small C virtual machine.

    import revtape as rt
    tape = rt.GradientTape(f, x0)       # record f once
    ctape = rt.compile(tape)            # lower to the C VM
    value, grad = ctape.value_and_gradient(x)
"""

from typing import TYPE_CHECKING, Any

from .errors import (BranchChanged, BuildMismatchError, ConcurrentUseError, ConversionError,
                     InputError, OutputError, RevtapeError, StaleTape, TapeFinishedError,
                     TapeMixError, UnsupportedError, VerificationError)
from .errors import ConfigError, IndexInputError, PicklingError
from .errors import NativeCompileError, NativeWarning, RevtapeWarning, StaleTapeWarning
from .trace.tape import NULL_TAPE, Tape
from .trace.watch import RandomDrawWarning
from .trace.tracked import TrackedArray, TrackedReal, istracked, tape_of, value
from .numpy_api import functions as _functions  # noqa: F401  (registers the numpy protocols)
from .core.pytree import register_pytree_node
from .numpy_api import linalg, structure as _structure  # noqa: F401
from .numpy_api import composite as _composite, rearrange as _rearrange  # noqa: F401
from .trace.recording import GradientTape, JacobianTape
from .trace.hessian import HessianTape
from .transforms.api import gradient, hessian, hvp, jacobian, value_and_gradient
from . import special, stats, bijectors  # the public namespaces rt.special, rt.stats, rt.bijectors
from .core.primitives import defjvp, defvjp, primitive, stop_gradient

__version__ = "0.1.0"

from .numpy_api.structure import array  # noqa: E402  (rt.array: lists mixing tracked values and floats)
from .numpy_api.structure import c_, r_  # noqa: E402  (np.r_/np.c_ of tracked values)
from .core.apitypes import NativeMode  # noqa: E402

if TYPE_CHECKING:
    # What __getattr__ below loads on first use, as type checkers should see it
    from .runtime.compiled import CompiledTape
    from .transforms.grad import grad, value_and_grad
    from .transforms.cached import jvp, vjp
    from .models.logdensity import LogDensity


def compile(tape: Tape, guards: bool = True, native: NativeMode = "auto") -> "CompiledTape":
    """Lower a finished tape into a flat C program: a CompiledTape.

    Parameters
    ----------
    tape : Tape
        A finished tape (``rt.GradientTape(f, x)``, ``rt.JacobianTape``,
        ``rt.HessianTape``, or an ``rt.Tape()`` after ``tape.finish(y)``).
    guards : bool, default True
        Check at every replay that each comparison recorded on a tracked value
        takes the recorded branch (``rt.BranchChanged`` otherwise).  False
        replays the recorded branch whatever the input.
    native : {"auto", True, False}, default "auto"
        ``"auto"`` replays on the VM and switches to native code, built in the
        background by the system C compiler, once the tape is hot; ``True``
        builds the native code now; ``False`` is the VM only
        (docs/guide/native.md).

    Returns
    -------
    CompiledTape
        The verified program, with the tape's replay methods run in C.

    Raises
    ------
    InputError
        The tape is still recording, has no inputs, or is not a tape.
    NativeCompileError
        ``native=True`` and no native code could be built (no C compiler...).

    Examples
    --------
    >>> import numpy as np, revtape as rt
    >>> ctape = rt.compile(rt.GradientTape(lambda x: np.sum(x ** 2), np.ones(3)))
    >>> ctape.value_and_gradient(np.array([1.0, 2.0, 3.0]))
    (14.0, array([2., 4., 6.]))
    """
    from .runtime.compiled import CompiledTape
    return CompiledTape(tape, guards=guards, native=native)


def __getattr__(name: str) -> Any:
    # The compiled side and the function transforms import the C extension;
    # load them on first use so that `import revtape` stays cheap.
    if name == "CompiledTape":
        from .runtime.compiled import CompiledTape
        return CompiledTape
    if name in ("grad", "value_and_grad"):
        from .transforms import grad as transforms
        # kept as a module attribute: rt.grad(f)(x) written inline looks it up
        # on every call, and __getattr__ costs as much as a small replay
        globals()[name] = value = getattr(transforms, name)
        return value
    if name in ("jvp", "vjp"):
        from .transforms import cached
        return getattr(cached, name)
    if name == "LogDensity":
        from .models.logdensity import LogDensity
        return LogDensity
    raise AttributeError(f"module 'revtape' has no attribute {name!r}")


__all__ = [
    "Tape", "NULL_TAPE", "TrackedReal", "TrackedArray", "value", "istracked", "tape_of",
    "GradientTape", "JacobianTape", "HessianTape", "gradient", "value_and_gradient",
    "jacobian", "hessian", "hvp", "compile", "CompiledTape", "grad", "value_and_grad",
    "RevtapeError", "InputError", "TapeMixError", "TapeFinishedError", "OutputError",
    "ConversionError", "UnsupportedError", "VerificationError", "ConcurrentUseError",
    "BuildMismatchError", "BranchChanged", "StaleTape", "RandomDrawWarning", "special",
    "stats", "bijectors", "primitive", "defvjp", "defjvp", "stop_gradient",
    "PicklingError", "IndexInputError", "jvp", "vjp", "register_pytree_node", "LogDensity",
]
__all__ += ["array", "r_", "c_", "ConfigError", "NativeCompileError", "RevtapeWarning", "NativeWarning", "StaleTapeWarning"]


def __dir__() -> list[str]:
    # the lazily loaded names (grad, CompiledTape, LogDensity, ...) are
    # public API too: list them with the eagerly imported ones
    return sorted(set(globals()) | set(__all__))
