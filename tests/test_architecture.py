"""The house drawn from the imports: no circles between modules nor between the layers
(a package, or a module at the root), no module reaching into another's underscore
names, and no module named like a standard-library one.

Every ``import`` and ``from ... import`` in src/hybridkb is read with :mod:`ast`,
wherever it stands: at the top of a module, inside a function (a late import), or
under ``if TYPE_CHECKING:``. A late or type-only import hides a circle from Python at
run time, not from the design: the layer below still names the layer above. So each
counts as an edge from the importing module to the module it names (``from .storage
import base`` names ``hybridkb.storage.base``; ``from .storage import Storage`` names
the package ``hybridkb.storage``), as import-linter and grimp draw the graph. Nothing
is imported.

Run ``python tests/test_architecture.py`` to print the modules, edges and any circle.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from paths import ROOT

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

SRC = ROOT / "src"
PACKAGE = "hybridkb"


@dataclass(frozen=True)
class Import:
    """One imported name: the module holding the import, the module it names, the line,
    and the name taken from that module (None for ``import x`` or a submodule)."""

    importer: str
    module: str
    line: int
    name: str | None


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__.py``)."""
    found = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _owner(target: str, known: dict[str, Path]) -> str:
    """The module of the package that defines ``target`` (a dotted name, or a module)."""
    while target not in known and "." in target:
        target = target.rsplit(".", 1)[0]
    return target


def imports(known: dict[str, Path]) -> Iterator[Import]:
    """Every import of the package's own modules, late and type-only ones included."""
    for module, path in known.items():
        is_package = path.name == "__init__.py"
        here = module.split(".") if is_package else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == PACKAGE:
                        yield Import(module, _owner(alias.name, known), node.lineno, None)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base_parts = here[: len(here) - node.level + 1]
                    base = ".".join([*base_parts, *([node.module] if node.module else [])])
                else:
                    base = node.module or ""
                if base.split(".")[0] != PACKAGE:
                    continue
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in known:  # a submodule: ``from . import render``
                        yield Import(module, full, node.lineno, None)
                    else:
                        yield Import(module, _owner(base, known), node.lineno, alias.name)


def edges(known: dict[str, Path]) -> dict[str, set[str]]:
    """Importer -> the modules it imports (itself left out)."""
    graph: dict[str, set[str]] = {m: set() for m in known}
    for found in imports(known):
        if found.module != found.importer:
            graph[found.importer].add(found.module)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def test_the_package_has_no_import_circle() -> None:
    found = circles(edges(modules()))
    assert found == [], "import circles (late and TYPE_CHECKING imports count): " + "; ".join(
        " <-> ".join(group) for group in found
    )


def test_no_module_imports_another_modules_underscore_name() -> None:
    known = modules()
    private = [
        f"{i.importer} line {i.line}: {i.module}.{i.name}"
        for i in imports(known)
        if i.name is not None
        and i.name.startswith("_")
        and not i.name.startswith("__")
        and i.module != i.importer
    ]
    assert private == []


def layer(module: str) -> str:
    """The layer a module belongs to: its top-level package (``hybridkb.storage`` for
    ``hybridkb.storage.duckdb.rows``), or itself for a module at the root."""
    return ".".join(module.split(".")[:2])


def layer_edges(known: dict[str, Path]) -> dict[str, set[str]]:
    """Layer -> the layers it imports: the graph of the packages and root modules."""
    graph: dict[str, set[str]] = {layer(m): set() for m in known}
    for importer, targets in edges(known).items():
        graph[layer(importer)] |= {layer(t) for t in targets} - {layer(importer)}
    return graph


def test_the_layers_have_no_import_circle() -> None:
    # A circle between packages (storage -> text -> storage) is an arrow running back up
    # the house even where no two modules import each other: the layers must stack.
    found = circles(layer_edges(modules()))
    assert found == [], "circles between packages: " + "; ".join(
        " <-> ".join(group) for group in found
    )


def test_no_module_is_named_like_a_standard_library_module() -> None:
    # A script run from inside the package folder puts that folder first on sys.path:
    # a types.py there broke `import ast` (ast imports types).
    shadowing = sorted(
        str(path.relative_to(SRC))
        for path in (SRC / PACKAGE).rglob("*")
        if (path.stem if path.suffix == ".py" else path.name) in sys.stdlib_module_names
        and path.name != "__pycache__"
    )
    assert shadowing == []


def test_a_script_runs_from_inside_the_package_folder(tmp_path: Path) -> None:
    for folder in sorted({p.parent for p in (SRC / PACKAGE).rglob("*.py")}):
        done = subprocess.run(
            [sys.executable, "-c", "import ast, copy, types, html, http, io, keyword"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, (folder, done.stderr[-500:])


def test_an_old_import_path_is_the_module_it_became_with_a_warning() -> None:
    from hybridkb.renamed import RENAMED

    for old, new in RENAMED.items():
        sys.modules.pop(old, None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(old)
        assert module is importlib.import_module(new), old
        assert [w.category for w in caught] == [DeprecationWarning], old
        assert new in str(caught[0].message)
    from hybridkb.results import Hit

    assert importlib.import_module("hybridkb.types").Hit is Hit


def test_no_module_imports_an_old_path() -> None:
    from hybridkb.renamed import RENAMED

    old = {o for o in RENAMED}
    users = sorted(f"{i.importer} line {i.line}" for i in imports(modules()) if i.module in old)
    assert users == []


def test_the_walk_sees_late_and_type_only_imports(tmp_path: Path) -> None:
    # The rule is only as good as the walk: a circle closed by a function-level import
    # and one closed under TYPE_CHECKING are both found.
    package = tmp_path / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text("def f():\n    from .high import g\n")
    (package / "high.py").write_text(
        "from typing import TYPE_CHECKING\nfrom . import low\n"
        "if TYPE_CHECKING:\n    from .other import Thing\n"
    )
    (package / "other.py").write_text("from hybridkb.high import low\nfrom .low import _hidden\n")
    known = {
        ".".join(p.relative_to(tmp_path).with_suffix("").parts).removesuffix(".__init__"): p
        for p in package.glob("*.py")
    }
    assert circles(edges(known)) == [["hybridkb.high", "hybridkb.low", "hybridkb.other"]]
    assert [(i.importer, i.name) for i in imports(known) if i.name == "_hidden"] == [
        ("hybridkb.other", "_hidden")
    ]


if __name__ == "__main__":
    graph = edges(modules())
    print(f"{len(graph)} modules, {sum(len(v) for v in graph.values())} import edges")
    for group in circles(graph):
        print("circle:", " <-> ".join(group))
    layers = layer_edges(modules())
    print(f"{len(layers)} layers (packages and root modules)")
    for name in sorted(layers):
        print(f"  {name} -> {', '.join(sorted(layers[name])) or '-'}")
    for group in circles(layers):
        print("circle between layers:", " <-> ".join(group))


def imports_of_test_modules(folder: Path) -> list[str]:
    """Every ``import test_x`` or ``from test_x import ...`` in the .py files under ``folder``,
    as ``path:line`` (late imports inside a function included)."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            found += [
                f"{path.relative_to(folder.parent)}:{node.lineno}"
                for n in names
                if n.startswith("test_")
            ]
    return found


def test_no_test_module_imports_another() -> None:
    # A test module imported by another works in a whole run (pytest has put its folder on
    # the path) and fails when the importer runs alone: shared code lives in tests/support.
    assert imports_of_test_modules(ROOT / "tests") == []


def test_no_benchmark_imports_a_test_module() -> None:
    # A benchmark reaches a test module only through sys.path entries for tests/ folders,
    # and the test's helpers are then private names of a module pytest owns: what a bench
    # shares with the tests lives in tests/support.
    assert imports_of_test_modules(ROOT / "bench") == []
