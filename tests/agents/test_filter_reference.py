"""Filters a stranger can discover and use: the reference in --help and the docs (docs/guide/filters.md), a
warning for a field no document has, an error naming the operators, refused metadata
that would shadow a built-in field, and the same filters from the CLI, the Python API,
the LangChain tool and MCP (by page, file name, date added and a metadata field)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from mcp_session import INIT, Session
from paths import ROOT
from pdfgen import Page, write_pdf

import hybridkb
from hybridkb.agents.filter_check import filter_warnings
from hybridkb.agents.tools import make_tools
from hybridkb.cli.commands import cli, main
from hybridkb.errors import ConfigError, InvalidFilter
from hybridkb.text.filters import FIELDS, OPERATORS, filter_reference, parse_filter

pytestmark = pytest.mark.process  # starts processes (a server, a worker, the CLI)

FILTERS_PAGE = ROOT / "docs" / "guide" / "filters.md"
TODAY = datetime.now(UTC).date()
YESTERDAY = (TODAY - timedelta(days=1)).isoformat()
TOMORROW = (TODAY + timedelta(days=2)).isoformat()  # whatever the session time zone


@pytest.fixture(autouse=True)
def fake_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDKB_MODEL", "fake")


def make_files(folder: Path) -> tuple[Path, Path]:
    guide = write_pdf(
        folder / "2023-guide.pdf",
        [
            Page("Tax guide\n\nKeep receipts for every claim."),
            Page("Depreciation\n\nLaptops are written off over three years."),
            Page("Travel\n\nCar trips for work are claimed per kilometre."),
        ],
    )
    notes = folder / "notes.md"
    notes.write_text("# Notes\n\nLaptops bought in 2024 for the office.\n", encoding="utf-8")
    return guide, notes


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    """A DuckDB file whose 'Tax' collection holds a 3-page PDF (year 2023) and a note (2024)."""
    guide, notes = make_files(tmp_path)
    db = tmp_path / "kb.duckdb"
    with hybridkb.connect(db, model="fake") as kb:
        tax = kb.create_collection("Tax")
        tax.add([guide], metadata={"year": 2023})
        tax.add([notes], metadata={"year": 2024, "tag": "office"})
    return db


# -- the reference -----------------------------------------------------------------


def test_search_help_lists_every_operator_and_builtin_field() -> None:
    result = CliRunner().invoke(cli, ["search", "--help"], terminal_width=200)
    assert result.exit_code == 0
    for name in [*OPERATORS, "$and", "$or", *FIELDS]:
        assert name in result.output, name
    assert '{"added_at": {"$gte": "2024-01-01", "$lt": "2025-01-01"}}' in result.output


def test_the_docs_hold_the_reference_rendered_from_filters_py() -> None:
    assert filter_reference() in FILTERS_PAGE.read_text(encoding="utf-8")


def test_an_unknown_operator_names_the_allowed_ones() -> None:
    with pytest.raises(InvalidFilter, match=r"unknown operator '\$gtx'.*\$gte.*\$nin"):
        parse_filter({"page": {"$gtx": 3}})
    with pytest.raises(InvalidFilter, match=r"unknown operator '\$gte'.*\$and or \$or.*\$lte"):
        parse_filter({"$gte": 3})


# -- warnings ---------------------------------------------------------------------------


def test_a_field_no_document_has_is_said_and_known_ones_are_not(filled: Path) -> None:
    with hybridkb.connect(filled, model="fake") as kb:
        assert filter_warnings(kb, {"year": 2023, "page": 2}) == []
        assert filter_warnings(kb, '{"tag": "office"}', ["Tax"]) == []
        (warning,) = filter_warnings(kb, {"$or": [{"yeer": 2023}, {"year": 2024}]}, ["Tax"])
    assert "'yeer'" in warning and "'Tax'" in warning and "tag, year" in warning


def test_cli_warns_on_stderr_and_in_json(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    code = main(["--db", str(filled), "search", "Tax", "laptops", "--where", '{"yeer": 2023}'])
    out, err = capsys.readouterr()
    assert code == 0 and out.strip() == "no results"
    assert err.startswith("hybridkb: warning: where: no document in 'Tax' has the field 'yeer'")
    assert err.count("\n") == 1
    code = main(
        ["--db", str(filled), "search", "Tax", "laptops", "--where", '{"yeer": 1}', "--json"]
    )
    out, _ = capsys.readouterr()
    data = json.loads(out)
    assert data["results"] == [] and len(data["warnings"]) == 1 and "'yeer'" in data["warnings"][0]


def test_cli_add_metadata_shadowing_a_builtin_field_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, notes = make_files(tmp_path)
    db = str(tmp_path / "kb.duckdb")
    args = ["--db", db, "add", "Tax", str(notes), "--create", "--metadata", '{"page": 5}']
    code = main(args)
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1
    assert "'page' is a built-in field" in err and "'doc_page'" in err
    with hybridkb.connect(db, model="fake") as kb:  # refused before anything was created
        assert kb.collection_names() == []
    add = ["--db", db, "add", "Tax", str(notes), "--create", "--metadata", '{"doc_page": 5}']
    assert main(add) == 0
    capsys.readouterr()
    assert (
        main(["--db", db, "search", "Tax", "laptops", "--where", '{"doc_page": 5}', "--json"]) == 0
    )
    (hit,) = json.loads(capsys.readouterr().out)["results"]
    assert hit["metadata"]["doc_page"] == 5


# -- the same filters from every front end ----------------------------------------------

# (filter, the (filename, page) pairs every hit must be among)
CASES: list[tuple[dict[str, Any], set[tuple[str, int | None]]]] = [
    ({"page": 2}, {("2023-guide.pdf", 2)}),
    ({"filename": "notes.md"}, {("notes.md", None)}),
    ({"filename": "2023-guide.pdf", "page": {"$gte": 2}}, {("2023-guide.pdf", 2), ("2023-guide.pdf", 3)}),
    ({"year": 2024}, {("notes.md", None)}),
    ({"added_at": {"$gte": YESTERDAY, "$lt": TOMORROW}}, {("2023-guide.pdf", p) for p in (1, 2, 3)} | {("notes.md", None)}),
    ({"added_at": {"$lt": "2020-01-01"}}, set()),
]  # fmt: skip


def expected_hits(found: set[tuple[str, int | None]], wanted: set[tuple[str, int | None]]) -> None:
    assert found <= wanted
    assert bool(found) == bool(wanted)


@pytest.mark.parametrize(("where", "wanted"), CASES)
def test_python_api_filters(filled: Path, where: dict[str, Any], wanted: set[Any]) -> None:
    with hybridkb.connect(filled, model="fake") as kb:
        hits = kb.collection("Tax").search("laptops receipts car", k=10, where=where)
    expected_hits({(h.filename or "", h.page) for h in hits}, wanted)


@pytest.mark.parametrize(("where", "wanted"), CASES)
def test_cli_filters(
    filled: Path, capsys: pytest.CaptureFixture[str], where: dict[str, Any], wanted: set[Any]
) -> None:
    capsys.readouterr()
    args = ["search", "Tax", "laptops receipts car", "--k", "10", "--where", json.dumps(where)]
    assert main(["--db", str(filled), *args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["warnings"] == []
    expected_hits({(h["filename"], h["page"]) for h in data["results"]}, wanted)


@pytest.mark.parametrize(("where", "wanted"), CASES)
def test_langchain_tool_filters(
    filled: Path, where: dict[str, Any], wanted: set[Any], tmp_path: Path
) -> None:
    with hybridkb.connect(filled, model="fake") as kb:
        tools = {t.name: t for t in make_tools(kb, allowed_paths=[tmp_path])}
        for form in (where, json.dumps(where)):  # an object, or JSON text as some models send
            message = tools["search_kb"].invoke(
                {
                    "type": "tool_call",
                    "id": "1",
                    "name": "search_kb",
                    "args": {"query": "laptops receipts car", "limit": 10, "where": form},
                }
            )
            assert "Error" not in message.content and "Warning" not in message.content
            expected_hits({(h["filename"], h["page"]) for h in message.artifact}, wanted)


def test_langchain_tool_warns_and_refuses(filled: Path, tmp_path: Path) -> None:
    with hybridkb.connect(filled, model="fake") as kb:
        search = {t.name: t for t in make_tools(kb, allowed_paths=[tmp_path])}["search_kb"]
        text = search.invoke({"query": "laptops", "where": {"yeer": 2024}})
        assert text.startswith("Warning: where: no document in 'Tax' has the field 'yeer'")
        text = search.invoke({"query": "laptops", "where": {"page": {"$gtx": 1}}})
        assert text.startswith("Error (invalid_filter)") and "$gte" in text
        deep: Any = 1
        for _ in range(60):
            deep = {"$and": [{"page": deep}]} if isinstance(deep, dict) else {"page": 1}
        text = search.invoke({"query": "laptops", "where": json.dumps(deep)})
        assert "nested more than 20 levels" in text
        text = search.invoke({"query": "laptops", "where": "x" * 70_000})
        assert "too long" in text


def test_mcp_search_kb_filters_by_page_file_date_and_metadata(filled: Path, tmp_path: Path) -> None:
    session = Session(tmp_path, filled)
    try:
        session.request(0, "initialize", INIT)
        listed = session.request(1, "tools/list")["result"]["tools"]
        schema = next(t for t in listed if t["name"] == "search_kb")["inputSchema"]
        assert "where" in schema["properties"] and '{"page": 3}' in json.dumps(
            schema["properties"]["where"]["description"]
        ).replace("\\", "")
        for n, (where, wanted) in enumerate(CASES[:5], start=2):
            text, is_error = session.call(
                n, "search_kb", {"query": "laptops receipts car", "limit": 10, "where": where}
            )
            assert not is_error, text
            cited = {line for line in text.splitlines() if line.startswith("[")}
            names = {f for f, _ in wanted}
            assert cited and all(any(name in line for name in names) for line in cited), text
        text, is_error = session.call(9, "search_kb", {"query": "x", "where": {"yeer": 1}})
        assert not is_error and "Warning: where: no document in 'Tax' has the field 'yeer'" in text
        text, is_error = session.call(10, "search_kb", {"query": "x", "where": {"page": {"$x": 1}}})
        assert is_error and "$nin" in text
    finally:
        session.close()


def test_python_add_refuses_metadata_under_a_builtin_name(
    tmp_path: Path,
) -> None:
    _, notes = make_files(tmp_path)
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as kb:
        coll = kb.create_collection("Tax")
        with pytest.raises(ConfigError, match="'filename' is a built-in field"):
            coll.add([notes], metadata={"filename": "other.md"})
