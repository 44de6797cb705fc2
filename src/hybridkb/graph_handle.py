"""The knowledge graph handle (``kb.graph``), written once for every door.

Each method takes the caller's arguments and makes one flat call on the knowledge
base's graph engine (:class:`hybridkb.engine.GraphEngine`): the workspace's graph in
this process (:class:`hybridkb.graph.api.LocalGraph`), or the owner's, through the
wire (hybridkb.serve).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine import Door, EdgeTypes
    from .graph.extract import EntityExtractor
    from .graph.model import (
        Edge,
        GraphSearchResults,
        NeighborsResult,
        Node,
        PathsResult,
        Subgraph,
        TraverseResult,
    )
    from .graph.model import Path as GraphPath

__all__ = ["Graph", "GraphAPI"]


class Graph:
    """The knowledge graph of one workspace (``kb.graph``).

    It lives in the same store as the chunks and is written in the same transaction
    as the documents it comes from, so it never lags behind them. Node ids: a chunk's
    node id is its ``chunk_id``; a document's is ``doc:<collection_id>:<document_id>``
    (each hit's ``document_node``); sections ``sec:...``, entities ``ent:<key>``, tag
    categories ``cat:<tag>``, collections ``coll:<id>``, plus nodes users add.

    Every query raises :class:`~hybridkb.errors.GraphError` for an unknown node id,
    an unknown ``direction`` (``in``, ``out``, ``both``) or a bound out of range, and
    returns results in a stable order for the same graph. ``edge_types`` (one type, a
    list, or None for all) restricts which edges a walk may follow. Writes raise
    GraphError when the knowledge base is open read-only.

    Args:
        door: The knowledge base's engine, whose ``graph`` runs the calls.
    """

    def __init__(self, door: Door) -> None:
        self.door = door

    def __repr__(self) -> str:
        return f"Graph(workspace={self.door.workspace!r})"

    def node(self, node_id: str) -> Node:
        """The node with this id: its type and properties.

        Raises:
            GraphError: No node has this id.
        """
        return self.door.graph.node(node_id)

    def has_node(self, node_id: str) -> bool:
        """Whether a node with this id has a row of its own (from a document or a user);
        an id known only as the end of an edge gives False. Never raises.
        """
        return self.door.graph.has_node(node_id)

    def node_of_chunk(self, chunk_id: str) -> Node:
        """A chunk's node (a hit's ``chunk_id`` is its node id); GraphError if unknown."""
        return self.door.graph.node_of_chunk(chunk_id)

    def chunks_of(self, node_id: str, *, limit: int = 100) -> list[str]:
        """The chunk ids a node stands for, at most ``limit`` (from 1).

        A chunk stands for itself; a document or section for the chunks it contains;
        an entity for the chunks that mention it; a category for the chunks of its
        documents. Feed them to ``Collection.search(where={"chunk_id": ...})`` or read
        the hits' text.

        Raises:
            GraphError: Unknown node, or ``limit`` below 1.
        """
        return self.door.graph.chunks_of(node_id, limit=limit)

    def neighbors(
        self, node: str, *, edge_types: EdgeTypes = None, direction: str = "both", limit: int = 100
    ) -> NeighborsResult:
        """The nodes one edge away from ``node``, at most ``limit`` of them.

        Args:
            node: The node id to start from.
            edge_types: Follow only edges of these types (None: every type).
            direction: ``out`` (node -> x), ``in`` (x -> node) or ``both``.
            limit: At most this many neighbours (from 1).

        Returns:
            The start node and, per neighbour, the edge type, its direction, the
            neighbour node and the edge itself.

        Raises:
            GraphError: Unknown node or direction, or ``limit`` below 1.
        """
        return self.door.graph.neighbors(
            node, edge_types=edge_types, direction=direction, limit=limit
        )

    def traverse(
        self,
        node: str,
        *,
        edge_types: EdgeTypes = None,
        direction: str = "out",
        max_depth: int = 3,
        limit: int = 1000,
    ) -> TraverseResult:
        """Walk breadth-first from ``node`` along ``direction`` (default ``out``).

        Returns one shortest path to each node reached within ``max_depth`` edges
        (0 to 50), nearest first, at most ``limit`` nodes; ``truncated`` says the limit
        cut the walk short.

        Raises:
            GraphError: Unknown node or direction, or a bound out of range.
        """
        return self.door.graph.traverse(
            node, edge_types=edge_types, direction=direction, max_depth=max_depth, limit=limit
        )

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
        """Simple paths (no node twice) from ``a`` to ``b``, shortest first.

        Args:
            a: Start node id.
            b: End node id.
            edge_types: Follow only edges of these types (None: every type).
            max_depth: Longest path in edges (0 to 12).
            limit: At most this many paths (1 to 10,000); ``truncated`` says more exist.
            direction: ``out``, ``in`` or ``both`` (edges walked either way).

        Raises:
            GraphError: Unknown node or direction, or a bound out of range.
        """
        return self.door.graph.find_paths(
            a, b, edge_types=edge_types, max_depth=max_depth, limit=limit, direction=direction
        )

    def shortest_path(
        self,
        a: str,
        b: str,
        *,
        edge_types: EdgeTypes = None,
        max_depth: int = 5,
        direction: str = "both",
    ) -> GraphPath | None:
        """The shortest path from ``a`` to ``b`` (a graph ``Path``), or None when there
        is none within ``max_depth`` edges; arguments and errors as :meth:`find_paths`.
        """
        return self.door.graph.shortest_path(
            a, b, edge_types=edge_types, max_depth=max_depth, direction=direction
        )

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
        """The nodes within ``max_depth`` hops (0 to 50) of ``node`` and the edges among
        them, at most ``node_limit`` nodes and ``edge_limit`` edges, nearest first, with
        counts by type and whether a limit cut it short.

        Raises:
            GraphError: Unknown node or direction, or a bound out of range.
        """
        return self.door.graph.subgraph(
            node,
            edge_types=edge_types,
            max_depth=max_depth,
            node_limit=node_limit,
            edge_limit=edge_limit,
            direction=direction,
        )

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
        """Search for seed chunks, then add the graph context around each.

        Args:
            query: The words or question.
            strategy: Where the seeds come from: ``vector_first`` (a hybrid search,
                the default), ``vector_only`` (the same seeds, no context),
                ``graph_only`` (entities and titles matching the query),
                ``graph_first`` (graph seeds, topped up by the hybrid search) or
                ``parallel`` (both, fused by reciprocal rank).
            traverse_depth: Hops of context around each seed (0 to 5).
            search_limit: Seeds wanted (the ``k`` of the hybrid search).
            neighbor_limit: Context items per seed (0 to 1000).
            edge_types: Context follows only these edge types (None: all).
            collections: Names to search (None: every collection of the workspace).
            where: A metadata filter, as for :meth:`hybridkb.kb.Collection.search`; graph
                seeds are filtered by it too.

        Returns:
            The seeds in rank order, each a :class:`~hybridkb.results.Hit` with where it
            came from (``vector``, ``graph`` or ``both``) and its context items.

        Raises:
            GraphError: Unknown strategy or a bound out of range.
            ConfigError: Empty query or ``search_limit`` out of range.
            CollectionNotFound: A name in ``collections`` is not a collection.
            InvalidFilter: ``where`` is malformed.
        """
        return self.door.graph.search(
            query,
            strategy=strategy,
            traverse_depth=traverse_depth,
            search_limit=search_limit,
            neighbor_limit=neighbor_limit,
            edge_types=edge_types,
            collections=None if collections is None else list(collections),
            where=where,
        )

    def stats(self) -> dict[str, Any]:
        """Counts of the workspace's graph: ``nodes``, ``edges``, and ``node_types`` /
        ``edge_types`` mapping each type to its count (sorted by type).
        """
        return self.door.graph.stats()

    def relate(
        self,
        source: str,
        target: str,
        type: str = "related",
        *,
        weight: float = 1.0,
        properties: Mapping[str, Any] | None = None,
    ) -> Edge:
        """Link two existing nodes with an edge of your own.

        Idempotent: the same ``source``, ``target`` and ``type`` is one edge, whose
        weight and properties the last call sets. User edges survive re-ingests of
        the documents at either end while both ends still exist.

        Returns:
            The edge as stored.

        Raises:
            GraphError: An end is unknown, ``type`` is empty, ``weight`` is not a
                finite number, or the knowledge base is read-only.
        """
        return self.door.graph.relate(source, target, type, weight=weight, properties=properties)

    def unrelate(self, source: str, target: str, type: str = "related") -> bool:
        """Remove an edge made with :meth:`relate`; False when there was none (edges
        that came from documents cannot be removed this way).
        """
        return self.door.graph.unrelate(source, target, type)

    def add_node(
        self, node_id: str, type: str, properties: Mapping[str, Any] | None = None
    ) -> Node:
        """Create a node of your own (e.g. a concept to link documents to), or replace
        the type and properties of one made before; returns it.

        Raises:
            GraphError: Empty id or type, or an id of the kinds ingest owns (a chunk
                id, ``doc:...``, ``sec:...``).
        """
        return self.door.graph.add_node(node_id, type, properties)

    def add_nodes(self, nodes: Iterable[Node | Mapping[str, Any]]) -> int:
        """Create or replace many user nodes in one transaction, all or none; each is a
        :class:`Node` or a mapping ``{"id", "type", ...properties}``. Returns how many
        were written (a repeated id counts once: the last wins). Errors as
        :meth:`add_node`.
        """
        return self.door.graph.add_nodes(list(nodes))

    def add_edges(self, edges: Iterable[Edge | Mapping[str, Any]], *, check: bool = True) -> int:
        """Create or replace many user edges in one transaction, all or none; each is an
        :class:`Edge` or a mapping ``{"source", "target", "type", "weight"?, ...}``.

        Args:
            edges: The edges; the same (source, target, type) twice counts once.
            check: Refuse edges whose ends are not nodes yet (False skips the
                check, for a bulk load that adds the nodes afterwards).

        Returns:
            How many edges were written.

        Raises:
            GraphError: A malformed edge, or (with ``check``) an unknown end.
        """
        return self.door.graph.add_edges(list(edges), check=check)

    def remove_node(self, node_id: str) -> bool:
        """Remove a node made with :meth:`add_node` (and the user edges on it once it
        is gone); False when there was no such user node.
        """
        return self.door.graph.remove_node(node_id)

    def add_extractor(self, extractor: EntityExtractor) -> None:
        """Run ``extractor`` (anything with ``extract(text) -> list[Entity]``) on every
        chunk ingested from now on, inside its document's transaction; :meth:`rebuild`
        applies it to what is stored. Local only: an owner refuses it, since code cannot
        cross processes.

        Raises:
            GraphError: The object has no ``extract`` method.
        """
        self.door.add_extractor(extractor)

    def aliases(self) -> dict[str, str]:
        """The alias table: normalised alias -> canonical entity name."""
        return self.door.graph.aliases()

    def set_alias(self, alias: str, canonical: str | None) -> None:
        """Make entity name ``alias`` mean ``canonical`` (None removes the alias), for
        documents ingested from now on; :meth:`rebuild` re-derives the stored ones.

        Raises:
            GraphError: An empty name, or the knowledge base is read-only.
        """
        self.door.graph.set_alias(alias, canonical)

    def rebuild(self, collection: str) -> int:
        """Derive the graph rows of every stored document of ``collection`` again
        (after new aliases or extractors, or for a collection stored before the graph
        existed), one transaction per document. Imported documents keep their imported
        structure. Returns the number of documents rebuilt.

        Raises:
            CollectionNotFound: No such collection.
            GraphError: The knowledge base is read-only.
        """
        return self.door.graph.rebuild(collection)

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
        """A graph as text: the subgraph within ``max_depth`` hops of ``node`` if one is
        given, else ``collection``'s graph, in ``format`` ``graphml`` or ``mermaid``, cut
        at the limits.

        Raises:
            GraphError: Neither ``collection`` nor ``node``, an unknown node or
                format, or a bound out of range.
            CollectionNotFound: No such collection.
        """
        return self.door.graph.export(
            collection=collection,
            node=node,
            max_depth=max_depth,
            format=format,
            node_limit=node_limit,
            edge_limit=edge_limit,
        )

    def export_folder(self, collection: str, folder: str | Path) -> list[Path]:
        """Write a collection's graph to ``folder``, one ``<doc>.nodes.json`` /
        ``.edges.json`` / ``.parquet`` (chunks and vectors) set per document, which
        :meth:`import_folder` reads back; returns the files written.
        """
        return [Path(p) for p in self.door.graph.export_folder(collection, folder)]

    def import_folder(self, collection: str, folder: str | Path) -> dict[str, Any]:
        """Import the node/edge JSON and Parquet sets of ``folder`` (as
        :meth:`export_folder` writes them) as documents of ``collection``; returns
        counts of what was imported.

        Raises:
            GraphError: Not a folder, no ``<name>.nodes.json`` in it, or a malformed
                file.
            CollectionNotFound: No such collection.
        """
        return self.door.graph.import_folder(collection, folder)


# The name front ends typed against while the API was a protocol over two classes.
GraphAPI = Graph
