"""Progress bars (src/revtape/bench/progress.py): tqdm on a terminal when it
is installed, silent otherwise."""

import io
import sys
import types

from revtape.bench import progress as _progress


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
