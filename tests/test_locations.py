"""Where the knowledge base lives when nobody says: the per-user data folder, shared by the
CLI, Python and the MCP server; a named file in a missing folder is refused."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.tools import BaseTool

import hybridkb
from hybridkb.agents.tools import make_tools
from hybridkb.cli.commands import main
from hybridkb.errors import ConfigError
from hybridkb.locations import default_db, user_data_folder
from hybridkb.settings import load_settings

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)


@pytest.fixture(autouse=True)
def fake_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDKB_MODEL", "fake")


@pytest.fixture
def data_home() -> Path:
    """The per-user data home conftest points XDG_DATA_HOME at (not created yet)."""
    return Path(os.environ["XDG_DATA_HOME"])


def test_the_default_file_is_in_the_per_user_data_folder(data_home: Path) -> None:
    expected = data_home / "hybridkb" / "hybridkb.duckdb"
    assert user_data_folder() == data_home / "hybridkb"
    assert default_db() == str(expected)
    assert load_settings().db == str(expected)


def test_the_cli_makes_the_default_folder_private_and_nothing_in_the_working_folder(
    tmp_path: Path, data_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not data_home.exists()
    assert main(["create", "Notes"]) == 0
    folder = data_home / "hybridkb"
    assert (folder / "hybridkb.duckdb").is_file()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert not (tmp_path / "hybridkb.duckdb").exists()


def test_cli_and_python_share_the_default_knowledge_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["create", "Notes"]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with hybridkb.connect() as kb:
        assert [c.name for c in kb.list_collections()] == ["Notes"]


@pytest.mark.parametrize("how", ["--db", "HYBRIDKB_DB"])
def test_a_file_in_a_missing_folder_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    typo = tmp_path / "Documnets" / "kb.duckdb"
    args = ["create", "Notes"]
    if how == "--db":
        args = ["--db", str(typo), *args]
    else:
        monkeypatch.setenv("HYBRIDKB_DB", str(typo))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"the folder {typo.parent} does not exist" in err and "HYBRIDKB_DB" in err
    assert not typo.parent.exists()


def test_python_refuses_a_missing_folder_too(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        hybridkb.connect(tmp_path / "nope" / "kb.duckdb")
    assert not (tmp_path / "nope").exists()


def test_an_existing_folder_and_memory_still_open(tmp_path: Path) -> None:
    with hybridkb.connect(tmp_path / "kb.duckdb") as kb:
        kb.create_collection("Notes")
    with hybridkb.connect(f"duckdb://{tmp_path / 'other.duckdb'}") as kb:
        kb.create_collection("Notes")
    with hybridkb.connect(":memory:") as kb:
        kb.create_collection("Notes")
        assert [c.name for c in kb.list_collections()] == ["Notes"]
    assert not Path(os.environ["XDG_DATA_HOME"]).exists()


def test_kb_list_names_the_file(tmp_path: Path) -> None:
    with hybridkb.connect(tmp_path / "kb.duckdb") as kb:
        tools: dict[str, BaseTool] = {t.name: t for t in make_tools(kb)}
        empty = tools["kb_list"].invoke({})
        kb.create_collection("Notes")
        listed = tools["kb_list"].invoke({})
    where = f"(stored in {tmp_path / 'kb.duckdb'})"
    assert f"No collections yet in workspace 'default' {where}." in empty
    assert f"1 collection in workspace 'default' {where}:" in listed


def test_mcp_says_which_file_on_stderr(tmp_path: Path, data_home: Path) -> None:
    env = {**os.environ, "HYBRIDKB_LOCK_TIMEOUT": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "hybridkb", "mcp"],
        input=b"",  # no client: the server starts, sees end of input and stops
        capture_output=True,
        env=env,
        cwd="/",
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    first = proc.stderr.decode().splitlines()[0]
    assert first == f"hybridkb mcp: knowledge base {data_home / 'hybridkb' / 'hybridkb.duckdb'}"


def test_mcp_refuses_a_missing_folder_before_serving(tmp_path: Path) -> None:
    typo = tmp_path / "Documnets" / "kb.duckdb"
    proc = subprocess.run(
        [sys.executable, "-m", "hybridkb", "mcp"],
        input=b"",
        capture_output=True,
        env={**os.environ, "HYBRIDKB_DB": str(typo)},
        cwd="/",
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == b""
    err = proc.stderr.decode()
    assert err.count("\n") == 1 and f"the folder {typo.parent} does not exist" in err
    assert not typo.parent.exists()
