"""The house drawn from the imports: no circles, and no module reaching into another's
underscore names (issue 33).

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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
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
