"""LangChain tools over the knowledge graph: neighbours, paths and graph-expanded search.

Same rules as ``hybridkb.tools``: each returns ``(text, artifact)``, the text cut to
the settings' token budgets with a last line saying what was cut; passages carry
the citation of ``render.citation``; a KBError becomes a ToolException.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from langchain_core.tools import BaseTool, tool

from .. import render
from ..errors import ConfigError
from ..frontend import check_limit, tool_guard

if TYPE_CHECKING:
    from ..settings import Settings
    from .model import Node

Result = tuple[str, Any]
MAX_LIMIT = 50
GRAPH_TOOL_NAMES = ("graph_neighbors", "graph_find_paths", "graph_search_kb", "graph_relate")


def _types(edge_types: str) -> list[str] | None:
    if not isinstance(edge_types, str):
        raise ConfigError("edge_types: a comma-separated string such as 'mentions,contains'")
    found = [t.strip() for t in edge_types.split(",") if t.strip()]
    return found or None


def node_line(node: Node) -> str:
    """``ent:itaa-1997 (entity) ITAA 1997`` / a chunk with its citation."""
    p = node.properties
    text = f"{node.id} ({node.type})"
    name = p.get("name")
    if node.type in ("chunk", "code"):
        parts = [str(x) for x in (p.get("collection"), p.get("filename")) if x]
        if p.get("page") is not None:
            parts.append(f"p. {p['page']}")
        if p.get("section"):
            parts.append("§ " + render.clip(render.fold_whitespace(str(p["section"])), 60))
        if p.get("document_id"):
            parts.append(f"doc {p['document_id']}")
        text += " " + " | ".join(parts)
        preview = p.get("preview") or name
        if isinstance(preview, str):
            text += ": " + render.clip(render.fold_whitespace(preview), 120)
    elif isinstance(name, str) and name != node.id:
        text += " " + render.clip(render.fold_whitespace(name), 100)
    return text


class ToolHost(Protocol):
    """What the graph tools need of a knowledge base (any door of hybridkb.api's
    KnowledgeBaseAPI has it); declared here so that graph/ imports nothing above it."""

    settings: Settings
    workspace: str

    @property
    def graph(self) -> Any:
        """The workspace's graph (:class:`hybridkb.api.GraphAPI`)."""
        ...

    def in_workspace(self, workspace: str) -> ToolHost:
        """The same store bound to another workspace (the tools' ``workspace`` argument)."""
        ...


class GraphToolkit:
    """The operations behind the graph tools, bound to one knowledge base; each returns
    ``(text, artifact)`` and raises KBError for bad input (the tool wrappers turn it into a
    ToolException)."""

    def __init__(self, kb: ToolHost) -> None:
        self.kb = kb

    @property
    def graph(self) -> Any:
        """The bound knowledge base's graph, looked up per call (a lazy one opens on first use)."""
        return self.kb.graph

    def neighbors(
        self, node_id: str, edge_types: str = "", direction: str = "both", limit: int = 20
    ) -> Result:
        """graph_neighbors: the nodes one edge from ``node_id`` (``edge_types`` comma-separated,
        ``limit`` at most 200), one line each, within the listing budget."""
        result = self.graph.neighbors(
            node_id,
            edge_types=_types(edge_types),
            direction=direction,
            limit=check_limit(limit, high=200),
        )
        lines = []
        for n in result.neighbors:
            arrow = f"-{n.edge_type}->" if n.direction == "out" else f"<-{n.edge_type}-"
            lines.append(f"- {arrow} {node_line(n.node)}")
        header = (
            f"{node_line(result.node)}\n{len(lines)} neighbour{'s' if len(lines) != 1 else ''}:"
        )
        if not lines:
            header = (
                f"{node_line(result.node)}\nNo neighbours (try direction 'both' or no edge_types)."
            )
        out = render.fit_lines(
            header,
            lines,
            budget_tokens=self.kb.settings.listing_token_budget,
            hint="Use a smaller limit or name edge_types.",
        )
        return out.text, result.to_dict()

    def paths(
        self,
        source_id: str,
        target_id: str,
        edge_types: str = "",
        max_depth: int = 4,
        limit: int = 5,
    ) -> Result:
        """graph_find_paths: up to ``limit`` (20) shortest paths of at most ``max_depth`` (8)
        edges, each as arrows between node ids, then one line per node on them."""
        result = self.graph.find_paths(
            source_id,
            target_id,
            edge_types=_types(edge_types),
            max_depth=check_limit(max_depth, "max_depth", high=8),
            limit=check_limit(limit, high=20),
        )
        if not result.paths:
            return (
                f"No path from {source_id} to {target_id} within {max_depth} edges.",
                result.to_dict(),
            )
        lines = []
        for k, p in enumerate(result.paths, 1):
            steps = [p.nodes[0].id]
            for edge, node in zip(p.edges, p.nodes[1:], strict=True):
                arrow = f"-{edge.type}->" if edge.target == node.id else f"<-{edge.type}-"
                steps.append(f"{arrow} {node.id}")
            lines.append(f"{k}. ({p.length} edge{'s' if p.length != 1 else ''}) " + " ".join(steps))
        names = {n.id: n for p in result.paths for n in p.nodes}
        lines.append("Nodes:")
        lines += [f"- {node_line(n)}" for n in names.values()]
        out = render.fit_lines(
            f"{len(result.paths)} path(s), shortest first:",
            lines,
            budget_tokens=self.kb.settings.listing_token_budget,
            hint="Ask for fewer paths or a smaller max_depth.",
        )
        return out.text, result.to_dict()

    def search(
        self,
        query: str,
        collection_name: str = "",
        strategy: str = "vector_first",
        depth: int = 1,
        limit: int = 5,
    ) -> Result:
        """graph_search_kb: graph-expanded search; the passages get three quarters of the search
        budget, the graph context around them the rest."""
        if not isinstance(query, str) or not query.strip():
            raise ConfigError("query: empty; pass the question or words to look for")
        collections = (
            [collection_name.strip()]
            if isinstance(collection_name, str) and collection_name.strip()
            else None
        )
        result = self.graph.search(
            query,
            strategy=strategy,
            traverse_depth=check_limit(depth, "depth", high=3) if depth else 0,
            search_limit=check_limit(limit),
            neighbor_limit=8,
            collections=collections,
        )
        hits = [r.seed for r in result.results]
        budget = self.kb.settings.search_token_budget
        # Passages first (three quarters of the budget), then what the graph adds.
        passages = render.render_hits(
            hits,
            query=query,
            budget_tokens=max(1, budget * 3 // 4),
            scope=repr(collection_name) if collections else "all collections",
        )
        lines = []
        for k, r in enumerate(result.results, 1):
            for c in r.context:
                arrow = f"-{c.edge_type}->" if c.direction == "out" else f"<-{c.edge_type}-"
                lines.append(f"[{k}] {arrow} {node_line(c.node)}")
        context = render.fit_lines(
            "Graph context ([n] = passage; node ids work with graph_neighbors/graph_find_paths):",
            lines,
            budget_tokens=max(1, budget - render.tokens(passages.text)),
            hint="Use graph_neighbors on a node id for more.",
        )
        text = passages.text if not lines else passages.text + "\n" + context.text
        return text, result.to_dict()

    def relate(self, source_id: str, target_id: str, relation: str = "related") -> Result:
        """graph_relate: link two existing nodes with a user edge of type ``relation``."""
        edge = self.graph.relate(source_id, target_id, relation)
        return f"Linked {edge.source} -{edge.type}-> {edge.target}.", edge.to_dict()


def make_graph_tools(
    kb: ToolHost,
    *,
    workspace: str | None = None,
    read_only: bool = False,
    allowed_paths: Sequence[Any] | None = None,
) -> list[BaseTool]:
    """Graph tools bound to ``kb`` (and ``workspace``): graph_neighbors, graph_find_paths,
    graph_search_kb, and graph_relate unless ``read_only``."""
    del allowed_paths  # graph tools read no files
    if workspace is not None and workspace != kb.workspace:
        kb = kb.in_workspace(workspace)
    tk = GraphToolkit(kb)

    @tool(response_format="content_and_artifact", parse_docstring=True)
    @tool_guard
    def graph_neighbors(
        node_id: str, edge_types: str = "", direction: str = "both", limit: int = 20
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
        return tk.neighbors(node_id, edge_types, direction, limit)

    @tool(response_format="content_and_artifact", parse_docstring=True)
    @tool_guard
    def graph_find_paths(
        source_id: str, target_id: str, edge_types: str = "", max_depth: int = 4, limit: int = 5
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
        return tk.paths(source_id, target_id, edge_types, max_depth, limit)

    @tool(response_format="content_and_artifact", parse_docstring=True)
    @tool_guard
    def graph_search_kb(
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
        return tk.search(query, collection_name, strategy, depth, limit)

    @tool(response_format="content_and_artifact", parse_docstring=True)
    @tool_guard
    def graph_relate(source_id: str, target_id: str, relation: str = "related") -> Result:
        """Record a link between two existing nodes of the knowledge graph.

        Use this when the user states a relation to remember, e.g. "note that this ruling
        amends the 2019 guide". Linking the same pair with the same relation twice changes
        nothing.

        Args:
            source_id: Node id the link starts from, e.g. "doc:1:abc".
            target_id: Node id the link points to, e.g. "doc:1:def".
            relation: The link type, e.g. "related", "AMENDS", "CITES" (default related).
        """
        return tk.relate(source_id, target_id, relation)

    tools: list[BaseTool] = [graph_neighbors, graph_find_paths, graph_search_kb]
    if not read_only:
        tools.append(graph_relate)
    for t in tools:
        t.handle_tool_error = True
    return tools
