"""Public functions, methods and classes of src/hybridkb carry docstrings (issue 24).

What counts as public (read with :mod:`ast`, nothing is imported):

* module-level functions and classes whose name does not start with ``_``, in any
  module of the package (``__init__.py`` and ``__main__.py`` included);
* methods and nested classes of a public class, named without a leading ``_``;
  properties count once, by their getter: a ``@name.setter`` or ``@name.deleter``
  is skipped (its getter's docstring speaks for the attribute);
* members of a ``Protocol`` count like any method: they are the contract, and the
  implementations may point to them with a one-line docstring;
* ``@overload`` stubs are skipped: the implementation carries the docstring;
* dunder methods (``__init__``, ``__enter__``, ``__getitem__``...) are skipped: the
  language says what they do, and a class documents its constructor's arguments in
  its own docstring (Google style);
* nothing defined inside a function counts (closures and local classes are details
  of the function that holds them).

Run ``python tests/test_docstrings.py`` to print the figure.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest
from paths import ROOT

PACKAGE = ROOT / "src" / "hybridkb"
MAX_MISSING_SHARE = 0.10
SHOWN = 30


@dataclass(frozen=True)
class Definition:
    """One public function, method or class, and whether it has a docstring."""

    path: str  # relative to src/
    line: int
    name: str  # qualified within its module: "Class.method"
    documented: bool

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.name}"


def _decorator_names(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    names = []
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        names.append(ast.unparse(target))
    return names


def _skipped(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Overload stubs and property setters/deleters (dunders start with ``_`` anyway)."""
    for deco in _decorator_names(node):
        if deco in ("overload", "typing.overload"):
            return True
        if deco.endswith((".setter", ".deleter")):
            return True
    return False


def _walk(body: list[ast.stmt], prefix: str, path: str, out: list[Definition]) -> None:
    for node in body:
        if isinstance(node, (ast.If, ast.Try)):
            # Definitions under ``if TYPE_CHECKING:`` or a try/except import fallback
            # are still module (or class) level.
            branches = [node.body, node.orelse]
            if isinstance(node, ast.Try):
                branches += [h.body for h in node.handlers] + [node.finalbody]
            for branch in branches:
                _walk(branch, prefix, path, out)
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.startswith("_") or _skipped(node):
                continue
        elif isinstance(node, ast.ClassDef):
            if node.name.startswith("_"):
                continue
        else:
            continue
        out.append(
            Definition(path, node.lineno, prefix + node.name, ast.get_docstring(node) is not None)
        )
        if isinstance(node, ast.ClassDef):
            _walk(node.body, f"{prefix}{node.name}.", path, out)


def public_definitions(package: Path = PACKAGE) -> list[Definition]:
    """Every public definition of the package, in file and line order."""
    found: list[Definition] = []
    for file in sorted(package.rglob("*.py")):
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
        _walk(tree.body, "", file.relative_to(package.parent).as_posix(), found)
    return found


def summary(definitions: list[Definition]) -> str:
    """``N of M public functions lack a docstring (x%)``."""
    missing = sum(not d.documented for d in definitions)
    share = missing / len(definitions) if definitions else 0.0
    return (
        f"{missing} of {len(definitions)} public functions, methods and classes "
        f"lack a docstring ({share:.1%})"
    )


def test_walk_counts_what_the_docstring_says(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "mod.py").write_text(
        '''
from typing import TYPE_CHECKING, Protocol, overload

def public(): ...
def _private(): ...

if TYPE_CHECKING:
    def typed_only(): ...

class Shape(Protocol):
    """A shape."""
    def area(self) -> float:
        """Its area."""
    def __init__(self): ...
    @overload
    def scale(self, f: int) -> None: ...
    def scale(self, f): ...
    @property
    def size(self): ...
    @size.setter
    def size(self, v): ...
    def _helper(self): ...

class _Hidden:
    def shown(self): ...

def outer():
    """Outer."""
    def inner(): ...
    class Local: ...
''',
        encoding="utf-8",
    )
    found = {d.name: d.documented for d in public_definitions(package)}
    assert found == {
        "public": False,
        "typed_only": False,
        "Shape": True,
        "Shape.area": True,
        "Shape.scale": False,
        "Shape.size": False,
        "outer": True,
    }


def test_public_definitions_have_docstrings() -> None:
    definitions = public_definitions()
    assert len(definitions) > 500  # the walk found the package
    missing = [d for d in definitions if not d.documented]
    if len(missing) >= MAX_MISSING_SHARE * len(definitions):
        shown = "\n".join(str(d) for d in missing[:SHOWN])
        pytest.fail(
            f"{summary(definitions)}; at most {MAX_MISSING_SHARE:.0%} may. "
            f"The first {min(SHOWN, len(missing))}:\n{shown}"
        )


if __name__ == "__main__":
    print(summary(public_definitions()))
