"""The graph of one workspace in this process: the local :class:`~hybridkb.engine.GraphEngine`
(queries, user links, aliases, import/export) under the ``kb.graph`` handle."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from ..errors import GraphError
from ..storage.base import EdgeRow, NodeRow, WriteEvent
from . import queries
from .build import clean_properties, document_rows
from .edit_check import (
    checked_edge_type,
    checked_weight,
    edge_from_dict,
    user_node_row,
)
from .export import export_folder, export_text
from .extract import EntityExtractor
from .host import Host
from .importer import import_folder
from .memgraph import check_node_id
from .model import (
    CHUNK_TYPES,
    EDGE_RESERVED,
    Edge,
    GraphSearchResults,
    Neighbor,
    NeighborsResult,
    Node,
    PathsResult,
    Subgraph,
    TraverseResult,
    slug,
)
from .queries import USER, MemGraph, check_bound, check_direction
from .search import graph_search
from .store import GraphStore, edge_tuples, node_tuples

EdgeTypes = str | Iterable[str] | None
F = TypeVar("F", bound=Callable[..., Any])


def _locked(fn: F) -> F:
    """Reads hold the store's lock: another thread's write is replayed into the same
    in-memory graph, never while a query walks it."""

    @functools.wraps(fn)
    def wrapper(self: LocalGraph, *args: Any, **kwargs: Any) -> Any:
        with self.store.lock:
            return fn(self, *args, **kwargs)

    return cast(F, wrapper)


def _types(edge_types: EdgeTypes) -> frozenset[str] | None:
    if edge_types is None:
        return None
    if isinstance(edge_types, str):
        edge_types = [edge_types]
    types = frozenset(t for t in edge_types if t)
    return types or None


class LocalGraph:
    """Property graph of ``kb.workspace`` in this process; lives in the same store as the
    chunks (its calls are documented on :class:`hybridkb.graph.Graph`).

    Node ids: a chunk's id is its ``chunk_id``; a document's is ``doc:<collection_id>:
    <document_id>`` (each search hit's ``document_node``); sections ``sec:...``,
    entities ``ent:<key>``, tag categories ``cat:<tag>``, collections ``coll:<id>``.
    """

    def __init__(self, kb: Host, store: GraphStore) -> None:
        self.kb = kb
        self.store = store
        self.workspace = kb.workspace

    def __repr__(self) -> str:
        return f"LocalGraph(workspace={self.workspace!r})"

    def memgraph(self) -> MemGraph:
        """The in-memory graph of this workspace, current as of the last commit."""
        return self.store.graph(self.workspace)

    # -- single nodes ---------------------------------------------------------------

    @_locked
    def node(self, node_id: str) -> Node:
        """The node with this id (GraphError if unknown)."""
        g = self.memgraph()
        return g.node(g.resolve(node_id))

    @_locked
    def has_node(self, node_id: str) -> bool:
        """Whether the node has a row of its own; see :meth:`hybridkb.api.GraphAPI.has_node`."""
        return self.memgraph().has(node_id)

    def node_of_chunk(self, chunk_id: str) -> Node:
        """A chunk's graph node (its id is the chunk_id)."""
        return self.node(chunk_id)

    @_locked
    def chunks_of(self, node_id: str, *, limit: int = 100) -> list[str]:
        """Chunk ids a node stands for: itself, the chunks a section/document contains,
        the chunks that mention an entity, the chunks of a category's documents."""
        check_bound("limit", limit, low=1)
        g = self.memgraph()
        start = g.resolve(node_id)
        if g.ntype[start] in CHUNK_TYPES:
            return [node_id]
        out: list[str] = []
        seen = {start}
        frontier = [start]
        for _ in range(6):
            nxt = []
            for x in frontier:
                for eid, direction, y in g.steps(x, "both", None):
                    etype = g.etype[eid]
                    down = (direction == "out" and etype in ("contains", "parent_of")) or (
                        direction == "in" and etype in ("mentions", "categorized_as")
                    )
                    if not down or y in seen:
                        continue
                    seen.add(y)
                    if g.ntype[y] in CHUNK_TYPES:
                        out.append(g.ids[y])
                        if len(out) >= limit:
                            return out
                    else:
                        nxt.append(y)
            frontier = nxt
        return out

    # -- queries --------------------------------------------------------------------

    @_locked
    def neighbors(
        self, node: str, *, edge_types: EdgeTypes = None, direction: str = "both", limit: int = 100
    ) -> NeighborsResult:
        """Nodes one edge away. ``direction``: out (node -> x), in (x -> node) or both."""
        check_direction(direction)
        check_bound("limit", limit, low=1)
        g = self.memgraph()
        i = g.resolve(node)
        steps = g.neighbors(i, direction, _types(edge_types), limit)
        return NeighborsResult(
            g.node(i),
            [Neighbor(g.etype[eid], d, g.node(y), g.edge(eid)) for eid, d, y in steps],
        )

    @_locked
    def traverse(
        self,
        node: str,
        *,
        edge_types: EdgeTypes = None,
        direction: str = "out",
        max_depth: int = 3,
        limit: int = 1000,
    ) -> TraverseResult:
        """Breadth-first walk; one (shortest) path per node reached, nearest first."""
        check_direction(direction)
        check_bound("max_depth", max_depth, high=50)
        check_bound("limit", limit, low=1)
        g = self.memgraph()
        i = g.resolve(node)
        found, truncated = queries.traverse(g, i, direction, _types(edge_types), max_depth, limit)
        return TraverseResult(g.node(i), g.build_paths((n, e) for _d, n, e in found), truncated)

    @_locked
    def find_paths(
        self,
        a: str,
        b: str,
        *,
        edge_types: EdgeTypes = None,
        max_depth: int = 5,
        limit: int = 10,
        direction: str = "both",
    ) -> PathsResult:
        """Simple paths from ``a`` to ``b`` of at most ``max_depth`` edges, shortest first."""
        check_direction(direction)
        check_bound("max_depth", max_depth, high=12)
        check_bound("limit", limit, low=1, high=10_000)
        g = self.memgraph()
        ia, ib = g.resolve(a), g.resolve(b)
        paths, truncated = queries.find_paths(
            g, ia, ib, direction, _types(edge_types), max_depth, limit
        )
        return PathsResult(g.build_paths(paths), truncated)

    def shortest_path(
        self,
        a: str,
        b: str,
        *,
        edge_types: EdgeTypes = None,
        max_depth: int = 5,
        direction: str = "both",
    ) -> Any:
        """The shortest path, or None when none is within ``max_depth``."""
        found = self.find_paths(
            a, b, edge_types=edge_types, max_depth=max_depth, limit=1, direction=direction
        ).paths
        return found[0] if found else None

    @_locked
    def subgraph(
        self,
        node: str,
        *,
        edge_types: EdgeTypes = None,
        max_depth: int = 2,
        node_limit: int = 100,
        edge_limit: int = 200,
        direction: str = "both",
    ) -> Subgraph:
        """Nodes within ``max_depth`` hops and the edges among them, with stats."""
        check_direction(direction)
        check_bound("max_depth", max_depth, high=50)
        check_bound("node_limit", node_limit, low=1)
        check_bound("edge_limit", edge_limit)
        types = _types(edge_types)

        def subgraph_of(g: MemGraph) -> tuple[list[int], list[int], int, bool]:
            return queries.subgraph(
                g, g.resolve(node), direction, types, max_depth, node_limit, edge_limit
            )

        capped = False

        def kept(first: MemGraph) -> list[str]:
            """The nodes of the answer, from a graph of the node's own edges."""
            nonlocal capped
            if first.index.get(node) is None:
                return [node]  # no edge: the node alone (if it has a row at all)
            members, _edges, _depth, capped = subgraph_of(first)
            return [first.ids[i] for i in members]

        g = self.store.loaded(self.workspace)
        if g is None and max_depth <= 1 and check_node_id(node):
            # One hop needs only the node's edges and the rows of the nodes kept: the
            # answer read from those is the whole graph's (its edges to nodes left out
            # are not read, so whether the nodes were capped comes from the first pass).
            g = self.store.around(self.workspace, node, kept)
            if node not in g.index:
                g = self.memgraph()  # unknown here: the whole graph's answer says why
            else:
                nodes, edges, depth, truncated = subgraph_of(g)
                return g.to_subgraph(nodes, edges, depth, truncated or capped)
        elif g is None:
            g = self.memgraph()
        return g.to_subgraph(*subgraph_of(g))

    @_locked
    def search(
        self,
        query: str,
        *,
        strategy: str = "vector_first",
        traverse_depth: int = 1,
        search_limit: int = 5,
        neighbor_limit: int = 10,
        edge_types: EdgeTypes = None,
        collections: Iterable[str] | None = None,
        where: Mapping[str, Any] | str | None = None,
    ) -> GraphSearchResults:
        """Hybrid search for seed chunks, plus the graph context around each (see graph.search)."""
        types = _types(edge_types)
        return graph_search(
            self,
            query,
            strategy=strategy,
            traverse_depth=traverse_depth,
            search_limit=search_limit,
            neighbor_limit=neighbor_limit,
            edge_types=sorted(types) if types else None,
            collections=collections,
            where=where,
        )

    @_locked
    def stats(self) -> dict[str, Any]:
        """Node and edge counts, by type."""
        g = self.memgraph()
        nodes: dict[str, int] = {}
        for i in g.live_nodes():
            t = g.ntype[i] or "unresolved"
            nodes[t] = nodes.get(t, 0) + 1
        edges: dict[str, int] = {}
        for eid, prov in enumerate(g.eprov):
            if prov is not None:
                edges[g.etype[eid]] = edges.get(g.etype[eid], 0) + 1
        return {
            "workspace": self.workspace,
            "nodes": sum(nodes.values()),
            "edges": sum(edges.values()),
            "node_types": dict(sorted(nodes.items())),
            "edge_types": dict(sorted(edges.items())),
        }

    # -- user edits -----------------------------------------------------------------

    def relate(
        self,
        source: str,
        target: str,
        type: str = "related",
        *,
        weight: float = 1.0,
        properties: Mapping[str, Any] | None = None,
    ) -> Edge:
        """Link two existing nodes (idempotent: the same source, target and type is one edge)."""
        etype, w = checked_edge_type(type), checked_weight(weight)
        props = clean_properties(properties, EDGE_RESERVED)
        g = self.memgraph()
        for node_id in (source, target):
            if not g.has(node_id):
                g.resolve(node_id)  # raises the unknown-node error
                raise GraphError(
                    f"node {node_id!r} has no row of its own; link existing nodes only"
                )
        self.add_edges([Edge(source, target, etype, w, props)], check=False)
        return Edge(source, target, etype, w, props)

    def unrelate(self, source: str, target: str, type: str = "related") -> bool:
        """Remove a link made with :meth:`relate`; False when there was none."""
        etype = checked_edge_type(type)
        ws = self.workspace
        count = self.store.write(
            ws,
            lambda con: self.store.sql.delete_user_edge(con, ws, source, target, etype),
            lambda g: g.remove_user_edge(source, target, etype),
        )
        return bool(count)

    def add_node(
        self, node_id: str, type: str, properties: Mapping[str, Any] | None = None
    ) -> Node:
        """Create or update a node of your own (e.g. a concept to link documents to)."""
        node = Node(node_id, type, clean_properties(properties))
        self.add_nodes([node])
        return node

    def add_nodes(self, nodes: Iterable[Node | Mapping[str, Any]]) -> int:
        """Bulk create/update user nodes ({"id", "type", ...properties} or Node)."""
        rows: dict[str, NodeRow] = {}
        for item in nodes:
            row = user_node_row(item)
            rows[row.id] = row
        if not rows:
            return 0
        ws, data = self.workspace, list(rows.values())
        tuples = node_tuples(data, *USER)
        self.store.write(
            ws,
            lambda con: self.store.sql.upsert_user_nodes(con, ws, data),
            lambda g: _replace_user_nodes(g, tuples),
        )
        return len(data)

    def add_edges(self, edges: Iterable[Edge | Mapping[str, Any]], *, check: bool = True) -> int:
        """Bulk create/update user edges; both ends must exist (or be created in ``add_nodes``)."""
        rows: dict[tuple[str, str, str], EdgeRow] = {}
        for item in edges:
            e = item if isinstance(item, Edge) else edge_from_dict(item)
            rows[(e.source, e.target, checked_edge_type(e.type))] = EdgeRow(
                e.source, e.target, e.type.strip(), checked_weight(e.weight), dict(e.properties)
            )
        if not rows:
            return 0
        if check:
            g = self.memgraph()
            missing = [n for r in rows.values() for n in (r.source, r.target) if not g.has(n)]
            if missing:
                raise GraphError(
                    f"unknown node {missing[0]!r} ({len(set(missing))} missing); add nodes first"
                )
        ws, data = self.workspace, list(rows.values())
        tuples = edge_tuples(data, *USER)
        self.store.write(
            ws,
            lambda con: self.store.sql.upsert_user_edges(con, ws, data),
            lambda g: g.add_edges(tuples),
        )
        return len(data)

    def remove_node(self, node_id: str) -> bool:
        """Remove a node made with :meth:`add_node` (and user edges on it if it vanishes)."""
        ws = self.workspace
        count = self.store.write(
            ws,
            lambda con: self.store.sql.delete_user_node(con, ws, node_id),
            lambda g: g.remove_user_node(node_id),
        )
        return bool(count)

    # -- extraction -----------------------------------------------------------------

    @property
    def extractors(self) -> list[EntityExtractor]:
        """Extractors run on each chunk at ingest (default: one RuleExtractor)."""
        return self.store.extractors_for(self.workspace)

    def add_extractor(self, extractor: EntityExtractor) -> None:
        """Add an extractor (anything with ``extract(text) -> list[Entity]``), e.g. LLM-based.

        It runs inside each document's write transaction, for documents added from now
        on; call :meth:`rebuild` to apply it to what is already stored.
        """
        if not callable(getattr(extractor, "extract", None)):
            raise GraphError("extractor: needs an extract(text) -> list[Entity] method")
        self.extractors.append(extractor)

    def aliases(self) -> dict[str, str]:
        """The alias table: normalised alias -> canonical entity name."""
        store, ws = self.store, self.workspace
        return dict(store.transaction(lambda con: store.sql.aliases(con, ws)))

    def set_alias(self, alias: str, canonical: str | None) -> None:
        """Map an entity name to a canonical one (None removes the alias).

        Applies to documents ingested from now on; :meth:`rebuild` re-derives the rest.
        """
        if not isinstance(alias, str) or not slug(alias):
            raise GraphError("alias: expected a non-empty name")
        if canonical is not None and (not isinstance(canonical, str) or not slug(canonical)):
            raise GraphError("canonical: expected a non-empty name")
        store, ws = self.store, self.workspace
        if store.read_only:
            raise GraphError(store.storage.write_refusal())
        store.transaction(lambda con: store.sql.set_alias(con, ws, slug(alias), canonical))
        store.forget_aliases(ws)

    def rebuild(self, collection: str) -> int:
        """Re-derive the graph rows of every stored document of a collection (after new
        aliases or extractors, or for a collection stored before the graph existed).
        Imported documents keep their imported structure. Returns documents rebuilt."""
        record = self.kb.record(collection)
        store = self.store
        if store.read_only:
            raise GraphError(store.storage.write_refusal())

        count = 0
        for doc, chunks, _vectors in self.kb.storage.export_documents(record):
            if doc.source == "import":
                continue
            event = WriteEvent("put", record, [doc.document_id], doc, chunks)
            store.transaction(functools.partial(store.hook, event=event))
            count += 1
        return count

    # -- import / export ------------------------------------------------------------

    @_locked
    def export(
        self,
        *,
        collection: str | None = None,
        node: str | None = None,
        max_depth: int = 2,
        format: str = "graphml",
        node_limit: int = 10_000,
        edge_limit: int = 50_000,
    ) -> str:
        """A collection's graph (or the subgraph around ``node``) as GraphML or Mermaid text."""
        return export_text(
            self,
            collection=collection,
            node=node,
            max_depth=max_depth,
            fmt=format,
            node_limit=node_limit,
            edge_limit=edge_limit,
        )

    @_locked
    def export_folder(self, collection: str, folder: str | Path) -> list[Path]:
        """Write one ``<doc>.nodes.json`` / ``.edges.json`` / ``.parquet`` set per document."""
        return export_folder(self, collection, Path(folder))

    def import_folder(self, collection: str, folder: str | Path) -> dict[str, Any]:
        """Import node/edge JSON + Parquet embedding sets as documents of a collection."""
        return import_folder(self, collection, Path(folder))


def _replace_user_nodes(g: MemGraph, tuples: Sequence[Any]) -> None:
    for t in tuples:
        i = g.index.get(t[0])
        if i is not None:
            g.unback_node(i, USER)
    g.add_nodes(tuples)


__all__ = ["LocalGraph", "document_rows"]
