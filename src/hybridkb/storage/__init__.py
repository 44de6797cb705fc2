"""Storage backends, picked from a URL: a path, ``duckdb:///path`` or ``:memory:`` is
embedded DuckDB; ``postgresql://...`` is PostgreSQL + pgvector."""

from __future__ import annotations

from .backends import backend_for
from .base import Capabilities, ChunkRecord, CollectionRecord, DocumentRecord, Storage
from .urls import is_postgres_url, redact_url

__all__ = [
    "Capabilities",
    "ChunkRecord",
    "CollectionRecord",
    "DocumentRecord",
    "Storage",
    "is_postgres_url",
    "open_storage",
    "redact_url",
]


def open_storage(
    url: str,
    *,
    read_only: bool = False,
    lock_timeout: float = 10.0,
    row_cache_mb: int | None = None,
) -> Storage:
    """Open the store a URL names with the backend that takes it (see ``backends``).

    Args:
        url: a DuckDB file path, ``duckdb:///path``, ``:memory:`` or ``postgresql://...``
            (or a URL of a registered backend).
        read_only: open without write access.
        lock_timeout: seconds to wait for a file another process holds (DuckDB).
        row_cache_mb: chunk rows kept in memory (DuckDB); None for the default.

    Raises:
        ConfigError: no backend takes the URL.
        DatabaseLocked: another process holds the DuckDB file past ``lock_timeout``.
        BackendError: the store cannot be opened.
    """
    return backend_for(url).open(
        url, read_only=read_only, lock_timeout=lock_timeout, row_cache_mb=row_cache_mb
    )
