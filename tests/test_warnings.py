"""Every warning revtape issues is an rt.RevtapeWarning that points at the
user's line: each class is triggered here, from this file, and each warning
must name this file (and the line that called into revtape) as its origin,
however deep inside revtape it was issued -- on another thread too (the
native tier's background build)."""

import os
import pathlib
import subprocess
import sys
import warnings

import numpy as np
import pytest

import revtape as rt
from revtape.errors import user_site, warn, warn_at

X3 = np.array([0.5, -1.0, 2.0])


def _caught(call):
    """The revtape warnings that call() issues, each one kept."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [w for w in caught if issubclass(w.category, rt.RevtapeWarning)]


def _here():
    """The line of our caller (what a warning issued from that line names)."""
    return sys._getframe(1).f_lineno


def test_every_warning_class_is_exported_under_one_base():
    for name in ("NativeWarning", "RandomDrawWarning", "StaleTapeWarning"):
        cls = getattr(rt, name)
        assert issubclass(cls, rt.RevtapeWarning) and name in rt.__all__
    assert issubclass(rt.RevtapeWarning, RuntimeWarning) and "RevtapeWarning" in rt.__all__


def test_a_gradient_tape_that_draws_points_at_the_line_that_recorded_it():
    rng = np.random.default_rng(0)
    line = [0]

    def record():
        line[0] = _here() + 1
        rt.GradientTape(lambda x: np.sum(x * rng.normal(size=3)), X3)

    (w,) = _caught(record)
    assert w.category is rt.RandomDrawWarning
    assert (w.filename, w.lineno) == (__file__, line[0])


def test_rt_grad_of_a_function_that_draws_in_place_points_at_the_call():
    rng = np.random.default_rng(0)

    def f(x):                       # drawn in place: recorded on every call
        return np.sum(x * rng.permuted(np.arange(3.0), out=np.empty(3)))

    g, line = rt.grad(f), [0]

    def calls():
        for _ in range(3):
            line[0] = _here() + 1
            g(X3)

    (w,) = _caught(calls)
    assert w.category is rt.RandomDrawWarning
    assert w.filename == __file__ and w.lineno == line[0]


def test_a_cached_transform_that_draws_points_at_the_call():
    rng = np.random.default_rng(5)
    H, line = rt.hessian(lambda x: np.sum(x ** 2 * rng.standard_normal(2))), [0]

    def call():
        line[0] = _here() + 1
        H(np.ones(2))

    (w,) = _caught(call)
    assert w.category is rt.RandomDrawWarning
    assert (w.filename, w.lineno) == (__file__, line[0])


def test_rt_grad_of_unwatchable_state_points_at_the_call():
    class Bag:
        def __init__(self):
            self._d = {"s": 2.0}

        def __getattr__(self, name):
            try:
                return self.__dict__["_d"][name]
            except KeyError:
                raise AttributeError(name) from None

    bag = Bag()
    g, line = rt.grad(lambda w: np.sum(w) * bag.s), [0]

    def call():
        line[0] = _here() + 1
        g(X3)

    (w,) = _caught(call)
    assert w.category is rt.StaleTapeWarning and "__getattr__" in str(w.message)
    assert (w.filename, w.lineno) == (__file__, line[0])


def _folded(x):
    # one comparison guard per element: each sign pattern is a recorded variant
    return sum(x[i] if x[i] > 0 else -2.0 * x[i] for i in range(5))


SIGNS = [np.array([1.0 if (k >> i) & 1 else -1.0 for i in range(5)]) for k in range(20)]


def test_rt_grad_past_its_variant_cap_points_at_the_call():
    g, line = rt.grad(_folded), [0]

    def calls():
        for x in SIGNS:
            line[0] = _here() + 1
            g(x)

    stale = _caught(calls)
    assert stale and all(w.category is rt.StaleTapeWarning for w in stale)
    assert "variants" in str(stale[0].message)
    assert all((w.filename, w.lineno) == (__file__, line[0]) for w in stale)


def test_a_cached_transform_past_its_variant_cap_points_at_the_call():
    H, line = rt.hessian(_folded), [0]

    def calls():
        for x in SIGNS:
            line[0] = _here() + 1
            H(x)

    stale = _caught(calls)
    assert stale and all(w.category is rt.StaleTapeWarning for w in stale)
    assert "variants" in str(stale[0].message)
    assert all((w.filename, w.lineno) == (__file__, line[0]) for w in stale)


# ----------------------------------------------------------------- native="auto"

@pytest.fixture
def auto_without_a_compiler(monkeypatch):
    """native="auto" on (conftest turns it off for the suite), hot after 5
    calls, a compiler that does not exist, the once-per-process state reset."""
    from revtape.runtime import native
    monkeypatch.setenv("REVTAPE_NATIVE", "1")
    monkeypatch.setenv("REVTAPE_NATIVE_CALLS", "5")
    monkeypatch.delenv("REVTAPE_NATIVE_SECONDS", raising=False)
    monkeypatch.setenv("REVTAPE_CC", "no-such-cc-revtape")
    monkeypatch.setattr(native, "_warned", set())
    monkeypatch.setattr(native, "_failed", {})


def test_native_auto_without_a_compiler_says_what_to_do_at_the_users_line(
        auto_without_a_compiler):
    # a constant no other test compiles: this build is real (and fails)
    c = 0.25 + 1 / 7919.0
    ctape = rt.compile(rt.GradientTape(lambda x: np.sum(np.sin(x) * x) * c, X3))
    line = [0]

    def hot():
        for _ in range(8):
            line[0] = _here() + 1
            ctape.value_and_gradient(X3)
        assert not ctape.wait_native(600)

    (w,) = _caught(hot)
    assert ctape.native_state == "failed"
    msg = str(w.message)
    assert w.category is rt.NativeWarning
    assert w.filename == __file__                  # the line whose call made it hot
    assert "native.py" not in w.filename and "threading" not in w.filename
    assert w.lineno == line[0]
    assert "native=True" not in msg and "no-such-cc-revtape" in msg
    assert "install a c compiler" in msg.lower() and "REVTAPE_NATIVE=0" in msg


def test_native_auto_with_a_failing_compiler_points_at_the_users_line(
        auto_without_a_compiler, monkeypatch, tmp_path):
    monkeypatch.setenv("REVTAPE_CC", "false")             # runs, and fails
    monkeypatch.setenv("REVTAPE_CACHE_DIR", str(tmp_path))  # nothing cached here
    c = 0.75 + 1 / 7919.0
    ctape = rt.compile(rt.GradientTape(lambda x: np.sum(np.cos(x) * x) * c, X3))
    line = [0]

    def hot():
        for _ in range(8):
            line[0] = _here() + 1
            ctape.value_and_gradient(X3)
        assert not ctape.wait_native(600)

    (w,) = _caught(hot)
    msg = str(w.message)
    assert w.category is rt.NativeWarning and (w.filename, w.lineno) == (__file__, line[0])
    assert "failed" in msg and "native=False" not in msg and "REVTAPE_NATIVE=0" in msg


# ----------------------------------------------------------------- the helpers (errors.py)

# stands for revtape code: two functions whose frames lie in the package's files
_inside: dict = {"warn": warn, "rt": rt}
exec(compile("def inner(message):\n    warn(message, rt.RevtapeWarning)\n\n"
             "def outer(message):\n    inner(message)\n", rt.errors.__file__, "exec"), _inside)


def test_warn_skips_every_revtape_frame():
    line = [0]

    def call():
        line[0] = _here() + 1
        _inside["outer"]("deep")

    (w,) = _caught(call)
    assert (w.filename, w.lineno) == (__file__, line[0])


def test_warn_at_names_the_captured_site_from_another_thread():
    import threading
    site = user_site()
    here = _here() - 1
    assert site is not None and (site.filename, site.lineno) == (__file__, here)

    def issue():
        warn_at("later", rt.NativeWarning, site)

    def call():
        t = threading.Thread(target=issue)
        t.start()
        t.join()

    (w,) = _caught(call)
    assert (w.filename, w.lineno) == (__file__, here)



def test_warn_at_works_for_code_without_a_source_file():
    # `python -c` (and interactive code): __main__'s loader has no source to give
    code = ("import threading, warnings, revtape as rt\n"
            "from revtape.errors import user_site, warn_at\n"
            "site = user_site()\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            "    warnings.simplefilter('always')\n"
            "    t = threading.Thread(target=warn_at, args=('later', rt.NativeWarning, site))\n"
            "    t.start(); t.join()\n"
            "print([(w.filename, w.lineno) for w in caught])\n")
    src = str(pathlib.Path(rt.__file__).resolve().parents[1])
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": src})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[('<string>', 3)]", r.stdout + r.stderr
