"""The bridges' optional libraries: imported on use, with what to install."""

import importlib

from ..errors import RevtapeError


class MissingPackageError(RevtapeError, ImportError):
    """A bridge's library is not installed: the message says what to install."""


def require(module, extra):
    """Import module, or raise MissingPackageError naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingPackageError(
            f"this bridge needs {module.split('.')[0]}, which is not installed "
            f"({e}): pip install \"revtape[{extra}]\"") from None
