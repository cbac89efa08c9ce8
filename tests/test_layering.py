"""The import structure, drawn from the code: no circle between files, no import running up.

Every module under ``src/easyvideor1`` is read with ``ast`` (the package is never imported), and
every import it makes becomes an edge of the file graph: module-level and function-level imports
alike, relative and absolute, ``from . import x`` of a submodule included; only the imports under
``if TYPE_CHECKING:`` are left out (they never run). The graph must have no cycle, and an import
from one layer to another must go down :data:`LAYERS`, the table ``docs/architecture.md`` states in
words. Within one layer files import each other freely, as long as there is no cycle.

``pytest tests/test_layering.py`` runs the check; on failure it names every circle's files and every
import that runs up.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "easyvideor1"
SOURCE = Path(__file__).resolve().parents[1] / "src"

# The package's own leaf modules, which everything may use: one layer, whose files import each other.
FOUNDATION = (
    "__init__",
    "errors",
    "registry",
    "outdir",
    "validation",
    "threads",
    "jsonlines",
    "config_loading",
)

# Bottom first: a layer imports only the layers below it (two names in one row import neither). A
# name is a subpackage (``media``), a module directly under the package (``config``), or the
# foundation.
LAYERS: list[tuple[str, ...]] = [
    ("foundation",),
    ("media",),
    ("rewards",),
    ("models",),
    ("data",),
    ("resolve",),
    ("tools",),
    ("algorithms",),
    ("rollout",),
    ("evaluation",),
    ("curation", "trainer", "plan"),
    ("config",),
    ("demo",),
    ("cli",),
    ("__main__",),
]


def find_modules(source: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of ``package`` under ``source``."""
    modules = {}
    for path in sorted((source / package).rglob("*.py")):
        parts = list(path.relative_to(source).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node`` that can run (``if TYPE_CHECKING:`` bodies skipped)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _imports_at(other)
        else:
            yield from _imports_at(child)


def _imports_at(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    yield from _imports(node)


def _nearest_module(name: str, modules: dict[str, Path]) -> str | None:
    """The module that importing ``name`` reaches (``pkg.mod.Class`` -> ``pkg.mod``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(source: Path = SOURCE, package: str = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    modules = find_modules(source, package)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                wanted = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                # `from pkg import sub` imports the submodule; `from mod import name`, the module
                wanted = [
                    f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in modules else origin
                    for alias in node.names
                ]
            for target in wanted:
                if target == package or target.startswith(package + "."):
                    found = _nearest_module(target, modules)
                    if found is not None and found != name:
                        targets.add(found)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
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
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def layer_name(module: str) -> str:
    """The layer-table name of a module: its subpackage, the module itself directly under the
    package, or ``foundation``."""
    parts = module.split(".")
    name = parts[1] if len(parts) > 1 else "__init__"
    return "foundation" if name in FOUNDATION else name


RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def imports_up(graph: dict[str, set[str]]) -> list[str]:
    """``importer -> imported`` for every import into a layer that is not below the importer's."""
    bad = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            a, b = layer_name(module), layer_name(target)
            if a != b and RANK[b] >= RANK[a]:
                bad.append(f"{module} ({a}) -> {target} ({b})")
    return bad


def test_every_package_has_a_layer() -> None:
    names = {layer_name(m) for m in find_modules(SOURCE, PACKAGE)}
    assert names - RANK.keys() == set(), "place these in LAYERS (and in docs/architecture.md)"
    assert RANK.keys() - names == set(), "LAYERS names what the package no longer has"


def test_no_circle_between_files() -> None:
    found = cycles(import_graph())
    assert not found, "import circles (the files of each):\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_import_runs_up_the_layers() -> None:
    bad = imports_up(import_graph())
    assert not bad, "imports running up the layering:\n" + "\n".join(bad)


def test_the_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The scanner on a small package: what runs is an edge, what only type checkers read is not."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "from . import b\nfrom .sub.c import thing\n",
        "b.py": "def f():\n    from pkg import a\n",  # function-level: a circle with a.py
        "d.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n"
            "else:\n    import pkg.sub.c\n"
        ),
        "sub/__init__.py": "",
        "sub/c.py": "from .. import d as _d\nimport os\n",  # `from .. import d`: the submodule
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    graph = import_graph(tmp_path, "pkg")
    assert graph == {
        "pkg": set(),
        "pkg.a": {"pkg.b", "pkg.sub.c"},
        "pkg.b": {"pkg.a"},
        "pkg.d": {"pkg.sub.c"},
        "pkg.sub": set(),
        "pkg.sub.c": {"pkg.d"},
    }
    assert cycles(graph) == [["pkg.a", "pkg.b"], ["pkg.d", "pkg.sub.c"]]
