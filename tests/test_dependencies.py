"""Every module src/ imports is a declared dependency (issue 32 item 7).

The CLI imported click, which the wheel did not declare: it arrived only through
huggingface_hub, so ``hybridkb`` would break the day that chain changed. deptry
(configured in pyproject.toml's ``[tool.deptry]``) fails on an import that is missing,
only transitive, or declared nowhere, and on a declared dependency nothing imports.
It cannot see modules imported by name (``errors.attempt_import``, ``importlib``), so
those are listed in its DEP002 ignores, and the second test checks each is declared (or
listed as used only when installed, DEP003) and that the DEP002 list holds nothing else
(but the dependencies a dependency needs without any import of ours).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions

import pytest
from paths import ROOT

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

SRC = ROOT / "src"
# Declared for a dependency's sake, never imported: pypdf's AES needs cryptography,
# duckdb's TIMESTAMPTZ values need pytz, Starlette's form parser (the UI's uploads)
# needs python-multipart.
NEEDED_BY_A_DEPENDENCY = {"cryptography", "pytz", "python-multipart"}
BY_NAME = {"attempt_import", "import_module", "find_spec"}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    """Every distribution pyproject.toml declares, core or in an extra (normalized)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    specs += [s for extra in project["optional-dependencies"].values() for s in extra]
    names = {normalized(re.split(r"[\s\[<>=!~;]", spec, maxsplit=1)[0]) for spec in specs}
    return names - {"hybridkb"}


def imported_by_name() -> dict[str, str]:
    """Top-level modules src/ imports from a string, e.g. ``attempt_import("onnx", ...)``,
    with the file that does it."""
    found: dict[str, str] = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if name in BY_NAME and isinstance(first, ast.Constant):
                module = str(first.value).split(".")[0]
                if module and module != "hybridkb":
                    found.setdefault(module, str(path.relative_to(ROOT)))
    return found


def test_deptry_finds_no_missing_transitive_or_unused_dependency() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "deptry", "src"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_modules_imported_by_name_are_declared_and_only_they_escape_deptry() -> None:
    distributions = packages_distributions()
    wanted = declared()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["deptry"]
    with_fallback = set(config["per_rule_ignores"]["DEP003"])
    by_name: set[str] = set()
    for module, where in imported_by_name().items():
        if module in with_fallback:
            continue
        dists = {normalized(d) for d in distributions.get(module, [module])}
        assert dists & wanted, f"{where} imports {module!r} by name; declare it in pyproject.toml"
        by_name |= dists & wanted
    ignored = {normalized(n) for n in config["per_rule_ignores"]["DEP002"]}
    # The ignores hide no unused dependency: each is imported by name or needed by another.
    assert ignored - by_name - NEEDED_BY_A_DEPENDENCY == set()
