"""Progress bars for long runs: tqdm when it is installed and stderr is a terminal.

tqdm is optional (never a run-time dependency): without it, or when stderr is
redirected to a file or a pipe (CI logs, ``2> log``), the loops run silently so
logs hold no carriage-return bar debris.
"""

from __future__ import annotations

import sys


def _tqdm():
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


def bars_enabled(file=None) -> bool:
    """True when a bar would be drawn: tqdm importable and `file` (stderr) a terminal."""
    f = sys.stderr if file is None else file
    try:
        tty = f.isatty()
    except (AttributeError, ValueError):   # closed or file-like objects without isatty
        tty = False
    return tty and _tqdm() is not None


def progress(iterable, *, total=None, desc=None, file=None, disable=False):
    """`iterable` wrapped in a tqdm bar on stderr, or `iterable` itself when bars are off."""
    f = sys.stderr if file is None else file
    if disable or not bars_enabled(f):
        return iterable
    return _tqdm()(iterable, total=total, desc=desc, file=f, leave=False, dynamic_ncols=True)


def write(msg, file=None):
    """Print a log line on stderr without tearing a live bar (tqdm.write when bars are on)."""
    f = sys.stderr if file is None else file
    if bars_enabled(f):
        _tqdm().write(msg, file=f)
    else:
        print(msg, file=f, flush=True)
