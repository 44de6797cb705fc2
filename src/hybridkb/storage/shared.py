"""What every backend does the same way, written once: the protocol methods that are
defined by others, and the refusals (with their messages) that every backend makes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence

import numpy as np

from ..errors import BackendError, CollectionExists, CollectionNotFound
from .base import (
    ChunkRecord,
    CollectionHealth,
    CollectionRecord,
    DocumentRecord,
    Finding,
    HybridSearch,
    PutItem,
    Storage,
)

# A write on a store opened with read_only=True (DuckDB's driver says so in its own words).
OPENED_READ_ONLY = (
    "the knowledge base is open read-only; open it without read_only=True to change it"
)


class StorageDefaults(ABC):
    """Default implementations of :class:`~hybridkb.storage.base.Storage` methods that
    follow from others; a backend class inherits them and may override any."""

    # The optional part most backends lack: the core fuses their legs.
    hybrid: HybridSearch | None = None
    read_only: bool

    def write_refusal(self) -> str:
        """The store was opened read-only (a backend whose roles decide overrides this)."""
        return OPENED_READ_ONLY

    @abstractmethod
    def get_document(self, coll: CollectionRecord, document_id: str) -> DocumentRecord | None:
        """A document's record; None if the collection has no such document."""

    def get_documents(
        self, coll: CollectionRecord, document_ids: Sequence[str]
    ) -> dict[str, DocumentRecord]:
        """The records of those of ``document_ids`` the collection holds, by id: one
        :meth:`get_document` each (a backend may read them in one statement)."""
        found = {}
        for document_id in dict.fromkeys(document_ids):
            record = self.get_document(coll, document_id)
            if record is not None:
                found[document_id] = record
        return found

    @abstractmethod
    def put_documents(self, coll: CollectionRecord, items: Sequence[PutItem]) -> None:
        """Atomically replace several documents in one transaction (all or none)."""

    def put_document(
        self,
        coll: CollectionRecord,
        doc: DocumentRecord,
        chunks: Sequence[ChunkRecord],
        vectors: np.ndarray,
    ) -> None:
        """Atomically replace the document (and its chunks and vectors): a batch of one."""
        self.put_documents(coll, [PutItem(doc, chunks, vectors)])


def refuse_repeated_ids(document_ids: Sequence[str | None]) -> None:
    """Refuse a write batch that names a document twice (which copy would win is unclear).

    Raises:
        ValueError: a document id appears twice (a caller's bug, not bad input).
    """
    if len(set(document_ids)) != len(document_ids):
        raise ValueError("put_documents: a document id appears twice in one batch")


def collection_exists(name: str) -> CollectionExists:
    """The error for creating a collection whose name is taken (the caller raises it)."""
    return CollectionExists(f"collection {name!r} already exists; use it, or drop it first")


def collection_gone(name: str) -> CollectionNotFound:
    """The error for a collection that was dropped while it was being used."""
    return CollectionNotFound(
        f"collection {name!r} was dropped by another process; create it again"
    )


def check_schema_version(version: int, supported: int) -> None:
    """Refuse a store whose schema a newer hybridkb wrote.

    Args:
        version: the store's schema version.
        supported: the newest version this hybridkb knows (its number of migrations).

    Raises:
        BackendError: the store is newer; naming both versions and the fix.
    """
    if version > supported:
        raise BackendError(
            f"database schema version {version} is newer than this hybridkb supports "
            f"({supported}); upgrade hybridkb"
        )


# A collection that ``copy`` is still writing is stored under its name with this mark, and
# renamed to its name once its counts match (copy.py). The mark is a control character,
# which no collection name may hold (kb.check_name refuses them): a staged collection never
# clashes with a user's, and is never listed, searched or copied; doctor reports one that
# a killed copy left, and the next copy of that collection replaces it.
STAGING_MARK = "\x1f"


def staging_name(name: str) -> str:
    """The name a collection is copied under until it is complete."""
    return f"{name}{STAGING_MARK}copying"


def is_staged(name: str) -> bool:
    """Whether a stored collection name is a staged (unfinished) copy's."""
    return STAGING_MARK in name


def staged_target(name: str) -> str:
    """The name a staged collection takes when its copy completes."""
    return name.partition(STAGING_MARK)[0]


def listed(records: Iterable[CollectionRecord], *, staged: bool) -> list[CollectionRecord]:
    """The collections ``list_collections`` returns: the complete ones, or with ``staged``
    the copies still being written (or left by a copy that was killed)."""
    return [r for r in records if is_staged(r.name) == staged]


def drop_staged(dst: Storage, staged: CollectionRecord) -> None:
    """Drop a staged collection and the graph rows copied into it (a store opened for a
    copy has no graph write hook to drop them)."""
    sql = dst.graph_sql
    if sql is not None and dst.transaction(sql.has_schema):
        dst.transaction(lambda con: sql.drop_collection(con, staged.workspace, staged.id))
    dst.drop_collection(staged)


def unfinished_copy(
    storage: Storage, staged: CollectionRecord, *, repair: bool
) -> CollectionHealth:
    """Doctor's finding for a collection a copy was writing when it was stopped (``repair``
    drops it)."""
    documents = storage.stats(staged).documents
    finding = Finding(
        "unfinished_copy",
        1,
        f"a copy into this store was stopped after {documents} documents; the half copy is"
        " not listed or searched (repair drops it; copying again replaces it)",
    )
    if repair:
        drop_staged(storage, staged)
        finding.repaired = True
    return CollectionHealth(staged_target(staged.name), [finding])
