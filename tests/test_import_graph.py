"""The package's imports form a DAG (issue 19): no module imports, even inside a function, a module
that imports it back; nor does a package (issue 37): `specviz.bench` and `specviz.experiments`, say,
may not each import something of the other; and the library imports neither the serving layer nor
the app. Read from the source with `ast`, nothing imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "specviz"


def import_graph() -> dict[str, set[str]]:
    """module -> the specviz modules it imports (module-level or inside functions)."""
    modules = {}
    for path in ROOT.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    graph = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("specviz"):
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def package_of(module: str) -> str:
    """The unit a package-level cycle is counted in: a subpackage of specviz (specviz.ui for
    specviz.ui.race) or a module at its top (specviz.bench)."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """package -> the other packages its modules import."""
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        out.setdefault(package_of(module), set()).update(package_of(t) for t in targets)
    return {package: targets - {package} for package, targets in out.items()}


# The library: what serving the methods (specviz.serving: threads, pools, visitors' sessions) and the
# app (specviz.ui) build on, never the other way round (issue 37, item 6). A method takes what a
# server lends it (an executor, a session) as arguments of `run`.
LIBRARY = ("specviz.methods", "specviz.verify", "specviz.decoding", "specviz.models", "specviz.runner", "specviz.osd")
SERVING = ("specviz.serving", "specviz.ui")


def _under(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_one_that_imports_it_back():
    graph = import_graph()
    assert graph.get("specviz.models.pair")  # the graph was read
    assert cycles(graph) == []


def test_no_package_imports_one_that_imports_it_back():
    packages = package_graph(import_graph())
    assert package_graph({"specviz.a.x": {"specviz.b"}, "specviz.a.y": set(), "specviz.b": {"specviz.a.y"}}) == {
        "specviz.a": {"specviz.b"},
        "specviz.b": {"specviz.a"},
    }
    assert "specviz.experiments" in packages["specviz.bench"]  # the graph was read
    assert not packages["specviz.harness"] & {"specviz.bench", "specviz.experiments"}  # what both import
    assert cycles(packages) == []


def test_the_library_imports_neither_the_serving_layer_nor_the_app():
    graph = import_graph()
    assert "specviz.serving.threads" in graph["specviz.serving.runs"]  # the graph was read
    wrong = sorted(
        f"{m} imports {t}" for m, targets in graph.items() if _under(m, LIBRARY) for t in targets if _under(t, SERVING)
    )
    assert wrong == []


CACHE_TYPES = {"DynamicCache", "StaticCache", "HybridCache", "QuantizedCache"}  # transformers' KV caches
KV = ROOT / "models" / "kv.py"


def cache_handling(tree: ast.AST) -> list[str]:
    """Where a module names one of transformers' KV caches or crops a cache (`x.crop(n)`)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found += [f"line {node.lineno}: imports {a.name}" for a in node.names if a.name in CACHE_TYPES]
        elif isinstance(node, ast.Name) and node.id in CACHE_TYPES:
            found.append(f"line {node.lineno}: names {node.id}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "crop":
            found.append(f"line {node.lineno}: crops a cache")
    return found


def test_only_the_kv_module_builds_or_crops_a_kv_cache():
    """Issue 52: `specviz/models/kv.py` is the one module that touches KV caches, EAGLE's head cache and
    the training corpus's too (they built and cropped their own DynamicCache)."""
    outside = {
        str(path.relative_to(ROOT)): found
        for path in ROOT.rglob("*.py")
        if path != KV and (found := cache_handling(ast.parse(path.read_text())))
    }
    assert not outside, f"KV caches handled outside specviz/models/kv.py: {outside}"
    assert cache_handling(ast.parse(KV.read_text()))  # the scan sees kv.py's own
