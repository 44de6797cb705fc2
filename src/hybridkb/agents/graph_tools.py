"""The agent tools over the knowledge graph: neighbours, paths and graph-expanded search.

Same rules as the other tools (:mod:`hybridkb.agents.toolbox`, whose registry lists
:data:`GRAPH_TOOLS`): each is one function returning ``(text, artifact)``, the text cut
to the settings' token budgets with a last line saying what was cut; passages carry the
citation of ``render.citation``; a KBError becomes an error observation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ConfigError
from . import render
from .frontend import ToolSpec, bind_tool, check_limit, offered

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

    from ..settings import Settings

__all__ = ["GRAPH_TOOLS", "GRAPH_TOOL_NAMES", "ToolContext", "ToolHost", "make_graph_tools"]

Result = tuple[str, Any]


def _types(edge_types: str) -> list[str] | None:
    if not isinstance(edge_types, str):
        raise ConfigError("edge_types: a comma-separated string such as 'mentions,contains'")
    found = [t.strip() for t in edge_types.split(",") if t.strip()]
    return found or None


class ToolHost(Protocol):
    """What the graph tools need of a knowledge base (:class:`hybridkb.KnowledgeBase` has
    it, through every door); declared here so that graph/ imports nothing above it."""

    @property
    def settings(self) -> Settings:
        """The settings (the tools' token budgets)."""
        ...

    @property
    def workspace(self) -> str:
        """The workspace the tools see."""
        ...

    @property
    def graph(self) -> Any:
        """The workspace's graph (:class:`hybridkb.graph.Graph`)."""
        ...

    def in_workspace(self, workspace: str) -> ToolHost:
        """The same store bound to another workspace (the tools' ``workspace`` argument)."""
        ...


class ToolContext(Protocol):
    """What a graph tool is bound to: a toolkit holding the knowledge base."""

    @property
    def kb(self) -> ToolHost:
        """The bound knowledge base."""
        ...


def graph_neighbors(
    tk: ToolContext, node_id: str, edge_types: str = "", direction: str = "both", limit: int = 20
) -> Result:
    """List the nodes linked to one node of the knowledge graph.

    Use this to see what a passage mentions, which section and document hold it, the
    passages before and after it, or which documents a document amends or cites. Node
    ids come from graph_search_kb (chunk ids, "doc:..." document nodes, "ent:..." entities).

    Args:
        node_id: A node id, e.g. "doc:1:3f2a9c1b7d4e5f60" or "ent:itaa-1997".
        edge_types: Optional comma-separated edge types, e.g. "mentions,contains".
        direction: "out" (from the node), "in" (to the node) or "both" (default).
        limit: How many neighbours, 1 to 200 (default 20).
    """
    result = tk.kb.graph.neighbors(
        node_id,
        edge_types=_types(edge_types),
        direction=direction,
        limit=check_limit(limit, high=200),
    )
    lines = [
        f"- {render.arrow(n.edge_type, out=n.direction == 'out')} {render.node_line(n.node)}"
        for n in result.neighbors
    ]
    header = (
        f"{render.node_line(result.node)}\n{len(lines)} neighbour{'s' if len(lines) != 1 else ''}:"
    )
    if not lines:
        header = (
            f"{render.node_line(result.node)}\n"
            "No neighbours (try direction 'both' or no edge_types)."
        )
    out = render.fit_lines(
        header,
        lines,
        budget_tokens=tk.kb.settings.listing_token_budget,
        hint="Use a smaller limit or name edge_types.",
    )
    return out.text, result.to_dict()


def graph_find_paths(
    tk: ToolContext,
    source_id: str,
    target_id: str,
    edge_types: str = "",
    max_depth: int = 4,
    limit: int = 5,
) -> Result:
    """Find how two nodes of the knowledge graph are connected, shortest paths first.

    Use this for questions such as "how is this ruling related to section 40-880?" or
    "which documents connect these two passages?".

    Args:
        source_id: Node id to start from, e.g. a chunk id or "doc:1:abc".
        target_id: Node id to reach, e.g. "ent:itaa-1997".
        edge_types: Optional comma-separated edge types to follow; empty follows all.
        max_depth: Longest path in edges, 1 to 8 (default 4).
        limit: How many paths, 1 to 20 (default 5).
    """
    result = tk.kb.graph.find_paths(
        source_id,
        target_id,
        edge_types=_types(edge_types),
        max_depth=check_limit(max_depth, "max_depth", high=8),
        limit=check_limit(limit, high=20),
    )
    if not result.paths:
        return (
            f"No path from {render.shown_name(source_id, 120)} to "
            f"{render.shown_name(target_id, 120)} within {max_depth} edges.",
            result.to_dict(),
        )
    lines = [
        f"{k}. ({p.length} edge{'s' if p.length != 1 else ''}) {render.path_line(p)}"
        for k, p in enumerate(result.paths, 1)
    ]
    names = {n.id: n for p in result.paths for n in p.nodes}
    lines.append("Nodes:")
    lines += [f"- {render.node_line(n)}" for n in names.values()]
    out = render.fit_lines(
        f"{len(result.paths)} path(s), shortest first:",
        lines,
        budget_tokens=tk.kb.settings.listing_token_budget,
        hint="Ask for fewer paths or a smaller max_depth.",
    )
    return out.text, result.to_dict()


def graph_search_kb(
    tk: ToolContext,
    query: str,
    collection_name: str = "",
    strategy: str = "vector_first",
    depth: int = 1,
    limit: int = 5,
) -> Result:
    """Search the user's documents and add each passage's graph context.

    Like search_kb, returning numbered, cited passages, plus for each passage its section
    and document, neighbouring passages, the entities it mentions and linked documents.
    Use it when the answer may need surrounding or related material.

    Args:
        query: The question or keywords, e.g. "depreciation of a home office".
        collection_name: Collection to search; empty searches every collection.
        strategy: vector_first (default), graph_first (entities named in the query first),
            parallel (both merged), graph_only, or vector_only.
        depth: Hops of context around each passage, 0 to 3 (default 1).
        limit: How many passages, 1 to 50 (default 5).
    """
    if not isinstance(query, str) or not query.strip():
        raise ConfigError("query: empty; pass the question or words to look for")
    collections = (
        [collection_name.strip()]
        if isinstance(collection_name, str) and collection_name.strip()
        else None
    )
    result = tk.kb.graph.search(
        query,
        strategy=strategy,
        traverse_depth=check_limit(depth, "depth", high=3) if depth else 0,
        search_limit=check_limit(limit),
        neighbor_limit=8,
        collections=collections,
    )
    hits = [r.seed for r in result.results]
    budget = tk.kb.settings.search_token_budget
    # Passages first (three quarters of the budget), then what the graph adds.
    passages = render.render_hits(
        hits,
        query=query,
        budget_tokens=max(1, budget * 3 // 4),
        scope=repr(collection_name) if collections else "all collections",
    )
    lines = [
        f"[{k}] {render.arrow(c.edge_type, out=c.direction == 'out')} {render.node_line(c.node)}"
        for k, r in enumerate(result.results, 1)
        for c in r.context
    ]
    context = render.fit_lines(
        "Graph context ([n] = passage; node ids work with graph_neighbors/graph_find_paths):",
        lines,
        budget_tokens=max(1, budget - render.tokens(passages.text)),
        hint="Use graph_neighbors on a node id for more.",
    )
    text = passages.text if not lines else passages.text + "\n" + context.text
    return text, result.to_dict()


def graph_relate(
    tk: ToolContext, source_id: str, target_id: str, relation: str = "related"
) -> Result:
    """Record a link between two existing nodes of the knowledge graph.

    Use this when the user states a relation to remember, e.g. "note that this ruling
    amends the 2019 guide". Linking the same pair with the same relation twice changes
    nothing.

    Args:
        source_id: Node id the link starts from, e.g. "doc:1:abc".
        target_id: Node id the link points to, e.g. "doc:1:def".
        relation: The link type, e.g. "related", "AMENDS", "CITES" (default related).
    """
    edge = tk.kb.graph.relate(source_id, target_id, relation)
    return f"Linked {render.edge_line(edge)}.", edge.to_dict()


GRAPH_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(graph_neighbors),
    ToolSpec(graph_find_paths),
    ToolSpec(graph_search_kb),
    ToolSpec(graph_relate, writes=True),
)
GRAPH_TOOL_NAMES = tuple(spec.name for spec in GRAPH_TOOLS)


class _Bound:
    """A knowledge base as a graph tool's context."""

    def __init__(self, kb: ToolHost) -> None:
        self.kb = kb


def make_graph_tools(
    kb: ToolHost,
    *,
    workspace: str | None = None,
    read_only: bool = False,
    allowed_paths: Sequence[Any] | None = None,
) -> list[BaseTool]:
    """The graph tools alone bound to ``kb`` (and ``workspace``): graph_neighbors,
    graph_find_paths, graph_search_kb, and graph_relate unless ``read_only``
    (:func:`hybridkb.agents.tools.make_tools` offers them with the others)."""
    del allowed_paths  # graph tools read no files
    if workspace is not None and workspace != kb.workspace:
        kb = kb.in_workspace(workspace)
    context = _Bound(kb)
    return [
        bind_tool(spec, context)
        for spec in offered(GRAPH_TOOLS, read_only=read_only, settings=kb.settings)
    ]
