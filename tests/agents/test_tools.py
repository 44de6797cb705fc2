"""LangChain tools: names and arguments, input forms, cited budgeted answers, errors, security."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.tools import BaseTool, StructuredTool
from pdfgen import Page, write_pdf
from pydantic import BaseModel
from tool_calls import by_name, call, reply_text

import hybridkb
from hybridkb.agents import render
from hybridkb.agents.tools import TOOL_NAMES, WRITE_TOOLS, make_tools
from hybridkb.results import AddReport, CollectionInfo, FailedFile, FileResult, Hit

NO_VALUE = "optional, default null"  # a parameter whose default is None (None means required)
EXPECTED_PARAMS: dict[str, list[tuple[str, object]]] = {
    "create_kb_collection": [("collection_name", None), ("documents", "")],
    "search_kb": [("query", None), ("collection_name", ""), ("limit", 5), ("where", NO_VALUE)],
    "kb_list": [],
    "describe_kb_collection": [("collection_name", None)],
    "drop_kb_collection": [("collection_name", None)],
    "add_kb_documents": [("collection_name", None), ("documents", None)],
    "delete_kb_documents": [("collection_name", None), ("ids", None)],
    "sync_kb_collection": [("collection_name", "")],
}
DEPRECIATION = "Depreciation of equipment is spread over five years using the straight-line method."


def input_schema(t: BaseTool) -> dict[str, Any]:
    """The JSON schema of a tool's arguments (our tools take pydantic v2 models)."""
    model = t.get_input_schema()
    assert issubclass(model, BaseModel), model
    return model.model_json_schema()


@pytest.fixture
def tools(kb: hybridkb.KnowledgeBase) -> dict[str, BaseTool]:
    return by_name(make_tools(kb))


@pytest.fixture
def tax_pdf(tmp_path: Path) -> Path:
    return write_pdf(
        tmp_path / "guide.pdf",
        [
            Page("Tax guide 2023\n\nHome office costs are deductible."),
            Page(f"Depreciation\n\n{DEPRECIATION}"),
        ],
    )


# -- names, arguments, descriptions ------------------------------------------------------


def test_make_tools_has_the_fixed_names_and_parameters(tools: dict[str, BaseTool]) -> None:
    assert list(tools)[: len(TOOL_NAMES)] == list(TOOL_NAMES)
    assert not set(list(tools)[len(TOOL_NAMES) :]) & set(TOOL_NAMES)  # graph tools may follow
    for name, params in EXPECTED_PARAMS.items():
        schema = input_schema(tools[name])
        props = schema.get("properties", {})
        assert list(props) == [p for p, _ in params], name
        for param, default in params:
            if default is None:
                assert param in schema.get("required", []), (name, param)
            else:
                wanted = None if default == NO_VALUE else default
                assert props[param]["default"] == wanted, (name, param)
        assert tools[name].response_format == "content_and_artifact"
        assert tools[name].handle_tool_error is True


def test_descriptions_say_when_to_use_and_give_examples(tools: dict[str, BaseTool]) -> None:
    for name in TOOL_NAMES:
        t = tools[name]
        assert "Use this" in t.description, name
        for prop, spec in input_schema(t).get("properties", {}).items():
            assert len(spec.get("description", "")) > 15, (name, prop)
    for name in ("create_kb_collection", "search_kb", "add_kb_documents", "delete_kb_documents"):
        assert "e.g." in json.dumps(input_schema(tools[name])), name


def test_module_level_tools_have_the_same_names_and_bind_lazily(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hybridkb.agents.tools as module

    for name in TOOL_NAMES:
        t = getattr(module, name)
        assert isinstance(t, BaseTool) and t.name == name
    assert module.query_kb_sql.name == "query_kb_sql"
    db = tmp_path / "settings.duckdb"
    monkeypatch.setenv("HYBRIDKB_DB", str(db))
    monkeypatch.setenv("HYBRIDKB_MODEL", "fake")
    monkeypatch.setattr(module._DEFAULT, "_kb", None)  # as if freshly imported
    assert not db.exists()
    try:
        assert "No collections yet" in module.kb_list.invoke({})
        assert db.exists()
        module.create_kb_collection.invoke({"collection_name": "Notes", "documents": "hello there"})
        assert "1 passage" in module.search_kb.invoke({"query": "hello"})
        assert "turned off" in module.query_kb_sql.invoke({"sql": "SELECT 1"})
        assert [t.name for t in module.get_tools()][: len(TOOL_NAMES)] == list(TOOL_NAMES)
    finally:
        if module._DEFAULT._kb is not None:
            module._DEFAULT._kb.close()
        monkeypatch.setattr(module._DEFAULT, "_kb", None)


def test_plain_invoke_gives_text_and_tool_call_gives_artifact(tools: dict[str, BaseTool]) -> None:
    text = tools["create_kb_collection"].invoke({"collection_name": "Notes", "documents": "hello"})
    assert isinstance(text, str) and "Created collection 'Notes'" in text
    msg = call(tools["search_kb"], query="hello", collection_name="Notes")
    assert msg.status == "success"
    assert msg.artifact[0]["text"] == "hello" and msg.artifact[0]["collection"] == "Notes"


# -- the conversation an agent has -------------------------------------------------------


def test_create_add_search_delete_a_pdf(tools: dict[str, BaseTool], tax_pdf: Path) -> None:
    assert "Created" in call(tools["create_kb_collection"], collection_name="Tax Documents").content
    added = call(tools["add_kb_documents"], collection_name="Tax Documents", documents=str(tax_pdf))
    assert "added 1" in added.content and "guide.pdf" in added.content
    doc_id = added.artifact["added"][0]["document_id"]
    assert doc_id in added.content
    found = call(tools["search_kb"], query="depreciation", collection_name="Tax Documents")
    first = reply_text(found).splitlines()[1]
    assert first.startswith("[1] Tax Documents | guide.pdf | p. 2 | doc " + doc_id)
    assert DEPRECIATION in found.content
    assert found.artifact[0]["page"] == 2
    gone = call(tools["delete_kb_documents"], collection_name="Tax Documents", ids=doc_id)
    assert f"deleted {doc_id}" in gone.content
    empty = call(tools["search_kb"], query="depreciation", collection_name="Tax Documents")
    assert "No passages found" in empty.content and empty.artifact == []


def test_create_with_documents_and_describe(tools: dict[str, BaseTool], tax_pdf: Path) -> None:
    msg = call(tools["create_kb_collection"], collection_name="Tax", documents=str(tax_pdf))
    assert "added 1" in msg.content
    desc = call(tools["describe_kb_collection"], collection_name="Tax")
    assert "1 document," in desc.content and "guide.pdf" in desc.content
    assert desc.artifact["documents_listed"][0]["filename"] == "guide.pdf"
    listing = call(tools["kb_list"])
    assert "- Tax: 1 document, 2 chunks" in listing.content
    assert listing.artifact[0]["name"] == "Tax"


@pytest.mark.parametrize("sep", ["\n", ", ", "json"])
def test_add_several_files_in_any_list_form(
    tools: dict[str, BaseTool], tmp_path: Path, sep: str
) -> None:
    (tmp_path / "a.txt").write_text("alpha text")
    (tmp_path / "b c.md").write_text("# Bravo\n\nbravo text")
    names = ["a.txt", "b c.md"]
    documents = json.dumps(names) if sep == "json" else sep.join(names)
    call(tools["create_kb_collection"], collection_name="Files")
    msg = call(tools["add_kb_documents"], collection_name="Files", documents=documents)
    assert "added 2" in msg.content


def test_add_a_folder_and_a_tilde_path(
    tools: dict[str, BaseTool], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "one.txt").write_text("one")
    (tmp_path / "docs" / "two.md").write_text("two")
    (tmp_path / "docs" / "tally.xyz").write_text("three")
    monkeypatch.setenv("HOME", str(tmp_path))
    call(tools["create_kb_collection"], collection_name="Files")
    answer = call(tools["add_kb_documents"], collection_name="Files", documents="~/docs").content
    assert "added 2, unchanged 0, failed 0, skipped 1." in answer
    assert "- skipped tally.xyz: unsupported type .xyz;" in answer
    assert (
        "unchanged 1"
        in call(
            tools["add_kb_documents"], collection_name="Files", documents='"~/docs/one.txt"'
        ).content
    )


def test_add_json_records_keep_metadata_and_ids(tools: dict[str, BaseTool], kb: Any) -> None:
    call(tools["create_kb_collection"], collection_name="Notes")
    records = [
        {"content": "The deadline is 31 October.", "metadata": {"year": 2023}, "id": "n1"},
        {"content": "Receipts go in the blue folder."},
    ]
    msg = call(tools["add_kb_documents"], collection_name="Notes", documents=json.dumps(records))
    assert "added 2" in msg.content and "id n1" in msg.content
    assert kb.collection("Notes").get("n1").metadata == {"year": 2023}


def test_plain_text_becomes_a_note(tools: dict[str, BaseTool]) -> None:
    call(tools["create_kb_collection"], collection_name="Notes")
    note = "Call the accountant on Monday about the 2023 return, and bring the receipts."
    msg = call(tools["add_kb_documents"], collection_name="Notes", documents=note)
    assert "added 1" in msg.content and "(note)" in msg.content
    assert note in call(tools["search_kb"], query="accountant").content


def test_missing_path_is_an_error_naming_it_not_a_note(tools: dict[str, BaseTool]) -> None:
    call(tools["create_kb_collection"], collection_name="Notes")
    msg = call(tools["add_kb_documents"], collection_name="Notes", documents="nowhere/return.pdf")
    assert msg.status == "error"
    assert "return.pdf: no such file or folder" in msg.content
    assert "Traceback" not in msg.content
    assert (
        "No documents yet" in call(tools["describe_kb_collection"], collection_name="Notes").content
    )


def test_create_refuses_bad_documents_before_creating(tools: dict[str, BaseTool]) -> None:
    msg = call(tools["create_kb_collection"], collection_name="Tax", documents="missing.pdf")
    assert msg.status == "error"
    assert "No collections yet" in call(tools["kb_list"]).content


def test_unsupported_file_is_reported(tools: dict[str, BaseTool], tmp_path: Path) -> None:
    (tmp_path / "sheet.odt").write_bytes(b"PK")
    call(tools["create_kb_collection"], collection_name="Files")
    msg = call(tools["add_kb_documents"], collection_name="Files", documents="sheet.odt")
    assert msg.status == "error" and "unsupported file type" in msg.content


def test_delete_by_filename_and_unknown_id(tools: dict[str, BaseTool], tax_pdf: Path) -> None:
    call(tools["create_kb_collection"], collection_name="Tax", documents=str(tax_pdf))
    missing = call(tools["delete_kb_documents"], collection_name="Tax", ids="nope-id")
    assert missing.status == "error" and "not found 1" in missing.content
    msg = call(tools["delete_kb_documents"], collection_name="Tax", ids="guide.pdf")
    assert msg.status == "success" and "deleted 1" in msg.content


def test_drop_collection(tools: dict[str, BaseTool]) -> None:
    call(tools["create_kb_collection"], collection_name="Old", documents="a note")
    msg = call(tools["drop_kb_collection"], collection_name="Old")
    assert "Dropped collection 'Old' (1 documents" in msg.content
    assert "No collections yet" in call(tools["kb_list"]).content


def test_collection_names_match_case_insensitively(tools: dict[str, BaseTool]) -> None:
    call(tools["create_kb_collection"], collection_name="Tax Documents", documents="a note")
    assert (
        "1 passage"
        in call(tools["search_kb"], query="note", collection_name="tax  documents").content
    )


def test_search_every_collection_when_name_is_empty(tools: dict[str, BaseTool]) -> None:
    call(tools["create_kb_collection"], collection_name="A", documents="apples are red")
    call(tools["create_kb_collection"], collection_name="B", documents="apples are green")
    msg = call(tools["search_kb"], query="apples")
    assert "in all 2 collections" in msg.content
    assert {h["collection"] for h in msg.artifact} == {"A", "B"}


# -- errors as observations --------------------------------------------------------------


def test_unknown_collection_lists_existing(tools: dict[str, BaseTool]) -> None:
    call(tools["create_kb_collection"], collection_name="Tax Documents")
    for name, args in [
        ("search_kb", {"query": "x", "collection_name": "Receipts"}),
        ("describe_kb_collection", {"collection_name": "Receipts"}),
        ("drop_kb_collection", {"collection_name": "Receipts"}),
        ("add_kb_documents", {"collection_name": "Receipts", "documents": "note"}),
        ("delete_kb_documents", {"collection_name": "Receipts", "ids": "x"}),
    ]:
        msg = call(tools[name], **args)
        assert msg.status == "error", name
        assert reply_text(msg).startswith("Error (collection_not_found)"), name
        assert "existing: 'Tax Documents'" in msg.content, name


def test_existing_collection_says_what_to_do(tools: dict[str, BaseTool]) -> None:
    call(tools["create_kb_collection"], collection_name="Tax")
    msg = call(tools["create_kb_collection"], collection_name="Tax")
    assert msg.status == "error" and "already exists" in msg.content


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ({"query": "x", "limit": 0}, "from 1 to 50"),
        ({"query": "x", "limit": 51}, "from 1 to 50"),
        ({"query": "x", "limit": "many"}, "invalid_arguments"),
        ({"query": "   "}, "query: empty"),
        ({}, "invalid_arguments"),
    ],
)
def test_bad_arguments_are_observations(
    tools: dict[str, BaseTool], args: dict[str, Any], needle: str
) -> None:
    msg = call(tools["search_kb"], **args)
    assert msg.status == "error" and needle in msg.content


def test_string_limit_is_coerced(tools: dict[str, BaseTool]) -> None:
    call(tools["create_kb_collection"], collection_name="N", documents="one note")
    assert call(tools["search_kb"], query="note", limit="3").status == "success"


# -- budgets -----------------------------------------------------------------------------


def test_search_answer_respects_the_budget(tmp_path: Path) -> None:
    kb = hybridkb.connect(
        tmp_path / "b.duckdb",
        model="fake",
        search_token_budget=200,
        chunk_size=400,
        chunk_overlap=0,
    )
    try:
        tools = by_name(make_tools(kb))
        paragraphs = [
            f"Depreciation rule {i}: " + "assets lose value over time. " * 12 for i in range(12)
        ]
        call(tools["create_kb_collection"], collection_name="Big")
        records = [{"content": p} for p in paragraphs]
        call(tools["add_kb_documents"], collection_name="Big", documents=json.dumps(records))
        msg = call(tools["search_kb"], query="depreciation rule", limit=10)
        assert len(msg.content) <= 200 * 4
        assert reply_text(msg).splitlines()[-1].startswith("[cut to fit ~200 tokens")
        assert len(msg.artifact) == 10  # the artifact keeps every hit
    finally:
        kb.close()


def test_listing_respects_the_budget(tmp_path: Path) -> None:
    kb = hybridkb.connect(tmp_path / "l.duckdb", model="fake", listing_token_budget=100)
    try:
        tools = by_name(make_tools(kb))
        for i in range(12):
            kb.create_collection(f"Collection number {i:02d}")
        msg = call(tools["kb_list"])
        assert len(msg.content) <= 100 * 4
        assert "more not shown" in reply_text(msg).splitlines()[-1]
        assert len(msg.artifact) == 12
    finally:
        kb.close()


# -- security ----------------------------------------------------------------------------


def test_paths_outside_allowed_folders_are_refused(kb: Any, tmp_path: Path) -> None:
    inside, outside = tmp_path / "in", tmp_path / "out"
    inside.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("the secret")
    (inside / "ok.txt").write_text("fine")
    tools = by_name(make_tools(kb, allowed_paths=[inside]))
    call(tools["create_kb_collection"], collection_name="C")
    for documents in [
        str(outside / "secret.txt"),
        "../out/secret.txt",
        "out/secret.txt",
        f"{inside}/../out/secret.txt",
        str(outside),
    ]:
        msg = call(tools["add_kb_documents"], collection_name="C", documents=documents)
        assert msg.status == "error", documents
        assert reply_text(msg).startswith("Error (access_denied)"), documents
        assert str(inside) in msg.content, documents
    (inside / "link.txt").symlink_to(outside / "secret.txt")
    msg = call(tools["add_kb_documents"], collection_name="C", documents=str(inside / "link.txt"))
    assert msg.status == "error" and "access_denied" in msg.content
    msg = call(tools["create_kb_collection"], collection_name="D", documents=str(outside))
    assert msg.status == "error" and "access_denied" in msg.content
    assert "the secret" not in call(tools["search_kb"], query="secret").content


def test_allowed_paths_default_to_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "x.txt").write_text("x marks the spot")
    (tmp_path / "y.txt").write_text("y")
    monkeypatch.setenv("HYBRIDKB_ALLOWED_PATHS", str(allowed))
    with hybridkb.connect(tmp_path / "s.duckdb", model="fake") as kb:
        tools = by_name(make_tools(kb))
        call(tools["create_kb_collection"], collection_name="C")
        assert (
            call(
                tools["add_kb_documents"], collection_name="C", documents=str(allowed / "x.txt")
            ).status
            == "success"
        )
        denied = call(
            tools["add_kb_documents"], collection_name="C", documents=str(tmp_path / "y.txt")
        )
        assert denied.status == "error" and str(allowed) in denied.content


def test_the_library_is_not_restricted(kb: Any, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("a person may add any file")
    report = kb.create_collection("C").add(outside)
    assert len(report.added) == 1


def test_workspaces_cannot_see_or_change_each_other(kb: Any) -> None:
    alice = by_name(make_tools(kb, workspace="alice"))
    bob = by_name(make_tools(kb, workspace="bob"))
    added = call(
        alice["create_kb_collection"],
        collection_name="Private",
        documents="alice's salary is confidential",
    )
    doc_id = added.artifact["report"]["added"][0]["document_id"]
    assert "No collections yet in workspace 'bob'" in call(bob["kb_list"]).content
    assert "No collections yet" in call(bob["search_kb"], query="salary").content
    for name, args in [
        ("search_kb", {"query": "salary", "collection_name": "Private"}),
        ("describe_kb_collection", {"collection_name": "Private"}),
        ("drop_kb_collection", {"collection_name": "Private"}),
        ("add_kb_documents", {"collection_name": "Private", "documents": "bob was here"}),
        ("delete_kb_documents", {"collection_name": "Private", "ids": doc_id}),
    ]:
        msg = call(bob[name], **args)
        assert msg.status == "error" and "collection_not_found" in msg.content, name
        assert "existing: none yet" in msg.content, name
    # bob's own collection of the same name is his, not alice's
    call(bob["create_kb_collection"], collection_name="Private", documents="bob's note")
    call(bob["delete_kb_documents"], collection_name="Private", ids=doc_id)
    assert "alice's salary" in call(alice["search_kb"], query="salary").content
    assert "alice" not in call(bob["search_kb"], query="salary").content


def test_read_only_leaves_out_the_writers(kb: Any) -> None:
    names = [t.name for t in make_tools(kb, read_only=True)]
    assert names[:3] == [n for n in TOOL_NAMES if n not in WRITE_TOOLS]
    assert set(names) & set(TOOL_NAMES) == {"search_kb", "kb_list", "describe_kb_collection"}
    assert not set(names) & WRITE_TOOLS


def test_sql_tool_only_when_enabled(tmp_path: Path) -> None:
    with hybridkb.connect(tmp_path / "q.duckdb", model="fake") as kb:
        assert "query_kb_sql" not in by_name(make_tools(kb))
    with hybridkb.connect(tmp_path / "q.duckdb", model="fake", enable_sql_tool=True) as kb:
        assert "query_kb_sql" in by_name(make_tools(kb))
        assert "query_kb_sql" in by_name(make_tools(kb, read_only=True))


def test_every_front_end_derives_from_the_one_registry(kb: Any) -> None:
    # The LangChain tools, the read-only filter, TOOL_NAMES/WRITE_TOOLS and the MCP
    # catalogue with its hints all come from toolbox.TOOLS (graph tools included,
    # registered there, not found by importing a module).
    from hybridkb.agents.toolbox import TOOLS
    from hybridkb.mcp.tools import advertised_tools

    always = [s for s in TOOLS if s.setting is None]
    assert [t.name for t in make_tools(kb)] == [s.name for s in always]
    readers = [t.name for t in make_tools(kb, read_only=True)]
    assert readers == [s.name for s in always if not s.writes]
    assert {s.name for s in TOOLS if s.writes} == WRITE_TOOLS >= {"graph_relate"}
    specs = {s.name: s for s in TOOLS}
    catalogue = advertised_tools(read_only=False, sql_tool=True)
    assert [t["name"] for t in catalogue] == list(specs)
    for listed in catalogue:
        spec, hints = specs[listed["name"]], listed["annotations"]
        assert hints["readOnlyHint"] is not spec.writes
        assert hints.get("destructiveHint") == (spec.destructive if spec.writes else None)
        assert listed["description"].startswith((spec.function.__doc__ or "?").splitlines()[0])


WEIRD = [
    "Robert'); DROP TABLE hybridkb_collections;--",
    '50% off; "quoted" `tick`',
    "emoji 📚🧾 тест 中文",
    "back\\slash %_ LIKE wildcards",
    "x" * 200,
]


@pytest.mark.parametrize("name", WEIRD)
def test_hostile_names_and_queries_are_data(tools: dict[str, BaseTool], kb: Any, name: str) -> None:
    msg = call(tools["create_kb_collection"], collection_name=name, documents=f"note about {name}")
    assert msg.status == "success", msg.content
    assert name in kb.collection_names()
    found = call(tools["search_kb"], query=name, collection_name=name)
    assert found.status == "success" and found.artifact[0]["collection"] == name
    assert call(tools["delete_kb_documents"], collection_name=name, ids=name).status == "error"
    assert (
        call(tools["search_kb"], query="'; DROP TABLE x; --", collection_name=name).status
        == "success"
    )
    assert call(tools["drop_kb_collection"], collection_name=name).status == "success"
    assert name not in kb.collection_names()


@pytest.mark.parametrize(
    ("name", "needle"),
    [("bad\x00name", "control characters"), ("x" * 10_000, "longer than 200"), ("", "empty")],
)
def test_unusable_names_are_clear_errors(
    tools: dict[str, BaseTool], name: str, needle: str
) -> None:
    for tool_name, extra in [
        ("create_kb_collection", {}),
        ("search_kb", {"query": "q"}),
        ("describe_kb_collection", {}),
    ]:
        msg = call(tools[tool_name], collection_name=name, **extra)
        if tool_name == "search_kb" and name == "":
            assert msg.status == "success"  # empty name means every collection
            continue
        assert msg.status == "error" and needle in msg.content, tool_name


def test_long_and_nul_queries(tools: dict[str, BaseTool]) -> None:
    call(tools["create_kb_collection"], collection_name="N", documents="a plain note")
    assert call(tools["search_kb"], query="note " * 2_000).status == "success"
    assert call(tools["search_kb"], query="note\x00; DROP").status == "success"
    msg = call(tools["delete_kb_documents"], collection_name="N", ids="a\x00b, 'x'; --, 📚")
    assert msg.status == "error" and "not found 3" in msg.content


# -- render: pure budget rules -----------------------------------------------------------


def _hit(i: int, text: str, filename: str | None = "f.pdf", page: int | None = 1) -> Hit:
    return Hit(
        rank=i,
        score=1.0 / i,
        text=text,
        collection="C",
        document_id=f"d{i}",
        chunk_id=f"c{i}",
        filename=filename,
        page=page,
        section=None,
        metadata={},
        scores={},
    )


def test_render_hits_shows_everything_when_it_fits() -> None:
    hits = [_hit(1, "alpha"), _hit(2, "beta")]
    out = render.render_hits(hits, query="q", budget_tokens=2000, scope="'C'")
    assert out.text.splitlines() == [
        "2 passages for \"q\" in 'C':",
        "[1] C | f.pdf | p. 1 | doc d1",
        "alpha",
        "[2] C | f.pdf | p. 1 | doc d2",
        "beta",
    ]
    assert not out.cut


def test_render_hits_keeps_rank_order_and_drops_the_tail() -> None:
    hits = [_hit(i, f"passage {i} " + "word " * 200) for i in range(1, 11)]
    out = render.render_hits(hits, query="q", budget_tokens=500, scope="'C'")
    assert len(out.text) <= 2000
    assert 1 <= out.shown < 10
    dropped = 10 - out.shown
    assert "[1] C" in out.text
    assert f"{dropped} lower-ranked passage{'s' if dropped > 1 else ''} not shown" in out.text


text_st = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=3000)


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(text_st, min_size=1, max_size=12),
    budget=st.integers(min_value=150, max_value=4000),
    query=st.text(max_size=500),
    filename=st.one_of(st.none(), st.text(max_size=300)),
    section=st.one_of(st.none(), st.text(max_size=300)),
)
def test_render_hits_budget_invariants(
    texts: list[str], budget: int, query: str, filename: str | None, section: str | None
) -> None:
    hits = [_hit(i, t, filename) for i, t in enumerate(texts, 1)]
    for h in hits:
        h.section = section
    out = render.render_hits(hits, query=query, budget_tokens=budget, scope="'C'")
    assert len(out.text) <= budget * render.CHARS_PER_TOKEN
    assert 1 <= out.shown <= len(hits)
    lines = out.text.splitlines()
    heads = [lines[i] for i in range(1, 2 * out.shown, 2)]
    assert [h.split("]")[0] for h in heads] == [f"[{i}" for i in range(1, out.shown + 1)]
    assert all(h.startswith(f"[{i}] C | ") for i, h in enumerate(heads, 1))
    assert out.text.splitlines()[-1].startswith("[cut") == out.cut
    if sum(len(render.fold_whitespace(t)) for t in texts) + 300 * len(texts) < budget * 4 - 800:
        assert not out.cut


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.text(max_size=400), max_size=50),
    budget=st.integers(min_value=100, max_value=3000),
    more=st.integers(0, 5),
)
def test_fit_lines_invariants(lines: list[str], budget: int, more: int) -> None:
    out = render.fit_lines("Header:", lines, budget_tokens=budget, more=more, hint="Ask again.")
    assert len(out.text) <= budget * render.CHARS_PER_TOKEN
    body = out.text.split("\n")
    assert body[0] == "Header:"
    assert out.total == len(lines) + more
    if out.shown < out.total:
        assert body[-1].startswith(f"[{out.total - out.shown} more not shown")


@given(st.text(max_size=500), st.integers(0, 600))
def test_clip_never_exceeds_the_limit(text: str, limit: int) -> None:
    out = render.clip(text, limit)
    assert len(out) <= max(limit, 0)
    if len(text) <= limit:
        assert out == text


def test_render_add_report_and_collections() -> None:
    report = AddReport(
        added=[FileResult("a.pdf", "id1", 3, ["page 2 has no text layer"])],
        unchanged=[FileResult("n1", "n1", 1)],
        failed=[FailedFile("b.xyz", "b.xyz: unsupported file type .xyz; supported: ...")],
    )
    text = render.render_add_report(report, collection="C", budget_tokens=1000).text
    assert "added 1, unchanged 1, failed 1" in text
    assert "+ added a.pdf  id id1  3 chunks  warnings: page 2" in text
    assert "= unchanged (note)  id n1" in text and "! failed b.xyz" in text
    info = CollectionInfo("C", 1, 1, "fake", 64, ["en"], 10, None)
    assert (
        "- C: 1 document, 1 chunk,"
        in render.render_collections([info], workspace="w", budget_tokens=1000).text
    )


def test_error_rendering_has_code_and_message() -> None:
    exc = hybridkb.CollectionNotFound("collection 'x' not found; existing: 'y'")
    assert (
        render.render_error(exc)
        == "Error (collection_not_found): collection 'x' not found; existing: 'y'"
    )


def test_module_tools_are_structured_tools() -> None:
    import hybridkb.agents.tools as module

    assert all(isinstance(getattr(module, n), StructuredTool) for n in TOOL_NAMES)


@pytest.fixture(autouse=True)
def _no_module_kb_leak() -> Iterator[None]:
    yield
    import hybridkb.agents.tools as module

    assert module._DEFAULT._kb is None, "the module-level tools opened a knowledge base"


def test_real_json_lists_are_accepted_where_text_is_expected(
    tools: dict[str, BaseTool], tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("alpha")
    msg = call(tools["create_kb_collection"], collection_name="L", documents=["a.txt"])
    assert "added 1" in msg.content
    notes = call(
        tools["add_kb_documents"], collection_name="L", documents=[{"content": "beta", "id": "b"}]
    )
    assert "id b" in notes.content
    gone = call(tools["delete_kb_documents"], collection_name="L", ids=["b"])
    assert "deleted b" in gone.content
