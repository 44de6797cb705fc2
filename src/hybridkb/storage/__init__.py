"""Storage backends, picked from a URL: a path, ``duckdb:///path`` or ``:memory:`` is
embedded DuckDB; ``postgresql://...`` is PostgreSQL + pgvector."""

from __future__ import annotations

from .base import Capabilities, ChunkRecord, CollectionRecord, DocumentRecord, Storage
from .urls import check_store_url, is_postgres_url, redact_url

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
    """Open the store at ``url``: a Postgres URL, else a DuckDB file (``duckdb://`` optional;
    an empty path or ``:memory:`` is in memory).

    Raises:
        ConfigError: A URL of no known kind.
        DatabaseLocked: Another process holds the DuckDB file past ``lock_timeout``.
        BackendError: The store cannot be opened.
    """
    check_store_url(url)
    if is_postgres_url(url):
        from .postgres import PostgresStorage

        return PostgresStorage(url, read_only=read_only)
    # duckdb:///abs/path -> /abs/path, duckdb://rel/path -> rel/path
    path = url.removeprefix("duckdb://")
    from .duckdb import DuckDBStorage

    if row_cache_mb is None:
        return DuckDBStorage(path or ":memory:", read_only=read_only, lock_timeout=lock_timeout)
    return DuckDBStorage(
        path or ":memory:",
        read_only=read_only,
        lock_timeout=lock_timeout,
        row_cache_bytes=row_cache_mb << 20,
    )
