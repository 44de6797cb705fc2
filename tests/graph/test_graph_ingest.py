"""The graph built at ingest on a real corpus: structure, entities, links, pruning, graph_search."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from internals import local, local_graph, sql_rows

import hybridkb
from hybridkb.errors import GraphError
from hybridkb.graph import extract
from hybridkb.graph.extract import Entity, RuleExtractor, RuleHints, resolve_aliases
from hybridkb.storage.graph_sql import GraphSQLBase

GUIDE = """# Tax Guide

Intro about the Income Tax Assessment Act 1997 and how the Australian Taxation Office applies it.

## Depreciation

Under s.40-880 you can deduct business costs. The Australian Taxation Office explains ITAA1997.

### Cars

A car limit of $69,674 applies from 1 July 2024 under ITAA 1997.

## Records

Keep records for five years. "Record" means any document kept for tax purposes.
"""

RULING = """# Ruling 2024/1

This ruling explains section 40-880 of the ITAA 1997 for start-up costs.

The Commissioner of Taxation issued it on 2024-03-01.
"""

OLD = """# Old Act notes

Notes on the ITAA 1936 and its history before the Income Tax Assessment Act 1997.
"""


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "guide.md").write_text(GUIDE, encoding="utf-8")
    (folder / "ruling.md").write_text(RULING, encoding="utf-8")
    return folder


@pytest.fixture
def tax(tmp_path: Path, corpus: Path) -> Iterator[hybridkb.KnowledgeBase]:
    with hybridkb.connect(
        tmp_path / "kb.duckdb", model="fake", chunk_size=200, chunk_overlap=0
    ) as kb:
        coll = kb.create_collection("Tax Documents")
        report = coll.add(corpus, metadata={"tags": ["tax", "guides"]})
        assert report.ok and len(report.added) == 2
        coll.add_texts([OLD], ids=["old-act"], metadatas=[{"tags": "history"}])
        yield local(kb)


def doc_node(kb: hybridkb.KnowledgeBase, filename: str) -> str:
    coll = kb.collection("Tax Documents")
    for d in coll.documents():
        if d.filename == filename:
            return f"doc:{coll.record.id}:{d.document_id}"
    raise AssertionError(filename)


# -- extraction -------------------------------------------------------------------------


def test_itaa_forms_merge_into_one_entity() -> None:
    text = "Income Tax Assessment Act 1997, ITAA 1997 and ITAA1997 are one law; ITAA 1936 is not."
    keys = [e.key for e in resolve_aliases(RuleExtractor().extract(text), {})]
    assert keys.count("itaa-1997") == 1 and "itaa-1936" in keys


@pytest.mark.parametrize(
    ("text", "key", "kind"),
    [
        ("see s.40-880 now", "section:40-880", "section_ref"),
        ("see section 8-1(2) now", "section:8-1", "section_ref"),
        ("due 1 July 2024", "date:2024-07-01", "date"),
        ("due July 1, 2024", "date:2024-07-01", "date"),
        ("due 2024-07-01", "date:2024-07-01", "date"),
        ("pay $20,000 now", "amount:$20000", "amount"),
        ("pay AUD 1.5 million", "amount:aud1500000", "amount"),
        ('"Car" means a motor vehicle', "car", "term"),
        ("the Australian Taxation Office said", "australian-taxation-office", "name"),
        ("GST applies", "gst", "acronym"),
    ],
)
def test_rule_extractor_finds(text: str, key: str, kind: str) -> None:
    found = {e.key: e.kind for e in resolve_aliases(RuleExtractor().extract(text), {})}
    assert found.get(key) == kind, found


def test_alias_table_maps_to_canonical() -> None:
    ents = resolve_aliases([Entity("Tax Office")], {"tax-office": "ATO"})
    assert [(e.key, e.name) for e in ents] == [("ato", "ATO")]


def test_extraction_is_deterministic_and_ignores_sentence_starts() -> None:
    text = "The Commissioner decides. However Acme Holdings pays. We saw it."
    assert RuleExtractor().extract(text) == RuleExtractor().extract(text)
    names = {e.name for e in RuleExtractor().extract(text)}
    assert "The Commissioner" not in names and "Acme Holdings" in names


# -- structure --------------------------------------------------------------------------


def test_document_section_chunk_structure(tax: hybridkb.KnowledgeBase) -> None:
    g = tax.graph
    guide = doc_node(tax, "guide.md")
    sections = {
        n.node.properties["name"]: n.node.id
        for n in g.neighbors(guide, edge_types="contains").neighbors
    }
    assert "Tax Guide" in sections
    top = sections["Tax Guide"]
    children = {
        n.node.properties.get("name")
        for n in g.neighbors(top, edge_types="contains", direction="out").neighbors
    }
    assert {"Depreciation", "Records"} <= children
    chunks = g.chunks_of(guide)
    doc = tax.collection("Tax Documents").get(guide.split(":", 2)[2])
    assert doc is not None and len(chunks) == doc.chunk_count
    # next edges chain the chunks in reading order
    chain = g.traverse(chunks[0], edge_types="next", direction="out", max_depth=10)
    assert len(chain.paths) == len(chunks) - 1
    cars = next(c for c in chunks if "car limit" in g.node(c).properties["preview"])
    up = g.traverse(cars, edge_types="contains", direction="in", max_depth=5).paths
    assert [p.nodes[-1].properties.get("name") for p in up] == [
        "Cars",
        "Depreciation",
        "Tax Guide",
        "guide.md",
    ]


def test_every_hit_chunk_and_document_is_a_node(tax: hybridkb.KnowledgeBase) -> None:
    for hit in tax.search("depreciation business costs", k=5):
        assert hit.document_node is not None
        assert tax.graph.node(hit.chunk_id).type == "chunk"
        assert tax.graph.node(hit.document_node).type == "document"
        assert hit.chunk_id in tax.graph.chunks_of(hit.document_node)
        assert tax.graph.node_of_chunk(hit.chunk_id).properties["document_id"] == hit.document_id


def test_entities_shared_across_documents(tax: hybridkb.KnowledgeBase) -> None:
    g = tax.graph
    mentions = g.neighbors("ent:itaa-1997", direction="in", edge_types="mentions").neighbors
    docs = {n.node.properties["document_id"] for n in mentions}
    assert len(docs) == 3  # guide, ruling and the old-act note
    assert g.node("ent:section:40-880").properties["kind"] == "section_ref"
    assert g.node("ent:date:2024-07-01").type == "entity"
    # two documents meet through the section they both cite
    path = g.shortest_path(
        doc_node(tax, "guide.md"),
        doc_node(tax, "ruling.md"),
        edge_types=["contains", "mentions"],
        max_depth=8,
    )
    assert path is not None and "ent:" in "".join(n.id for n in path.nodes)


def test_categories_are_collection_and_tags(tax: hybridkb.KnowledgeBase) -> None:
    g = tax.graph
    guide = doc_node(tax, "guide.md")
    cats = {n.node.id for n in g.neighbors(guide, edge_types="categorized_as").neighbors}
    coll_id = tax.collection("Tax Documents").record.id
    assert cats == {f"coll:{coll_id}", "cat:tax", "cat:guides"}
    assert g.node("cat:history").properties == {"name": "history", "kind": "tag"}


def test_graph_links_in_metadata(tax: hybridkb.KnowledgeBase) -> None:
    coll = tax.collection("Tax Documents")
    coll.add_texts(
        ["The 1997 Act rewrote the old one."],
        ids=["itaa-1997-note"],
        metadatas=[
            {"graph_links": [{"type": "AMENDS", "target": "old-act", "properties": {"year": 1997}}]}
        ],
    )
    cid = coll.record.id
    out = tax.graph.neighbors(f"doc:{cid}:itaa-1997-note", edge_types="AMENDS").neighbors
    assert [(n.node.id, n.direction, n.edge.properties) for n in out] == [
        (f"doc:{cid}:old-act", "out", {"year": 1997})
    ]
    # a link to a document not added yet resolves once it arrives
    coll.add_texts(
        ["forward"],
        ids=["early"],
        metadatas=[{"graph_links": [{"type": "CITES", "target": "later"}]}],
    )
    assert (
        tax.graph.neighbors(f"doc:{cid}:early", edge_types="CITES").neighbors[0].node.type
        == "unresolved"
    )
    coll.add_texts(["the later one"], ids=["later"])
    assert (
        tax.graph.neighbors(f"doc:{cid}:early", edge_types="CITES").neighbors[0].node.type
        == "document"
    )


def test_bad_graph_links_fail_the_document_only(tax: hybridkb.KnowledgeBase) -> None:
    coll = tax.collection("Tax Documents")
    report = coll.add_texts(
        ["x", "fine"], ids=["bad", "good"], metadatas=[{"graph_links": [{"type": "AMENDS"}]}, None]
    )
    assert [f.code for f in report.failed] == ["graph_error"] and "graph_links[0]" in report.failed[
        0
    ].error
    assert coll.get("bad") is None  # the whole write rolled back
    assert coll.get("good") is not None


def test_user_relation_between_documents(tax: hybridkb.KnowledgeBase) -> None:
    guide, ruling = doc_node(tax, "guide.md"), doc_node(tax, "ruling.md")
    tax.graph.relate(ruling, guide, "EXPLAINS", properties={"by": "user"})
    tax.graph.relate(ruling, guide, "EXPLAINS", properties={"by": "user"})
    links = tax.graph.neighbors(ruling, edge_types="EXPLAINS").neighbors
    assert len(links) == 1 and links[0].node.id == guide


# -- pruning ----------------------------------------------------------------------------


def _rows(kb: hybridkb.KnowledgeBase, where: str) -> int:
    return int(
        sql_rows(kb, f"SELECT count(*) FROM hybridkb_graph_nodes WHERE {where}")[0][0]
    ) + int(sql_rows(kb, f"SELECT count(*) FROM hybridkb_graph_edges WHERE {where}")[0][0])


def test_delete_prunes_exactly_the_document(tax: hybridkb.KnowledgeBase) -> None:
    g = tax.graph
    coll = tax.collection("Tax Documents")
    ruling = doc_node(tax, "ruling.md")
    ruling_id = ruling.split(":", 2)[2]
    chunks = g.chunks_of(ruling)
    guide = doc_node(tax, "guide.md")
    tax.graph.relate(ruling, guide, "EXPLAINS")
    before = g.stats()
    assert g.has_node("ent:commissioner-of-taxation")
    coll.delete(ruling_id)
    assert _rows(tax, f"document_id = '{ruling_id}'") == 0
    for node in [ruling, *chunks, "ent:commissioner-of-taxation", "ent:date:2024-03-01"]:
        assert not g.has_node(node)
    # shared entities stay while another document mentions them
    assert g.has_node("ent:itaa-1997") and g.has_node("ent:section:40-880")
    # the user edge on the deleted document went with it
    assert all(n.edge_type != "EXPLAINS" for n in g.neighbors(guide).neighbors)
    after = g.stats()
    assert after["nodes"] < before["nodes"] and after["edges"] < before["edges"]
    # a fresh load from the tables agrees with the copy kept in step
    live = g.stats()
    local_graph(tax).store.graphs.clear()
    assert g.stats() == live


def test_reingest_replaces_rows(tax: hybridkb.KnowledgeBase, corpus: Path) -> None:
    before = tax.graph.stats()
    rows_before = _rows(tax, "true")
    (corpus / "ruling.md").write_text(RULING.replace("2024-03-01", "2024-04-02"), encoding="utf-8")
    report = tax.collection("Tax Documents").add(corpus, metadata={"tags": ["tax", "guides"]})
    assert len(report.added) == 1
    after = tax.graph.stats()
    assert after["nodes"] == before["nodes"] and after["edges"] == before["edges"]
    assert tax.graph.has_node("ent:date:2024-04-02") and not tax.graph.has_node(
        "ent:date:2024-03-01"
    )
    assert _rows(tax, "true") == rows_before  # replaced, not added beside the old rows
    (dupes,) = sql_rows(
        tax,
        "SELECT count(*) FROM (SELECT source, target, type, collection_id, document_id FROM"
        " hybridkb_graph_edges GROUP BY ALL HAVING count(*) > 1)",
    )[0]
    assert dupes == 0


def test_drop_collection_prunes_its_graph(tax: hybridkb.KnowledgeBase) -> None:
    other = tax.create_collection("Other")
    other.add_texts(["The ITAA 1997 again."], ids=["o1"])
    tax.drop_collection("Tax Documents")
    g = tax.graph
    assert g.has_node("ent:itaa-1997")  # still mentioned by "Other"
    assert not g.has_node("cat:tax") and not g.has_node("ent:section:40-880")
    cid = other.record.id
    assert _rows(tax, f"collection_id <> {cid} AND collection_id <> 0") == 0
    tax.drop_collection("Other")
    assert g.stats()["nodes"] == 0 and _rows(tax, "true") == 0


def test_graph_persists_across_reopen(tmp_path: Path, corpus: Path) -> None:
    path = tmp_path / "p.duckdb"
    with hybridkb.connect(path, model="fake") as kb:
        kb.create_collection("C").add(corpus)
        stats = kb.graph.stats()
    with hybridkb.connect(path, model="fake", read_only=True) as kb:
        assert kb.graph.stats() == stats


def test_rebuild_applies_new_aliases(tax: hybridkb.KnowledgeBase) -> None:
    tax.graph.set_alias("Commissioner of Taxation", "ATO Commissioner")
    assert tax.graph.aliases() == {"commissioner-of-taxation": "ATO Commissioner"}
    assert tax.graph.rebuild("Tax Documents") == 3
    assert tax.graph.has_node("ent:ato-commissioner")
    assert not tax.graph.has_node("ent:commissioner-of-taxation")


def test_custom_extractor_plugs_in(tax: hybridkb.KnowledgeBase) -> None:
    class Keywords:
        def extract(self, text: str) -> list[Entity]:
            return [Entity("start-up costs", kind="topic")] if "start-up" in text else []

    tax.graph.add_extractor(Keywords())
    tax.graph.rebuild("Tax Documents")
    node = tax.graph.node("ent:start-up-costs")
    assert node.properties["kind"] == "topic"
    with pytest.raises(GraphError):
        tax.graph.add_extractor(object())  # type: ignore[arg-type]


# -- graph search -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "strategy", ["vector_first", "graph_first", "parallel", "vector_only", "graph_only"]
)
def test_graph_search_strategies(tax: hybridkb.KnowledgeBase, strategy: str) -> None:
    res = tax.graph.search("s.40-880 start-up costs", strategy=strategy, search_limit=3)
    assert res.results, strategy
    assert len(res.results) <= 3
    assert [r.seed.rank for r in res.results] == list(range(1, len(res.results) + 1))
    for r in res.results:
        assert r.seed.document_node and r.seed.chunk_id
        if strategy == "vector_only":
            assert r.context == []
    if strategy in ("graph_first", "graph_only"):
        assert res.results[0].source == "graph"
        assert "40-880" in res.results[0].seed.text
    data = res.to_dict()
    assert set(data["results"][0]) >= {"seed", "context"}


def test_graph_search_context_has_section_entities_and_links(tax: hybridkb.KnowledgeBase) -> None:
    coll = tax.collection("Tax Documents")
    ruling = doc_node(tax, "ruling.md")
    tax.graph.relate(ruling, f"doc:{coll.record.id}:old-act", "REPLACES")
    res = tax.graph.search(
        "start-up costs ruling", strategy="vector_first", search_limit=1, neighbor_limit=20
    )
    ctx = res.results[0].context
    seed = res.results[0].seed
    assert seed.filename == "ruling.md"
    types = {c.node.type for c in ctx}
    assert {"section", "document", "entity"} <= types
    assert any(c.edge_type == "REPLACES" for c in ctx)
    assert all(set(c.to_dict()) >= {"edge_type", "direction", "node"} for c in ctx)
    assert (
        len(tax.graph.search("start-up", neighbor_limit=2, search_limit=1).results[0].context) <= 2
    )


def test_graph_search_respects_collections_and_errors(tax: hybridkb.KnowledgeBase) -> None:
    tax.create_collection("Empty")
    assert tax.graph.search("ITAA 1997", strategy="graph_only", collections=["Empty"]).results == []
    with pytest.raises(GraphError):
        tax.graph.search("x", strategy="nope")
    with pytest.raises(hybridkb.KBError):
        tax.graph.search("  ")


# Pieces every rule matches or nearly matches, so generated texts hit each rule, its
# near misses, and texts that lack what a rule needs (digits, capitals, quotes, signs).
_PIECES = [
    "Income Tax Assessment Act 1997", "the Act 1936", "ITAA 1997", "ITAA1936", "GST",
    "s.40-880", "section 40-880(2)", "ss 8-1", "2024-07-01", "1 July 2024", "July 1, 2024",
    "$20,000", "AUD 1.5 million", "€300", "US$5k", '"car" means', '(the "Act")',
    "“record” includes", "Australian Taxation Office", "The Commissioner of Taxation",
    "DNA", "IL-6s", "1999", "20", "19", "Act", "$", "quarterly", "report", "and", "of",
    "٣٤", "x2", "May", "CEOs", "“", '"', "¥", "Mr Smith", "\n", ". ",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES) | st.text(max_size=8), max_size=24))
def test_rule_hints_skip_only_rules_that_cannot_match(pieces: list[str]) -> None:
    text = " ".join(pieces)
    everything = RuleHints(
        digits=True, years=True, capitals=True, act=True, amounts=True, quotes=True
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(extract, "rule_hints", lambda _: everything)
        unguarded = RuleExtractor().extract(text)
    assert RuleExtractor().extract(text) == unguarded


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(_PIECES), max_size=24),
    st.dictionaries(st.sampled_from(["gst", "itaa-1997", "dna", "act"]), st.sampled_from(
        ["Goods and Services Tax", "ITAA 1997", "GST", ""]), max_size=3),
)  # fmt: skip
def test_mentions_count_each_entity_by_the_key_it_resolves_to(
    pieces: list[str], aliases: dict[str, str]
) -> None:
    found = RuleExtractor().extract(" ".join(pieces))
    counted = extract.resolve_counted(found + found[:2], aliases)
    assert [ent for ent, _ in counted] == resolve_aliases(found + found[:2], aliases)
    for ent, count in counted:
        alone = [resolve_aliases([one], aliases) for one in found + found[:2]]
        assert count == sum(1 for r in alone if r and r[0].key == ent.key)


def test_an_act_title_spaced_twice_is_found_where_it_stands() -> None:
    """A graph search's query is not normalised: "Income  Tax Act 1997" raised ValueError
    (the title's words joined by one space are not in the text)."""
    text = "Under the Income  Tax\tAssessment Act 1997 now"
    (act,) = [e for e in RuleExtractor().extract(text) if e.kind == "act"]
    assert act.name == "ITAA 1997"
    assert act.surface == "Income  Tax\tAssessment Act 1997"
    assert text[act.start : act.end] == act.surface


def _graph_rows(kb: hybridkb.KnowledgeBase) -> list[tuple[Any, ...]]:
    return sql_rows(
        kb,
        "SELECT 'node', document_id, id, type, properties FROM hybridkb_graph_nodes UNION ALL"
        " SELECT 'edge', document_id, source || '>' || target, type, properties"
        " FROM hybridkb_graph_edges ORDER BY ALL",
    )


def test_new_documents_skip_the_graph_delete_that_replaced_ones_need(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new document has no graph rows yet: looking for them scanned both graph tables
    once a batch (6M node rows at 1M chunks). A replaced one still loses its old rows."""
    deleted: list[list[str]] = []
    original = GraphSQLBase._delete_rows

    def spy(self: GraphSQLBase, con: Any, where: str, params: Sequence[Any]) -> list[str]:
        deleted.append(json.loads(params[-1]))
        return original(self, con, where, params)

    monkeypatch.setattr(GraphSQLBase, "_delete_rows", spy)
    texts = [f"Note {i} on the Orchard Board of Tasmania and GST." for i in range(6)]
    final = [texts[0] + " Revised by the ATO.", *texts[1:], "Note 6 on DNA."]
    ids = [f"n{i}" for i in range(7)]
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as kb:
        coll = kb.create_collection("notes")
        coll.add_texts(texts, ids=ids[:6])
        assert deleted == []
        coll.add_texts(final, ids=ids)
        assert deleted == [["n0"]]
        replaced = _graph_rows(local(kb))
    with hybridkb.connect(tmp_path / "once.duckdb", model="fake") as once:
        once.create_collection("notes").add_texts(final, ids=ids)
        assert _graph_rows(local(once)) == replaced
    assert {r[1] for r in replaced} >= set(ids)


# The patterns as they were written before they started with a character set.
_CAP = r"[A-Z][\w'’\-]*"
_CONNECT = r"(?:of|and|for|the|on|in|to|de|van|von|der|la|du|&)"
_MONTHS = (
    "September|February|November|December|January|October|August|March|April|June|July"
    "|Sept|Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
)
_BOUNDARY_PATTERNS = {
    "_NAME": rf"\b{_CAP}(?:[ \t]+(?:{_CONNECT}[ \t]+)?{_CAP})+",
    "_ACRONYM": r"\b[A-Z][A-Z0-9\-]*[A-Z0-9]s?\b",
    "_ACRONYM_YEAR": r"\b([A-Z]{2,8})\s?((?:19|20)\d{2})\b",
    "_SECTION": r"(?:\bss?\.\s?|\b[Ss]ections?\s+|\bss?\s(?=\d+[A-Za-z]?-\d))"
    r"(\d+[A-Za-z]{0,2}(?:-\d+[A-Za-z]{0,2})?)((?:\(\w{1,4}\))*)",
    "_DATE_ISO": r"\b((?:19|20)\d{2})-(\d{2})-(\d{2})\b",
    "_DATE_DMY": rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({_MONTHS})\.?,?\s+((?:19|20)\d{{2}})\b",
    "_DATE_MDY": rf"\b({_MONTHS})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+((?:19|20)\d{{2}})\b",
}


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(_PIECES) | st.text("AZazsS019_-’'é É\tÜ.(", max_size=8), max_size=24)
)
def test_rules_match_where_a_word_boundary_starts_them(pieces: list[str]) -> None:
    """ "X(?<!\\w\\w)" is "\\bX" for a word character X: the same matches, found faster."""
    import re

    text = " ".join(pieces)
    for name, pattern in _BOUNDARY_PATTERNS.items():
        now = [(m.span(), m.groups()) for m in getattr(extract, name).finditer(text)]
        assert now == [(m.span(), m.groups()) for m in re.finditer(pattern, text)], name


@pytest.mark.parametrize(
    "props",
    [
        {"name": "Australian Taxation Office", "kind": "name"},
        {"surface": "€300 — “quoted” \\ \u2028 \x00 日本"},
        {"n": 1, "f": 1.5, "big": 1e300, "nan": float("nan"), "inf": float("-inf"), "t": True},
        {"none": None, "list": [1, "a", None], "nested": {"deep": {"x": [{}]}}},
        {"path": Path("/tmp/x"), "set": {1}, "tuple": (1, 2), 3: "int key"},
        {},
        None,
    ],
)
def test_graph_properties_are_stored_as_dump_props_writes_them(props: Any) -> None:
    from hybridkb.storage.base import dump_props
    from hybridkb.storage.duckdb.graph import props_text

    assert props_text(props) == dump_props(props)


def test_properties_holding_themselves_fail_as_dump_props_fails() -> None:
    from hybridkb.storage.base import dump_props
    from hybridkb.storage.duckdb.graph import props_text

    props: dict[str, Any] = {"a": 1}
    props["self"] = props
    with pytest.raises(ValueError) as before:
        dump_props(props)
    with pytest.raises(ValueError) as now:
        props_text(props)
    assert str(now.value) == str(before.value)


_ODD_PROPS: list[dict[str, Any] | None] = [
    {"name": "x\x1fy\x1e\x00", "kind": "name"},
    None,
    {"surface": "“quoted” \\ € 日本 \u2028", "n": 2, "f": 0.1},
    {},
    {"nested": {"a": [1, None, "\x1f"]}},
]


def _write_odd_rows(path: Path) -> list[tuple[Any, ...]]:
    from hybridkb.storage import open_storage
    from hybridkb.storage.base import EdgeRow, NodeRow
    from hybridkb.storage.duckdb.graph import DuckDBGraphSQL

    storage = open_storage(str(path))
    sql = DuckDBGraphSQL()
    nodes = [NodeRow(f"n{i}", "entity", p or {}, f"c{i}") for i, p in enumerate(_ODD_PROPS)]
    edges = [
        EdgeRow(f"n{i}", "n0", "mentions", 1.5, p or {}, "c") for i, p in enumerate(_ODD_PROPS)
    ]
    per_doc = [("d1", nodes[:3], edges[:2]), ("d2", nodes[3:], edges[2:]), ("d3", [], [])]
    try:
        storage.transaction(sql.ensure_schema)
        storage.transaction(lambda con: sql.replace_documents_many(con, "ws", 7, per_doc))
        return sql_rows(
            storage,
            "SELECT 'n', workspace, id, type, properties::TEXT, collection_id, document_id, chunk_id,"
            " NULL FROM hybridkb_graph_nodes UNION ALL SELECT 'e', workspace, source || '>' ||"
            " target, type, properties::TEXT, collection_id, document_id, chunk_id, weight"
            " FROM hybridkb_graph_edges ORDER BY ALL",
        )
    finally:
        storage.close()


def test_graph_rows_properties_travel_apart_and_land_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Properties go to DuckDB as one text split on a control character JSON always
    escapes; each lands as dump_props wrote it (None as NULL), on its own row, as when
    every column travelled in the one JSON (still the way when a text cannot be joined)."""
    from hybridkb.storage.base import dump_props
    from hybridkb.storage.duckdb import graph as duckdb_graph

    apart = _write_odd_rows(tmp_path / "apart.duckdb")
    monkeypatch.setattr(duckdb_graph, "joined_props", lambda texts: None)
    together = _write_odd_rows(tmp_path / "together.duckdb")
    assert apart == together
    written = {(r[0], r[2].split(">")[0]): r[4] for r in apart}
    for i, props in enumerate(_ODD_PROPS):
        assert written["n", f"n{i}"] == dump_props(props)
        assert written["e", f"n{i}"] == dump_props(props)
    assert {r[1] for r in apart} == {"ws"} and {r[5] for r in apart} == {7}
    assert duckdb_graph.joined_props(["{}", "x\x1fy"]) is None
