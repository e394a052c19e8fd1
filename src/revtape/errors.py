"""The errors revtape raises and the warnings it issues.  Every error is a
RevtapeError and says what to do; every warning is a RevtapeWarning issued
through warn() (or warn_at()), which points it at the user's line."""

import os as _os
import pickle as _pickle
import sys as _sys
import warnings as _warnings
from types import FrameType as _FrameType
from typing import Any as _Any, NamedTuple as _NamedTuple


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


# ----------------------------------------------------------------- issuing

# A frame whose code lives under this directory is revtape's, not the user's.
_PKG_DIR = _os.path.dirname(_os.path.abspath(__file__)) + _os.sep


def _is_ours(frame: _FrameType) -> bool:
    return _os.path.abspath(frame.f_code.co_filename).startswith(_PKG_DIR)


def warn(message: str, category: type[RevtapeWarning]) -> None:
    """Issue a revtape warning at the user's line: the first frame outside the
    revtape package, however deep inside revtape the call stands (a fixed
    stacklevel breaks whenever a call path gains or loses a frame)."""
    level, frame = 2, _sys._getframe(1)
    while frame is not None and _is_ours(frame):
        frame, level = frame.f_back, level + 1
    _warnings.warn(message, category, stacklevel=level if frame is not None else 2)


class UserSite(_NamedTuple):
    """Where the user's code stood when revtape started work that reports later
    from another thread (a background native build): what warn_at needs."""
    filename: str
    lineno: int
    module: str
    globals: dict[str, _Any]


def user_site() -> UserSite | None:
    """The user's line that called into revtape, on this thread (None when the
    whole stack is revtape's, as in a thread revtape started)."""
    frame: _FrameType | None = _sys._getframe(1)
    while frame is not None and _is_ours(frame):
        frame = frame.f_back
    if frame is None:
        return None
    g = frame.f_globals
    return UserSite(frame.f_code.co_filename, frame.f_lineno, g.get("__name__", "__main__"), g)


def warn_at(message: str, category: type[RevtapeWarning], site: UserSite | None) -> None:
    """Issue a revtape warning at a user's line captured earlier (user_site()),
    from whatever thread: a background thread has no user frame of its own."""
    if site is None:
        warn(message, category)
        return
    registry = site.globals.setdefault("__warningregistry__", {})
    # no module_globals: warnings would ask the module's loader for its source,
    # which fails for `python -c` and interactive code (whose __main__ has none)
    _warnings.warn_explicit(message, category, site.filename, site.lineno, module=site.module,
                            registry=registry)
