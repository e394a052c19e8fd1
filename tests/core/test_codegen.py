"""The committed C header is generated from the op table and must not lag it."""

import subprocess
import sys

from revtape.core import codegen as _codegen


def test_committed_header_matches_the_op_table():
    assert _codegen.header_path().read_text() == _codegen.render()


def test_check_mode_reports_a_stale_header(tmp_path, monkeypatch):
    stale = tmp_path / "ops_generated.h"
    old = _codegen.render().replace("RT_NUM_OPS", "RT_NUM_OPS_STALE")
    stale.write_text(old)
    monkeypatch.setattr(_codegen, "header_path", lambda: stale)
    assert _codegen.main(["--check"]) == 1
    assert stale.read_text() == old                       # --check never writes
    assert _codegen.main([]) == 0
    assert _codegen.main(["--check"]) == 0


def test_check_mode_runs_as_a_module():
    r = subprocess.run([sys.executable, "-m", "revtape.core.codegen", "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
