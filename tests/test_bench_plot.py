"""`python -m revtape bench --plot`: default path, caption, colours, skipped columns; progress bars."""

import argparse
import io
import os
import sys
import types

import pytest

from revtape.bench import progress as _progress
from revtape.bench import cli


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


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_is_silent_when_stderr_is_not_a_terminal(monkeypatch):
    items = [1, 2, 3]
    buf = io.StringIO()
    assert _progress.progress(items, desc="x", file=buf) is items
    _progress.write("hello", buf)
    assert buf.getvalue() == "hello\n"
    # a terminal but no tqdm: silent too (tqdm is optional)
    monkeypatch.setitem(sys.modules, "tqdm", None)
    assert _progress.progress(items, file=_Tty()) is items


def test_progress_uses_tqdm_on_a_terminal(monkeypatch):
    calls = []

    def fake_tqdm(it, **kw):
        calls.append(kw)
        return list(it)

    fake_tqdm.write = lambda msg, file: file.write("[bar-safe] " + msg + "\n")
    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=fake_tqdm))
    tty = _Tty()
    assert _progress.progress(iter([1, 2]), total=2, desc="bench", file=tty) == [1, 2]
    assert calls and calls[0]["file"] is tty and calls[0]["total"] == 2
    assert _progress.progress([1], file=tty, disable=True) == [1] and len(calls) == 1
    _progress.write("msg", tty)
    assert tty.getvalue() == "[bar-safe] msg\n"
