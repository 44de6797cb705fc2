"""Storage backends, picked from a URL: a path, ``duckdb:///path`` or ``:memory:`` is
embedded DuckDB; ``postgresql://...`` is PostgreSQL + pgvector."""

from __future__ import annotations

from .base import Capabilities, ChunkRecord, CollectionRecord, DocumentRecord, Storage

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


def is_postgres_url(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://", "postgresql+psycopg://"))


def redact_url(url: str) -> str:
    """The store's URL for messages: a Postgres password becomes ***."""
    if not is_postgres_url(url):
        return url
    head, sep, tail = url.partition("://")
    if "@" not in tail:
        return url
    cred, _, rest = tail.rpartition("@")
    user = cred.split(":", 1)[0]
    return f"{head}{sep}{user}:***@{rest}" if ":" in cred else url


def open_storage(
    url: str,
    *,
    read_only: bool = False,
    lock_timeout: float = 10.0,
    row_cache_mb: int | None = None,
) -> Storage:
    if is_postgres_url(url):
        from .postgres import PostgresStorage

        return PostgresStorage(url, read_only=read_only)
    path = url[len("duckdb://") :] if url.startswith("duckdb://") else url
    if path.startswith("/") and url.startswith("duckdb:///"):
        path = path  # duckdb:///abs/path -> /abs/path
    from .duckdb import DuckDBStorage

    if row_cache_mb is None:
        return DuckDBStorage(path or ":memory:", read_only=read_only, lock_timeout=lock_timeout)
    return DuckDBStorage(
        path or ":memory:",
        read_only=read_only,
        lock_timeout=lock_timeout,
        row_cache_bytes=row_cache_mb << 20,
    )
