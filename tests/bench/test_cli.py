"""`python -m revtape bench` (src/revtape/bench/cli.py): runs end to end,
verifies before timing, JSON structure; and --plot: default path, caption,
colours, skipped columns.

No timing assertions: only structure and correctness (every column that ran
matched the numpy reference; missing peers are skipped with a reason)."""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import pytest

from revtape.bench import cli
from conftest import ROOT

PEERS = ["jax", "torch", "autograd", "casadi"]
STATUSES = {"ok", "skipped", "mismatch"}
COLUMN_KEYS = {"status", "median_us", "min_us", "max_us", "ratio", "setup_s", "max_rel_err"}
VM_COLUMNS = ["revtape", "revtape-vm", "revtape-bind", "c-ref", "c-ref-bound"]


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
    result, proc = with_peers
    _check_structure(result)
    _check_all_passed(result)
    (w,) = result["workloads"]
    missing = result["missing_peers"]
    for peer in PEERS:
        if not _importable("autograd.numpy" if peer == "autograd" else peer):
            # one line for the run, not a skipped cell per workload
            assert peer not in w["columns"] and peer in missing[peer]
            line, = [ln for ln in proc.stdout.splitlines() if ln.startswith(f"{peer} not run")]
            assert line.endswith('pip install "revtape[peers]"')
        else:
            assert peer not in missing
            assert w["columns"][peer]["status"] in ("ok", "skipped"), w["columns"][peer]


def test_revtape_columns_name_their_tier(with_peers):
    result, proc = with_peers
    (w,) = result["workloads"]
    cols = w["columns"]
    if cols["revtape"]["status"] != "ok":
        pytest.skip(cols["revtape"].get("reason", "revtape not timed"))
    assert cols["revtape"]["tier"] in ("native", "vm")
    assert cols["revtape-bind"]["tier"] == cols["revtape"]["tier"]
    assert "native=False" in cols["revtape-vm"]["note"]
    assert "revtape's tier: " in proc.stdout
    for d in cols.values():
        if d["status"] == "ok":
            assert d["spread"] == pytest.approx(d["median_us"] / d["min_us"])


def test_bad_arguments():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run([sys.executable, "-m", "revtape", "bench", "--peers", "nosuchtool"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "nosuchtool" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "revtape", "bench", "--only", "nosuchwl"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "nosuchwl" in proc.stderr


# ---------------------------------------------------------------- --plot

def _col(us, ratio, status="ok", reason=None):
    d = {"status": status, "median_us": us, "min_us": us, "max_us": us, "ratio": ratio}
    if reason:
        d["reason"] = reason
    return d


def _fake_result(extra_column="c-ref"):
    skipped = _col(None, None, "skipped", "no C reference for this workload")
    return {
        "meta": {"date": "2026-11-30T20:00:00+00:00", "python": "3.11.7", "numpy": "2.4.6",
                 "cpu": "Test CPU 9000", "cpu_count": 2, "platform": "Linux-test",
                 "revtape": "0.1.0", "mode": "quick", "peers": {"jax": None, "torch": "2.1"},
                 "peers_selected": ["jax", "torch"]},
        "workloads": [
            {"name": "chain", "size": {"L": 1000},
             "columns": {"revtape": _col(100.0, 1.0), extra_column: _col(80.0, 0.8),
                         "torch": _col(900.0, 9.0)}},
            {"name": "chain", "size": {"L": 10000},
             "columns": {"revtape": _col(900.0, 1.0), extra_column: _col(700.0, 0.78),
                         "torch": _col(5000.0, 5.5)}},
            {"name": "gp", "size": {"n": 200},
             "columns": {"revtape": _col(50.0, 1.0), extra_column: skipped,
                         "torch": _col(None, None, "mismatch", "gradient differs")}},
        ],
    }


def _parse(*argv):
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    return p.parse_args(list(argv))


def test_plot_flag_alone_means_the_default_file():
    assert _parse("--plot").plot == cli.DEFAULT_PLOT == "revtape-bench.png"
    assert _parse("--plot", "x.png", "--quick").plot == "x.png"
    assert _parse("--plot", "--quick").plot == cli.DEFAULT_PLOT
    assert _parse().plot is None


def test_column_colour_is_deterministic_and_distinct_for_known_columns():
    known = cli._COLOUR_ORDER
    colours = [cli.column_colour(n) for n in known]
    assert len(set(colours)) == len(known)
    assert colours == [cli.column_colour(n) for n in known]
    # an unknown column gets a stable colour (crc32, not the per-process str hash)
    assert cli.column_colour("my-new-column") == cli.column_colour("my-new-column")
    assert cli.column_colour("my-new-column") not in colours


def test_caption_names_machine_date_and_untimed_columns():
    cap = cli.plot_caption(_fake_result())
    for s in ("Test CPU 9000", "2 cores", "python 3.11.7", "numpy 2.4.6", "Linux-test",
              "2026-11-30T20:00:00", "torch 2.1", "peers not installed: jax"):
        assert s in cap, s
    assert "c-ref skipped (1/3 workloads)" in cap
    assert "torch mismatch (1/3 workloads)" in cap
    assert "revtape " not in cap.split("\n")[-1]   # timed everywhere: not listed


def test_both_panels_use_one_colour_per_column_and_hatch_untimed_cells():
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    figs = []
    for extra in ("c-ref", "numpy-ref"):
        fig = cli._figure(_fake_result(extra), plt)
        figs.append(fig)
        ax1, ax2 = fig.axes[:2]
        lines = {ln.get_label(): to_hex(ln.get_color()) for ln in ax1.get_lines()
                 if not ln.get_label().startswith("_")}
        assert set(lines) == {"revtape", extra, "torch"}
        for n, c in lines.items():
            assert c == cli.column_colour(n)
        for cont in ax2.containers:
            n = cont.get_label().replace(" (not timed)", "")
            if cont.get_label().startswith("_"):   # a hatched set after a coloured one
                for bar in cont.patches:
                    assert bar.get_hatch() == "///"
                    assert to_hex(bar.get_edgecolor()) in {cli.column_colour(k) for k in lines}
                continue
            for bar in cont.patches:
                assert to_hex(bar.get_facecolor()) == cli.column_colour(n)
        hatched = [b for cont in ax2.containers for b in cont.patches if b.get_hatch()]
        assert len(hatched) == 2          # gp: the skipped extra column and torch's mismatch
        plt.close(fig)
    # the column shared by both figures keeps its colour though the other column changed
    assert cli.column_colour("torch") not in (cli.column_colour("c-ref"),
                                              cli.column_colour("numpy-ref"))


def test_plot_without_matplotlib_logs_one_line_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # import matplotlib -> ImportError
    msgs = []
    assert cli.plot(_fake_result(), str(tmp_path / "p.png"), msgs.append) is False
    assert len(msgs) == 1 and "matplotlib is not installed" in msgs[0]
    assert not (tmp_path / "p.png").exists()


def test_bench_plot_alone_writes_default_file_in_cwd(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    rc = cli.main(["--quick", "--peers", "none", "--only", "eight-schools",
                   "--call-budget", "0.5", "--plot"])
    assert rc == 0
    out = tmp_path / cli.DEFAULT_PLOT
    assert out.exists() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    err = capsys.readouterr().err
    assert f"plot written to {os.path.abspath(out)}" in err


def test_noisy_rows_are_flagged():
    def ok(mn, med):
        return {"status": "ok", "min_us": mn, "median_us": med, "max_us": med}
    cols = {"revtape": ok(1.0, 1.2), "revtape-bind": ok(2.0, 2.1), "numpy-ref": ok(10.0, 25.0),
            "jax": ok(5.0, 9.0), "torch": {"status": "skipped", "reason": "x"}}
    cli._ratios(cols)
    cli._flag_noise(cols)
    assert "noisy" not in cols["revtape"] and "noisy" not in cols["jax"]
    assert cols["numpy-ref"]["noisy"] == "median 2.5x the minimum"
    assert "2.0x revtape's" in cols["revtape-bind"]["noisy"]
    assert cli._fmt_spread(cols["numpy-ref"]) == "2.5!" and cli._fmt_spread(cols["jax"]) == "1.8"
    result = {"meta": {"revtape": "0", "mode": "quick", "date": "d", "python": "3", "numpy": "2",
                       "cpu": "c", "cpu_count": 2, "c_vm": True, "peers": {"torch": None}},
              "missing_peers": {"torch": "torch not importable: ModuleNotFoundError"},
              "workloads": [{"name": "w", "size": {"n": 1}, "columns": cols, "extra": {}}]}
    text = cli.format_table(result)
    assert text.count('pip install "revtape[peers]"') == 1
    noisy, = [ln for ln in text.splitlines() if ln.strip().startswith("! noisy")]
    assert "numpy-ref" in noisy and "revtape-bind" in noisy and "jax" not in noisy


def test_the_chain_panel_draws_the_tables_minimums():
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt
    res = _fake_result()
    for e in res["workloads"]:
        for d in e["columns"].values():
            if d["status"] == "ok":
                d["median_us"] = 3 * d["min_us"]
    fig = cli._figure(res, plt)
    line, = [ln for ln in fig.axes[0].get_lines() if ln.get_label() == "revtape"]
    assert list(line.get_ydata()) == [100.0, 900.0]        # the minimums, not the medians
    plt.close(fig)
