"""The standing hostile-file suite (issues 25 and 32): each crafted file sits in a folder
beside a good file and is added in a child process under a 1.5 GB address-space cap.
Each must end as one line naming the budget it hit (and the setting to raise), or be
read within its budgets, the good file must be added, the child's peak memory must stay
under 1 GB, and it must finish (a hang guard, not a timing). Every loader is here:
PDF, DOCX, PPTX, XLSX (.xlsm), CSV (.tsv), EPUB, HTML (.htm, .xhtml), Markdown and text,
whole and streamed.

The default run uses small variants against budgets lowered through the environment,
as a user would raise or lower them; the ``slow`` run uses the attack's full sizes at
the default budgets (bench/budgets.py measures them). The cases are in
tests/support/hostile_cases.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hostile_cases import FULL, SMALL, Crafted
from hostilegen import write_lines
from paths import SUPPORT

from hybridkb.loaders.ocr import ocr_available

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

CAP_MB = 1536
PEAK_GOAL_MB = 1024
TESTS = SUPPORT


def _markdown(mb: int) -> Callable[[Path], None]:
    # One fence never closed: the whole file is one code block, read as it comes.
    def make(path: Path) -> None:
        write_lines(path, b"code line of a fence nobody closed\n", mb << 20, prefix=b"# T\n```\n")

    return make


def add_in_child(tmp_path: Path, folder: Path, env: dict[str, str]) -> dict[str, object]:
    """Add ``folder`` in a child process capped at CAP_MB; return its JSON report."""
    run = subprocess.run(
        [
            sys.executable,
            str(TESTS / "budget_child.py"),
            str(tmp_path / "kb.duckdb"),
            str(folder),
            str(CAP_MB),
        ],
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard
        env={**os.environ, **env},
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    result: dict[str, object] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def check(tmp_path: Path, crafted: Crafted) -> dict[str, object]:
    if crafted.needs_ocr and not ocr_available():
        pytest.skip("the OCR extra is not installed")
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "good.txt").write_text("Lemurs live on Madagascar.\n")
    crafted.make(folder / crafted.name)
    result = add_in_child(tmp_path, folder, crafted.env)
    print(f"{crafted.name}: {json.dumps(result)}")
    assert isinstance(result["peak_rss_mb"], int) and result["peak_rss_mb"] < PEAK_GOAL_MB, result
    if crafted.readable:
        assert result["added"] == sorted([crafted.name, "good.txt"]), result
        assert not result["failed"], result
        return result
    assert result["added"] == ["good.txt"], result
    failed = result["failed"]
    assert isinstance(failed, dict) and list(failed) == [crafted.name], result
    error = failed[crafted.name]
    assert error.startswith(f"{crafted.name}: ") and "\n" not in error
    if crafted.setting is None:
        assert crafted.expect in error
    else:
        assert (
            "budget" in error and f"raise HYBRIDKB_MAX_FILE_{crafted.setting} to read it" in error
        )
    return result


@pytest.mark.parametrize("crafted", SMALL, ids=lambda c: c.name)
def test_a_crafted_file_fails_alone_within_its_budget(tmp_path: Path, crafted: Crafted) -> None:
    check(tmp_path, crafted)


def test_a_large_markdown_file_streams_in_bounded_memory(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "good.txt").write_text("Lemurs live on Madagascar.\n")
    _markdown(24)(folder / "fence.md")
    result = add_in_child(tmp_path, folder, {})
    assert result["added"] == ["fence.md", "good.txt"] and not result["failed"], result
    assert isinstance(result["peak_rss_mb"], int) and result["peak_rss_mb"] < PEAK_GOAL_MB, result


@pytest.mark.slow
@pytest.mark.parametrize("crafted", FULL, ids=lambda c: c.name)
def test_the_attack_files_at_full_size_fail_at_default_budgets(
    tmp_path: Path, crafted: Crafted
) -> None:
    check(tmp_path, crafted)


@pytest.mark.slow
def test_a_150_mb_markdown_file_streams_in_bounded_memory(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "good.txt").write_text("Lemurs live on Madagascar.\n")
    _markdown(150)(folder / "fence.md")
    result = add_in_child(tmp_path, folder, {})
    assert result["added"] == ["fence.md", "good.txt"] and not result["failed"], result
    assert isinstance(result["peak_rss_mb"], int) and result["peak_rss_mb"] < PEAK_GOAL_MB, result
