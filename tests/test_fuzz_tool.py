"""tools/fuzz_vm.py: it says how many programs it fuzzed, fails when that is
0, and builds its sanitized harness once per content (a stand-in compiler
counts the builds here; the real run is not part of the suite)."""

import importlib.util
import os
import pathlib
import stat

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def fuzz():
    spec = importlib.util.spec_from_file_location("fuzz_vm", ROOT / "tools" / "fuzz_vm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fake_cc(tmp_path):
    """A 'compiler' that logs each build and writes an empty executable."""
    log = tmp_path / "builds.log"
    cc = tmp_path / "fakecc"
    cc.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo fakecc 1.0; exit 0; fi\n"
                  f"echo build >> {log}\n"
                  "while [ $# -gt 1 ]; do if [ \"$1\" = -o ]; then : > \"$2\"; fi; shift; done\n")
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    return str(cc), log


def test_zero_programs_is_a_failure_not_a_clean_run(fuzz, tmp_path, capsys):
    code = fuzz.main(["--compilers", "no-such-compiler-xyz", "--build-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "programs run: 0" in out and "no program was fuzzed" in out


def test_the_sanitized_build_is_cached_by_content(fuzz, tmp_path):
    cc, log = _fake_cc(tmp_path)
    bdir = tmp_path / "b"
    bdir.mkdir()
    exe, secs = fuzz.build(cc, bdir)
    assert exe.exists() and log.read_text().count("build") == 1
    again, secs2 = fuzz.build(cc, bdir)
    assert again == exe and secs2 == 0.0 and log.read_text().count("build") == 1
    # another harness source is another key: rebuilt, the stale one removed
    changed = tmp_path / "fuzz_vm_harness.c"
    changed.write_bytes(fuzz.HARNESS.read_bytes() + b"/* changed */\n")
    fuzz.HARNESS = changed
    third, _ = fuzz.build(cc, bdir)
    assert third != exe and not exe.exists() and log.read_text().count("build") == 2

def test_the_budget_counts_fuzzing_not_building(fuzz, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(fuzz, "build", lambda cc, bdir: (bdir / "x", 9999.0))
    monkeypatch.setattr(fuzz.shutil, "which", lambda cc: "/bin/" + cc)
    ran = []

    class R:
        returncode = 0
        stderr = ""
        stdout = ('{"iterations": 5, "random_programs": 1, "verified": 3, "refused": 2, '
                  '"verifier_only": 0, "calls": {}}')

    real_run = fuzz.subprocess.run
    monkeypatch.setattr(fuzz.subprocess, "run",
                        lambda cmd, **k: ran.append(cmd) or R() if cmd[0].endswith("x")
                        else real_run(cmd, **k))
    monkeypatch.setattr(fuzz, "seed_programs", lambda: [])
    code = fuzz.main(["--compilers", "gcc", "--runs", "3", "--budget", "60",
                      "--build-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and len(ran) == 3 and "programs run: 15" in out
