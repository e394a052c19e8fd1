"""revtape.config: every environment variable revtape reads is declared
there once and read through config.get, which refuses a value it does not
accept with rt.ConfigError (naming the variable, the value and what is
accepted) instead of passing it on to Python's float()/int() or to C."""

import ast
import os
import pathlib
import re
import shutil
import stat
import subprocess
import sys
import sysconfig

import numpy as np
import pytest

import revtape as rt
from revtape import config
from revtape.runtime import compiled, native, vm

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "revtape"


@pytest.fixture
def env(monkeypatch):
    """monkeypatch, with every declared variable unset."""
    for name in config.SETTINGS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


# ---------------------------------------------------------------- the parsers

GOOD = [
    # booleans: one set of spellings, any case, around blanks
    ("REVTAPE_BLOCKS", "1", True), ("REVTAPE_BLOCKS", "true", True),
    ("REVTAPE_BLOCKS", "YES", True), ("REVTAPE_BLOCKS", " On ", True),
    ("REVTAPE_BLOCKS", "0", False), ("REVTAPE_BLOCKS", "False", False),
    ("REVTAPE_BLOCKS", "no", False), ("REVTAPE_BLOCKS", "OFF", False),
    # whole numbers in a range
    ("REVTAPE_BLOCK_TILE", "256", 256), ("REVTAPE_BLOCK_TILE", " 64\n", 64),
    ("REVTAPE_BLOCK_TILE", "+8", 8), ("REVTAPE_BLOCK_TILE", str(2 ** 30), 2 ** 30),
    ("REVTAPE_NATIVE_CALLS", "0", 0), ("REVTAPE_NATIVE_CALLS", str(2 ** 31 - 1), 2 ** 31 - 1),
    ("REVTAPE_THREADS", "1", 1), ("REVTAPE_THREADS", "1000", 1000),
    # finite numbers in a range
    ("REVTAPE_NATIVE_SECONDS", "0", 0.0), ("REVTAPE_NATIVE_SECONDS", "1e-9", 1e-9),
    ("REVTAPE_NATIVE_SECONDS", "2147483647", 2147483647.0),
    ("REVTAPE_NATIVE_TIMEOUT", "0.001", 0.001), ("REVTAPE_NATIVE_TIMEOUT", "600", 600.0),
    # a number where inf means no limit
    ("REVTAPE_PEER_SETUP_BUDGET", "inf", float("inf")),
    ("REVTAPE_PEER_SETUP_BUDGET", "240", 240.0),
    # paths
    ("REVTAPE_CACHE_DIR", "/tmp/rt cache", pathlib.Path("/tmp/rt cache")),
    ("REVTAPE_CACHE_DIR", "~/rt", pathlib.Path.home() / "rt"),
    # commands and flags, split like a shell
    ("CC", "gcc", ("gcc",)), ("CC", "ccache  gcc -pthread", ("ccache", "gcc", "-pthread")),
    ("CFLAGS", '-O3 "-DNAME=a b"', ("-O3", "-DNAME=a b")),
    ("REVTAPE_CC", "/opt/cc/bin/cc", ("/opt/cc/bin/cc",)),
]

BAD = [
    ("REVTAPE_BLOCKS", "2"), ("REVTAPE_BLOCKS", "maybe"), ("REVTAPE_BLOCKS", "enabled"),
    ("REVTAPE_NATIVE", "-1"), ("REVTAPE_SCIPY_DISPATCH", "nein"),
    ("REVTAPE_BLOCK_TILE", "abc"), ("REVTAPE_BLOCK_TILE", "1.5"), ("REVTAPE_BLOCK_TILE", "1e3"),
    ("REVTAPE_BLOCK_TILE", "1_000"), ("REVTAPE_BLOCK_TILE", "0"), ("REVTAPE_BLOCK_TILE", "-3"),
    ("REVTAPE_BLOCK_TILE", str(2 ** 30 + 1)), ("REVTAPE_BLOCK_TILE", "\u0663"),  # an Arabic 3
    ("REVTAPE_THREADS", "lots"), ("REVTAPE_THREADS", "0"), ("REVTAPE_THREADS", "4 cores"),
    ("REVTAPE_NATIVE_CALLS", "99999999999999999999"), ("REVTAPE_NATIVE_CALLS", str(2 ** 31)),
    ("REVTAPE_NATIVE_CALLS", "-5"), ("REVTAPE_NATIVE_CALLS", "1000.0"),
    ("REVTAPE_NATIVE_SECONDS", "inf"), ("REVTAPE_NATIVE_SECONDS", "-inf"),
    ("REVTAPE_NATIVE_SECONDS", "nan"), ("REVTAPE_NATIVE_SECONDS", "1e400"),
    ("REVTAPE_NATIVE_SECONDS", "-0.1"), ("REVTAPE_NATIVE_SECONDS", "2147483648"),
    ("REVTAPE_NATIVE_SECONDS", "fast"),
    ("REVTAPE_NATIVE_TIMEOUT", "0"), ("REVTAPE_NATIVE_TIMEOUT", "inf"),
    ("REVTAPE_NATIVE_TIMEOUT", "nan"), ("REVTAPE_NATIVE_TIMEOUT", "10m"),
    ("REVTAPE_PEER_SETUP_BUDGET", "nan"), ("REVTAPE_PEER_SETUP_BUDGET", "-1"),
    ("REVTAPE_BENCH_HMC_ITERS", "0"), ("REVTAPE_BENCH_CALL_BUDGET", "0"),
    ("CC", 'gcc "-DX'), ("CFLAGS", "-O2 '-DY"),
]


@pytest.mark.parametrize("name,raw,want", GOOD, ids=[f"{n}={r!r}" for n, r, _ in GOOD])
def test_a_good_value_parses(env, name, raw, want):
    env.setenv(name, raw)
    assert config.get(name) == want


@pytest.mark.parametrize("name,raw", BAD, ids=[f"{n}={r!r}" for n, r in BAD])
def test_a_bad_value_is_a_config_error_naming_the_variable(env, name, raw):
    env.setenv(name, raw)
    with pytest.raises(rt.ConfigError) as e:
        config.get(name)
    msg = str(e.value)
    assert name in msg and repr(raw) in msg
    assert config.SETTINGS[name].kind.accepted in msg          # says what it takes


def test_unset_or_blank_is_the_default(env):
    for name, s in config.SETTINGS.items():
        assert config.get(name) == s.default, name
        env.setenv(name, "  ")
        assert config.get(name) == s.default, name


def test_a_choice_takes_its_words_in_any_case(env):
    s = config.Setting("REVTAPE_TEST_CHOICE", config.Choice("vm", "native"), "vm", "a test")
    env.setitem(config.SETTINGS, s.name, s)
    env.setenv(s.name, "Native")
    assert config.get(s.name) == "native"
    env.setenv(s.name, "jit")
    with pytest.raises(rt.ConfigError, match="REVTAPE_TEST_CHOICE='jit'.*one of vm, native"):
        config.get(s.name)


def test_config_error_is_a_revtape_error_and_a_value_error():
    assert issubclass(rt.ConfigError, rt.RevtapeError) and issubclass(rt.ConfigError, ValueError)
    assert "ConfigError" in rt.__all__


def test_an_undeclared_variable_cannot_be_read():
    with pytest.raises(KeyError):
        config.get("REVTAPE_NO_SUCH_SETTING")


def test_override_sets_and_restores(env):
    with config.override("REVTAPE_BLOCK_TILE", 64):
        assert config.get("REVTAPE_BLOCK_TILE") == 64
    assert "REVTAPE_BLOCK_TILE" not in os.environ
    env.setenv("REVTAPE_BLOCK_TILE", "128")
    with config.override("REVTAPE_BLOCK_TILE", None):
        assert config.get("REVTAPE_BLOCK_TILE") == 256
    assert os.environ["REVTAPE_BLOCK_TILE"] == "128"


# ---------------------------------------------------------------- the table

def test_markdown_lists_every_declared_variable():
    md = config.markdown()
    rows = [line for line in md.splitlines() if line.startswith("| `")]
    assert [re.match(r"\| `([A-Z_]+)`", r).group(1) for r in rows] == list(config.SETTINGS)
    for row, s in zip(rows, config.SETTINGS.values()):
        cells = re.split(r"(?<!\\)\|", row)[1:-1]
        assert len(cells) == 5, row
        assert cells[2].strip() == s.kind.accepted.replace("|", "\\|")
        assert cells[4].strip() == ("users" if s.user else "debugging")
    assert "rt.ConfigError" in md


def test_every_setting_has_a_one_line_doc():
    for s in config.SETTINGS.values():
        assert s.doc and "\n" not in s.doc and s.doc.endswith("."), s.name


# ---------------------------------------------------------------- one place reads

_ENV_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def environment_uses(tree):
    """Line numbers where the module touches the process environment."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in _ENV_NAMES:
            found.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and any(
                a.name in _ENV_NAMES for a in node.names):
            found.append(node.lineno)
    return found


def _is_environ(node):
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def declared_reads(tree):
    """Line numbers where a script reads a declared variable from os.environ
    itself (os.environ.get / [] / in / os.getenv with the name spelt out)."""
    names = set(config.SETTINGS)
    const = lambda n: isinstance(n, ast.Constant) and n.value in names   # noqa: E731
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            f = node.func
            if ((f.attr in ("get", "setdefault", "pop") and _is_environ(f.value))
                    or f.attr == "getenv") and const(node.args[0]):
                found.append(node.lineno)
        elif (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
              and _is_environ(node.value) and const(node.slice)):
            found.append(node.lineno)
        elif (isinstance(node, ast.Compare) and const(node.left)
              and any(_is_environ(c) for c in node.comparators)):
            found.append(node.lineno)
    return found


def test_only_config_reads_the_environment_in_the_package():
    found = [f"{p.relative_to(SRC)}:{n}" for p in sorted(SRC.rglob("*.py"))
             if p != SRC / "config.py" for n in environment_uses(ast.parse(p.read_text()))]
    assert found == []


def test_scripts_read_declared_variables_through_config():
    """benchmarks/ and tools/ may set variables for what they start, but read
    revtape's settings through config.get like the package does."""
    found = [f"{p.relative_to(ROOT)}:{n}" for d in ("benchmarks", "tools")
             for p in sorted((ROOT / d).rglob("*.py"))
             for n in declared_reads(ast.parse(p.read_text()))]
    assert found == []


def test_the_scanners_see_a_read():
    tree = ast.parse("import os\nfrom os import getenv\na = os.environ.get('REVTAPE_THREADS')\n"
                     "b = os.environ['CC']\nc = 'CFLAGS' in os.environ\nd = os.getenv('CC')\n"
                     "os.environ['REVTAPE_NATIVE'] = '0'\n")
    assert sorted(environment_uses(tree)) == [2, 3, 4, 5, 6, 7]
    assert sorted(declared_reads(tree)) == [3, 4, 5, 6]      # setting one is no read


def test_every_config_get_names_a_declared_variable():
    bad = []
    for p in [*SRC.rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py"),
              *(ROOT / "tools").rglob("*.py")]:
        for node in ast.walk(ast.parse(p.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "config"
                    and node.func.attr in ("get", "override") and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value not in config.SETTINGS):
                bad.append(f"{p.relative_to(ROOT)}:{node.lineno} {node.args[0].value}")
    assert bad == []


def test_every_revtape_variable_the_package_mentions_is_declared():
    """A REVTAPE_* name in the package's text is a declared variable (or a C
    include guard, or the benchmark's column list), so that no docstring
    advertises a setting nobody reads."""
    words = set()
    for p in SRC.rglob("*.py"):
        words |= set(re.findall(r"\bREVTAPE_[A-Z0-9_]+\b", p.read_text()))
    stray = {w for w in words - set(config.SETTINGS)
             if not w.endswith("_H") and w != "REVTAPE_COLUMNS"}
    assert stray == set()


# ---------------------------------------------------------------- the native tier's numbers

NATIVE_BAD = [("REVTAPE_NATIVE_SECONDS", "inf"), ("REVTAPE_NATIVE_SECONDS", "1e400"),
              ("REVTAPE_NATIVE_SECONDS", "nan"), ("REVTAPE_NATIVE_SECONDS", "-1"),
              ("REVTAPE_NATIVE_CALLS", "99999999999999999999"),
              ("REVTAPE_NATIVE_CALLS", str(2 ** 31)), ("REVTAPE_NATIVE_CALLS", "-5"),
              ("REVTAPE_NATIVE_TIMEOUT", "inf"), ("REVTAPE_NATIVE_TIMEOUT", "nan"),
              ("REVTAPE_NATIVE_TIMEOUT", "0")]


def _f(x):
    return np.sum(np.sin(x) * x) + 0.25 * x[0] * x[1]


@pytest.mark.parametrize("name,raw", NATIVE_BAD, ids=[f"{n}={r}" for n, r in NATIVE_BAD])
def test_a_bad_native_number_is_a_config_error_from_compile_and_grad(monkeypatch, name, raw):
    monkeypatch.setenv("REVTAPE_NATIVE", "1")
    monkeypatch.setenv(name, raw)
    x = np.array([0.3, -0.7, 1.1])
    tape = rt.GradientTape(_f, x)
    with pytest.raises(rt.ConfigError, match=re.escape(f"{name}={raw!r}")):
        rt.compile(tape)
    g = rt.grad(_f)
    g(x)                   # the first call answers from the recording: nothing compiled
    with pytest.raises(rt.ConfigError, match=name):
        g(x)               # the first replay compiles
    with pytest.raises(rt.ConfigError, match=name):
        rt.LogDensity(_f, x).logdensity_and_gradient(x)
    # nothing was left behind: with the setting fixed, the same calls work
    monkeypatch.delenv(name)
    want = rt.compile(tape, native=False).gradient(x)
    assert np.array_equal(rt.compile(tape).gradient(x), want)
    assert np.array_equal(g(x), want)


def test_a_bad_timeout_is_a_config_error_with_native_true(monkeypatch):
    monkeypatch.setenv("REVTAPE_NATIVE_TIMEOUT", "inf")
    with pytest.raises(rt.ConfigError, match="REVTAPE_NATIVE_TIMEOUT"):
        rt.compile(rt.GradientTape(_f, np.array([0.3, -0.7])), native=True)


def test_native_numbers_are_read_only_while_the_native_tier_is_on(monkeypatch):
    monkeypatch.setenv("REVTAPE_NATIVE", "0")
    monkeypatch.setenv("REVTAPE_NATIVE_SECONDS", "inf")
    x = np.array([0.3, -0.7])
    assert rt.compile(rt.GradientTape(_f, x)).native_state == "off"
    monkeypatch.setenv("REVTAPE_NATIVE", "sometimes")
    with pytest.raises(rt.ConfigError, match="REVTAPE_NATIVE='sometimes'"):
        rt.compile(rt.GradientTape(_f, x))


# ---------------------------------------------------------------- read once per process

def _fresh_process(env_extra, code):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)


_COMPILE = ("import numpy as np, revtape as rt\n"
            "rt.compile(rt.GradientTape(lambda x: np.sum(x * x), np.ones(3)))\n"
            "from revtape.runtime import compiled\n"
            "print(compiled.array_threads()[0])\n")


def test_threads_junk_is_a_config_error(monkeypatch):
    r = _fresh_process({"REVTAPE_THREADS": "lots"}, _COMPILE)
    assert r.returncode != 0
    assert "ConfigError: REVTAPE_THREADS='lots' is not accepted" in r.stderr, r.stderr
    # in this process (the variable is read once, at import): the same check
    monkeypatch.setenv("REVTAPE_THREADS", "-2")
    with pytest.raises(rt.ConfigError, match="REVTAPE_THREADS='-2'"):
        vm._threads_from_environment()


def test_threads_reach_the_c_pool(monkeypatch):
    r = _fresh_process({"REVTAPE_THREADS": "3"}, _COMPILE)
    assert r.returncode == 0 and r.stdout.split() == ["3"], r.stderr
    before = compiled.array_threads()[0]
    try:
        monkeypatch.setenv("REVTAPE_THREADS", "1000")
        vm._threads_from_environment()
        assert compiled.array_threads()[0] == 64              # more than 64 count as 64
    finally:
        compiled.array_threads(threads=before)


def test_block_tile_junk_is_a_config_error():
    r = _fresh_process({"REVTAPE_BLOCK_TILE": "abc"}, _COMPILE)
    assert r.returncode != 0
    assert "ConfigError: REVTAPE_BLOCK_TILE='abc' is not accepted" in r.stderr, r.stderr
    r = _fresh_process({"REVTAPE_BLOCK_TILE": "64"},
                       "from revtape.lower import blocks; print(blocks.TILE)")
    assert r.returncode == 0 and r.stdout.split() == ["64"], r.stderr


# ---------------------------------------------------------------- the C compiler

def _real_compiler():
    try:
        return native.compiler()
    except native.NativeCompileError:
        pytest.skip("no C compiler on PATH")


def test_cc_and_cflags_are_honoured(monkeypatch, tmp_path):
    """CC names a wrapper that logs its arguments and runs the real compiler:
    the native tier builds the program's library with it, CC's own words
    first and $CFLAGS after revtape's flags."""
    real = _real_compiler()
    if not native.CSRC.is_dir():
        pytest.skip("no C sources")
    # kernels.c takes half a minute to compile: the objects linked in are the
    # real compiler's, from the suite's cache (the next test checks their commands)
    shared, real_id = native.cache_dir(), native._compiler()[1]
    build_objects = native._runtime_objects
    monkeypatch.setattr(native, "_runtime_objects",
                        lambda cc, cc_id, d, deadline: build_objects(real, real_id, shared,
                                                                     deadline))
    log = tmp_path / "calls.log"
    wrapper = tmp_path / "my cc"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec {" ".join(real.argv)} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.delenv("REVTAPE_CC", raising=False)
    monkeypatch.setenv("CC", f"'{wrapper}' -DREVTAPE_TEST_CC_WORD")
    monkeypatch.setenv("CFLAGS", "-DREVTAPE_TEST_CFLAG=1 -g0")
    monkeypatch.setenv("REVTAPE_CACHE_DIR", str(tmp_path / "cache"))   # nothing cached: a build
    monkeypatch.setattr(native, "_loaded", {})
    assert native.compiler() == native.Compiler(
        (str(wrapper), "-DREVTAPE_TEST_CC_WORD"), ("-DREVTAPE_TEST_CFLAG=1", "-g0"))
    x = np.array([0.3, -0.7, 1.1])
    tape = rt.GradientTape(_f, x)
    nt = rt.compile(tape, native=True)
    assert nt.native_state == "native"
    vm = rt.compile(tape, native=False)
    assert all(np.array_equal(a, b) for a, b in zip(vm.value_and_gradient(x),
                                                    nt.value_and_gradient(x)))
    (call,) = log.read_text().splitlines()                  # the program's library
    words = call.split()
    assert words[0] == "-DREVTAPE_TEST_CC_WORD"
    assert words.index("-DREVTAPE_TEST_CFLAG=1") > words.index("-ffp-contract=off")


def test_the_runtime_objects_are_built_with_cc_and_cflags(monkeypatch, tmp_path):
    runs = []
    monkeypatch.setattr(native, "_run", lambda cmd, cc, deadline: runs.append(cmd))
    cc = native.Compiler(("/opt/bin/cc", "-m64"), ("-DFLAG", "-O3"))
    # the stand-in compiler writes nothing, so there is no library to publish
    with pytest.raises(native.NativeCompileError, match="wrote no library"):
        native._runtime_objects(cc, "test-id", tmp_path, float("inf"))
    (cmd,) = runs                     # one shared library of both sources
    assert [pathlib.Path(w).name for w in cmd if w.endswith(".c")] == ["specfun.c", "kernels.c"]
    assert cmd[:2] == ["/opt/bin/cc", "-m64"]
    assert cmd.index("-DFLAG") > cmd.index("-ffp-contract=off") and "-O3" in cmd


def test_revtape_cc_wins_over_cc_and_a_missing_cc_is_no_fallback(env):
    real = _real_compiler()
    env.setenv("CC", "no-such-cc-revtape")
    with pytest.raises(native.NativeCompileError, match=r"no-such-cc-revtape \(\$CC\)"):
        native.compiler()
    env.setenv("REVTAPE_CC", real.argv[0])
    assert native.compiler().argv[0] == real.argv[0]


def test_without_cc_the_compiler_python_was_built_with(env):
    _real_compiler()
    words = (sysconfig.get_config_var("CC") or "").split()
    found = shutil.which(words[0]) if words else None
    if found is None:
        pytest.skip("sysconfig's CC is not on PATH here")
    assert native.compiler().argv == (os.path.realpath(found), *words[1:])
