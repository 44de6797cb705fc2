"""Storage backends, picked from a URL: a path, ``duckdb:///path`` or ``:memory:`` is
embedded DuckDB; ``postgresql://...`` is PostgreSQL + pgvector.

Opening lives here, above both the declarations (``backends.py``: which backend a URL
names, imported by anything that reads a store URL) and the backends themselves
(``duckdb/``, ``postgres/``), each imported when a store of it is opened. The records
and the ``Storage`` protocol (``base.py``, which brings numpy) load on first use, so
reading a URL's declarations costs a process nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..lazy import lazy_names
from . import backends
from .backends import Backend, backend_for, duckdb_path
from .urls import is_postgres_url, redact_url

if TYPE_CHECKING:
    from .base import Capabilities, ChunkRecord, CollectionRecord, DocumentRecord, Storage

__all__ = [
    "Capabilities",
    "ChunkRecord",
    "CollectionRecord",
    "DocumentRecord",
    "Opener",
    "Storage",
    "is_postgres_url",
    "open_storage",
    "redact_url",
    "register_backend",
]

__getattr__, __dir__ = lazy_names(
    __name__,
    {
        name: "base"
        for name in ("Capabilities", "ChunkRecord", "CollectionRecord", "DocumentRecord", "Storage")
    },
)


class Opener(Protocol):
    """Opens a store of one backend from its URL."""

    def __call__(
        self,
        url: str,
        *,
        read_only: bool,
        lock_timeout: float,
        row_cache_mb: int | None,
        pool_size: int | None,
    ) -> Storage:
        """Open the store ``url`` names (``lock_timeout``, ``row_cache_mb``, ``pool_size``:
        where the backend has a file lock, a row cache or a connection pool; None for the
        default)."""
        ...


def open_postgres(
    url: str,
    *,
    read_only: bool,
    lock_timeout: float,
    row_cache_mb: int | None,
    pool_size: int | None,
) -> Storage:
    """The PostgreSQL opener (the driver is an extra: imported here)."""
    from .postgres import PostgresStorage

    if pool_size is None:
        return PostgresStorage(url, read_only=read_only)
    return PostgresStorage(url, read_only=read_only, pool_size=pool_size)


def open_duckdb(
    url: str,
    *,
    read_only: bool,
    lock_timeout: float,
    row_cache_mb: int | None,
    pool_size: int | None,
) -> Storage:
    """The DuckDB opener: a file path, ``duckdb:///path`` or ``:memory:``."""
    from .duckdb import DuckDBStorage

    path = duckdb_path(url) or ":memory:"
    if row_cache_mb is None:
        return DuckDBStorage(path, read_only=read_only, lock_timeout=lock_timeout)
    return DuckDBStorage(
        path, read_only=read_only, lock_timeout=lock_timeout, row_cache_bytes=row_cache_mb << 20
    )


# Each backend's opener, by its declared name.
OPENERS: dict[str, Opener] = {"postgres": open_postgres, "duckdb": open_duckdb}


def register_backend(backend: Backend, opener: Opener) -> None:
    """Add a backend and how its stores open, asked before those already known (e.g. a
    third store, or a test's)."""
    backends.BACKENDS.insert(0, backend)
    OPENERS[backend.name] = opener


def open_storage(
    url: str,
    *,
    read_only: bool = False,
    lock_timeout: float = 10.0,
    row_cache_mb: int | None = None,
    pool_size: int | None = None,
) -> Storage:
    """Open the store a URL names with the backend that takes it (see ``backends``).

    Args:
        url: a DuckDB file path, ``duckdb:///path``, ``:memory:`` or ``postgresql://...``
            (or a URL of a registered backend).
        read_only: open without write access.
        lock_timeout: seconds to wait for a file another process holds (DuckDB).
        row_cache_mb: chunk rows kept in memory (DuckDB); None for the default.
        pool_size: connections the store may hold at once (PostgreSQL); None for the default.

    Raises:
        ConfigError: no backend takes the URL.
        DatabaseLocked: another process holds the DuckDB file past ``lock_timeout``.
        BackendError: the store cannot be opened.
    """
    opener = OPENERS[backend_for(url).name]
    return opener(
        url,
        read_only=read_only,
        lock_timeout=lock_timeout,
        row_cache_mb=row_cache_mb,
        pool_size=pool_size,
    )
