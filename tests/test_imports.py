"""revtape's modules import one another in one direction (issue 12).

The import graph is read from the source with ast: an edge a -> b for every
`from . import b` / `from .b import x` / `import revtape.b` in module a.
Module-level imports must form no cycle (a cycle there is an import-order
bug waiting to happen); imports inside functions are counted too, so that a
cycle cannot hide behind a lazy import -- the one allowed is tape <-> tracked
(a tape makes the tracked handles of its nodes; a handle's tape is a Tape).
The package's __init__ (which lazily loads submodules for rt.* names) and
__main__ are the roots and are left out.
"""

import ast
import pathlib

import revtape

PKG = pathlib.Path(revtape.__file__).resolve().parent
ALLOWED_LAZY_CYCLES = [{"tape", "tracked"}]


def modules():
    out = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join(parts)
        if name in ("", "__main__"):
            continue
        out[name] = path
    return out


def _targets(mod, node, names, is_pkg):
    """The revtape modules an import statement in module `mod` names."""
    found = []
    if isinstance(node, ast.ImportFrom):
        if node.level == 0:
            if not (node.module or "").startswith("revtape"):
                return []
            base = node.module[len("revtape"):].lstrip(".")
        else:
            pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
            pkg = pkg[:len(pkg) - (node.level - 1)] if node.level > 1 else pkg
            base = ".".join(pkg + ([node.module] if node.module else []))
        if base:
            found.append(base)
        found += [f"{base}.{a.name}" if base else a.name for a in node.names]
    else:
        found = [a.name[len("revtape."):] for a in node.names if a.name.startswith("revtape.")]
    return [f for f in found if f in names and f != mod]


def graph(include_lazy):
    mods = modules()
    edges = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text())
        is_pkg = path.name == "__init__.py"

        def visit(node, in_function):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    if include_lazy or not in_function:
                        edges[mod].update(_targets(mod, child, mods, is_pkg))
                visit(child, in_function or isinstance(
                    child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
        visit(tree, False)
    return edges


def cycles(edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return out


def test_the_scanner_sees_imports():
    edges = graph(include_lazy=False)
    assert "ops" in edges["tracked"] and "tape" in edges["tracked"]
    assert "compiler" in edges["compiled"] and "hessian" in edges["compiled"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_no_import_cycles_at_module_level():
    assert cycles(graph(include_lazy=False)) == []


def test_no_cycle_hides_behind_a_lazy_import():
    found = cycles(graph(include_lazy=True))
    assert all(c in ALLOWED_LAZY_CYCLES for c in found), found
