"""`python -m revtape bench`: runs end to end, verifies before timing, JSON structure.

No timing assertions: only structure and correctness (every column that ran
matched the numpy reference; missing peers are skipped with a reason)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PEERS = ["jax", "torch", "autograd", "casadi"]
STATUSES = {"ok", "skipped", "mismatch"}
COLUMN_KEYS = {"status", "median_us", "min_us", "max_us", "ratio", "setup_s", "max_rel_err"}
VM_COLUMNS = ["revtape", "revtape-bind", "c-ref", "c-ref-bound"]


def _vm_built():
    try:
        return importlib.util.find_spec("revtape._vm") is not None
    except ModuleNotFoundError:
        return False


def _importable(mod):
    try:
        return importlib.util.find_spec(mod) is not None
    except (ImportError, ValueError):
        return False


def _bench(tmp_path, *args, timeout=120):
    out = tmp_path / "bench.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src")] + (
        [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    proc = subprocess.run(
        [sys.executable, "-m", "revtape", "bench", "--quick", "--json", str(out), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(out.read_text()), proc


@pytest.fixture(scope="module")
def no_peers(tmp_path_factory):
    return _bench(tmp_path_factory.mktemp("nopeers"), "--only", "eight-schools,logreg",
                  "--peers", "none")


@pytest.fixture(scope="module")
def with_peers(tmp_path_factory):
    return _bench(tmp_path_factory.mktemp("peers"), "--only", "eight-schools")


def _check_structure(result):
    meta = result["meta"]
    for key in ("date", "python", "numpy", "cpu", "revtape", "peers"):
        assert key in meta, key
    assert set(PEERS) <= set(meta["peers"])
    for v in meta["peers"].values():
        assert v is None or isinstance(v, str)
    assert isinstance(result["workloads"], list) and result["workloads"]
    for w in result["workloads"]:
        assert {"name", "size", "columns", "extra"} <= set(w)
        assert isinstance(w["size"], dict) and w["size"]
        for name, col in w["columns"].items():
            assert COLUMN_KEYS <= set(col), (w["name"], name, col)
            assert col["status"] in STATUSES
            if col["status"] == "ok":
                assert col["min_us"] <= col["median_us"] <= col["max_us"], (name, col)
                assert col["max_rel_err"] <= 1e-8
            else:
                assert isinstance(col.get("reason"), str) and col["reason"], (name, col)


def _check_all_passed(result):
    """Every column that ran matched the reference; the rest were skipped with a reason."""
    for w in result["workloads"]:
        for name, col in w["columns"].items():
            assert col["status"] != "mismatch", (w["name"], name, col.get("reason"))
        cols = w["columns"]
        for name in ["revtape-ref", "numpy-ref"]:
            assert cols[name]["status"] == "ok", (w["name"], name, cols[name])
        for name in VM_COLUMNS:
            if _vm_built():
                assert cols[name]["status"] == "ok", (w["name"], name, cols[name])
            else:
                assert cols[name]["status"] == "skipped" and "C extension" in cols[name]["reason"]
        if cols["c-ref-bound"]["status"] == "ok":
            # ratios of the minimums to the C floor, on every timed column
            assert cols["c-ref-bound"]["ratio_c_bound"] == pytest.approx(1.0)
            for col in cols.values():
                if col["status"] == "ok":
                    assert col["ratio_c_bound"] == pytest.approx(
                        col["min_us"] / cols["c-ref-bound"]["min_us"])
        if cols["revtape"]["status"] == "ok":
            assert cols["revtape"]["ratio"] == pytest.approx(1.0)
            for col in cols.values():
                if col["status"] == "ok":
                    assert col["ratio"] > 0


def test_no_peers_structure(no_peers):
    result, proc = no_peers
    _check_structure(result)
    assert [w["name"] for w in result["workloads"]] == ["eight-schools", "logreg"]
    assert result["workloads"][1]["size"] == {"N": 1000, "D": 20}
    _check_all_passed(result)
    for w in result["workloads"]:
        assert not set(PEERS) & set(w["columns"]), "--peers none adds no peer columns"
        assert w["extra"]["tape"]["tape_instructions"] > 0


def test_no_peers_table(no_peers):
    _, proc = no_peers
    assert "== eight-schools" in proc.stdout and "== logreg" in proc.stdout
    assert "median us" in proc.stdout
    assert "numpy-ref" in proc.stdout
    assert "eight-schools" in proc.stderr   # progress goes to stderr


def test_default_peers(with_peers):
    result, _ = with_peers
    _check_structure(result)
    _check_all_passed(result)
    (w,) = result["workloads"]
    for peer in PEERS:
        assert peer in w["columns"], peer
        col = w["columns"][peer]
        if not _importable(peer):
            assert col["status"] == "skipped"
            assert peer in col["reason"]
        else:
            assert col["status"] in ("ok", "skipped"), col


def test_bad_arguments():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run([sys.executable, "-m", "revtape", "bench", "--peers", "nosuchtool"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "nosuchtool" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "revtape", "bench", "--only", "nosuchwl"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "nosuchwl" in proc.stderr


def test_hmc_sampler_is_deterministic():
    from revtape.bench import workloads as W
    from revtape.bench.hmc import hmc

    wl = W.eight_schools()
    a, acc = hmc(wl.numpy_vg, wl.x0, 50)
    b, _ = hmc(wl.numpy_vg, wl.x0, 50)
    assert a.shape == (50, 10) and (a == b).all()
    assert 0.5 < acc <= 1.0
