"""doctor / reembed / compact from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybridkb.cli.commands import main


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("HYBRIDKB_MODEL", "fake")
    (tmp_path / "a.txt").write_text("alpha beta gamma\n\ndelta epsilon", encoding="utf-8")
    path = str(tmp_path / "kb.duckdb")
    assert main(["--db", path, "create", "Notes"]) == 0
    assert main(["--db", path, "add", "Notes", str(tmp_path / "a.txt")]) == 0
    return path


@pytest.mark.parametrize("command", ["doctor", "reembed", "compact", "copy"])
def test_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--help"]) == 0
    assert "Usage" in capsys.readouterr().out


def test_doctor_reports_a_clean_kb(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["--db", db, "doctor", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["collections"][0]["collection"] == "Notes"


def test_reembed_then_compact(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["--db", db, "reembed", "Notes", "--model", "fake:32", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dim"] == 32
    assert main(["--db", db, "compact", "--json"]) == 0
    sizes = json.loads(capsys.readouterr().out)
    assert sizes["bytes_after"] <= sizes["bytes_before"]
    assert main(["--db", db, "search", "Notes", "delta", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"]


def test_unknown_collection_is_one_line(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["--db", db, "reembed", "Nope"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Notes" in err


def test_a_copy_to_a_missing_folder_names_to(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    dest = tmp_path / "no such folder" / "copy.duckdb"
    assert main(["--db", db, "copy", "--to", str(dest)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fix the path in --to" in err and "--db" not in err
    assert not dest.parent.exists()
