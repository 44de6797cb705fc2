"""LangChain graph tools: names, cited and budgeted text, errors as observations."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from internals import local
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool

import hybridkb
from hybridkb.agents.graph_tools import make_graph_tools
from hybridkb.agents.tools import make_tools


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[hybridkb.KnowledgeBase]:
    with hybridkb.connect(tmp_path / "t.duckdb", model="fake", search_token_budget=300) as base:
        coll = base.create_collection("Tax Documents")
        coll.add_texts(
            [
                "Depreciation of a car is limited under s.40-880 of the ITAA 1997. " * 3,
                "A ruling on start-up costs under s.40-880.",
                "Home office costs are deductible under the ITAA 1997.",
            ],
            ids=["guide", "ruling", "home"],
            metadatas=[{"graph_links": [{"type": "CITES", "target": "ruling"}]}, None, None],
        )
        yield local(base)


def call(t: BaseTool, **args: Any) -> ToolMessage:
    msg = t.invoke({"type": "tool_call", "id": "c1", "name": t.name, "args": args})
    assert isinstance(msg, ToolMessage)
    return msg


def by_name(tools: list[BaseTool]) -> dict[str, BaseTool]:
    return {t.name: t for t in tools}


def test_names_and_read_only(kb: hybridkb.KnowledgeBase) -> None:
    assert list(by_name(make_graph_tools(kb))) == [
        "graph_neighbors",
        "graph_find_paths",
        "graph_search_kb",
        "graph_relate",
    ]
    assert "graph_relate" not in by_name(make_graph_tools(kb, read_only=True))
    everything = by_name(make_tools(kb))
    assert {"graph_neighbors", "graph_find_paths", "graph_search_kb"} <= set(everything)
    for t in make_graph_tools(kb):
        assert t.response_format == "content_and_artifact" and t.handle_tool_error is True
        assert "Use this" in t.description or "Use it" in t.description


def test_graph_search_is_cited_and_within_budget(kb: hybridkb.KnowledgeBase) -> None:
    tools = by_name(make_graph_tools(kb))
    msg = call(tools["graph_search_kb"], query="depreciation of a car", limit=3)
    assert msg.status != "error"
    assert "Tax Documents" in msg.content and "doc guide" in msg.content
    assert "Graph context" in msg.content and "CITES" in msg.content
    assert len(msg.content) <= 300 * 4 + 200
    assert msg.artifact["results"][0]["seed"]["document_id"] == "guide"


def test_neighbors_and_paths(kb: hybridkb.KnowledgeBase) -> None:
    tools = by_name(make_graph_tools(kb))
    cid = kb.collection("Tax Documents").record.id
    msg = call(tools["graph_neighbors"], node_id=f"doc:{cid}:guide", edge_types="CITES")
    assert (
        f"doc:{cid}:ruling" in msg.content and msg.artifact["neighbors"][0]["edge_type"] == "CITES"
    )
    paths = call(
        tools["graph_find_paths"],
        source_id=f"doc:{cid}:home",
        target_id=f"doc:{cid}:ruling",
        max_depth=4,
    )
    assert "path" in paths.content and paths.artifact["paths"]
    assert paths.artifact["paths"][0]["length"] <= 4


def test_errors_become_observations(kb: hybridkb.KnowledgeBase) -> None:
    tools = by_name(make_graph_tools(kb))
    msg = call(tools["graph_neighbors"], node_id="ent:nothing-here")
    assert msg.status == "error" and isinstance(msg.content, str)
    assert msg.content.startswith("Error (graph_error): unknown node")
    msg = call(tools["graph_find_paths"], source_id="a", target_id="b", limit=500)
    assert msg.status == "error" and "limit" in msg.content


def test_relate_tool_is_idempotent(kb: hybridkb.KnowledgeBase) -> None:
    tools = by_name(make_graph_tools(kb, workspace=kb.workspace))
    cid = kb.collection("Tax Documents").record.id
    for _ in range(2):
        msg = call(
            tools["graph_relate"],
            source_id=f"doc:{cid}:home",
            target_id=f"doc:{cid}:guide",
            relation="SEE_ALSO",
        )
        assert msg.status != "error"
    assert kb.graph.stats()["edge_types"]["SEE_ALSO"] == 1
