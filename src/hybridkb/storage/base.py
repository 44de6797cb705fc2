"""The storage protocol both backends implement, and the records it moves.

Backends return ranked ``(chunk_key, score)`` lists; fusion happens in the core
(``hybridkb.fusion``) so every backend ranks the same way. Differences between
backends are data (:class:`Capabilities`), not scattered NotImplementedErrors.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..filters import Filter

Ranked = list[tuple[int, float]]


@dataclass(frozen=True)
class Capabilities:
    name: str  # "duckdb" | "postgres"
    concurrent_writers: bool  # many processes may write at once
    persistent: bool  # False for :memory:


@dataclass
class CollectionRecord:
    id: int
    workspace: str
    name: str
    model: str
    dim: int
    chunking: dict[str, Any]
    language: str
    created_at: str | None = None
    updated_at: str | None = None
    generation: int = 0


@dataclass
class DocumentRecord:
    document_id: str
    path: str | None
    filename: str | None
    source: str  # "file" | "text"
    content_hash: str  # file bytes (files) or text (add_texts)
    signature: str  # chunking settings + model: a change re-ingests
    metadata: dict[str, Any] = field(default_factory=dict)
    language: str = "und"
    bytes: int = 0
    chunk_count: int = 0
    added_at: str | None = None


@dataclass(slots=True)  # many live at once (ingest batches, the row cache)
class ChunkRecord:
    key: int
    chunk_id: str
    document_id: str
    chunk_index: int
    text: str
    page: int | None
    section: str | None
    char_start: int
    char_end: int
    content_hash: str
    language: str
    terms: list[str]
    metadata: dict[str, Any]
    filename: str | None
    path: str | None
    added_at: str | None = None


@dataclass
class PutItem:
    """One document to write with its chunks and their vectors (row i for chunk i)."""

    document: DocumentRecord
    chunks: Sequence[ChunkRecord]
    vectors: np.ndarray


@dataclass
class CollectionStats:
    documents: int
    chunks: int
    languages: list[str]
    bytes: int
    updated_at: str | None


def make_chunk_id(collection_id: int, document_id: str, content_hash: str, index: int) -> str:
    """Deterministic id, unique across the database (the graph uses it as a node id).

    16 hex digits of a 63-bit hash: the int value is the key derived indexes use.
    """
    raw = f"{collection_id}\x00{document_id}\x00{content_hash}\x00{index}".encode()
    value = int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big") & ((1 << 63) - 1)
    return f"{value:016x}"


def chunk_key(chunk_id: str) -> int:
    return int(chunk_id, 16)


def document_node_id(collection_id: int, document_id: str) -> str:
    """Graph node id of a document (chunk node ids are their chunk_ids)."""
    return f"doc:{collection_id}:{document_id}"


@dataclass
class WriteEvent:
    """Passed to write hooks inside the writing transaction (e.g. to keep the graph in step).

    kind: "put" (document replaced: ``document`` + ``chunks``; ``document_ids`` holds its id),
    "put_batch" (several documents replaced at once: ``items`` holds PutItems),
    "delete" (``document_ids`` removed), "drop" (whole collection, before its tables go).
    """

    kind: str
    coll: CollectionRecord
    document_ids: Sequence[str] = ()
    document: DocumentRecord | None = None
    chunks: Sequence[ChunkRecord] = ()
    items: Sequence[Any] = ()  # PutItem, for "put_batch"


# hook(connection_or_cursor, event): runs in the same transaction as the write.
WriteHook = Callable[[Any, WriteEvent], None]


class Storage(Protocol):
    """What the core needs from a database. One instance per open knowledge base."""

    capabilities: Capabilities
    hooks: list[WriteHook]  # called inside every document write/delete/drop transaction

    def close(self) -> None: ...

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
    ) -> CollectionRecord: ...
    def get_collection(self, workspace: str, name: str) -> CollectionRecord | None: ...
    def list_collections(self, workspace: str) -> list[CollectionRecord]: ...
    def drop_collection(self, coll: CollectionRecord) -> None: ...

    # documents
    def get_document(self, coll: CollectionRecord, document_id: str) -> DocumentRecord | None: ...
    def list_documents(
        self, coll: CollectionRecord, *, limit: int = 100, offset: int = 0
    ) -> list[DocumentRecord]: ...
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

    def stats(self, coll: CollectionRecord) -> CollectionStats: ...
    def stats_many(self, colls: Sequence[CollectionRecord]) -> dict[int, CollectionStats]:
        """Statistics of several collections by id (a listing asks for all at once)."""
        ...

    # search: ranked (chunk_key, score), best first, at most k, only chunks matching `where`
    def keyword_search(
        self, coll: CollectionRecord, terms: Sequence[str], k: int, where: Filter | None
    ) -> Ranked: ...
    def vector_search(
        self, coll: CollectionRecord, query: np.ndarray, k: int, where: Filter | None
    ) -> Ranked: ...
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

    def fetch_chunks(
        self, coll: CollectionRecord, keys: Sequence[int]
    ) -> dict[int, ChunkRecord]: ...
    def fetch_vectors(self, coll: CollectionRecord, keys: Sequence[int]) -> np.ndarray: ...
