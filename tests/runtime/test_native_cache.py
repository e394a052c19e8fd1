"""The native cache trusts nothing it did not write (revtape.runtime.native):
its directory is the user's and no one else's, every library is hashed
against the record its build wrote before any dlopen, builds are atomic,
serialised across processes, bounded in size, and clean up after the dead."""

import errno
import hashlib
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

import revtape as rt
from revtape.runtime import native

pytestmark = pytest.mark.skipif(os.name != "posix", reason="owners and modes are POSIX's")

ROOT = os.geteuid() == 0
OTHER_UID = 54321                 # a user id nobody on the machine has


def _real_cc():
    try:
        return native.compiler()
    except native.NativeCompileError as e:
        pytest.skip(f"no C compiler: {e}")


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """The kernels library (slow to compile: kernels.c), built once for the module."""
    if not native.CSRC.is_dir():
        pytest.skip("no C sources")
    _real_cc()
    d = tmp_path_factory.mktemp("kernels")
    os.chmod(d, 0o700)
    (path,) = native._runtime_objects(*native._compiler(), d, time.monotonic() + 900)
    return pathlib.Path(path)


def _env(**kw):
    return dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **kw)


def _copy_kernels(kernels, d):
    for f in (kernels, kernels.with_suffix(".sha256")):
        shutil.copy(f, d)


@pytest.fixture
def fresh(monkeypatch, tmp_path, kernels):
    """This process as if new: nothing loaded, failed, refused or warned about;
    its private directory (the fallback) holds the kernels already."""
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setattr(native, "_failed", {})
    monkeypatch.setattr(native, "_refused", set())
    monkeypatch.setattr(native, "_warned", set())
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    _copy_kernels(kernels, private)
    monkeypatch.setattr(native, "_private", private)
    monkeypatch.delenv("REVTAPE_CC", raising=False)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CFLAGS", raising=False)
    return monkeypatch


@pytest.fixture
def cache(tmp_path, kernels, fresh):
    """An empty cache directory of this user's (0700) holding only the kernels."""
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    _copy_kernels(kernels, d)
    fresh.setenv("REVTAPE_CACHE_DIR", str(d))
    return d


def _f(x, k):
    for _ in range(k):                # k sets the program's length: its own library
        x = np.sin(x) * 0.9
    return np.sum(np.exp(x) * x[::-1]) - np.prod(x)


def _tape(k):
    """A small program of its own: constants live in the arena, not in the C, so
    distinct programs (libraries) need distinct instructions."""
    return rt.GradientTape(lambda x: _f(x, k), np.array([0.3, -0.2, 0.5]))


def _check_bits(tape, nt):
    vm = rt.compile(tape, native=False)
    x = np.array([0.7, 0.1, -0.4])
    (v1, g1), (v2, g2) = vm.value_and_gradient(x), nt.value_and_gradient(x)
    assert v1 == v2 and np.array_equal(g1, g2)


def _native_warnings(caught):
    return [w for w in caught if issubclass(w.category, rt.NativeWarning)]


def _planted(tmp_path, marker):
    """A shared library whose constructor writes `marker`: what an attacker plants."""
    src = tmp_path / "planted.c"
    src.write_text(textwrap.dedent(f"""
        #include <stdio.h>
        __attribute__((constructor)) static void planted(void) {{
            FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("ran", f); fclose(f); }}
        }}
        void rtn_init(void *a, void *b, void *c) {{ (void)a; (void)b; (void)c; }}
        void *rtn_table(void) {{ return 0; }}
    """))
    so = tmp_path / "planted.so"
    subprocess.run([*_real_cc().argv, "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    return so


def _name_of(tape, tmp_path, kernels, fresh):
    """The file name the program's library has in any cache (its disk key)."""
    d = tmp_path / "probe"
    d.mkdir(mode=0o700)
    _copy_kernels(kernels, d)
    fresh.setenv("REVTAPE_CACHE_DIR", str(d))
    path = rt.compile(tape, native=True)._native_path
    fresh.setattr(native, "_loaded", {})
    return path.name, path


def _record(path, key_of=None, data=None):
    key = (key_of or path).stem.removeprefix("revtape_")
    digest = hashlib.sha256(path.read_bytes() if data is None else data).hexdigest()
    path.with_suffix(".sha256").write_text(f"{key} {digest}\n")


# ---------------------------------------------------------------- the directory

def test_the_cache_directory_is_created_0700_and_each_library_has_its_hash(
        tmp_path, kernels, fresh):
    d = tmp_path / "new" / "cache"
    fresh.setenv("REVTAPE_CACHE_DIR", str(d))
    (d.parent).mkdir()
    d.mkdir(mode=0o700)
    os.rmdir(d)                               # missing: the native tier creates it
    real = native._runtime_objects
    fresh.setattr(native, "_runtime_objects", lambda cc, cc_id, dd, dl: (
        _copy_kernels(kernels, dd), real(cc, cc_id, dd, dl))[1])
    tape = _tape(1)
    nt = rt.compile(tape, native=True)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    lib = nt._native_path
    assert lib.parent == d
    key, digest = lib.with_suffix(".sha256").read_text().split()
    assert key == lib.stem.removeprefix("revtape_")
    assert digest == hashlib.sha256(lib.read_bytes()).hexdigest()
    _check_bits(tape, nt)


@pytest.mark.parametrize("how", ["world-writable", "group-writable", "other owner"])
def test_a_directory_others_can_write_is_refused_and_its_library_never_runs(
        tmp_path, kernels, fresh, how):
    if how == "other owner" and not ROOT:
        pytest.skip("changing a directory's owner needs root")
    tape = _tape(2)
    name, _ = _name_of(tape, tmp_path, kernels, fresh)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o700)
    _copy_kernels(kernels, shared)
    marker = tmp_path / "planted-ran"
    planted = shared / name
    shutil.copy(_planted(tmp_path, marker), planted)
    _record(planted)                          # even a matching record: the directory is refused
    if how == "world-writable":
        os.chmod(shared, 0o777)
    elif how == "group-writable":
        os.chmod(shared, 0o770)
    else:
        os.chown(shared, OTHER_UID, OTHER_UID)
    fresh.setenv("REVTAPE_CACHE_DIR", str(shared))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nt = rt.compile(tape, native=True)
        nt2 = rt.compile(_tape(3), native=True)       # a second build: no second warning
    (w,) = _native_warnings(caught)
    assert str(shared) in str(w.message) and "private" in str(w.message)
    assert w.filename == __file__                       # points at the user's line
    assert issubclass(w.category, rt.RevtapeWarning)
    assert not marker.exists()
    assert nt.native_state == nt2.native_state == "native"
    assert nt._native_path.parent != shared and nt._native_path.parent == native._private
    _check_bits(tape, nt)


def test_the_private_directory_is_this_users_alone(fresh):
    fresh.setattr(native, "_private", None)
    d = native._private_dir()
    assert native._private_dir() == d                   # one per process
    st = os.stat(d)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
    assert native._check_dir(d) is None
    os.rmdir(d)


# ---------------------------------------------------------------- the files

@pytest.mark.parametrize("record", ["none", "wrong hash", "another key"])
def test_a_planted_library_in_the_users_own_cache_never_runs(
        tmp_path, kernels, cache, fresh, record):
    tape = _tape(4)
    name, _ = _name_of(tape, tmp_path, kernels, fresh)
    fresh.setenv("REVTAPE_CACHE_DIR", str(cache))
    marker = tmp_path / "planted-ran"
    planted = cache / name
    shutil.copy(_planted(tmp_path, marker), planted)
    if record == "wrong hash":
        _record(planted, data=b"something else")
    elif record == "another key":                   # a whole record, of another library
        planted.with_suffix(".sha256").write_text(
            f"{'0' * 32} {hashlib.sha256(planted.read_bytes()).hexdigest()}\n")
    built = native.compiles
    nt = rt.compile(tape, native=True)
    assert not marker.exists()
    assert native.compiles == built + 1               # rebuilt over it
    assert nt._native_path == planted
    _, digest = planted.with_suffix(".sha256").read_text().split()
    assert digest == hashlib.sha256(planted.read_bytes()).hexdigest()
    _check_bits(tape, nt)


@pytest.mark.skipif(not ROOT, reason="a file of another owner needs root to make")
def test_a_library_of_another_owner_is_refused_even_with_a_matching_record(
        tmp_path, kernels, cache, fresh):
    tape = _tape(5)
    name, _ = _name_of(tape, tmp_path, kernels, fresh)
    fresh.setenv("REVTAPE_CACHE_DIR", str(cache))
    marker = tmp_path / "planted-ran"
    planted = cache / name
    shutil.copy(_planted(tmp_path, marker), planted)
    _record(planted)
    os.chown(planted, OTHER_UID, OTHER_UID)
    nt = rt.compile(tape, native=True)
    assert not marker.exists()
    assert planted.stat().st_uid == os.geteuid()      # replaced by this user's build
    _check_bits(tape, nt)


def _damage(path, how, other=None):
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[:len(data) // 2])
    elif how == "byte-flipped":
        i = len(data) // 2
        path.write_bytes(data[:i] + bytes([data[i] ^ 0x40]) + data[i + 1:])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(os.urandom(len(data)))
    elif how == "wrong":                              # another program's library and record
        shutil.copy(other, path)
        shutil.copy(other.with_suffix(".sha256"), path.with_suffix(".sha256"))


KINDS = ["truncated", "byte-flipped", "empty", "garbage", "wrong"]

# A library is damaged on disk and then loaded by a new process (a process that
# has it mapped already would fault on its own pages whatever the loader did):
# each load runs in a child, which prints what it got.
_CHILD = """
import sys, warnings, numpy as np, revtape as rt
from revtape.runtime import native
k, mode = int(sys.argv[1]), sys.argv[2]


def f(x):
    for _ in range(k):
        x = np.sin(x) * 0.9
    return np.sum(np.exp(x) * x[::-1]) - np.prod(x)


tape = rt.GradientTape(f, np.array([0.3, -0.2, 0.5]))
x = np.array([0.7, 0.1, -0.4])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    if mode == "true":
        try:
            ct = rt.compile(tape, native=True)
        except Exception as e:
            print("raised", type(e).__name__, isinstance(e, rt.NativeCompileError))
            sys.exit(0)
    else:
        ct = rt.compile(tape)
        for _ in range(5):
            ct.value_and_gradient(x)
        ct.wait_native(300)
vm = rt.compile(tape, native=False)
(v1, g1), (v2, g2) = vm.value_and_gradient(x), ct.value_and_gradient(x)
print(ct.native_state, native.compiles, ct._native_path, v1 == v2 and np.array_equal(g1, g2),
      sum(issubclass(w.category, rt.NativeWarning) for w in caught))
"""


def _child(cache, k, mode):
    r = subprocess.run([sys.executable, "-c", _CHILD, str(k), mode], capture_output=True,
                       text=True, timeout=600,
                       env=_env(REVTAPE_CACHE_DIR=str(cache), REVTAPE_NATIVE="1",
                                REVTAPE_NATIVE_CALLS="3"))
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])     # -7: SIGBUS
    words = r.stdout.split()
    if words[0] == "raised":
        return words
    state, built, path, same, warned = words
    return state, int(built), pathlib.Path(path), same == "True", int(warned)


@pytest.mark.parametrize("how, mode", [(how, "true") for how in KINDS] +
                         [("truncated", "auto"), ("wrong", "auto")])
def test_a_damaged_or_wrong_library_is_rebuilt_never_loaded(cache, how, mode):
    path = _child(cache, 14, mode)[2]
    other = _child(cache, 15, mode)[2]
    _damage(path, how, other)
    assert _child(cache, 14, mode) == ("native", 1, path, True, 0)    # rebuilt, right bits
    assert _child(cache, 14, mode) == ("native", 0, path, True, 0)    # and now a cache hit


@pytest.mark.parametrize("how", KINDS[:4])
def test_the_verifier_never_opens_a_damaged_kernels_library(tmp_path, kernels, how):
    key = kernels.stem.removeprefix("revtape_kernels_")
    assert native._dlopen_verified(kernels, key) is not None        # the intact one loads
    d = tmp_path / "k"
    d.mkdir(mode=0o700)
    _copy_kernels(kernels, d)
    copy = d / kernels.name                  # a copy never mapped, damaged on disk
    _damage(copy, how)
    assert native._dlopen_verified(copy, key) is None


def test_a_library_that_matches_its_record_but_cannot_load_is_a_native_compile_error(cache):
    # the record matches (as if this user wrote garbage and hashed it): the
    # dlopen runs and fails, and that is NativeCompileError, never a raw OSError
    for mode in ("true", "auto"):
        path = _child(cache, 16, mode)[2]
        path.write_bytes(b"not a shared library")
        _record(path)
        if mode == "true":
            assert _child(cache, 16, mode) == ["raised", "NativeCompileError", "True"]
        else:                                          # one warning; the VM serves, right
            state, built, _, same, warned = _child(cache, 16, mode)
            assert (state, built, same, warned) == ("failed", 0, True, 1)


@pytest.mark.parametrize("how", ["mode 0500", "read-only file system"])
def test_a_read_only_cache_directory_falls_back_cleanly(cache, fresh, how):
    if how == "mode 0500":
        if ROOT:
            pytest.skip("root writes through mode bits")
        os.chmod(cache, 0o500)
    else:
        real_mkdtemp, real_open = native.tempfile.mkdtemp, os.open

        def refuse(path, *a, **k):
            raise OSError(errno.EROFS, "Read-only file system", str(path))

        def mkdtemp(*a, dir=None, **k):
            if dir is not None and pathlib.Path(dir) == cache:
                refuse(dir)
            return real_mkdtemp(*a, dir=dir, **k)

        def open_(path, flags, *a, **k):
            if flags & os.O_CREAT and pathlib.Path(path).parent == cache:
                refuse(path)
            return real_open(path, flags, *a, **k)
        fresh.setattr(native.tempfile, "mkdtemp", mkdtemp)
        fresh.setattr(native.os, "open", open_)
    tape = _tape(6)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            nt = rt.compile(tape, native=True)
    finally:
        os.chmod(cache, 0o700)
    (w,) = _native_warnings(caught)
    assert str(cache) in str(w.message)
    assert nt.native_state == "native" and nt._native_path.parent == native._private
    _check_bits(tape, nt)


def test_an_installed_copy_of_the_c_sources_is_checked_against_its_sums(tmp_path, fresh):
    copy = tmp_path / "_csrc"
    shutil.copytree(native.CSRC, copy)
    names = ["vm.h", "kernels/kernels.c"]
    (copy / "SHA256SUMS").write_text("".join(
        f"{hashlib.sha256((copy / n).read_bytes()).hexdigest()}  {n}\n" for n in names))
    fresh.setattr(native, "CSRC", copy)
    fresh.setattr(native, "_digest", None)
    assert native._sources_digest()
    with open(copy / "kernels" / "kernels.c", "a") as f:
        f.write("\n/* changed */\n")
    fresh.setattr(native, "_digest", None)
    with pytest.raises(rt.NativeCompileError, match="modified"):
        native._sources_digest()


# ---------------------------------------------------------------- resources

def _dead(pid):
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def _fake_cc(tmp_path, body):
    cc = tmp_path / "fake-cc"
    cc.write_text("#!/bin/sh\n" + body)
    cc.chmod(0o755)
    return cc


def test_a_compiler_that_times_out_has_its_whole_process_group_killed(tmp_path, cache, fresh):
    pids = tmp_path / "pids"
    cc = _fake_cc(tmp_path, f'sleep 300 &\necho $$ $! > "{pids}"\nsleep 300\n')
    fresh.setenv("REVTAPE_CC", str(cc))
    fresh.setenv("REVTAPE_NATIVE_TIMEOUT", "2")
    t0 = time.monotonic()
    with pytest.raises(native.NativeTimeout):
        rt.compile(_tape(7), native=True)
    assert time.monotonic() - t0 < 60
    shell, child = map(int, pids.read_text().split())
    deadline = time.monotonic() + 10
    while not (_dead(shell) and _dead(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _dead(shell) and _dead(child)
    assert not [p for p in cache.iterdir() if p.name.startswith("tmp")]


def test_the_temporaries_of_a_build_killed_mid_way_are_deleted_by_the_next(
        tmp_path, cache, fresh):
    pids = tmp_path / "pids"
    cc = _fake_cc(tmp_path, f'echo $$ >> "{pids}"\nexec sleep 300\n')
    code = ("import numpy as np, revtape as rt\n"
            "rt.compile(rt.GradientTape(lambda x: np.sum(x * x), np.ones(3)), native=True)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL,
                         env=_env(REVTAPE_CACHE_DIR=str(cache), REVTAPE_CC=str(cc)))
    deadline = time.monotonic() + 120
    while not pids.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids.exists(), "the build never started"
    p.kill()                                      # mid-way: its build directory stays
    p.wait()
    for pid in pids.read_text().split():
        os.kill(int(pid), 9)
    left = [f for f in cache.iterdir() if f.name.startswith("tmp")]
    assert left                                    # what the killed build left
    old = cache / "tmpk2j4x.o"                     # an old temporary of unknown origin
    old.write_bytes(b"\x7fELF")
    os.utime(old, (time.time() - 2 * native.STALE_SECONDS,) * 2)
    nt = rt.compile(_tape(8), native=True)       # the next build
    assert nt.native_state == "native"
    assert not [f for f in cache.iterdir() if f.name.startswith("tmp")]


def test_two_processes_build_one_library_once(tmp_path, cache):
    code = ("import numpy as np, revtape as rt\n"
            "from revtape.runtime import native\n"
            "t = rt.compile(rt.GradientTape(lambda x: np.sin(x[0]) * x[1] + 0.123457,"
            " np.array([0.3, 0.4])), native=True)\n"
            "v, g = t.value_and_gradient(np.array([0.7, -0.2]))\n"
            "print(native.compiles, t._native_path, v.hex(), *[float(e).hex() for e in g])")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=_env(REVTAPE_CACHE_DIR=str(cache)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    counts = sorted(int(o.split()[0]) for o, _ in outs)
    assert counts == [0, 1]                         # one built it, the other waited and loaded it
    assert outs[0][0].split()[1:] == outs[1][0].split()[1:]


def test_the_cache_keeps_the_most_recently_used_libraries_within_its_bound(cache, fresh):
    a = rt.compile(_tape(9), native=True)._native_path
    b = rt.compile(_tape(10), native=True)._native_path
    now = time.time()
    os.utime(a, (now - 100, now - 100))
    os.utime(b, (now - 50, now - 50))
    fresh.setattr(native, "_loaded", {})
    assert rt.compile(_tape(9), native=True)._native_path == a    # a used again: newest
    kernels = next(cache.glob("revtape_kernels_*.so"))
    size = sum(f.stat().st_size for f in (kernels, kernels.with_suffix(".sha256")))
    one = sum(f.stat().st_size for f in (a, a.with_suffix(".sha256")))
    fresh.setenv("REVTAPE_CACHE_MAX_MB", repr((size + 2.5 * one) / 2 ** 20))
    c = rt.compile(_tape(11), native=True)._native_path
    assert a.exists() and c.exists() and kernels.exists()
    assert not b.exists() and not b.with_suffix(".sha256").exists()   # least recently used


def test_a_program_library_is_small_and_links_the_shared_kernels(cache, kernels, fresh):
    lib = rt.compile(_tape(12), native=True)._native_path
    assert lib.stat().st_size < kernels.stat().st_size / 10
    assert kernels.name.encode() in lib.read_bytes()     # its recorded dependency


def test_the_key_changes_when_the_generator_source_changes(tmp_path, fresh):
    gen = tmp_path / "native.py"
    shutil.copy(native.__file__, gen)
    fresh.setattr(native, "_GENERATOR", gen)
    fresh.setattr(native, "_gen_digest", None)
    ct = rt.compile(_tape(13), native=False)
    layout = native._layout(ct)
    src = native.translate(ct._code, ct._ints, layout)
    before = (native._key(ct._code, ct._ints, layout, "cc"), native._disk_key(src, "cc", "k.so"))
    with open(gen, "a") as f:
        f.write("\n# a change to the generator\n")
    fresh.setattr(native, "_gen_digest", None)
    after = (native._key(ct._code, ct._ints, layout, "cc"), native._disk_key(src, "cc", "k.so"))
    assert before[0] != after[0] and before[1] != after[1]
    # and the generated C, the compiler command and the kernels are in the disk key
    assert len({native._disk_key(src, "cc", "k.so"), native._disk_key(src + " ", "cc", "k.so"),
                native._disk_key(src, "cc2", "k.so"), native._disk_key(src, "cc", "k2.so")}) == 4
