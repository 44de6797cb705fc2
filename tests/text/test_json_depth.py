"""JSON from outside is read by one rule (``limits.parse_json``: size and depth first).

``json.loads`` recurses once per nested array or object, so a small text nesting 100,000
of them raises RecursionError: not a one-line error but a traceback, wherever the text came
from. Fixed for a setting (``HYBRIDKB_ALLOWED_PATHS`` from a repository's ``.env``:
test_settings) and an evaluation corpus (test_evaluate); the handshake's lines are in
test_handshake_lines; a graph folder to import is here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridkb.cli.commands import main

NESTED = "[" * 100_000 + "]" * 100_000


def test_a_graph_folder_nested_too_deeply_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYBRIDKB_MODEL", "fake")
    folder = tmp_path / "graph"
    folder.mkdir()
    (folder / "d.nodes.json").write_text(NESTED)
    (folder / "d.edges.json").write_text("[]")
    db = str(tmp_path / "kb.duckdb")
    assert main(["--db", db, "create", "Docs"]) == 0
    capsys.readouterr()
    assert main(["--db", db, "graph", "import", "Docs", str(folder)]) in (1, 2)
    said = capsys.readouterr()
    assert "d.nodes.json" in said.out + said.err and "Traceback" not in said.err
