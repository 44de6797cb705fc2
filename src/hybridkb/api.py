"""What a user can call on a knowledge base, declared once.

Two sibling implementations provide it: :class:`hybridkb.kb.KnowledgeBase` (this
process opened the store) and :class:`hybridkb.serve.client.RemoteKnowledgeBase`
(another process holds the DuckDB file and runs the calls). Neither subclasses the
other; mypy checks both against these protocols (see the ``_checked`` assignments at
the end of kb.py and serve/client.py), and tests/test_api_contract.py checks that
the owner serves every member here or refuses it with a reason listed in
``hybridkb.serve.server.REFUSED``.

Front ends (CLI, MCP, LangChain, the agent tools) type their knowledge base as
:class:`KnowledgeBaseAPI`, so they work the same through either door.
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
    """The knowledge graph of one workspace (``kb.graph``; see hybridkb.graph.Graph)."""

    def node(self, node_id: str) -> Node: ...
    def has_node(self, node_id: str) -> bool: ...
    def node_of_chunk(self, chunk_id: str) -> Node: ...
    def chunks_of(self, node_id: str, *, limit: int = 100) -> list[str]: ...
    def neighbors(
        self, node: str, *, edge_types: EdgeTypes = None, direction: str = "both", limit: int = 100
    ) -> NeighborsResult: ...
    def traverse(
        self,
        node: str,
        *,
        edge_types: EdgeTypes = None,
        direction: str = "out",
        max_depth: int = 3,
        limit: int = 1000,
    ) -> TraverseResult: ...
    def find_paths(
        self,
        a: str,
        b: str,
        *,
        edge_types: EdgeTypes = None,
        max_depth: int = 5,
        limit: int = 10,
        direction: str = "both",
    ) -> PathsResult: ...
    def shortest_path(
        self,
        a: str,
        b: str,
        *,
        edge_types: EdgeTypes = None,
        max_depth: int = 5,
        direction: str = "both",
    ) -> Any: ...
    def subgraph(
        self,
        node: str,
        *,
        edge_types: EdgeTypes = None,
        max_depth: int = 2,
        node_limit: int = 100,
        edge_limit: int = 200,
        direction: str = "both",
    ) -> Subgraph: ...
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
    ) -> GraphSearchResults: ...
    def stats(self) -> dict[str, Any]: ...
    def relate(
        self,
        source: str,
        target: str,
        type: str = "related",
        *,
        weight: float = 1.0,
        properties: Mapping[str, Any] | None = None,
    ) -> Edge: ...
    def unrelate(self, source: str, target: str, type: str = "related") -> bool: ...
    def add_node(
        self, node_id: str, type: str, properties: Mapping[str, Any] | None = None
    ) -> Node: ...
    def add_nodes(self, nodes: Iterable[Node | Mapping[str, Any]]) -> int: ...
    def add_edges(
        self, edges: Iterable[Edge | Mapping[str, Any]], *, check: bool = True
    ) -> int: ...
    def remove_node(self, node_id: str) -> bool: ...
    def add_extractor(self, extractor: EntityExtractor) -> None: ...
    def aliases(self) -> dict[str, str]: ...
    def set_alias(self, alias: str, canonical: str | None) -> None: ...
    def rebuild(self, collection: str) -> int: ...
    def export(
        self,
        *,
        collection: str | None = None,
        node: str | None = None,
        max_depth: int = 2,
        format: str = "graphml",
        node_limit: int = 10_000,
        edge_limit: int = 50_000,
    ) -> str: ...
    def export_folder(self, collection: str, folder: str | Path) -> list[Path]: ...
    def import_folder(self, collection: str, folder: str | Path) -> dict[str, Any]: ...


class CollectionAPI(Protocol):
    """A handle on one collection (``kb.collection(name)``, ``kb[name]``)."""

    name: str

    @property
    def kb(self) -> KnowledgeBaseAPI: ...
    @property
    def record(self) -> CollectionRecord:
        """The catalog record (model, dimension, chunking), read afresh."""
        ...

    def add(
        self,
        paths: str | Path | Iterable[str | Path],
        *,
        metadata: Mapping[str, Any] | None = None,
        allowed_paths: Iterable[str | Path] | None = None,
    ) -> AddReport:
        """Add files and folders; ``allowed_paths`` confines reading to those folders."""
        ...

    def add_texts(
        self,
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
        ids: Sequence[str] | None = None,
    ) -> AddReport:
        """Add raw texts as documents (ids default to a hash of the text)."""
        ...

    def sync(
        self,
        *,
        dry_run: bool = False,
        allowed_paths: Iterable[str | Path] | None = None,
        busy: Iterable[str] = (),
        paths: Iterable[str] | None = None,
    ) -> SyncReport:
        """Bring the collection in step with its sources: new files added, changed ones
        re-read, vanished ones removed, renamed ones re-keyed without embedding."""
        ...

    def sources(self) -> list[dict[str, Any]]:
        """The folders and files the collection was added from."""
        ...

    def remove_source(self, path: str | Path) -> DeleteReport:
        """Forget a source and remove the documents that came only from it."""
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
        """The ``k`` best chunks for ``query`` (hybrid, vector, keyword or filter mode)."""
        ...

    def delete(self, document_ids: str | Sequence[str]) -> DeleteReport:
        """Delete documents by id; unknown ids change nothing and are reported."""
        ...

    def get(self, document_id: str) -> DocumentRecord | None:
        """A document's record, or None if there is no such document."""
        ...

    def chunks(self, document_id: str) -> list[ChunkRecord]:
        """A document's chunks in reading order (empty if there is no such document)."""
        ...

    def document_text(self, document_id: str) -> str | None:
        """A document's text stitched back from its chunks, or None if it cannot be."""
        ...

    def search_by_vector(
        self,
        vector: np.ndarray | Sequence[float],
        *,
        k: int | None = None,
        where: Mapping[str, Any] | str | None = None,
    ) -> list[Hit]:
        """The chunks nearest to a query vector embedded by the caller."""
        ...

    def documents(self, *, limit: int = 100, offset: int = 0) -> list[DocumentRecord]:
        """One page of the collection's documents."""
        ...

    def describe(self) -> CollectionInfo:
        """Counts, model, chunking and size."""
        ...

    def count(self) -> int:
        """Number of documents."""
        ...

    def drop(self) -> None:
        """Delete the collection and everything in it."""
        ...


class KnowledgeBaseAPI(Protocol):
    """A workspace of named collections in one store, and its maintenance verbs."""

    settings: Settings
    workspace: str
    on_close: list[Callable[[], None]]

    @property
    def graph(self) -> GraphAPI:
        """The knowledge graph of this workspace."""
        ...

    def close(self) -> None: ...
    def __enter__(self) -> KnowledgeBaseAPI: ...
    def __exit__(self, *exc: object) -> None: ...

    def in_workspace(self, workspace: str) -> KnowledgeBaseAPI:
        """Another workspace over the same store."""
        ...

    def with_embedder(self, embedder: Embedder) -> KnowledgeBaseAPI:
        """The same store and workspace, embedding with ``embedder`` for its model id."""
        ...

    def with_reranker(self, reranker: Reranker) -> KnowledgeBaseAPI:
        """The same store and workspace, reranking searches with ``reranker``."""
        ...

    def embedder(self, model: str, recipe: Recipe | None = None) -> Embedder:
        """The embedder for ``model`` (loaded in this process)."""
        ...

    def embedder_for(self, coll: CollectionRecord) -> Embedder:
        """The collection's own model, checked against its dimension."""
        ...

    def embedding_cache(self) -> EmbeddingCache | None:
        """The on-disk cache of embeddings this process uses (None with given models)."""
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
        """Create a collection (``exist_ok=True`` returns the existing one instead)."""
        ...

    def collection(
        self, name: str, *, create: bool = False, model: str | None = None
    ) -> CollectionAPI:
        """An existing collection; ``create=True`` makes it when missing."""
        ...

    def __getitem__(self, name: str) -> CollectionAPI: ...

    def record(self, name: str) -> CollectionRecord:
        """A collection's catalog record (CollectionNotFound if there is none)."""
        ...

    def list_collections(self) -> list[CollectionInfo]: ...
    def collection_names(self) -> list[str]: ...
    def describe(self, name: str) -> CollectionInfo: ...
    def drop_collection(self, name: str) -> None: ...

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
        """Search several collections (all of this workspace by default) as one."""
        ...

    # -- maintenance verbs (hybridkb.maintenance, hybridkb.copy, hybridkb.sql_tool) --

    def doctor(self, name: str | None = None, *, repair: bool = False) -> list[CollectionHealth]:
        """Check one or every collection; ``repair=True`` fixes what it finds."""
        ...

    def reembed(
        self, name: str, *, model: str | None = None, progress: bool = True
    ) -> dict[str, Any]:
        """Re-embed a collection with ``model`` (default: its own), switching atomically."""
        ...

    def compact(self) -> dict[str, int]:
        """Reclaim space left by deletes and re-ingests."""
        ...

    def copy_to(
        self, dst_url: str, *, workspace: str | None = None, progress: CopyProgress | None = None
    ) -> dict[str, Any]:
        """Copy this store (or one workspace) into another one."""
        ...

    def sql(
        self, sql: str, *, max_rows: int = ..., timeout: float = ..., max_bytes: int = ...
    ) -> SQLResult:
        """Run one checked, read-only SELECT over this workspace's views."""
        ...
