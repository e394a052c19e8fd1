"""The environment variables revtape reads: each declared once here, read through get().

    from revtape import config
    config.get("REVTAPE_THREADS")      # None (unset) or a whole number >= 1

A declaration names the variable, its default, what it accepts, whether a
user needs it or it is a switch for revtape's own debugging, and what it
means; markdown() renders the table for the documentation.

get() parses the variable each time it is called, so that a setting read
where it is used follows the environment as it is now (a module that reads
one once at import says so in the setting's text).  An unset or blank
variable is its default.  Anything else the declaration does not accept
is refused, never clamped nor ignored: get() raises ConfigError naming the
variable, the value and what it accepts, where the setting is used (the
compile that would have used it fails, not a background thread later).  So
a mistyped setting is never taken for the default, and a number out of
range (inf, nan, negative, past what a C int holds) never reaches C.

Besides revtape's own REVTAPE_* variables, the table holds the conventions
revtape follows as other tools do (CC and CFLAGS as setuptools and cffi read
them, XDG_CACHE_HOME).  This module imports nothing of revtape's but its
errors, so that every stage can read its settings.
"""

import contextlib
import dataclasses
import math
import os
import pathlib
import re
import shlex

from .errors import ConfigError

# The largest number a C int holds: counts and lengths beyond it would wrap.
C_INT_MAX = 2 ** 31 - 1


class Bool:
    """On or off, spelt one of a few ways in any case."""

    TRUE = ("1", "true", "yes", "on")
    FALSE = ("0", "false", "no", "off")
    accepted = "on: 1, true, yes, on; off: 0, false, no, off (any case)"

    def parse(self, raw):
        word = raw.strip().lower()
        if word in self.TRUE:
            return True
        if word in self.FALSE:
            return False
        raise ValueError(raw)

    def show(self, value):
        return "1" if value else "0"


class Int:
    """A whole number in decimal digits, lo <= n <= hi."""

    def __init__(self, lo, hi=C_INT_MAX):
        self.lo, self.hi = lo, hi
        self.accepted = f"a whole number from {lo} to {hi}"

    def parse(self, raw):
        text = raw.strip()
        # int() would also take "1_000" and non-ASCII digits: only plain digits here
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise ValueError(raw)
        n = int(text)
        if not self.lo <= n <= self.hi:
            raise ValueError(raw)
        return n

    def show(self, value):
        return str(value)


class Float:
    """A number, lo <= x <= hi (lo < x with above=True); nan never, inf
    only where hi is inf."""

    def __init__(self, lo, hi, above=False):
        self.lo, self.hi, self.above = lo, hi, above
        low = f"above {_num(lo)}" if above else f"from {_num(lo)}"
        if math.isinf(hi):
            self.accepted = f"a number {low} (inf: no limit)"
        else:
            self.accepted = f"a finite number {low} {'up ' if above else ''}to {_num(hi)}"

    def parse(self, raw):
        x = float(raw.strip())               # ValueError for what is no number
        if math.isnan(x) or (math.isinf(x) and not math.isinf(self.hi)):
            raise ValueError(raw)
        if (x <= self.lo if self.above else x < self.lo) or x > self.hi:
            raise ValueError(raw)
        return x

    def show(self, value):
        return _num(value)


def _num(x):
    return str(int(x)) if math.isfinite(x) and float(x).is_integer() else f"{x:g}"


class Choice:
    """One word of a fixed set, in any case."""

    def __init__(self, *words):
        self.words = words
        self.accepted = "one of " + ", ".join(words)

    def parse(self, raw):
        word = raw.strip().lower()
        if word not in self.words:
            raise ValueError(raw)
        return word

    def show(self, value):
        return value


class Path:
    """A file system path; a leading ~ is the home directory."""

    accepted = "a path (~ is expanded)"

    def parse(self, raw):
        return pathlib.Path(os.path.expanduser(raw))

    def show(self, value):
        return str(value)


class Words:
    """A command line or a list of flags, split as a POSIX shell splits it
    (quotes group words)."""

    def __init__(self, what):
        self.accepted = f"{what}, split like a shell does"

    def parse(self, raw):
        return tuple(shlex.split(raw))       # ValueError on an unclosed quote

    def show(self, value):
        return shlex.join(value)


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    kind: object          # one of the parsers above
    default: object       # what get() returns when the variable is unset or blank
    doc: str              # one line: what it does
    user: bool = True     # False: a switch for revtape's own debugging and tuning
    shown: str = None     # the default as the table shows it, where it is no value


_DECLARED = [
    # ------------------------------------------------ the native tier
    Setting("REVTAPE_NATIVE", Bool(), True,
            'native="auto" (the default of rt.compile, rt.grad and every compiled path) may '
            "move a hot tape to native C; off keeps every such tape on the VM."),
    Setting("REVTAPE_NATIVE_CALLS", Int(0), 1000,
            'Calls after which a native="auto" tape is hot (0 counts as 1); read by every '
            'native="auto" compile while REVTAPE_NATIVE is on.'),
    Setting("REVTAPE_NATIVE_SECONDS", Float(0, C_INT_MAX), 0.1,
            'Seconds of replay after which a native="auto" tape is hot; read by every '
            'native="auto" compile while REVTAPE_NATIVE is on.'),
    Setting("REVTAPE_NATIVE_TIMEOUT", Float(0, C_INT_MAX, above=True), 600.0,
            "Seconds the C compiler may take to build one native library; read by every "
            'native=True compile and every native="auto" one while REVTAPE_NATIVE is on.'),
    Setting("REVTAPE_CACHE_DIR", Path(), None,
            "Where native libraries are cached.",
            shown="$XDG_CACHE_HOME/revtape (~/Library/Caches/revtape on macOS)"),
    Setting("REVTAPE_CACHE_MAX_MB", Float(0, C_INT_MAX, above=True), 256.0,
            "Most megabytes of native libraries the cache directory keeps; after a build the "
            "least recently used ones beyond it are deleted."),
    Setting("REVTAPE_CC", Words("a compiler command"), None,
            "revtape's own choice of the C compiler for the native tier, over CC.",
            shown="CC"),
    Setting("CC", Words("a compiler command"), None,
            "The C compiler for the native tier (as setuptools and cffi read it).",
            shown="sysconfig's CC, else cc, else gcc"),
    Setting("CFLAGS", Words("compiler flags"), (),
            "Flags added after revtape's own when the native tier compiles (flags that "
            "change floating-point results, e.g. -ffast-math, break the VM's bits).",
            shown="(none)"),
    Setting("XDG_CACHE_HOME", Path(), None,
            "The user's cache directory (the XDG convention); revtape's cache is its revtape/.",
            shown="~/.cache"),
    # ------------------------------------------------ the VM
    Setting("REVTAPE_THREADS", Int(1), None,
            "Most threads one replay's large array instructions use (1: never split; more "
            "than 64 count as 64); read once per process, at the first rt.compile.",
            shown="the CPUs this process may use"),
    Setting("REVTAPE_BLAS", Choice("auto", "off", "all"), "auto",
            "Large matrix products and factorisations (matmul, cholesky, solve, inv, slogdet, "
            "eigh, solve_triangular) call the BLAS and LAPACK scipy ships, where scipy is "
            "installed (auto); off keeps them on revtape's own kernels; all sends every size "
            "there (to test that path). Read at each compile: a compiled program keeps its path."),
    # ------------------------------------------------ rt.grad
    Setting("REVTAPE_PROGRAM_CACHE", Int(0), 256,
            "Functions whose recorded programs rt.grad keeps process-wide (least recently "
            "used dropped first), so that rt.grad(f)(x) written inline reuses f's program; "
            "0 gives every rt.grad object its own cache. Read when an rt.grad object is made."),
    # ------------------------------------------------ numpy and scipy
    Setting("REVTAPE_SCIPY_DISPATCH", Bool(), True,
            "Route scipy's Python functions (special.logsumexp, linalg.cholesky, ...) to "
            "revtape's on tracked arguments; off leaves scipy untouched. Read at import."),
    # ------------------------------------------------ the compiler's block forming
    Setting("REVTAPE_BLOCKS", Bool(), True,
            "Fuse runs of elementwise instructions into tiled blocks (off: the unfused "
            "program, with the same results); read at each compile.", user=False),
    Setting("REVTAPE_BLOCK_TILE", Int(1, 2 ** 30), 256,
            "Elements per tile of a fused block; read once, when revtape.lower.blocks is "
            "imported.", user=False),
    # ------------------------------------------------ the benchmark
    Setting("REVTAPE_PEER_SETUP_BUDGET", Float(0, math.inf), 60.0,
            "Seconds of one-time setup (e.g. XLA compiling) past which `python -m revtape "
            "bench` skips a peer's column."),
    Setting("REVTAPE_BENCH_CALL_BUDGET", Float(0, C_INT_MAX, above=True), 1.0,
            "Seconds one call may take before the pytest benchmarks (benchmarks/) skip "
            "its column.", user=False),
    Setting("REVTAPE_BENCH_HMC_ITERS", Int(1), 100,
            "HMC iterations per round of benchmarks/test_hmc.py.", user=False),
]

SETTINGS = {s.name: s for s in _DECLARED}


def get(name):
    """The value of the declared variable `name` now: its default when it is
    unset or blank; ConfigError when the declaration does not accept it."""
    setting = SETTINGS[name]              # KeyError: a variable nobody declared
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return setting.default
    try:
        return setting.kind.parse(raw)
    except ValueError:
        raise ConfigError(
            f"{name}={raw!r} is not accepted: {name} takes {setting.kind.accepted}; "
            f"set it to such a value, or unset it for the default "
            f"({_default_text(setting)})") from None


@contextlib.contextmanager
def override(name, value):
    """Set the declared variable `name` to `value` (str, or None to unset it)
    inside the with block, as it was after."""
    SETTINGS[name]
    old = os.environ.get(name)
    try:
        _put(name, value)
        yield
    finally:
        _put(name, old)


def _put(name, value):
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = str(value)


def _default_text(setting):
    if setting.shown is not None:
        return setting.shown
    return setting.kind.show(setting.default)


def markdown():
    """The table of every declared variable, as Markdown."""
    def cell(text):
        return str(text).replace("|", "\\|")

    lines = ["An unset or blank variable means its default; a value outside its accepted "
             "values raises `rt.ConfigError` where revtape reads it.", "",
             "| Variable | Default | Accepted values | Meaning | For |",
             "| --- | --- | --- | --- | --- |"]
    for s in _DECLARED:
        lines.append("| " + " | ".join(cell(c) for c in (
            f"`{s.name}`", _default_text(s), s.kind.accepted, s.doc,
            "users" if s.user else "debugging")) + " |")
    return "\n".join(lines) + "\n"
