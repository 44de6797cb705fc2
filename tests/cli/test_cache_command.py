"""`hybridkb cache [info|clear]`: where the cache folder is, what it holds, and emptying it
without touching anything hybridkb did not put there."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import hybridkb
from hybridkb.cli.commands import main


@pytest.fixture
def cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A cache folder of this test's own (conftest's links the session's ONNX exports)."""
    folder = tmp_path / "my-cache"
    folder.mkdir()
    monkeypatch.setenv("HYBRIDKB_CACHE_DIR", str(folder))
    monkeypatch.setenv("HYBRIDKB_MODEL", "fake")
    return folder


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def fill(cache_dir: Path, tmp_path: Path) -> None:
    with hybridkb.connect(tmp_path / "kb.duckdb") as kb:
        kb.create_collection("Notes").add_texts([f"note number {i}" for i in range(7)])
    (cache_dir / "onnx" / "some-model" / "v2").mkdir(parents=True)
    (cache_dir / "onnx" / "some-model" / "v2" / "model.onnx").write_bytes(b"x" * 5000)


def test_info_says_where_the_cache_is_and_what_it_holds(
    cache_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fill(cache_dir, tmp_path)
    report = run_json(capsys, "cache", "info")
    assert report["folder"] == str(cache_dir)
    entries = {e["name"]: e for e in report["entries"]}
    assert set(entries) == {"onnx", "embeddings.sqlite3", "langid"}
    assert entries["onnx"]["bytes"] == 5000 and entries["onnx"]["exists"]
    assert entries["embeddings.sqlite3"]["vectors"] == 7
    assert entries["embeddings.sqlite3"]["limit_bytes"] == 256 << 20
    assert report["bytes"] == sum(e["bytes"] for e in entries.values())
    assert all(e["holds"] for e in entries.values())


def test_bare_cache_is_info_in_text(
    cache_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fill(cache_dir, tmp_path)
    capsys.readouterr()
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"cache folder: {cache_dir} (")
    assert "7 vectors (limit 256.0 MB)" in out and "onnx" in out


def test_clear_removes_only_what_hybridkb_keeps(
    cache_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fill(cache_dir, tmp_path)
    (cache_dir / "notes-of-mine.txt").write_text("not ours")
    report = run_json(capsys, "cache", "clear")
    assert report["bytes"] > 5000 and "onnx" in report["removed"]
    assert sorted(p.name for p in cache_dir.iterdir()) == ["notes-of-mine.txt"]
    after = run_json(capsys, "cache", "info")
    assert after["bytes"] == 0 and not any(e["exists"] for e in after["entries"])
    with hybridkb.connect(tmp_path / "kb.duckdb") as kb:  # the knowledge base is not the cache
        assert kb.collection("Notes").count() == 7


def test_clear_unlinks_a_linked_folder_and_keeps_its_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = Path(os.environ["HYBRIDKB_CACHE_DIR"])  # conftest links onnx/ to the session's
    target = (cache / "onnx").resolve()
    run_json(capsys, "cache", "clear")
    assert not (cache / "onnx").exists() and target.is_dir()


def test_help_lists_the_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache", "--help"]) == 0
    out = capsys.readouterr().out
    assert "info" in out and "clear" in out
