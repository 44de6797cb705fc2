"""The docs site builds and runs: generated pages are current, every shell and Python block
of docs/ runs (as the README's do), links and anchors resolve, and `mkdocs build --strict`
passes (broken links, missing pages and stale anchors fail it)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docblocks import RUNNABLE, blocks, run_block, scratch
from paths import ROOT

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

DOCS = ROOT / "docs"
README = ROOT / "README.md"
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def test_generated_pages_are_current() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_page_blocks_run(page: Path, tmp_path: Path) -> None:
    found = blocks(page)
    runnable = [b for b in found if b.lang in RUNNABLE and b.tag is None]
    for b in found:
        assert b.lang, f"{page} line {b.line}: a fence without a language"
        if b.lang == "json":
            json.loads(b.body)
        if b.tag is not None:
            assert b.tag in ("skip", "postgres") and b.why, b
    if not runnable:
        return
    env = scratch(tmp_path)
    for block in runnable:
        run_block(block, env)


def slug(heading: str) -> str:
    """The anchor mkdocs (Python-Markdown's toc) gives a heading."""
    from markdown.extensions.toc import slugify

    return str(slugify(heading, "-"))


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {slug(m[1].strip("` ")) for m in re.finditer(r"^#{1,6}\s+(.+)$", text, re.M)}


def test_readme_links_into_docs_resolve() -> None:
    text = README.read_text(encoding="utf-8")
    checked = 0
    for match in LINK.finditer(text):
        target = match["target"]
        if "://" in target or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        file = (ROOT / path) if path else README
        assert file.exists(), f"README links to {target}, which does not exist"
        if anchor and file.suffix == ".md":
            assert anchor in anchors(file), f"README links to {target}: no such heading"
        checked += 1
    assert checked >= 3


def test_mkdocs_builds_strict(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the dev extra installs mkdocs-material")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").exists()
