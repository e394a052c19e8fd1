"""revtape: reverse-mode AD for Python and numpy; tapes compile to a flat C
instruction buffer replayed by a small C virtual machine.

    import revtape as rt
    tape = rt.GradientTape(f, x0)       # record f once
    ctape = rt.compile(tape)            # lower to the C VM
    value, grad = ctape.value_and_gradient(x)
"""

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


def compile(tape, guards=True, native="auto"):
    """Lower a finished tape into a flat C program: a CompiledTape.  native=True also
    translates it to C compiled by the system compiler now; "auto" (the default)
    replays on the VM and switches to native code in the background once the tape
    is hot; False is the VM only (docs/guide/native.md)."""
    from .runtime.compiled import CompiledTape
    return CompiledTape(tape, guards=guards, native=native)


def __getattr__(name):
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


def __dir__():
    # the lazily loaded names (grad, CompiledTape, LogDensity, ...) are
    # public API too: list them with the eagerly imported ones
    return sorted(set(globals()) | set(__all__))
