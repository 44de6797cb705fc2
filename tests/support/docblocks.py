"""Run the shell and Python blocks of a Markdown file (the README, every page of docs/).

Each block runs in order in a scratch folder, offline, with the fake embedder (the blocks
are about the API, not the model). A block that cannot run here carries a marker comment
on the line above its fence, ``<!-- readme-test: skip (why) -->`` (or ``postgres (why)``:
run by the postgres-marked test).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from pdfgen import Page, write_pdf

import hybridkb

SRC = Path(hybridkb.__file__).resolve().parents[1]
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
    """One fenced block: where it starts, its language, its text and its marker."""

    path: Path
    line: int
    lang: str
    body: str
    tag: str | None
    why: str | None


def blocks(path: Path) -> list[Block]:
    """Every fenced block of the Markdown file ``path``, in order."""
    text = path.read_text(encoding="utf-8")
    return [
        Block(
            path,
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
        f"{block.path.name} line {block.line} ({block.lang}) failed:\n{block.body}\n"
        f"--- stdout\n{done.stdout[-2000:]}\n--- stderr\n{done.stderr[-3000:]}"
    )
    assert "Traceback" not in done.stderr, done.stderr
