"""revtape's modules import one another in one direction.

The package's folders are the pipeline's stages, listed in the order data
flows through them (LAYERS); a module imports only from its own folder or
from a stage below it.

The import graph is read from the source with ast: an edge a -> b for every
`from . import b` / `from .b import x` / `import revtape.b` in module a,
wherever it stands -- imports inside functions count too, so that no cycle
can hide behind a lazy import.  There is no cycle anywhere.  Where a lower
layer needs something of a higher one (a tape makes the tracked handles of
its nodes), the lower layer defines a hook (tape.register_handles) that the
higher one fills at import; no module assigns attributes on another one
behind its back.  The package's __init__ (which lazily loads submodules for
rt.* names), __main__ and the public namespaces (rt.special, rt.stats,
rt.bijectors: re-exports of their implementations) are the roots and are
left out.
"""

import ast
import functools
import pathlib

import revtape

PKG = pathlib.Path(revtape.__file__).resolve().parent
ROOTS = ("", "__main__", "special", "stats", "bijectors")

# The stages, lowest first: a module may import from its own stage and from
# the stages before it.  Top-level modules other than the roots sit in the
# first stage with the C extension they wrap.
LAYERS = [
    ("errors", "config", "_vm", "_checked", "_build_vm"),
    ("core",),
    ("trace",),
    ("numpy_api",),
    ("lower",),
    ("runtime",),
    ("transforms",),
    ("models",),
    ("interop", "autograd"),
    ("bench",),
]


def layer_of(mod):
    head = mod.split(".")[0]
    for i, names in enumerate(LAYERS):
        if head in names:
            return i
    raise AssertionError(f"revtape.{mod} is in no stage of LAYERS: add its folder there")


def modules():
    out = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join(parts)
        if name in ROOTS:
            continue
        out[name] = path
    return out


@functools.cache
def parsed(path):
    """The module's syntax tree, parsed once for every test here."""
    return ast.parse(path.read_text())


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
        tree = parsed(path)
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
    assert "core.ops" in edges["trace.tracked"] and "trace.tape" in edges["trace.tracked"]
    assert ("lower.compiler" in edges["runtime.compiled"]
            and "trace.hessian" in edges["runtime.compiled"])
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_no_import_cycles_at_module_level():
    assert cycles(graph(include_lazy=False)) == []


def test_no_import_cycles_even_through_function_level_imports():
    assert cycles(graph(include_lazy=True)) == []


def upward_edges(edges):
    return sorted(f"{a} -> {b}" for a, bs in edges.items() for b in bs
                  if layer_of(b) > layer_of(a)
                  or (layer_of(b) == layer_of(a) and a.split(".")[0] != b.split(".")[0]
                      and layer_of(a) > 0))


def test_every_module_is_in_a_stage():
    heads = {name for names in LAYERS for name in names}
    assert sorted(m for m in modules() if m.split(".")[0] not in heads) == []
    # and every stage the list names exists (a renamed folder cannot hide)
    present = {m.split(".")[0] for m in modules()}
    assert sorted(h for h in heads if h not in present and h not in ("_checked", "_vm")) == []


def test_imports_run_down_the_pipeline():
    """Even a function-level import may not reach a later stage."""
    assert upward_edges(graph(include_lazy=True)) == []


def test_the_layer_check_sees_an_upward_edge():
    assert upward_edges({"core.ops": {"runtime.compiled"}, "runtime.compiled": {"core.ops"}}) == [
        "core.ops -> runtime.compiled"]
    # two folders of one stage do not import one another either
    assert upward_edges({"interop.jax": {"autograd.numpy"}, "autograd.numpy": set()}) == [
        "interop.jax -> autograd.numpy"]


def test_the_scanner_sees_function_level_imports():
    # a lazy import must add its edge, or the test above could not fail
    src = "def f():\n    from .tracked import stack\n    return stack\n"
    tree = ast.parse(src)
    fn = tree.body[0]
    assert _targets("trace.tape", fn.body[0], modules(), False) == ["trace.tracked"]


def test_tape_does_not_know_the_tracked_layer():
    edges = graph(include_lazy=True)
    assert "trace.tracked" not in edges["trace.tape"]


def test_the_numpy_api_sits_above_the_value_types():
    edges = graph(include_lazy=True)
    assert "trace.tracked" in edges["numpy_api.functions"]
    assert not any(m.startswith("numpy_api") for m in edges["trace.tracked"] | edges["trace.tape"])


def _module_aliases(tree, mod, names, is_pkg):
    """Local names bound to revtape modules by this module's imports."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                targets = _targets(mod, type(node)(**{**node.__dict__, "names": [a]}),
                                   names, is_pkg)
                full = [t for t in targets if t in names and t.split(".")[-1] == a.name.split(".")[-1]]
                if full:
                    out[a.asname or a.name] = full[-1]
    return out


def _patches(tree, mod, names, is_pkg):
    aliases = _module_aliases(tree, mod, names, is_pkg)
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for t in targets:
            if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                    and t.value.id in aliases):
                found.append(f"{mod}:{node.lineno} sets {aliases[t.value.id]}.{t.attr}")
    return found


def test_no_module_patches_another():
    """`other_module.attr = x` is an undeclared back edge (the old tape._WRAP
    injection): a lower module must declare a hook and be called instead."""
    mods = modules()
    found = []
    for mod, path in mods.items():
        found += _patches(parsed(path), mod, mods, path.name == "__init__.py")
    assert found == []


def test_the_patch_scanner_sees_a_patch():
    tree = ast.parse("from . import tape as _t\n_t._WRAP = 1\n")
    assert _patches(tree, "trace.tracked", modules(), False) == [
        "trace.tracked:2 sets trace.tape._WRAP"]
