"""The default allowed folder is the working folder, never / or the home folder itself
(issue 23 item 7): an MCP host starting ``hybridkb mcp`` there let an agent add almost
any file. ``hybridkb mcp`` says at start what the tools may read."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp_session import INIT, Session

from hybridkb.settings import load_settings

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)


def test_the_working_folder_is_the_default(tmp_path: Path) -> None:
    assert load_settings().allowed_paths == [tmp_path.resolve()]


@pytest.mark.parametrize("where", ["home", "root"])
def test_root_and_home_are_never_the_default_but_may_be_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    folder = home if where == "home" else Path("/")
    monkeypatch.chdir(folder)
    assert load_settings().allowed_paths == []
    monkeypatch.setenv("HYBRIDKB_ALLOWED_PATHS", str(folder))
    assert load_settings().allowed_paths == [folder.resolve()]


def test_mcp_says_what_the_tools_may_read(tmp_path: Path) -> None:
    s = Session(tmp_path, tmp_path / "kb.duckdb")
    s.request(1, "initialize", INIT)
    s.close()
    assert f"the tools may read files under {tmp_path.resolve()}" in s.stderr_path.read_text()


def test_mcp_started_in_the_home_folder_reads_no_file(tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("a private key")
    s = Session(tmp_path, tmp_path / "kb.duckdb", HOME=str(tmp_path))
    s.request(1, "initialize", INIT)
    assert not s.call(2, "create_kb_collection", {"collection_name": "c"})[1]
    text, is_error = s.call(
        3, "add_kb_documents", {"collection_name": "c", "documents": str(tmp_path / "secret.txt")}
    )
    assert is_error and "HYBRIDKB_ALLOWED_PATHS" in text
    s.close()
    assert "the tools may read no files" in s.stderr_path.read_text()
