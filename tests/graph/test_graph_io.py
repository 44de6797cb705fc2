"""Graph import (JSON + Parquet sets) and export (folder, GraphML, Mermaid)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree as ET

import duckdb
import numpy as np
import pytest
from internals import local

import hybridkb
from hybridkb.errors import GraphError
from hybridkb.graph.export import write_vectors
from hybridkb.graph.formats import to_graphml, to_mermaid
from hybridkb.graph.model import Edge, Node

NS = {"g": "http://graphml.graphdrawing.org/xmlns"}


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[hybridkb.KnowledgeBase]:
    with hybridkb.connect(
        tmp_path / "io.duckdb", model="fake", chunk_size=200, chunk_overlap=0
    ) as base:
        yield local(base)


def write_set(folder: Path, name: str, dim: int, *, vectors: bool = True) -> None:
    """A document as a code-graph tool would write it: section -> chunks/code, entity, category."""
    folder.mkdir(exist_ok=True)
    nodes = [
        {"id": "s1", "type": "section", "name": "Parsing", "level": 1},
        {
            "id": "c1",
            "type": "chunk",
            "text": "The parser reads tokens from the Lexer Module.",
            "chunk_index": 0,
        },
        {
            "id": "c2",
            "type": "code",
            "text": "def parse(tokens):\n    return Tree(tokens)",
            "language": "python",
            "chunk_index": 1,
        },
        {"id": "e1", "type": "entity", "name": "Lexer Module"},
        {"id": "k1", "type": "category", "name": "compilers"},
    ]
    edges = [
        {"source": "s1", "target": "c1", "type": "parent_of"},
        {"source": "s1", "target": "c2", "type": "contains"},
        {"source": "c1", "target": "c2", "type": "next"},
        {"source": "c1", "target": "e1", "type": "mentions"},
        {"source": "s1", "target": "k1", "type": "categorized_as"},
        {"source": "c2", "target": "e1", "type": "related", "weight": 0.5, "why": "calls"},
    ]
    (folder / f"{name}.nodes.json").write_text(json.dumps(nodes), encoding="utf-8")
    (folder / f"{name}.edges.json").write_text(json.dumps({"edges": edges}), encoding="utf-8")
    if vectors:
        rng = np.random.default_rng(len(name))
        vecs = rng.normal(size=(2, dim)).astype(np.float32)
        write_vectors(folder / f"{name}.parquet", ["c1", "c2"], vecs)


def test_import_uses_vectors_when_dimension_matches(
    kb: hybridkb.KnowledgeBase, tmp_path: Path
) -> None:
    folder = tmp_path / "imp"
    write_set(folder, "parser", 64)
    write_set(folder, "lexer", 64)
    report = kb.graph.import_folder("Code", folder)
    assert report["failed"] == [] and report["reembedded"] == 0
    assert sorted(a["document_id"] for a in report["added"]) == ["lexer", "parser"]
    coll = kb.collection("Code")
    assert coll.count() == 2 and coll.describe().chunks == 4
    hit = kb.search("parser reads tokens", collections=["Code"], mode="keyword")[0]
    node = kb.graph.node(hit.chunk_id)
    assert node.type == "chunk" and node.properties["source_id"] == "c1"
    around = {(n.edge_type, n.node.type) for n in kb.graph.neighbors(hit.chunk_id).neighbors}
    assert {("parent_of", "section"), ("next", "code"), ("mentions", "entity")} <= around
    # the stored vector is the imported one (normalised), not a re-embedding
    stored = kb.storage.fetch_vectors(coll.record, [int(hit.chunk_id, 16)])[0]
    rng = np.random.default_rng(len(hit.document_id))
    expected = rng.normal(size=(2, 64)).astype(np.float32)[0]
    assert np.allclose(stored, expected / np.linalg.norm(expected), atol=1e-5)
    # entities and tags join the workspace's own; the document node holds the roots
    assert kb.graph.has_node("ent:lexer-module") and kb.graph.has_node("cat:compilers")
    doc = f"doc:{coll.record.id}:parser"
    assert {n.node.type for n in kb.graph.neighbors(doc, edge_types="contains").neighbors} == {
        "section"
    }
    again = kb.graph.import_folder("Code", folder)
    assert len(again["unchanged"]) == 2 and again["added"] == []


def test_import_reembeds_on_dimension_mismatch_or_missing(
    kb: hybridkb.KnowledgeBase, tmp_path: Path
) -> None:
    folder = tmp_path / "imp"
    write_set(folder, "wrongdim", 32)
    write_set(folder, "novectors", 64, vectors=False)
    report = kb.graph.import_folder("Code", folder)
    assert report["reembedded"] == 4 and not report["failed"]


def test_import_reports_bad_sets(kb: hybridkb.KnowledgeBase, tmp_path: Path) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "broken.nodes.json").write_text("{not json", encoding="utf-8")
    (folder / "empty.nodes.json").write_text(
        json.dumps([{"id": "s", "type": "section"}]), encoding="utf-8"
    )
    write_set(folder, "good", 64)
    report = kb.graph.import_folder("Code", folder)
    assert {f["name"] for f in report["failed"]} == {"broken", "empty"}
    assert all(f["code"] == "graph_error" for f in report["failed"])
    assert [a["name"] for a in report["added"]] == ["good"]
    with pytest.raises(GraphError):
        kb.graph.import_folder("Code", tmp_path / "missing")


def test_export_folder_round_trips(kb: hybridkb.KnowledgeBase, tmp_path: Path) -> None:
    coll = kb.create_collection("Notes")
    coll.add_texts(
        ["The ITAA 1997 applies.\n\nSection 40-880 covers costs.", "Old rules of the ITAA 1936."],
        ids=["new", "old"],
        metadatas=[{"tags": ["tax"], "graph_links": [{"type": "AMENDS", "target": "old"}]}, None],
    )
    out = tmp_path / "out"
    files = kb.graph.export_folder("Notes", out)
    assert sorted(p.name for p in files) == sorted(
        f"{d}.{ext}" for d in ("new", "old") for ext in ("nodes.json", "edges.json", "parquet")
    )
    nodes = json.loads((out / "new.nodes.json").read_text())
    assert {n["type"] for n in nodes} >= {"document", "chunk", "entity", "category"}
    assert all("text" in n for n in nodes if n["type"] == "chunk")
    parquet = duckdb.sql(f"SELECT * FROM read_parquet('{out / 'new.parquet'}')")
    assert parquet.columns == ["id", "embedding"] and len(parquet.fetchall()[0][1]) == 64
    report = kb.graph.import_folder("Copy", out)
    assert report["reembedded"] == 0 and len(report["added"]) == 2
    copy = kb.collection("Copy").record.id
    links = kb.graph.neighbors(f"doc:{copy}:new", edge_types="AMENDS").neighbors
    assert [n.node.id for n in links] == [f"doc:{copy}:old"]
    assert kb.search("section costs", collections=["Copy"], k=1)[0].document_id == "new"
    # deleting an imported document prunes what it brought
    kb.collection("Copy").delete("new")
    assert not kb.graph.has_node(f"doc:{copy}:new")
    assert kb.graph.has_node("ent:itaa-1997")  # still held by the original collection


def test_graphml_is_valid_and_typed(kb: hybridkb.KnowledgeBase) -> None:
    nodes = [
        Node("a", "entity", {"name": "A & <B>", "count": 2, "tags": ["x"]}),
        Node("b", "chunk", {"score": 0.5}),
    ]
    edges = [Edge("a", "b", "mentions", 1.5, {"surface": '"A"'}), Edge("a", "zz", "dangling")]
    root = ET.fromstring(to_graphml(nodes, edges))
    keys = {k.get("attr.name"): k.get("attr.type") for k in root.findall("g:key", NS)}
    assert keys["count"] == "long" and keys["score"] == "double" and keys["weight"] == "double"
    graph = root.find("g:graph", NS)
    assert graph is not None and graph.get("edgedefault") == "directed"
    assert [n.get("id") for n in graph.findall("g:node", NS)] == ["a", "b"]
    assert len(graph.findall("g:edge", NS)) == 1  # the dangling edge is left out
    nx = pytest.importorskip("networkx")
    loaded = nx.parse_graphml(to_graphml(nodes, edges))
    assert loaded.nodes["a"]["name"] == "A & <B>" and loaded.edges["a", "b"]["weight"] == 1.5


def test_mermaid_escapes_labels() -> None:
    text = to_mermaid(
        [Node("x:1", "entity", {"name": 'say "hi" <b>'}), Node("y", "chunk")],
        [Edge("x:1", "y", "a|b")],
    )
    assert text.startswith("flowchart LR\n")
    assert '"' not in text.split("[", 1)[1].split("<br/>")[0].strip('"')
    assert "n0 -->|a#124;b| n1" in text and "classDef entity" in text


def test_export_text_of_collection_and_subgraph(kb: hybridkb.KnowledgeBase) -> None:
    coll = kb.create_collection("Notes")
    coll.add_texts(["The ITAA 1997 applies."], ids=["n1"])
    cid = coll.record.id
    whole = ET.fromstring(kb.graph.export(collection="Notes", format="graphml"))
    ids = {n.get("id") for n in whole.iter("{http://graphml.graphdrawing.org/xmlns}node")}
    assert f"doc:{cid}:n1" in ids and "ent:itaa-1997" in ids
    sub = kb.graph.export(node=f"doc:{cid}:n1", max_depth=1, format="mermaid")
    assert "<i>entity</i>" not in sub and "<i>chunk</i>" in sub and "|contains|" in sub
    with pytest.raises(GraphError):
        kb.graph.export(collection="Notes", format="dot")
