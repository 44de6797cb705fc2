"""What a user can call on a knowledge base, declared once.

Two sibling implementations provide it: :class:`hybridkb.kb.KnowledgeBase` (this
process opened the store) and :class:`hybridkb.serve.client.RemoteKnowledgeBase`
(another process holds the DuckDB file and runs the calls). Neither subclasses the
other; mypy checks both against these protocols (see the ``_checked`` assignments at
the end of kb.py and serve/client.py), and tests/test_api_contract.py checks that
the owner serves every member here or refuses it with a reason listed in
``hybridkb.serve.operations.REFUSED``.

Front ends (CLI, MCP, LangChain, the agent tools) type their knowledge base as
:class:`KnowledgeBaseAPI`, so they work the same through either door.

Rules every member keeps (each docstring below adds its own):

* Errors a caller can cause are :class:`~hybridkb.errors.KBError` subclasses with a
  one-line message naming the argument and the fix; anything else is a bug. Through
  an owner the same class arrives (``hybridkb.serve.codec`` rebuilds it by name).
* Bad arguments (wrong type, empty or over-long text, text that is not valid Unicode,
  a number out of range) raise :class:`~hybridkb.errors.ConfigError` before anything is read
  or written; a malformed ``where`` raises :class:`~hybridkb.errors.InvalidFilter`.
* Any member may raise :class:`~hybridkb.errors.BackendError` for a database failure,
  and :class:`~hybridkb.errors.DatabaseLocked` when another process holds a DuckDB
  file past ``HYBRIDKB_LOCK_TIMEOUT`` and serves no calls for it.
* A collection handle reads its catalog record on every use: a handle whose
  collection was dropped raises :class:`~hybridkb.errors.CollectionNotFound`.
* Writes are atomic per document: a reader sees a document's old version or its new
  one, never a mix, and a failure leaves the old version.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

    from .embed_cache import EmbeddingCache
    from .embedders import Embedder, Recipe
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
    from .rerank import Reranker
    from .settings import Settings
    from .sql_tool import SQLResult
    from .storage.base import ChunkRecord, CollectionHealth, CollectionRecord, DocumentRecord
    from .types import AddReport, CollectionInfo, DeleteReport, Hit, SyncReport

__all__ = ["CollectionAPI", "GraphAPI", "KnowledgeBaseAPI"]

EdgeTypes = str | Sequence[str] | None
CopyProgress = Callable[[str, int, int], None]  # (collection name, documents done, total)


class GraphAPI(Protocol):
    """The knowledge graph of one workspace (``kb.graph``; see hybridkb.graph.Graph).

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
    """

    def node(self, node_id: str) -> Node:
        """The node with this id: its type and properties.

        Raises:
            GraphError: No node has this id.
        """
        ...

    def has_node(self, node_id: str) -> bool:
        """Whether a node with this id has a row of its own (from a document or a user);
        an id known only as the end of an edge gives False. Never raises."""
        ...

    def node_of_chunk(self, chunk_id: str) -> Node:
        """A chunk's node (a hit's ``chunk_id`` is its node id); GraphError if unknown."""
        ...

    def chunks_of(self, node_id: str, *, limit: int = 100) -> list[str]:
        """The chunk ids a node stands for, at most ``limit`` (from 1).

        A chunk stands for itself; a document or section for the chunks it contains;
        an entity for the chunks that mention it; a category for the chunks of its
        documents. Feed them to ``Collection.search(where={"chunk_id": ...})`` or read
        the hits' text.

        Raises:
            GraphError: Unknown node, or ``limit`` below 1.
        """
        ...

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
        ...

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
        ...

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
        ...

    def shortest_path(
        self,
        a: str,
        b: str,
        *,
        edge_types: EdgeTypes = None,
        max_depth: int = 5,
        direction: str = "both",
    ) -> Any:
        """The shortest path from ``a`` to ``b`` (a graph ``Path``), or None when there
        is none within ``max_depth`` edges; arguments and errors as :meth:`find_paths`."""
        ...

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
        ...

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
            where: A metadata filter, as for :meth:`CollectionAPI.search`; graph
                seeds are filtered by it too.

        Returns:
            The seeds in rank order, each a :class:`~hybridkb.types.Hit` with where it
            came from (``vector``, ``graph`` or ``both``) and its context items.

        Raises:
            GraphError: Unknown strategy or a bound out of range.
            ConfigError: Empty query or ``search_limit`` out of range.
            CollectionNotFound: A name in ``collections`` is not a collection.
            InvalidFilter: ``where`` is malformed.
        """
        ...

    def stats(self) -> dict[str, Any]:
        """Counts of the workspace's graph: ``nodes``, ``edges``, and ``node_types`` /
        ``edge_types`` mapping each type to its count (sorted by type)."""
        ...

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
        ...

    def unrelate(self, source: str, target: str, type: str = "related") -> bool:
        """Remove an edge made with :meth:`relate`; False when there was none (edges
        that came from documents cannot be removed this way)."""
        ...

    def add_node(
        self, node_id: str, type: str, properties: Mapping[str, Any] | None = None
    ) -> Node:
        """Create a node of your own (e.g. a concept to link documents to), or replace
        the type and properties of one made before; returns it.

        Raises:
            GraphError: Empty id or type, or an id of the kinds ingest owns (a chunk
                id, ``doc:...``, ``sec:...``).
        """
        ...

    def add_nodes(self, nodes: Iterable[Node | Mapping[str, Any]]) -> int:
        """Create or replace many user nodes in one transaction, all or none; each is a
        :class:`Node` or a mapping ``{"id", "type", ...properties}``. Returns how many
        were written (a repeated id counts once: the last wins). Errors as
        :meth:`add_node`."""
        ...

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
        ...

    def remove_node(self, node_id: str) -> bool:
        """Remove a node made with :meth:`add_node` (and the user edges on it once it
        is gone); False when there was no such user node."""
        ...

    def add_extractor(self, extractor: EntityExtractor) -> None:
        """Run ``extractor`` (anything with ``extract(text) -> list[Entity]``) on every
        chunk ingested from now on, inside its document's transaction; :meth:`rebuild`
        applies it to what is stored. Local only: an owner refuses it, since code cannot
        cross processes.

        Raises:
            GraphError: The object has no ``extract`` method.
        """
        ...

    def aliases(self) -> dict[str, str]:
        """The alias table: normalised alias -> canonical entity name."""
        ...

    def set_alias(self, alias: str, canonical: str | None) -> None:
        """Make entity name ``alias`` mean ``canonical`` (None removes the alias), for
        documents ingested from now on; :meth:`rebuild` re-derives the stored ones.

        Raises:
            GraphError: An empty name, or the knowledge base is read-only.
        """
        ...

    def rebuild(self, collection: str) -> int:
        """Derive the graph rows of every stored document of ``collection`` again
        (after new aliases or extractors, or for a collection stored before the graph
        existed), one transaction per document. Imported documents keep their imported
        structure. Returns the number of documents rebuilt.

        Raises:
            CollectionNotFound: No such collection.
            GraphError: The knowledge base is read-only.
        """
        ...

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
        ...

    def export_folder(self, collection: str, folder: str | Path) -> list[Path]:
        """Write a collection's graph to ``folder``, one ``<doc>.nodes.json`` /
        ``.edges.json`` / ``.parquet`` (chunks and vectors) set per document, which
        :meth:`import_folder` reads back; returns the files written."""
        ...

    def import_folder(self, collection: str, folder: str | Path) -> dict[str, Any]:
        """Import the node/edge JSON and Parquet sets of ``folder`` (as
        :meth:`export_folder` writes them) as documents of ``collection``; returns
        counts of what was imported.

        Raises:
            GraphError: Not a folder, no ``<name>.nodes.json`` in it, or a malformed
                file.
            CollectionNotFound: No such collection.
        """
        ...


class CollectionAPI(Protocol):
    """A handle on one collection (``kb.collection(name)``, ``kb[name]``).

    A handle is cheap and holds no lock or cursor: every call reads the collection's
    catalog record afresh, so a handle stays valid across other processes' writes and
    raises :class:`~hybridkb.errors.CollectionNotFound` once the collection is dropped.
    Writes on a knowledge base opened read-only raise
    :class:`~hybridkb.errors.BackendError` before anything is read.
    """

    name: str

    @property
    def kb(self) -> KnowledgeBaseAPI:
        """The knowledge base (and workspace) this handle belongs to."""
        ...

    @property
    def record(self) -> CollectionRecord:
        """The catalog record (id, model, dimension, chunking, language), read afresh.

        Raises:
            CollectionNotFound: The collection does not exist (or no longer does).
        """
        ...

    def add(
        self,
        paths: str | Path | Iterable[str | Path],
        *,
        metadata: Mapping[str, Any] | None = None,
        allowed_paths: Iterable[str | Path] | None = None,
    ) -> AddReport:
        """Add files and folders (folders walked recursively), and remember them as
        sources for :meth:`sync`.

        A file's document id is derived from its resolved path, so adding a file
        again replaces its document when its bytes, the chunking or the model changed,
        and skips it (``unchanged``) otherwise. Each document is replaced atomically.
        A file that cannot be read or parsed does not stop the others: it is reported
        in ``failed`` with its error code, and its previous version stays searchable.

        Args:
            paths: A file or folder, or several.
            metadata: User metadata stored on every document added (filterable with
                ``where``); keys of the built-in fields (``filename``, ``page``...) are
                refused.
            allowed_paths: Read only inside these folders (what the agent tools pass):
                a file or link leading elsewhere is reported in ``failed``, never read,
                even if swapped in while the add runs. None reads any file the process
                can read, following links.

        Returns:
            The files ``added``, ``unchanged``, ``failed`` (with the reason) and
            ``skipped`` (unsupported types, hidden files).

        Raises:
            ConfigError: Bad metadata (a built-in key, a value that is not JSON).
            BackendError: The knowledge base is read-only.
            ModelUnavailable: The collection's model cannot be loaded here.
        """
        ...

    def add_texts(
        self,
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
        ids: Sequence[str] | None = None,
    ) -> AddReport:
        """Add raw texts as documents, one per text, chunked and embedded like files.

        Args:
            texts: The texts (a list: one string alone is refused).
            metadatas: One metadata mapping (or None) per text.
            ids: One document id per text, unique within the call; a text under an id
                that exists replaces that document. Default: a hash of the text, so
                adding the same text again stores it once.

        Returns:
            The documents ``added``, ``unchanged`` (the same text, metadata and
            chunking under the same id) and ``failed`` (an empty text).

        Raises:
            ConfigError: Lengths differ, an id is empty or repeated, the same text twice
                without ids, a text is not a string, or a metadata value is not JSON.
            BackendError: The knowledge base is read-only.
        """
        ...

    def sync(
        self,
        *,
        dry_run: bool = False,
        allowed_paths: Iterable[str | Path] | None = None,
        busy: Iterable[str] = (),
        paths: Iterable[str] | None = None,
    ) -> SyncReport:
        """Bring the collection in step with its sources (what :meth:`add` was given).

        New files are added, changed ones re-read, vanished ones removed, renamed ones
        re-keyed without embedding again. An unchanged file (same size and
        modification time as when it was read) is not opened. A file that fails keeps
        its previous version searchable and is reported in ``failed``.

        Args:
            dry_run: Report what would change and change nothing.
            allowed_paths: Sync only sources inside these folders (the agent tools').
            busy: Resolved paths of files still being written: left as they are this
                time, neither read nor removed.
            paths: Look only at these files and folders (absolute paths, e.g. a
                watcher's events); None walks every source.

        Raises:
            BackendError: The knowledge base is read-only (unless ``dry_run``).
        """
        ...

    def sources(self) -> list[dict[str, Any]]:
        """The folders and files the collection was added from, sorted by path: each
        ``{"path", "recursive", "types"}`` (``types`` None: every supported type)."""
        ...

    def remove_source(self, path: str | Path) -> DeleteReport:
        """Forget a source and delete the documents that came from it, except those
        another source also covers.

        Raises:
            ConfigError: ``path`` is not a source of the collection (the message lists
                them).
        """
        ...

    def search(
        self,
        query: str,
        *,
        k: int | None = None,
        mode: str | None = None,
        where: Mapping[str, Any] | str | None = None,
        rerank: bool | None = None,
    ) -> list[Hit]:
        """The ``k`` chunks of this collection that best answer ``query``.

        Modes:

        * ``hybrid`` (default, ``HYBRIDKB_DEFAULT_MODE``): a BM25 keyword leg and a
          vector leg, each ``HYBRIDKB_CANDIDATES`` deep (at least ``k``), fused in the
          core by ``HYBRIDKB_FUSION`` (z-score by default, or weighted, or reciprocal
          rank), so every backend ranks the same way;
        * ``vector``: cosine similarity to the embedded query;
        * ``keyword``: BM25 over the query's terms, analysed in the collection's
          languages;
        * ``filter``: chunks containing at least one query term, ranked by vector
          similarity.

        Args:
            query: The words or question (not empty, at most ``MAX_QUERY_CHARS``).
            k: Hits wanted, 1 to ``MAX_K`` (10,000); None: ``HYBRIDKB_DEFAULT_K``.
            mode: ``hybrid``, ``vector``, ``keyword`` or ``filter``; None: the default.
            where: A metadata filter (a mapping or its JSON text) on built-in chunk
                fields (``filename``, ``path``, ``document_id``, ``page``,
                ``section``, ``language``, ...) or user metadata keys, with ``$eq``,
                ``$ne``, ``$gt``/``$gte``/``$lt``/``$lte``, ``$in``/``$nin``, ``$and``
                and ``$or`` (see :mod:`hybridkb.filters`). It is applied inside each
                leg, before the cut to ``k``: a filtered search returns ``k`` hits
                whenever ``k`` chunks match.
            rerank: None reranks when a reranker is set (``with_reranker`` or
                ``HYBRIDKB_RERANKER``), True requires one, False skips it.

        Returns:
            At most ``k`` hits, best first: ``rank`` runs 1, 2, ... and ``score`` (the
            mode's own score, or the reranker's; higher is better, comparable within
            one call only) never increases; ties keep a stable order. Fewer than ``k``
            when fewer chunks match. Each hit carries the chunk's ``text``,
            ``chunk_id``, ``document_id``, ``collection``, its citation (``filename``,
            ``page``, ``section``), ``metadata`` (the user's keys plus the built-in
            fields, ``char_start``/``char_end`` into the document text included),
            ``scores`` (``bm25``/``bm25_rank``, ``vector``/``vector_rank``,
            ``fused``, ``rerank``: None for a leg that did not find it) and
            ``document_node`` (its document's graph node id). An empty collection
            gives no hits, not an error.

        Raises:
            ConfigError: Empty or over-long query, ``k`` out of range, unknown mode,
                or ``rerank=True`` with no reranker set.
            InvalidFilter: ``where`` is malformed (unknown operator, bad value).
            CollectionNotFound: The collection does not exist.
            ModelUnavailable: The collection's model (or the reranker) cannot run here.
            EmbeddingMismatch: The model loaded gives another dimension than stored.
        """
        ...

    def delete(self, document_ids: str | Sequence[str]) -> DeleteReport:
        """Delete documents (their chunks, vectors and graph rows) by id, atomically.

        Unknown ids change nothing and are listed in ``not_found``; deleting twice is
        not an error. A deleted file comes back with the next :meth:`sync` if it is
        still in a source: :meth:`remove_source` forgets the source.

        Returns:
            The ids ``deleted`` and ``not_found``, in the order given.
        """
        ...

    def get(self, document_id: str) -> DocumentRecord | None:
        """A document's record, or None if the collection has no such document.

        The record is what the catalog holds, not the text: ``document_id``,
        ``filename`` and resolved ``path`` (None for texts), ``source`` (``file`` or
        ``text``), ``content_hash``, user ``metadata``, ``language``, ``bytes``,
        ``chunk_count`` and ``added_at``. Read the text with :meth:`document_text`
        or :meth:`chunks`.

        Raises:
            ConfigError: ``document_id`` is not valid Unicode (a lone surrogate).
            CollectionNotFound: The collection does not exist.
        """
        ...

    def chunks(self, document_id: str) -> list[ChunkRecord]:
        """A document's chunks in reading order (``chunk_index`` 0, 1, ...), with their
        text, citation fields and offsets; empty if there is no such document."""
        ...

    def document_text(self, document_id: str) -> str | None:
        """A document's text stitched back from its chunks (overlaps removed), or None
        when there is no such document or its chunks cannot give the text back exactly
        (a chunk is missing, or its whitespace was normalised)."""
        ...

    def search_by_vector(
        self,
        vector: np.ndarray | Sequence[float],
        *,
        k: int | None = None,
        where: Mapping[str, Any] | str | None = None,
    ) -> list[Hit]:
        """The ``k`` chunks nearest to ``vector``, a query the caller embedded with the
        collection's model; hits as :meth:`search` in ``vector`` mode.

        Raises:
            ConfigError: The vector does not have the collection's dimension, holds a
                value that is not finite, or is all zeros; ``k`` out of range.
            InvalidFilter: ``where`` is malformed.
        """
        ...

    def documents(self, *, limit: int = 100, offset: int = 0) -> list[DocumentRecord]:
        """One page of the collection's documents (records as :meth:`get`), oldest
        first (by ``added_at``, then ``document_id``); page on with ``offset``."""
        ...

    def describe(self) -> CollectionInfo:
        """The collection's counts (documents, chunks), model and dimension, chunking,
        languages, size in bytes, dates and sources."""
        ...

    def count(self) -> int:
        """Number of documents (not chunks)."""
        ...

    def drop(self) -> None:
        """Delete the collection and everything in it (documents, vectors, sources,
        graph rows), atomically; CollectionNotFound if it does not exist."""
        ...


class KnowledgeBaseAPI(Protocol):
    """A workspace of named collections in one store, and its maintenance verbs.

    ``hybridkb.connect(url)`` returns one: a :class:`~hybridkb.kb.KnowledgeBase` when
    this process opened the store, a
    :class:`~hybridkb.serve.client.RemoteKnowledgeBase` when another process owns the
    DuckDB file and runs the calls. Collection names are free text (trimmed, NFC
    normalised, at most ``MAX_NAME_CHARS``, no control characters) and unique within a
    workspace; workspaces in one store never see each other's collections.
    """

    settings: Settings
    workspace: str
    on_close: list[Callable[[], None]]

    @property
    def graph(self) -> GraphAPI:
        """The knowledge graph of this workspace."""
        ...

    def close(self) -> None:
        """Wait for background loads, run the ``on_close`` callbacks (last added
        first), and close the store (or the connection to its owner). Handles made
        from this knowledge base must not be used afterwards."""
        ...

    def __enter__(self) -> KnowledgeBaseAPI: ...
    def __exit__(self, *exc: object) -> None: ...

    def in_workspace(self, workspace: str) -> KnowledgeBaseAPI:
        """Another workspace over the same open store (one process serving many users),
        with this one's embedders and reranker. Locally the two share the open store:
        closing either closes it for both.

        Raises:
            ConfigError: ``workspace`` is not a valid name.
        """
        ...

    def with_embedder(self, embedder: Embedder) -> KnowledgeBaseAPI:
        """The same store and workspace, embedding with ``embedder`` wherever its
        ``model_id`` is asked for (e.g. a LangChain model); collections created through
        it record that id. A collection made with another model still uses its own."""
        ...

    def with_reranker(self, reranker: Reranker) -> KnowledgeBaseAPI:
        """The same store and workspace, reranking searches with ``reranker`` (any object
        with ``name`` and ``score(query, texts) -> scores``; see :mod:`hybridkb.rerank`).

        Raises:
            ConfigError: The object lacks ``name`` or ``score``; through an owner,
                always (a reranker is code: the owner ranks with its own).
        """
        ...

    def embedder(self, model: str, recipe: Recipe | None = None) -> Embedder:
        """The embedder for ``model``, loaded in this process: one given with
        :meth:`with_embedder`, else loaded as the settings say (device, backend), with
        ``recipe`` when it must match how an existing collection's vectors were made. A
        client loads it too (for vectors the caller embeds); the owner embeds for its
        own searches and adds.

        Raises:
            ModelUnavailable: The model cannot be found or loaded here.
            MissingDependency: Its backend's extra is not installed.
        """
        ...

    def embedder_for(self, coll: CollectionRecord) -> Embedder:
        """The collection's own model (the catalog is the authority), loaded with its
        recipe.

        Raises:
            ModelUnavailable: That model cannot be loaded here (the message says how to
                re-embed with another).
            EmbeddingMismatch: The loaded model's dimension differs from the stored one.
        """
        ...

    def embedding_cache(self) -> EmbeddingCache | None:
        """The on-disk cache of embeddings by model id and text this process uses; None
        when it is off (``HYBRIDKB_EMBED_CACHE_MB=0``) or models were given (their ids
        cannot tell two given models apart)."""
        ...

    def reranker(self) -> Reranker | None:
        """The reranker searches use when asked (None: none is set)."""
        ...

    def prepare_search(self, collections: Iterable[str] | None = None) -> None:
        """Start loading what searching ``collections`` needs (nothing to load for a
        client of an owner)."""
        ...

    def warm_up(self) -> None:
        """Load the collections' models (or, with none, the default one) now rather
        than in the first call (a client of an owner has nothing to load)."""
        ...

    def create_collection(
        self,
        name: str,
        *,
        model: str | None = None,
        chunk_strategy: str | None = None,
        chunk_size: int | None = None,
        chunk_overlap: int | None = None,
        language: str | None = None,
        exist_ok: bool = False,
    ) -> CollectionAPI:
        """Create an empty collection in this workspace.

        The model, chunking and language are fixed at creation and recorded in the
        catalog: every later add and search of the collection uses them, whatever the
        settings say then (change the model with :meth:`reembed`).

        Args:
            name: The display name (free text, see the class docstring).
            model: Embedding model id; None: ``HYBRIDKB_MODEL``. It is loaded now, to
                record its dimension.
            chunk_strategy: ``paragraph``, ``page`` or ``size``; None: the setting.
            chunk_size: Characters per chunk; None: the setting.
            chunk_overlap: Characters shared by neighbouring chunks, from 0 to below
                ``chunk_size``; None: the setting.
            language: Language code for keyword analysis, or ``auto`` (detected per
                chunk); None: the setting.
            exist_ok: Return the existing collection of that name instead of raising
                (its own chunking stays; a ``model`` it does not use raises
                EmbeddingMismatch).

        Raises:
            CollectionExists: The name is taken and ``exist_ok`` is False.
            ConfigError: A bad name, strategy, size or overlap.
            ModelUnavailable: The model cannot be loaded here.
        """
        ...

    def collection(
        self, name: str, *, create: bool = False, model: str | None = None
    ) -> CollectionAPI:
        """A handle on an existing collection, checked now.

        Args:
            name: The collection's name.
            create: Create it (with ``model`` and the settings' chunking) when missing.
            model: When given, the model the collection must use.

        Raises:
            CollectionNotFound: No such collection and ``create`` is False (the
                message lists the existing ones).
            EmbeddingMismatch: The collection uses another model than ``model``.
            ConfigError: A bad name.
        """
        ...

    def __getitem__(self, name: str) -> CollectionAPI:
        """A lazy handle (``kb["Notes"]``): nothing is read until it is used, so a
        missing collection raises CollectionNotFound at the first call."""
        ...

    def record(self, name: str) -> CollectionRecord:
        """A collection's catalog record: id, model, dimension, chunking, language,
        recipe, generation (bumped by every write).

        Raises:
            CollectionNotFound: No such collection (the message lists the existing
                ones).
        """
        ...

    def list_collections(self) -> list[CollectionInfo]:
        """Every collection of this workspace with its counts, model and size, sorted by
        name (``sources`` is left empty: :meth:`describe` fills it)."""
        ...

    def collection_names(self) -> list[str]:
        """The names of this workspace's collections, sorted; cheaper than
        :meth:`list_collections` (no counts)."""
        ...

    def describe(self, name: str) -> CollectionInfo:
        """One collection's counts, model, dimension, chunking, languages, size, dates
        and sources; CollectionNotFound if there is none."""
        ...

    def drop_collection(self, name: str) -> None:
        """Delete a collection and everything in it, atomically; CollectionNotFound if
        there is none (dropping twice is an error: the name is checked)."""
        ...

    def search(
        self,
        query: str,
        *,
        k: int | None = None,
        mode: str | None = None,
        where: Mapping[str, Any] | str | None = None,
        collections: Iterable[str] | None = None,
        rerank: bool | None = None,
    ) -> list[Hit]:
        """Search several collections as one ranking.

        The query is embedded once per model; each collection's legs are ranked, then
        merged and fused across collections, so scores compare across them. Arguments,
        hits and errors as :meth:`CollectionAPI.search`; each hit's ``collection`` says
        where it came from.

        Args:
            collections: Names to search (repeats ignored); None: every collection of
                this workspace. With no collection at all, the result is empty.
        """
        ...

    # -- maintenance verbs (hybridkb.maintenance, hybridkb.copy, hybridkb.sql_tool) --

    def doctor(self, name: str | None = None, *, repair: bool = False) -> list[CollectionHealth]:
        """Check one or every collection of the workspace: tables against each other,
        against the derived indexes and the graph.

        Args:
            name: One collection; None: every collection of the workspace.
            repair: Fix what is found (rebuild indexes, remove orphans); a finding
                fixed is marked ``repaired``.

        Returns:
            One health record per collection, each listing its findings.

        Raises:
            CollectionNotFound: ``name`` is not a collection.
            ConfigError: The backend offers no maintenance.
        """
        ...

    def reembed(
        self, name: str, *, model: str | None = None, progress: bool = True
    ) -> dict[str, Any]:
        """Re-embed every chunk of a collection with ``model`` (default: its own, e.g.
        after a model update) into a side table, then switch over in one transaction:
        searches keep working on the old vectors meanwhile, and a failure leaves them.

        Returns:
            ``collection``, ``model`` and ``dim`` (the new ones), ``chunks``
            re-embedded and ``previous_model``.

        Raises:
            CollectionNotFound: No such collection.
            ModelUnavailable: ``model`` cannot be loaded here.
            ConfigError: The backend offers no maintenance.
        """
        ...

    def compact(self) -> dict[str, int]:
        """Reclaim the space deletes and re-ingests left in the store file; returns the
        sizes before and after, in bytes. Searches give the same answers afterwards.

        Raises:
            ConfigError: The backend offers no maintenance (e.g. ``:memory:``).
        """
        ...

    def copy_to(
        self, dst_url: str, *, workspace: str | None = None, progress: CopyProgress | None = None
    ) -> dict[str, Any]:
        """Copy this store's collections (or one ``workspace``'s) into the store at
        ``dst_url`` (a DuckDB path or a Postgres URL), documents, chunks, vectors,
        sources and graph, without embedding again.

        Args:
            dst_url: Where to copy to; collections there of the same names are refused,
                never overwritten.
            workspace: Copy only this workspace; None: every workspace.
            progress: Called as ``(collection, documents done, total)``.

        Returns:
            Per collection what was copied, and totals of documents, chunks and graph
            rows.

        Raises:
            CollectionExists: A collection of the same name exists at ``dst_url``
                (nothing is copied).
            ConfigError: The destination is this store.
        """
        ...

    def sql(
        self, sql: str, *, max_rows: int = ..., timeout: float = ..., max_bytes: int = ...
    ) -> SQLResult:
        """Run one read-only SELECT over this workspace's views (``kb_collections``,
        ``kb_documents``, ``kb_chunks``, ``kb_graph_nodes``, ``kb_graph_edges``) in a
        separate engine that holds a copy of this workspace's rows and nothing else; the
        defaults are those of :mod:`hybridkb.sql_tool`.

        Args:
            sql: One SELECT (or WITH ... SELECT) statement.
            max_rows: Rows returned at most; ``truncated`` says more existed.
            timeout: Seconds before the query is cancelled.
            max_bytes: Size of the result at most.

        Returns:
            Column names, rows, whether the caps cut the result, and the statement
            that ran.

        Raises:
            ConfigError: Not a single read-only SELECT over the views, a SQL error,
                or stopped at ``timeout``.
            BackendError: The engine could not be started.
        """
        ...
