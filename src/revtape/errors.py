"""The errors revtape raises.  Every one is a RevtapeError and says what to do."""

import pickle as _pickle


class RevtapeError(Exception):
    """Base class of every error revtape raises on purpose."""


class InputError(RevtapeError, ValueError):
    """A replay input (or out= buffer) has the wrong structure, shape or dtype."""


class ConfigError(RevtapeError, ValueError):
    """An environment variable revtape reads holds a value it does not accept
    (revtape.config declares each one and what it accepts)."""


class TapeMixError(RevtapeError):
    """One operation received tracked values of two different recording tapes."""


class TapeFinishedError(RevtapeError):
    """A tracked value of a finished tape was used in a new operation."""


class OutputError(RevtapeError, ValueError):
    """The tape's output does not suit the request (e.g. non-scalar for a gradient)."""


class ConversionError(RevtapeError, TypeError):
    """A tracked value was turned into a plain number, which would drop its gradient."""


class UnsupportedError(RevtapeError, NotImplementedError):
    """An operation revtape cannot record."""


class VerificationError(RevtapeError):
    """The C verifier refused a program; it was never executed."""


class ConcurrentUseError(RevtapeError):
    """Two threads replayed the same CompiledTape at once."""


class BuildMismatchError(RevtapeError):
    """A pickled or compiled program comes from an incompatible build of revtape."""


class BranchChanged(RevtapeError):
    """A replay took another branch than the recording did (a branch guard failed)."""

    def __init__(self, message, guard=None, where=None, operands=None):
        super().__init__(message)
        self.guard = guard
        self.where = where
        self.operands = operands


class StaleTape(RevtapeError):
    """A cached tape no longer matches the function (raised with on_stale='raise')."""


class IndexInputError(RevtapeError, IndexError):
    """A gather index read from a tape input (minibatch indices refilled on each
    replay) is not a whole number inside the indexed array."""


class PicklingError(RevtapeError, _pickle.PicklingError):
    """An object that cannot travel in a pickle (the message says what to pickle instead)."""


class NativeCompileError(RevtapeError):
    """The native tier could not build or load its shared library (no C compiler, it
    failed, or the cache held a library that does not verify)."""


class RevtapeWarning(RuntimeWarning):
    """Base class of every warning revtape issues; it points at the user's line."""


class NativeWarning(RevtapeWarning):
    """native="auto" could not build native code; the VM keeps serving."""


class RandomDrawWarning(RevtapeWarning):
    """f drew random numbers while it was recorded."""


class StaleTapeWarning(RevtapeWarning):
    """rt.grad cannot keep a cached program in step with f: f re-records so often
    that caching stopped, or f reads state revtape cannot watch (an object with
    its own __getattr__, a C extension's state)."""
