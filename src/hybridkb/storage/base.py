"""The storage contract: the protocol both backends implement and the records it moves.

This module is the whole contract between the core and a backend. Backends return
ranked ``(chunk_key, score)`` lists; fusion happens in the core (``hybridkb.search.fusion``)
so every backend ranks the same way. Differences between backends are data: the
flags of :class:`Capabilities` (how the store behaves), and the optional parts
(:attr:`Storage.graph_sql`, :attr:`Storage.maintenance`, :attr:`Storage.reembedding`,
:attr:`Storage.hybrid`):
objects that are ``None`` where a backend lacks them, the one way a backend says it
lacks something. Callers test those, never a backend's class or name, and never
probe with ``hasattr``.

The records the protocol moves live in ``contract_records.py`` and its optional parts
in ``optional_parts.py``; this module re-exports both, so every name is still imported
from here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from ..text.filters import Filter
from .columns import Table
from .contract_records import (
    ChunkRecord,
    CollectionRecord,
    CollectionStats,
    Connection,
    DocumentRecord,
    Exported,
    FileState,
    PutItem,
    SourceRecord,
    WriteEvent,
    WriteHook,
    chunk_key,
    document_node_id,
    make_chunk_id,
)
from .optional_parts import (
    CollectionHealth,
    EdgeRow,
    Finding,
    FusionSpec,
    GraphSQL,
    HybridSearch,
    Maintenance,
    NodeRow,
    Reembedding,
    StoreHit,
    dump_props,
    load_props,
)

__all__ = [
    "Capabilities",
    "ChunkRecord",
    "CollectionHealth",
    "CollectionRecord",
    "CollectionStats",
    "Connection",
    "DocumentRecord",
    "EdgeRow",
    "Exported",
    "FileState",
    "Finding",
    "FusionSpec",
    "GraphSQL",
    "HybridSearch",
    "Maintenance",
    "NodeRow",
    "PutItem",
    "Ranked",
    "Reembedding",
    "SourceRecord",
    "Storage",
    "StoreHit",
    "WriteEvent",
    "WriteHook",
    "chunk_key",
    "document_node_id",
    "dump_props",
    "load_props",
    "make_chunk_id",
]

Ranked = list[tuple[int, float]]
T = TypeVar("T")


@dataclass(frozen=True)
class Capabilities:
    """How a store behaves, as data callers test (never the backend's class or name).

    What a backend may lack is not a flag here but an optional part of :class:`Storage`
    (``graph_sql``, ``maintenance``, ``reembedding``, ``hybrid``), None where it is absent.
    """

    name: str  # "duckdb" | "postgres": for messages and reports only
    persistent: bool  # False for :memory:


class Storage(Protocol):
    """What the core needs from a database. One instance per open knowledge base.

    A backend must:

    * make every write atomic: ``put_document``, ``put_documents``,
      ``put_document_stream``, ``delete_documents`` and ``drop_collection`` each commit
      all of their rows (chunks, vectors, catalog, and whatever the write ``hooks``
      write in the same transaction) or none, and bump the collection's
      ``generation``; a reader (another thread, or another process where the backend
      declares ``concurrent_writers`` in ``storage/backends.py``) sees the old state or
      the new one, never a mix;
    * rank only: the searches return ``(chunk_key, score)`` pairs, best first, at most
      ``k``, each a chunk that matches ``where`` (filters apply before the cut, so a
      filtered search is not a post-filtered top k), ties broken by key so the same
      store answers the same way; the core fuses, dresses hits and applies settings;
    * see its own writes at once: a search or read after a write returns commits
      made before it (derived in-memory indexes are brought up to date first);
    * take identifiers from :class:`CollectionRecord` ids only: no name or other user
      text is ever spliced into SQL (values travel as bound parameters, filters
      through :func:`hybridkb.text.filters.to_sql`);
    * raise every driver error as a :class:`~hybridkb.errors.BackendError` (or a
      subclass, e.g. :class:`~hybridkb.errors.DatabaseLocked` when another process
      holds the file past the lock timeout), keeping the driver's as the cause; never
      the driver's own exception;
    * refuse writes with BackendError when ``read_only``, saying :meth:`write_refusal`.

    A backend must never chunk, parse files, load models or embed (the core hands it
    finished rows and vectors; :meth:`Maintenance.reembed` uses the embedder it is
    given), call back into the core except through ``hooks``, or let a connection
    escape :meth:`transaction`. What a backend lacks is said
    by :class:`Capabilities` and the ``None`` optional parts, never by raising
    NotImplementedError from a member.
    """

    capabilities: Capabilities
    read_only: bool
    hooks: list[WriteHook]  # called inside every document write/delete/drop transaction

    # Optional parts: None where the backend does not offer them (the one way a backend
    # declares what it lacks). A caller reads the attribute and handles None, naming the
    # backend (``capabilities.name``) in its message.
    graph_sql: GraphSQL | None
    """The graph's tables (the knowledge graph needs them); None: no graph here."""
    maintenance: Maintenance | None
    """doctor / compact; None: the backend offers no housekeeping."""
    reembedding: Reembedding | None
    """reembed in place; None: the backend cannot (a copy through another store can)."""
    hybrid: HybridSearch | None
    """A hybrid search run whole in the store (one round trip); None: the core fuses."""

    def close(self) -> None:
        """Release the store: save what must persist (e.g. index snapshots), close the
        connections and the file lock. Closing again does nothing; no other member may
        be called afterwards."""
        ...

    def write_refusal(self) -> str:
        """Why a write is refused while ``read_only`` and how to get write access, in one
        line (opened read-only, or a database role that may only read): what every write
        of the core and the graph raises."""
        ...

    def transaction(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn(con)`` in one transaction (committed if it returns, rolled back if it
        raises) under the backend's lock; for the graph and copy helpers."""
        ...

    def list_workspaces(self) -> list[str]:
        """Workspaces holding at least one (complete) collection, sorted."""
        ...

    # catalog
    def create_collection(
        self,
        workspace: str,
        name: str,
        *,
        model: str,
        dim: int,
        chunking: dict[str, Any],
        language: str,
        recipe: dict[str, Any] | None = None,
    ) -> CollectionRecord:
        """Add a collection to the catalog and create its tables, in one transaction.

        Returns:
            Its record, with a new ``id`` and ``generation`` 0.

        Raises:
            CollectionExists: ``name`` is taken in ``workspace`` (the message names it).
        """
        ...

    def get_collection(self, workspace: str, name: str) -> CollectionRecord | None:
        """The record of ``name`` in ``workspace``, read afresh; None if there is none."""
        ...

    def list_collections(self, workspace: str, *, staged: bool = False) -> list[CollectionRecord]:
        """The workspace's collections, sorted by name; with ``staged``, instead, the
        collections a copy is still writing or left unfinished (``shared.staging_name``)."""
        ...

    def rename_collection(self, coll: CollectionRecord, name: str) -> CollectionRecord:
        """Give the collection another name in its workspace (its id, tables and rows
        stay); return its record.

        Raises:
            CollectionExists: ``name`` is taken in the workspace.
        """
        ...

    def drop_collection(self, coll: CollectionRecord) -> None:
        """Delete the collection: catalog row, tables, sources, file states and derived
        indexes, in one transaction; write hooks see a ``drop`` event before the tables go."""
        ...

    # documents
    def get_document(self, coll: CollectionRecord, document_id: str) -> DocumentRecord | None:
        """A document's record; None if the collection has no such document."""
        ...

    def get_documents(
        self, coll: CollectionRecord, document_ids: Sequence[str]
    ) -> dict[str, DocumentRecord]:
        """The records of those of ``document_ids`` the collection holds, by id (an add's
        unchanged check for a whole batch at once)."""
        ...

    def list_documents(
        self,
        coll: CollectionRecord,
        *,
        limit: int = 100,
        offset: int = 0,
        where: Filter | None = None,
    ) -> list[DocumentRecord]:
        """One page of the collection's documents, ordered by ``added_at`` then
        ``document_id``; with ``where`` (a parsed filter naming no passage's field, see
        :func:`hybridkb.text.filters.parse_document_filter`) only those it matches, decided
        in the database (compiled by :func:`hybridkb.text.filters.to_sql`)."""
        ...

    def put_document(
        self,
        coll: CollectionRecord,
        doc: DocumentRecord,
        chunks: Sequence[ChunkRecord],
        vectors: np.ndarray,
    ) -> None:
        """Atomically replace the document (and its chunks and vectors) with these."""
        ...

    def put_documents(self, coll: CollectionRecord, items: Sequence[PutItem]) -> None:
        """Atomically replace several documents in one transaction (all or none)."""
        ...

    def put_document_stream(
        self,
        coll: CollectionRecord,
        doc: DocumentRecord,
        batches: Iterable[tuple[Sequence[ChunkRecord], np.ndarray]],
    ) -> int:
        """Replace one huge document from a stream of (chunks, vectors) batches, all or nothing.

        Memory stays bounded (a batch, plus the database's own buffers). Until the new
        version is complete, reads and searches see the old one (or none) and never a
        staged row; a failure or a crash at any moment leaves the old version. Returns
        the number of chunks written. DuckDB stages the batches in a file beside the
        database and switches them in with one transaction (``duckdb_stream.py``);
        Postgres writes one transaction (it spills to disk).
        """
        ...

    def delete_documents(self, coll: CollectionRecord, document_ids: Sequence[str]) -> list[str]:
        """Delete; return the ids that existed."""
        ...

    def stats(self, coll: CollectionRecord) -> CollectionStats:
        """Counts of one collection (see :meth:`stats_many` for several)."""
        ...

    def prepare(self, coll: CollectionRecord) -> None:
        """Load now what a search of ``coll`` will need (derived indexes), e.g. in a thread
        while the query's model loads; a backend with nothing to load does nothing."""
        ...

    def stats_many(self, colls: Sequence[CollectionRecord]) -> dict[int, CollectionStats]:
        """Statistics of several collections by id (a listing asks for all at once)."""
        ...

    # search: ranked (chunk_key, score), best first, at most k, only chunks matching `where`
    def keyword_search(
        self, coll: CollectionRecord, terms: Sequence[str], k: int, where: Filter | None
    ) -> Ranked:
        """BM25 over the chunks' analysed ``terms``; an empty ``terms`` ranks nothing.

        Scores are the BM25 scores of the backend's index (only ranks compare across
        backends: the core fuses ranks and normalised scores, never raw BM25).
        """
        ...

    def vector_search(
        self, coll: CollectionRecord, query: np.ndarray, k: int, where: Filter | None
    ) -> Ranked:
        """Chunks by cosine similarity to ``query`` (a unit vector of the collection's
        dimension). The search may be approximate (an index), but with ``where`` it must
        still return ``k`` hits whenever ``k`` chunks match."""
        ...

    def filter_search(
        self,
        coll: CollectionRecord,
        terms: Sequence[str],
        query: np.ndarray,
        k: int,
        where: Filter | None,
    ) -> Ranked:
        """Chunks containing at least one of `terms`, ranked by vector similarity."""
        ...

    def fetch_chunks(self, coll: CollectionRecord, keys: Sequence[int]) -> dict[int, ChunkRecord]:
        """Chunk rows by key (missing keys are left out); ``terms`` may be empty."""
        ...

    def fetch_vectors(self, coll: CollectionRecord, keys: Sequence[int]) -> np.ndarray:
        """Stored float32 vectors in the order of ``keys`` (zero rows for missing keys)."""
        ...

    def vector_directions(self, coll: CollectionRecord, keys: Sequence[int]) -> np.ndarray:
        """Vectors pointing where the stored ones of ``keys`` point (cosine >= 0.999),
        possibly read from a quantised in-memory copy: for query feedback, where a
        database round trip would cost more than the search. Zero rows for missing keys."""
        ...

    # export: for copying between stores and for the agent SQL engine
    def export_documents(self, coll: CollectionRecord, *, batch: int = 200) -> Iterator[Exported]:
        """Every stored document with its chunks (terms included) and vectors."""
        ...

    def export_tables(
        self, coll: CollectionRecord, document_ids: Sequence[str] | None = None
    ) -> tuple[Table, Table]:
        """The collection's rows for read-only SQL: tables of exactly
        ``columns.EXPORT_DOCUMENTS`` and ``columns.EXPORT_CHUNKS`` (metadata as JSON text,
        ``added_at`` as timestamp text), in the orders of the backends' SELECTs; with
        ``document_ids``, only those documents' rows (unknown ids are ignored)."""
        ...

    def document_fingerprints(self, coll: CollectionRecord) -> dict[str, str]:
        """Each document's id and a fingerprint of its catalog row, computed by the
        database (content hash, metadata, path and times included: it changes whenever
        the document's rows do), so a reader can tell which documents changed."""
        ...

    def count_vectors(self, coll: CollectionRecord) -> int:
        """Stored vectors of the collection (a copy compares it with the chunk count)."""
        ...

    # sources and file states: what a sync compares the disk with (dropped with the
    # collection; a state is a cache, so a missing or stale one only costs a re-read)
    def put_source(self, coll: CollectionRecord, source: SourceRecord) -> None:
        """Remember ``source`` (replacing the one with the same path)."""
        ...

    def list_sources(self, coll: CollectionRecord) -> list[SourceRecord]:
        """The collection's sources, sorted by path."""
        ...

    def mark_synced(self, coll: CollectionRecord, paths: Sequence[str]) -> None:
        """Record now (the database's clock) as when the sources at ``paths`` were last
        walked whole by an add or a sync; a path that is no source is ignored."""
        ...

    def delete_source(self, coll: CollectionRecord, path: str) -> bool:
        """Forget the source at ``path``; return whether there was one."""
        ...

    def file_states(self, coll: CollectionRecord) -> dict[str, FileState]:
        """Every recorded file state by document id."""
        ...

    def put_file_states(self, coll: CollectionRecord, states: Sequence[FileState]) -> None:
        """Record these states (replacing those of the same document ids)."""
        ...

    def delete_file_states(self, coll: CollectionRecord, document_ids: Sequence[str]) -> None:
        """Forget the states of these documents (unknown ids are ignored)."""
        ...
