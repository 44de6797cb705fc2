"""What every backend does the same way, written once: the protocol methods that are
defined by others, and the refusals (with their messages) that every backend makes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from ..errors import BackendError, CollectionExists
from .base import ChunkRecord, CollectionRecord, DocumentRecord, PutItem


class StorageDefaults(ABC):
    """Default implementations of :class:`~hybridkb.storage.base.Storage` methods that
    follow from others; a backend class inherits them and may override any."""

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
