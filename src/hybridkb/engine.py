"""The engine under the handles: one protocol of flat calls, written once.

:class:`~hybridkb.kb.KnowledgeBase`, :class:`~hybridkb.kb.Collection` and
:class:`~hybridkb.graph.Graph` are the API, written once: each method takes what the
caller gave, and makes one flat call on its knowledge base's :class:`Door` (a
collection's calls name the collection; the graph's go to ``door.graph``). Two doors
implement it, neither a subclass of the other, both checked by mypy:

* :class:`hybridkb.local.LocalEngine`: this process opened the store;
* :class:`hybridkb.serve.owner.OwnerEngine`: another process holds the DuckDB file.
  Each call crosses to it as the method's name and keyword arguments, checked on both
  sides against an allow-list derived from :class:`Engine` and :class:`GraphEngine`
  (``hybridkb.serve.wire``): there is no table of operations to keep in step. When
  the owner goes away, the next call takes the file over and runs in a local engine.

So a new verb is written three times: in the protocol here, in the local engine, and
on the handle. Every argument of a flat call is JSON or a record the wire carries
(``hybridkb.serve.codec``); a call that writes says so with :func:`writes` (a
read-only door refuses it before it is sent). Three kinds of argument mean something
only where the caller runs, and say so by their type: a :data:`CallerPath` and a
:data:`CallerFolder` (made absolute there: the owner runs in another folder), a
:data:`StoreURL` (a file made absolute, a server URL as given), and a
:data:`CallerOnly` value (code, or a progress bar for the caller's terminal), never
sent: an owner runs the call with the declared default.

What is not a flat call stays in the process (:class:`Plumbing`: models, caches,
warming up) or belongs to the door itself (:class:`Door`: settings, closing, another
workspace, objects that are code). The rules every call keeps (errors, read-only,
atomic writes) are in the handles' docstrings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypeAlias, TypeVar

if TYPE_CHECKING:
    import numpy as np

    from .embedders import Embedder, Recipe
    from .embedders.cache import EmbeddingCache
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
    from .results import AddReport, CollectionInfo, DeleteReport, Hit, SyncReport
    from .search.rerank import Reranker
    from .settings import Settings
    from .sql.tool import SQLResult
    from .storage.base import (
        ChunkRecord,
        CollectionHealth,
        CollectionRecord,
        DocumentRecord,
        Storage,
    )

__all__ = [
    "CallerFolder",
    "CallerOnly",
    "CallerPath",
    "CopyProgress",
    "Door",
    "EdgeTypes",
    "Engine",
    "GraphEngine",
    "Plumbing",
    "StoreURL",
    "Write",
    "writes",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

CallerPath: TypeAlias = str | Path
"""A file or folder as the caller names it (relative to its folder, ``~``)."""
CallerFolder: TypeAlias = str | Path
"""A folder that confines what a call may read, resolved (links too) where the caller runs."""
StoreURL: TypeAlias = str
"""A store: a file path (made absolute where the caller runs) or a server's URL."""
CallerOnly: TypeAlias = Annotated[T, "kept in the caller's process"]
"""A value that never crosses to an owner (it runs the call with the declared default)."""

EdgeTypes: TypeAlias = str | Sequence[str] | None
CopyProgress: TypeAlias = Callable[[str, int, int], None]  # (collection, documents done, total)
Vector: TypeAlias = "np.ndarray | Sequence[float]"


@dataclass(frozen=True)
class Write:
    """When a call changes the store: always, or only when the argument ``when`` is true,
    or unless the argument ``unless`` is."""

    when: str = ""
    unless: str = ""

    def applies(self, args: Mapping[str, Any]) -> bool:
        """Whether the call with these (keyword) arguments writes."""
        if self.when:
            return bool(args.get(self.when))
        if self.unless:
            return not args.get(self.unless)
        return True


def writes(*, when: str = "", unless: str = "") -> Callable[[F], F]:
    """Mark a call of the protocol as one that changes the store (see :class:`Write`)."""

    def mark(fn: F) -> F:
        fn.__dict__["write"] = Write(when, unless)
        return fn

    return mark


class GraphEngine(Protocol):
    """The graph's flat calls (``door.graph``); each is documented on
    :class:`hybridkb.graph.Graph`, the handle that makes it."""

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
    ) -> GraphPath | None: ...
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
        collections: Sequence[str] | None = None,
        where: Mapping[str, Any] | str | None = None,
    ) -> GraphSearchResults: ...
    def stats(self) -> dict[str, Any]: ...
    @writes()
    def relate(
        self,
        source: str,
        target: str,
        type: str = "related",
        *,
        weight: float = 1.0,
        properties: Mapping[str, Any] | None = None,
    ) -> Edge: ...
    @writes()
    def unrelate(self, source: str, target: str, type: str = "related") -> bool: ...
    @writes()
    def add_node(
        self, node_id: str, type: str, properties: Mapping[str, Any] | None = None
    ) -> Node: ...
    @writes()
    def add_nodes(self, nodes: Sequence[Node | Mapping[str, Any]]) -> int: ...
    @writes()
    def add_edges(
        self, edges: Sequence[Edge | Mapping[str, Any]], *, check: bool = True
    ) -> int: ...
    @writes()
    def remove_node(self, node_id: str) -> bool: ...
    def aliases(self) -> dict[str, str]: ...
    @writes()
    def set_alias(self, alias: str, canonical: str | None) -> None: ...
    @writes()
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
    def export_folder(self, collection: str, folder: CallerPath) -> list[Path]: ...
    @writes()
    def import_folder(self, collection: str, folder: CallerPath) -> dict[str, Any]: ...


class Engine(Protocol):
    """The flat calls of one workspace's knowledge base; each is documented on the
    handle that makes it (:class:`~hybridkb.kb.KnowledgeBase`,
    :class:`~hybridkb.kb.Collection`). A collection is named by its name; results are
    records, never handles."""

    @property
    def graph(self) -> GraphEngine:
        """The workspace's graph calls."""
        ...

    # -- collections
    @writes()
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
    ) -> str: ...
    @writes(when="create")
    def collection(self, name: str, *, create: bool = False, model: str | None = None) -> str: ...
    def record(self, name: str) -> CollectionRecord: ...
    def list_collections(self) -> list[CollectionInfo]: ...
    def collection_names(self) -> list[str]: ...
    def describe(self, name: str) -> CollectionInfo: ...
    @writes()
    def drop_collection(self, name: str) -> None: ...
    def search(
        self,
        query: str,
        *,
        k: int | None = None,
        mode: str | None = None,
        where: Mapping[str, Any] | str | None = None,
        collections: Sequence[str] | None = None,
        rerank: bool | None = None,
    ) -> list[Hit]: ...

    # -- documents of one collection
    @writes()
    def add(
        self,
        collection: str,
        paths: Sequence[CallerPath],
        *,
        metadata: Mapping[str, Any] | None = None,
        allowed: Sequence[CallerFolder] | None = None,
    ) -> AddReport: ...
    @writes()
    def add_texts(
        self,
        collection: str,
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any] | None] | None = None,
        ids: Sequence[str] | None = None,
    ) -> AddReport: ...
    @writes(unless="dry_run")
    def sync(
        self,
        collection: str,
        *,
        dry_run: bool = False,
        allowed: Sequence[CallerFolder] | None = None,
        busy: Sequence[str] = (),
        paths: Sequence[CallerPath] | None = None,
    ) -> SyncReport: ...
    def sources(self, collection: str) -> list[dict[str, Any]]: ...
    @writes()
    def remove_source(self, collection: str, path: CallerPath) -> DeleteReport: ...
    @writes()
    def delete(self, collection: str, ids: Sequence[str]) -> DeleteReport: ...
    def get(self, collection: str, document_id: str) -> DocumentRecord | None: ...
    def chunks(self, collection: str, document_id: str) -> list[ChunkRecord]: ...
    def document_text(self, collection: str, document_id: str) -> str | None: ...
    def search_by_vector(
        self,
        collection: str,
        vector: Vector,
        *,
        k: int | None = None,
        where: Mapping[str, Any] | str | None = None,
    ) -> list[Hit]: ...
    def documents(
        self,
        collection: str,
        *,
        limit: int = 100,
        offset: int = 0,
        where: Mapping[str, Any] | str | None = None,
    ) -> list[DocumentRecord]: ...
    def count(self, collection: str) -> int: ...

    # -- maintenance
    @writes(when="repair")
    def doctor(
        self, name: str | None = None, *, repair: bool = False
    ) -> list[CollectionHealth]: ...
    @writes()
    def reembed(
        self, name: str, *, model: str | None = None, progress: CallerOnly[bool] = False
    ) -> dict[str, Any]: ...
    @writes()
    def compact(self) -> dict[str, int]: ...
    def copy_to(
        self,
        dst_url: StoreURL,
        *,
        workspace: str | None = None,
        progress: CallerOnly[CopyProgress | None] = None,
    ) -> dict[str, Any]: ...
    def sql(
        self,
        sql: str,
        *,
        max_rows: int | None = None,
        timeout: float | None = None,
        max_bytes: int | None = None,
    ) -> SQLResult: ...


class Plumbing(Protocol):
    """What a front end asks of the process it runs in (never a flat call): the models
    and caches, and loading them ahead of the first call. Through an owner, the owner
    embeds and searches, so most of these have nothing to do."""

    def embedder(self, model: str, recipe: Recipe | None = None) -> Embedder:
        """The embedder for ``model``, loaded in this process."""
        ...

    def embedder_for(self, coll: CollectionRecord) -> Embedder:
        """The collection's own model, loaded here with its recipe and checked."""
        ...

    def embedding_cache(self) -> EmbeddingCache | None:
        """The on-disk embedding cache this process uses (None: off, or none here)."""
        ...

    def reranker(self) -> Reranker | None:
        """The reranker this process's searches use (None: none here)."""
        ...

    def prepare_search(self, collections: Iterable[str] | None = None) -> None:
        """Start loading what searching ``collections`` needs."""
        ...

    def warm_up(self) -> None:
        """Load the collections' models now rather than in the first call."""
        ...

    def prepare_graph(self) -> None:
        """Start loading the workspace's graph into memory, in the background: until it
        is there, a neighbourhood one hop deep is read from its own rows."""
        ...


class Door(Engine, Plumbing, Protocol):
    """What a handle holds: an engine with its plumbing, bound to one workspace."""

    settings: Settings
    workspace: str

    @property
    def storage(self) -> Storage:
        """The open store (DatabaseLocked while another process holds the file)."""
        ...

    @property
    def read_only(self) -> bool:
        """Whether writes are refused: opened read-only, or a database role that may only
        read (known once the store is open)."""
        ...

    def close(self) -> None:
        """Close the store (or the link to its owner)."""
        ...

    def in_workspace(self, workspace: str) -> Door:
        """The same store, another workspace."""
        ...

    def with_embedder(self, embedder: Embedder) -> Door:
        """The same store and workspace, embedding with ``embedder`` for its model id."""
        ...

    def with_reranker(self, reranker: Reranker) -> Door:
        """The same store and workspace, reranking with ``reranker``."""
        ...

    def add_extractor(self, extractor: EntityExtractor) -> None:
        """Run ``extractor`` on every chunk ingested from now on."""
        ...
