"""`hybridkb graph ...`: command names, flags and JSON keys (the contract checked from outside)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest

from hybridkb.cli import commands as main_cli
from hybridkb.cli.graph import graph

GRAPH_COMMANDS = ["neighbors", "traverse", "path", "subgraph", "search", "export", "import", "stats",
                  "relate", "rebuild"]  # fmt: skip
NODE_KEYS = {"id", "type"}
EDGE_KEYS = {"source", "target", "type"}


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYBRIDKB_MODEL", "fake")
    if "graph" not in main_cli.cli.commands:  # until cli.py registers the group itself
        main_cli.cli.add_command(graph)


class Run:
    def __init__(self, capsys: pytest.CaptureFixture[str], db: str) -> None:
        self.capsys, self.db = capsys, db

    def __call__(self, *args: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = main_cli.main(["--db", self.db, *args])
        out, err = self.capsys.readouterr()
        return code, out, err

    def json(self, *args: str) -> Any:
        code, out, err = self(*args, "--json")
        assert code == 0, err
        return json.loads(out)


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Run:
    return Run(capsys, str(tmp_path / "kb.duckdb"))


@pytest.fixture
def loaded(run: Run, tmp_path: Path) -> dict[str, str]:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text(
        "# Guide\n\nThe ITAA 1997 covers s.40-880.\n\n## Cars\n\nCar limits under the ITAA 1997.\n",
        encoding="utf-8",
    )
    (docs / "ruling.md").write_text(
        "# Ruling\n\nThis ruling explains s.40-880.\n", encoding="utf-8"
    )
    code, _, err = run("add", "Tax", str(docs), "--create")
    assert code == 0, err
    hit = run.json("search", "Tax", "ruling explains")["results"][0]
    return {"chunk": hit["chunk_id"], "doc": hit["document_node"]}


def _node(n: dict[str, Any]) -> None:
    assert NODE_KEYS <= set(n), n


def _edge(e: dict[str, Any]) -> None:
    assert EDGE_KEYS <= set(e), e


def test_every_graph_command_has_help(run: Run) -> None:
    code, out, _ = run("graph", "--help")
    assert code == 0
    for name in GRAPH_COMMANDS:
        assert name in out
        code, text, err = run("graph", name, "--help")
        assert code == 0 and "Usage" in text, err


def test_neighbors_json(run: Run, loaded: dict[str, str]) -> None:
    data = run.json("graph", "neighbors", loaded["chunk"], "--direction", "out", "--limit", "5")
    assert set(data) >= {"node", "neighbors"}
    _node(data["node"])
    assert data["node"]["id"] == loaded["chunk"]
    assert data["neighbors"]
    for n in data["neighbors"]:
        assert set(n) >= {"edge_type", "direction", "node"} and n["direction"] == "out"
        _node(n["node"])
    only = run.json(
        "graph", "neighbors", loaded["chunk"], "--edge-type", "mentions", "--edge-type", "next"
    )
    assert {n["edge_type"] for n in only["neighbors"]} <= {"mentions", "next"}


def test_traverse_path_subgraph_json(run: Run, loaded: dict[str, str]) -> None:
    t = run.json("graph", "traverse", loaded["doc"], "--max-depth", "2", "--direction", "out")
    assert t["paths"]
    for p in t["paths"]:
        assert set(p) >= {"depth", "nodes", "edges"} and p["depth"] == len(p["edges"]) <= 2
        for n in p["nodes"]:
            _node(n)
        for e in p["edges"]:
            _edge(e)
    p = run.json("graph", "path", loaded["doc"], "ent:itaa-1997", "--max-depth", "6")
    assert p["paths"] and [x["length"] for x in p["paths"]] == sorted(
        x["length"] for x in p["paths"]
    )
    first = p["paths"][0]
    assert first["nodes"][0]["id"] == loaded["doc"] and first["nodes"][-1]["id"] == "ent:itaa-1997"
    assert first["length"] == len(first["edges"])
    s = run.json("graph", "subgraph", loaded["doc"], "--max-depth", "1")
    assert set(s) >= {"nodes", "edges", "stats"}
    assert set(s["stats"]) >= {"node_count", "edge_count", "depth_reached"}
    assert s["stats"]["node_count"] == len(s["nodes"]) and s["stats"]["depth_reached"] <= 1


def test_search_json(run: Run, loaded: dict[str, str]) -> None:
    for strategy in ("vector_first", "graph_first", "parallel", "vector_only", "graph_only"):
        data = run.json(
            "graph", "search", "Tax", "s.40-880 ruling", "--strategy", strategy, "--depth", "1"
        )
        assert data["results"], strategy
        for r in data["results"]:
            assert set(r) >= {"seed", "context"}
            assert set(r["seed"]) >= {"chunk_id", "document_node", "text", "collection"}
            for c in r["context"]:
                assert set(c) >= {"edge_type", "direction", "node"}
                _node(c["node"])
    code, out, _ = run("graph", "search", "*", "ITAA 1997")
    assert code == 0 and "ITAA" in out


def test_export_and_import(run: Run, loaded: dict[str, str], tmp_path: Path) -> None:
    code, out, _ = run("graph", "export", "Tax", "--format", "graphml")
    assert code == 0
    ET.fromstring(out)
    code, out, _ = run(
        "graph", "export", "Tax", "--node", loaded["doc"], "--max-depth", "1", "--format", "mermaid"
    )
    assert code == 0 and out.startswith("flowchart LR")
    target = tmp_path / "g.graphml"
    code, _, _ = run("graph", "export", "Tax", "--format", "graphml", "--output", str(target))
    assert code == 0 and target.read_text().startswith("<?xml")
    folder = tmp_path / "sets"
    code, _, err = run("graph", "export", "Tax", "--format", "json", "--output", str(folder))
    assert code == 0, err
    report = run.json("graph", "import", "Copy", str(folder))
    assert len(report["added"]) == 2 and report["failed"] == []
    code, out, _ = run("graph", "import", "Copy", str(folder))
    assert code == 0 and "2 unchanged" in out


def test_errors_are_one_line(run: Run, loaded: dict[str, str]) -> None:
    code, out, err = run("graph", "neighbors", "no-such-node")
    assert code == 1 and out == "" and err.startswith("hybridkb: unknown node 'no-such-node'")
    assert err.count("\n") == 1
    code, _, err = run("graph", "export", "Nope", "--format", "mermaid")
    assert code == 1 and "not found" in err
    code, _, _ = run("graph", "neighbors", loaded["chunk"], "--direction", "up")
    assert code == 2


def test_text_output_and_relate(run: Run, loaded: dict[str, str]) -> None:
    code, out, _ = run("graph", "neighbors", loaded["chunk"])
    assert code == 0 and loaded["chunk"] in out
    edge = run.json("graph", "relate", loaded["doc"], "ent:itaa-1997", "--type", "ABOUT")
    assert edge["type"] == "ABOUT" and edge["source"] == loaded["doc"]
    stats = run.json("graph", "stats")
    assert stats["edge_types"]["ABOUT"] == 1
    code, out, _ = run("graph", "rebuild", "Tax")
    assert code == 0 and "2 documents" in out
    assert run.json("graph", "stats")["edge_types"]["ABOUT"] == 1
