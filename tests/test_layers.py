"""The import layers of einkern, checked from the source text.

Every einkern module's imports are read with :mod:`ast` — at module level and
inside functions, absolute and relative, ``TYPE_CHECKING`` blocks included —
and each module is mapped to its layer.  The test fails when a module imports
a module of a higher layer, when a module has no layer (a new package must be
placed in :data:`LAYERS`), or when any import cycle exists among the modules
(a strongly connected component of more than one module, whatever its layers).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src"

#: Layers, lowest first: a module may import modules of its own layer or a lower
#: one.  Keys are module names or package prefixes (the longest match wins).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("einkern.source", "einkern.errors", "einkern.semantics", "einkern._version")),
    ("lang", ("einkern.lang",)),
    ("ir", ("einkern.ir", "einkern.reference")),
    ("gpu", ("einkern.gpu",)),
    ("backends", ("einkern.backends", "einkern.arrays", "einkern.testing")),
    ("tuning", ("einkern.tuning",)),
    ("api", ("einkern.api",)),
    (
        "tools",
        (
            "einkern.bench",
            "einkern.einsum",
            "einkern.einsum_subscripts",
            "einkern.torch",
            "einkern.blas",
        ),
    ),
    ("cli", ("einkern.cli",)),
    ("facade", ("einkern", "einkern.__main__")),  # the package root, above all
)

#: Imports allowed to break the rules, each with the reason (none today).  An
#: entry that no longer exists fails :func:`test_allowed_violations_still_exist`,
#: so it cannot linger.
ALLOWED: dict[tuple[str, str], str] = {}


def layer_of(module: str) -> int | None:
    """Position of ``module``'s layer in :data:`LAYERS` (None: no layer)."""
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for position, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or (module.startswith(prefix + ".") and prefix != "einkern"):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), position)
    return None if best is None else best[1]


def modules() -> dict[str, Path]:
    """Every einkern module's dotted name and file (packages by their ``__init__``)."""
    found = {}
    for path in sorted((SOURCE / "einkern").rglob("*.py")):
        parts = list(path.relative_to(SOURCE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported(module: str, path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """``(einkern module imported, line)`` for every import statement in ``path``.

    ``from P import N`` names module ``P.N`` when that is a module, else ``P``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "einkern" or alias.name.startswith("einkern."):
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target != "einkern" and not target.startswith("einkern."):
                continue
            for alias in node.names:
                child = f"{target}.{alias.name}"
                yield (child if child in known else target), node.lineno


def import_graph() -> dict[str, dict[str, int]]:
    """``{module: {imported module: first line}}`` over every einkern module."""
    files = modules()
    known = set(files)
    graph: dict[str, dict[str, int]] = {}
    for module, path in files.items():
        edges: dict[str, int] = {}
        for target, line in imported(module, path, known):
            if target != module:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of ``graph`` (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, int]]:
    return import_graph()


def test_every_module_has_a_layer(graph):
    assert not [m for m in graph if layer_of(m) is None], "place these modules in LAYERS"


def test_no_module_imports_a_higher_layer(graph):
    upward = []
    for module, edges in graph.items():
        for target, line in edges.items():
            if (module, target) in ALLOWED:
                continue
            if layer_of(target) is not None and layer_of(target) > layer_of(module):  # type: ignore[operator]
                upward.append(
                    f"{module}:{line} imports {target} "
                    f"({LAYERS[layer_of(module)][0]} < {LAYERS[layer_of(target)][0]})"
                )  # type: ignore[index]
    assert not upward, "\n".join(upward)


def test_no_import_cycle(graph):
    edges = {
        m: {t for t in targets if (m, t) not in ALLOWED and t in graph}
        for m, targets in graph.items()
    }
    cycles = [c for c in strongly_connected(edges) if len(c) > 1]
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_every_import_names_a_module(graph):
    """An import of a module that does not exist (left behind by a move) fails."""
    missing = [
        f"{module}:{line} imports {target}"
        for module, edges in graph.items()
        for target, line in edges.items()
        if target not in graph
    ]
    assert not missing, "\n".join(missing)


def test_allowed_violations_still_exist(graph):
    gone = [
        f"{m} -> {t} ({branch})" for (m, t), branch in ALLOWED.items() if t not in graph.get(m, {})
    ]
    assert not gone, "fixed: remove from ALLOWED:\n" + "\n".join(gone)


def test_the_checker_sees_function_level_and_relative_imports(tmp_path):
    """The parser and the cycle finder catch what they are meant to catch."""
    package = tmp_path / "einkern"
    (package / "gpu").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "gpu" / "__init__.py").write_text("")
    (package / "gpu" / "a.py").write_text("def f():\n    from ..cli import main\n")
    (package / "gpu" / "b.py").write_text("from . import a\nimport einkern.gpu.c\n")
    known = {
        "einkern",
        "einkern.gpu",
        "einkern.gpu.a",
        "einkern.gpu.b",
        "einkern.gpu.c",
        "einkern.cli",
    }
    assert list(imported("einkern.gpu.a", package / "gpu" / "a.py", known)) == [("einkern.cli", 2)]
    assert sorted(imported("einkern.gpu.b", package / "gpu" / "b.py", known)) == [
        ("einkern.gpu.a", 1),
        ("einkern.gpu.c", 2),
    ]
    assert layer_of("einkern.gpu.a") < layer_of("einkern.cli")  # type: ignore[operator]
    assert layer_of("einkern") == len(LAYERS) - 1 and layer_of("einkern.nothing") is None
    cycle = strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert sorted(map(tuple, cycle)) == [("a", "b", "c"), ("d",)]
