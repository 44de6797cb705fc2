"""The records the storage protocol moves, and the ids derived from them.

Catalog rows (collections, documents, sources, file states), chunks, the items of a
batched write and a collection's stats; the deterministic chunk and document-node ids;
and the transaction and write-hook types a backend hands the core. They are plain data
every backend and the core share, so they live apart from the protocol that moves them
(``base.py``, which re-exports them: ``from hybridkb.storage.base import X`` keeps
working) and from the optional parts (``optional_parts.py``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


@dataclass
class CollectionRecord:
    """A collection's catalog row: what every add and search of it must use.

    ``id`` is unique in the store and names the collection's tables; ``model``, ``dim``,
    ``chunking`` and ``language`` are fixed at creation (``reembed`` changes the model);
    ``generation`` grows with every write to the collection, so ``(id, generation)`` keys
    a cache that can never serve stale data.
    """

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
    # How the collection's vectors were computed (hybridkb.embedders.recipe.Recipe as a
    # dict): backend and precision. Empty for collections made before it was recorded
    # (those are float32, made by sentence-transformers).
    recipe: dict[str, Any] = field(default_factory=dict)


@dataclass
class DocumentRecord:
    """A document's catalog row (one per file or added text; its text lives in its chunks).

    ``document_id`` is unique within the collection; ``chunk_count`` is the number of
    chunks stored for the current ``content_hash``.
    """

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


@dataclass
class SourceRecord:
    """A folder or file named in an add, remembered so a sync can walk it again."""

    path: str  # resolved absolute path
    recursive: bool = True  # a folder's subfolders too
    types: list[str] | None = None  # extensions to keep (".pdf"); None: every supported one
    metadata: dict[str, Any] = field(default_factory=dict)  # given to new files' documents
    added_at: str | None = None
    synced_at: str | None = None  # when an add or sync last walked it whole (None: never)
    # st_dev of the root and of the folder above it when it was added (None: not recorded)
    device: int | None = None
    parent_device: int | None = None

    @property
    def mount_point(self) -> bool:
        """Whether the root was a mount point (a drive, a share) when it was added: its
        device differed from its parent's. Unmounted, it shows as the empty folder below."""
        return self.device is not None and self.device != self.parent_device


@dataclass
class FileState:
    """What a file looked like when its document was last read: a sync that finds the
    same size and modification time trusts the stored content without opening it."""

    document_id: str
    path: str
    size: int
    mtime_ns: int
    content_hash: str


@dataclass(slots=True)  # many live at once (ingest batches, the row cache)
class ChunkRecord:
    """One stored chunk: its text, where it sits in its document, and what filters see.

    ``key`` is ``chunk_key(chunk_id)``, the integer the derived indexes rank by;
    ``char_start``/``char_end`` are offsets into the document text; ``terms`` are the
    analysed keywords the BM25 index holds; ``metadata`` is the user's, the built-in fields
    being the other attributes.
    """

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
    """Counts of one collection: documents, chunks, languages seen, bytes of source, last write."""

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
    """The integer key derived indexes use: the chunk's 16-hex-digit id as a number (< 2**63)."""
    return int(chunk_id, 16)


def document_node_id(collection_id: int, document_id: str) -> str:
    """Graph node id of a document (chunk node ids are their chunk_ids)."""
    return f"doc:{collection_id}:{document_id}"


class Connection(Protocol):
    """An open transaction of a backend, as the core sees it: statements in, rows out.

    DuckDB's connection and psycopg's both satisfy it (``.execute(...).fetchall()``);
    a backend's own helpers (its :class:`GraphSQL`) may use more of their driver.
    """

    def execute(self, query: str, parameters: Any = ..., /) -> Any:
        """Run one statement with positional parameters; the result has
        ``fetchall()``/``fetchone()``."""
        ...


@dataclass
class WriteEvent:
    """Passed to write hooks inside the writing transaction (e.g. to keep the graph in step).

    kind: "put" (document replaced: ``document`` + ``chunks``; ``document_ids`` holds its id),
    "put_batch" (several documents replaced at once: ``items`` holds PutItems),
    "delete" (``document_ids`` removed), "drop" (whole collection, before its tables go).
    ``fresh``: ids of a put the store did not hold before it (nothing derived from them
    to replace); empty when the writer does not say.
    """

    kind: str
    coll: CollectionRecord
    document_ids: Sequence[str] = ()
    document: DocumentRecord | None = None
    chunks: Sequence[ChunkRecord] = ()
    items: Sequence[Any] = ()  # PutItem, for "put_batch"
    fresh: frozenset[str] = frozenset()


# hook(connection, event): runs in the same transaction as the write.
WriteHook = Callable[[Connection, WriteEvent], None]

# One stored document with its chunks (terms included) and their vectors (row i, chunk i).
Exported = tuple[DocumentRecord, list[ChunkRecord], np.ndarray]
