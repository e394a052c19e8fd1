"""What a newcomer meets first: dir(rt) lists the public API, the submodules
are attributes, and the README links nothing outside the repository."""

import pathlib
import re

import revtape as rt

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_dir_lists_the_lazily_loaded_public_api_and_every_name_resolves():
    names = dir(rt)
    for n in ("grad", "value_and_grad", "CompiledTape", "LogDensity", "jvp", "vjp", "compile",
              "GradientTape", "special", "stats", "bijectors", "RevtapeError"):
        assert n in names, n
    for n in names:
        if not n.startswith("_"):
            getattr(rt, n)
    for n in rt.__all__:
        assert n in names
    assert rt.bijectors.exp.forward(0.0) == 1.0 and callable(rt.stats.norm.logpdf)


def test_readme_links_stay_inside_the_repository():
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", text)         # [text](target)
    targets += re.findall(r"\(see ([^\s\")]*(?:/|\.md|\.py)[^\s\")]*)\)", text)
    for t in targets:
        if re.match(r"[a-z]+://|#|mailto:", t):
            continue
        path = (ROOT / t.split("#")[0]).resolve()
        assert ROOT in path.parents or path == ROOT, f"README links outside the repository: {t}"
        assert path.exists(), f"README links a missing file: {t}"
    assert "../shared" not in text
