"""The command-line contract: names, flags, JSON keys, exit codes, one-line errors."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import docx
import pytest

from hybridkb.cli.commands import cli, main

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

COMMANDS = ["create", "list", "describe", "add", "search", "delete", "drop", "eval"]
HIT_KEYS = {
    "rank", "score", "text", "collection", "document_id", "chunk_id", "filename", "page",
    "section", "metadata", "scores", "document_node",
}  # fmt: skip
SCORE_KEYS = {"bm25", "bm25_rank", "vector", "vector_rank", "fused", "rerank"}
DESCRIBE_KEYS = {
    "name",
    "documents",
    "chunks",
    "embedding_model",
    "dim",
    "languages",
    "bytes",
    "updated_at",
    "sources",
}


@pytest.fixture(autouse=True)
def fake_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDKB_MODEL", "fake")


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "kb.duckdb")


class Run:
    def __init__(self, capsys: pytest.CaptureFixture[str], db: str) -> None:
        self.capsys = capsys
        self.db = db

    def __call__(self, *args: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = main(["--db", self.db, *args])
        out, err = self.capsys.readouterr()
        return code, out, err

    def json(self, *args: str) -> Any:
        code, out, err = self(*args, "--json")
        assert code == 0, err
        return json.loads(out)


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], db: str) -> Run:
    return Run(capsys, db)


def make_docs(folder: Path, *, bad: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "invoice.txt").write_text(
        "Invoice 2024-117\n\nLaptop computer purchased for the consulting business.\n",
        encoding="utf-8",
    )
    (folder / "handbook.md").write_text(
        "# Staff handbook\n\n## Annual leave\n\nEmployees accrue four weeks of paid annual leave.\n",
        encoding="utf-8",
    )
    document = docx.Document()
    document.add_heading("Capital allowances", level=1)
    document.add_paragraph("The decline in value of a depreciating asset is deductible.")
    document.save(str(folder / "allowances.docx"))
    if bad:
        (folder / "broken.docx").write_bytes(b"this is not a zip archive")
    return folder


# -- help and usage ----------------------------------------------------------------------


def _all_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    # list_commands/get_command, not group.commands: the root loads `graph` when named.
    ctx = click.Context(group)
    found = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        found.append((*prefix, name))
        if isinstance(command, click.Group):
            found += _all_commands(command, (*prefix, name))
    return found


def test_every_command_has_help(run: Run) -> None:
    code, top, _ = run("--help")
    assert code == 0 and "Exit codes" in top
    commands = _all_commands(cli)
    assert {c[0] for c in commands} >= {*COMMANDS, "graph", "mcp"}
    for command in COMMANDS:
        assert f"  {command} " in top
    for path in commands:
        code, out, err = run(*path, "--help")
        assert code == 0, err
        assert out.startswith(f"Usage: hybridkb {' '.join(path)}")
        if path[0] != "graph":  # the graph group carries its own epilog
            assert "Exit codes" in out


def test_usage_error_exits_2(run: Run) -> None:
    code, _, err = run("search")
    assert code == 2 and "Missing argument" in err
    code, _, err = run("search", "x", "q", "--mode", "fuzzy")
    assert code == 2


def test_mcp_without_the_extra_is_one_line(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # as if `hybridkb[mcp]` were not installed
    # stdio is served without the SDK (tests/mcp/test_mcp_stdio.py); HTTP needs it.
    code, out, err = run("mcp", "--http", "8765")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "pip install 'hybridkb[mcp]'" in err


def test_version(run: Run) -> None:
    code, out, _ = run("--version")
    assert code == 0 and "hybridkb" in out


# -- create, list, describe --------------------------------------------------------------


def test_create_list_describe_json_keys(run: Run) -> None:
    code, out, err = run("create", "Tax Documents")
    assert code == 0, err
    assert "Tax Documents" in out
    run("create", "税务文件", "--chunk-size", "500", "--chunk-strategy", "size")
    listing = run.json("list")
    assert list(listing) == ["collections"]
    assert {c["name"] for c in listing["collections"]} == {"Tax Documents", "税务文件"}
    for entry in listing["collections"]:
        assert set(entry) == {"name", "documents", "chunks"}
    info = run.json("describe", "Tax Documents")
    assert set(info) == DESCRIBE_KEYS
    assert info["embedding_model"] == "fake" and info["dim"] == 64 and info["documents"] == 0


def test_create_existing_fails_unless_exist_ok(run: Run) -> None:
    assert run("create", "Tax")[0] == 0
    code, out, err = run("create", "Tax")
    assert code == 1 and out == "" and err.count("\n") == 1 and err.startswith("hybridkb: ")
    assert run("create", "Tax", "--exist-ok")[0] == 0


def test_list_human_is_a_table(run: Run) -> None:
    code, out, _ = run("list")
    assert code == 0 and "no collections" in out
    run("create", "Tax")
    code, out, _ = run("list")
    assert out.splitlines()[0].split() == ["NAME", "DOCUMENTS", "CHUNKS", "MODEL", "UPDATED"]
    assert out.splitlines()[1].split()[:4] == ["Tax", "0", "0", "fake"]


def test_unknown_collection_is_one_line_listing_existing(run: Run) -> None:
    run("create", "Tax")
    run("create", "Leave")
    for args in (("describe", "Nope"), ("search", "Nope", "query"), ("delete", "Nope", "x")):
        code, out, err = run(*args)
        assert code == 1 and out == ""
        assert err.count("\n") == 1
        assert (
            err.startswith("hybridkb: ") and "'Nope'" in err and "'Tax'" in err and "'Leave'" in err
        )
        assert "Traceback" not in err


# -- add -----------------------------------------------------------------------------------


def test_add_reports_each_file_and_exits_1_on_a_bad_one(run: Run, tmp_path: Path) -> None:
    folder = make_docs(tmp_path / "docs")
    run("create", "Tax")
    code, out, err = run("add", "Tax", str(folder), "--json")
    assert code == 1, err
    report = json.loads(out)
    assert set(report) == {"added", "unchanged", "failed", "skipped"}
    assert report["skipped"] == []
    assert {f["filename"] for f in report["added"]} == {
        "invoice.txt",
        "handbook.md",
        "allowances.docx",
    }
    for f in report["added"]:
        assert {"filename", "document_id", "chunks", "warnings"} <= set(f) and f["chunks"] >= 1
    assert [f["filename"] for f in report["failed"]] == ["broken.docx"]
    assert {"filename", "error"} <= set(report["failed"][0]) and report["failed"][0]["error"]
    assert run.json("describe", "Tax")["documents"] == 3

    # Second run: nothing changed; the good files are skipped, the bad one still fails.
    code, out, _ = run("add", "Tax", str(folder))
    assert code == 1
    lines = out.splitlines()
    assert sum(line.startswith("unchanged") for line in lines) == 3
    assert any(line.startswith("failed") and "broken.docx" in line for line in lines)
    assert lines[-1] == "0 added, 3 unchanged, 1 failed"


def test_folder_add_says_what_it_skipped_and_still_exits_0(run: Run, tmp_path: Path) -> None:
    folder = make_docs(tmp_path / "docs", bad=False)
    (folder / "photo.xyz").write_bytes(b"\x00binary")
    (folder / ".notes.txt").write_text("a hidden file")
    run("create", "Tax")
    report = run.json("add", "Tax", str(folder))
    assert [(s["filename"], s["reason"].split(";")[0]) for s in report["skipped"]] == [
        (".notes.txt", "hidden (a name starting with '.')"),
        ("photo.xyz", "unsupported type .xyz"),
    ]
    code, out, err = run("add", "Tax", str(folder))
    assert code == 0, err
    lines = out.splitlines()
    assert any(
        line.startswith("skipped") and "photo.xyz: unsupported type .xyz" in line for line in lines
    )
    assert lines[-1].endswith(", 2 skipped")


def test_add_good_files_exits_0_with_summary(run: Run, tmp_path: Path) -> None:
    folder = make_docs(tmp_path / "docs", bad=False)
    run("create", "Tax")
    code, out, err = run("add", "Tax", str(folder / "invoice.txt"), str(folder / "handbook.md"))
    assert code == 0, err
    assert (
        out.splitlines()[0].startswith("added")
        and out.splitlines()[-1] == "2 added, 0 unchanged, 0 failed"
    )


def test_add_create_flag_and_bad_metadata(run: Run, tmp_path: Path) -> None:
    folder = make_docs(tmp_path / "docs", bad=False)
    code, _, err = run("add", "New", str(folder / "invoice.txt"))
    assert code == 1 and "not found" in err
    code, _, err = run("add", "New", str(folder / "invoice.txt"), "--metadata", "[1, 2]")
    assert code == 2 and err.startswith("hybridkb: --metadata")
    code, _, err = run("add", "New", str(folder / "invoice.txt"), "--metadata", "{oops")
    assert code == 2 and err.count("\n") == 1
    code, _, err = run(
        "add", "New", str(folder / "invoice.txt"), "--create", "--metadata", '{"year": 2024}'
    )
    assert code == 0, err
    hit = run.json("search", "New", "laptop")["results"][0]
    assert hit["metadata"]["year"] == 2024


# -- search -------------------------------------------------------------------------------


@pytest.fixture
def filled(run: Run, tmp_path: Path) -> Run:
    folder = make_docs(tmp_path / "docs", bad=False)
    run("create", "Tax")
    run("create", "Leave")
    assert run("add", "Tax", str(folder / "invoice.txt"), "--metadata", '{"year": 2024}')[0] == 0
    assert (
        run("add", "Tax", str(folder / "allowances.docx"), "--metadata", '{"year": 2023}')[0] == 0
    )
    assert run("add", "Leave", str(folder / "handbook.md"))[0] == 0
    return run


def test_search_json_has_every_hit_key(filled: Run) -> None:
    data = filled.json("search", "Tax", "laptop consulting business", "--k", "3")
    assert list(data) == ["results", "warnings"] and data["results"]
    assert data["warnings"] == []
    for hit in data["results"]:
        assert set(hit) == HIT_KEYS
        assert set(hit["scores"]) == SCORE_KEYS
        assert hit["collection"] == "Tax"
    assert data["results"][0]["filename"] == "invoice.txt"
    assert data["results"][0]["rank"] == 1


@pytest.mark.parametrize("mode", ["hybrid", "vector", "keyword", "filter"])
def test_search_modes(filled: Run, mode: str) -> None:
    data = filled.json("search", "Tax", "laptop", "--mode", mode)
    assert data["results"][0]["filename"] == "invoice.txt"


def test_search_star_spans_all_collections(filled: Run) -> None:
    data = filled.json("search", "*", "annual leave laptop", "--k", "10")
    assert {h["collection"] for h in data["results"]} == {"Tax", "Leave"}
    assert [h["rank"] for h in data["results"]] == list(range(1, len(data["results"]) + 1))


def test_search_where_filters_metadata(filled: Run) -> None:
    data = filled.json(
        "search", "Tax", "laptop decline value", "--where", '{"year": 2023}', "--k", "10"
    )
    assert data["results"] and {h["filename"] for h in data["results"]} == {"allowances.docx"}
    data = filled.json("search", "Tax", "laptop", "--where", '{"year": 1999}')
    assert data["results"] == []


def test_search_bad_where_is_usage_error(filled: Run) -> None:
    code, out, err = filled("search", "Tax", "laptop", "--where", "{not json")
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("hybridkb: ")


def test_search_human_output_cites(filled: Run) -> None:
    code, out, _ = filled("search", "*", "annual leave", "--k", "2")
    assert code == 0
    first = out.splitlines()[0]
    # The same citation the agent tools give: collection | file | p. | § section | doc id.
    assert first.startswith(" 1. ") and "Leave | handbook.md" in first and "| doc " in first
    assert "§ Staff handbook" in first
    assert "annual leave" in out.splitlines()[1]
    code, out, _ = filled("search", "Tax", "laptop", "--where", '{"year": 1999}')
    assert out.strip() == "no results"


# -- delete and drop ---------------------------------------------------------------------------


def test_delete_found_and_unknown_ids(filled: Run) -> None:
    data = filled.json("search", "Tax", "laptop", "--k", "10")
    doc_ids = sorted({h["document_id"] for h in data["results"]})
    code, out, err = filled("delete", "Tax", doc_ids[0], "no-such-id")
    assert code == 1
    assert "deleted 1 document" in out
    assert err.count("\n") == 1 and "no-such-id" in err
    assert filled.json("describe", "Tax")["documents"] == 1
    code, out, _ = filled("delete", "Tax", doc_ids[1], "--json")
    assert code == 0 and json.loads(out) == {"deleted": [doc_ids[1]], "not_found": []}


def test_drop_refuses_without_yes_when_not_a_terminal(filled: Run) -> None:
    code, out, err = filled("drop", "Tax")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "--yes" in err
    assert "Tax" in {c["name"] for c in filled.json("list")["collections"]}


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_drop_asks_on_a_terminal(filled: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", _Terminal("n\n"))
    code, out, _ = filled("drop", "Tax")
    assert code == 1 and "not dropped" in out
    monkeypatch.setattr(sys, "stdin", _Terminal("y\n"))
    code, out, _ = filled("drop", "Tax")
    assert code == 0 and "dropped" in out
    assert {c["name"] for c in filled.json("list")["collections"]} == {"Leave"}


def test_drop_yes(filled: Run) -> None:
    code, _, err = filled("drop", "Leave", "--yes")
    assert code == 0, err
    assert {c["name"] for c in filled.json("list")["collections"]} == {"Tax"}
    code, _, err = filled("drop", "Leave", "--yes")
    assert code == 1 and "not found" in err


# -- settings and workspaces -----------------------------------------------------------------


def test_bad_setting_is_one_line_config_error(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDKB_CHUNK_SIZE", "lots")
    code, out, err = run("list")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "HYBRIDKB_CHUNK_SIZE" in err


def test_workspaces_are_separate(run: Run) -> None:
    run("--workspace", "alice", "create", "Notes")
    assert run.json("--workspace", "bob", "list") == {"collections": []}
    assert [c["name"] for c in run.json("--workspace", "alice", "list")["collections"]] == ["Notes"]


def test_db_url_forms(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "url.duckdb"
    assert main(["--db", f"duckdb://{path}", "create", "X"]) == 0
    assert path.is_file()
    capsys.readouterr()
    assert main(["--db", ":memory:", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"collections": []}


# -- a real process ----------------------------------------------------------------------------


def test_console_script_end_to_end(tmp_path: Path) -> None:
    folder = make_docs(tmp_path / "docs")
    env = {**os.environ, "HYBRIDKB_MODEL": "fake", "HYBRIDKB_CACHE_DIR": str(tmp_path / "cache")}
    script = Path(sys.executable).with_name("hybridkb")
    base = [str(script)] if script.is_file() else [sys.executable, "-m", "hybridkb"]
    base += ["--db", str(tmp_path / "proc.duckdb")]

    def call(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*base, *args], env=env, cwd=tmp_path, capture_output=True, text=True, check=False,
            stdin=subprocess.DEVNULL, timeout=120,
        )  # fmt: skip

    assert call("create", "Tax").returncode == 0
    added = call("add", "Tax", str(folder), "--json")
    assert added.returncode == 1
    report = json.loads(added.stdout)
    assert len(report["added"]) == 3 and report["failed"][0]["filename"] == "broken.docx"
    listing = json.loads(call("list", "--json").stdout)
    assert listing == {
        "collections": [
            {"name": "Tax", "documents": 3, "chunks": listing["collections"][0]["chunks"]}
        ]
    }
    found = call("search", "*", "annual leave", "--json")
    assert found.returncode == 0 and set(json.loads(found.stdout)["results"][0]) == HIT_KEYS
    refused = call("drop", "Tax")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "--yes" in refused.stderr
    missing = call("describe", "Nope")
    assert (
        missing.returncode == 1
        and missing.stderr
        == "hybridkb: collection 'Nope' not found in workspace 'default'; existing: 'Tax'\n"
    )
    assert call("drop", "Tax", "--yes").returncode == 0
    module = subprocess.run(
        [sys.executable, "-m", "hybridkb", "--help"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert module.returncode == 0 and "Exit codes" in module.stdout
