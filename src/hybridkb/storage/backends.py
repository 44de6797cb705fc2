"""Which backend a store URL names, and what it declares before anything is opened.

Opening asks a :class:`Backend` questions it must answer before the store is open: may
several processes write at once (``concurrent_writers``), and if not, which file does
the one writing process hold (the file it then serves to the others). A backend is
imported only when a store of it is opened, so a process that reaches an owner never
loads a backend it does not use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import ConfigError
from .urls import SUPPORTED, is_postgres_url, redact_url, url_scheme

if TYPE_CHECKING:
    from .base import Storage


class Opener(Protocol):
    """Opens a store of one backend from its URL."""

    def __call__(
        self, url: str, *, read_only: bool, lock_timeout: float, row_cache_mb: int | None
    ) -> Storage:
        """Open the store ``url`` names (``lock_timeout``, ``row_cache_mb``: where the
        backend has a file lock or a row cache; None for the default cache)."""
        ...


@dataclass(frozen=True)
class Backend:
    """A storage backend as opening sees it: the URLs it takes and its declarations.

    Attributes:
        name: the backend's name, as its ``Capabilities.name``.
        accepts: whether a URL names a store of this backend.
        open: opens a store: ``open(url, *, read_only, lock_timeout, row_cache_mb)``.
        concurrent_writers: many processes may write at once (the store's
            ``Capabilities.concurrent_writers`` says the same); if False, one process at a
            time holds the store's file for writing and serves it to the others.
        held_file: the file one writing process holds, for a backend without concurrent
            writers; None where there is none to share (``:memory:``).
    """

    name: str
    accepts: Callable[[str], bool]
    open: Opener
    concurrent_writers: bool
    held_file: Callable[[str], str | None]


def _open_postgres(
    url: str, *, read_only: bool, lock_timeout: float, row_cache_mb: int | None
) -> Storage:
    from .postgres import PostgresStorage

    return PostgresStorage(url, read_only=read_only)


def _open_duckdb(
    url: str, *, read_only: bool, lock_timeout: float, row_cache_mb: int | None
) -> Storage:
    from .duckdb import DuckDBStorage

    path = duckdb_path(url) or ":memory:"
    if row_cache_mb is None:
        return DuckDBStorage(path, read_only=read_only, lock_timeout=lock_timeout)
    return DuckDBStorage(
        path, read_only=read_only, lock_timeout=lock_timeout, row_cache_bytes=row_cache_mb << 20
    )


def duckdb_path(url: str) -> str | None:
    """The path of a DuckDB URL (``duckdb:///abs/path`` -> ``/abs/path``, a plain path as
    given); None for ``:memory:``."""
    path = url.removeprefix("duckdb://")
    return None if not path or path == ":memory:" else path


def _duckdb_file(url: str) -> str | None:
    path = duckdb_path(url)
    return None if path is None else str(Path(path).expanduser())


def _is_duckdb_url(url: str) -> bool:
    # Any URL without a scheme is a file path (C:\ is a drive, not a scheme).
    return url == ":memory:" or url.startswith("duckdb:") or url_scheme(url) is None


POSTGRES = Backend(
    name="postgres",
    accepts=is_postgres_url,
    open=_open_postgres,
    concurrent_writers=True,
    held_file=lambda url: None,
)
DUCKDB = Backend(
    name="duckdb",
    accepts=_is_duckdb_url,
    open=_open_duckdb,
    concurrent_writers=False,
    held_file=_duckdb_file,
)

# Asked in order: the first backend that accepts a URL opens it.
BACKENDS: list[Backend] = [POSTGRES, DUCKDB]


def register_backend(backend: Backend) -> None:
    """Add a backend, asked before those already known (e.g. a third store, or a test's)."""
    BACKENDS.insert(0, backend)


def backend_for(url: str) -> Backend:
    """The backend of a store URL.

    Raises:
        ConfigError: no backend takes the URL; naming its scheme and the supported forms.
    """
    for backend in BACKENDS:
        if backend.accepts(url):
            return backend
    scheme = url_scheme(url) or url[:20]
    raise ConfigError(
        f"{redact_url(url)[:200]}: '{scheme}:' is not a store hybridkb opens; "
        f"give --db (or HYBRIDKB_DB) {SUPPORTED}"
    )


def check_store_url(url: str) -> None:
    """Refuse a URL of a store no backend opens, before anything is opened or created.

    Raises:
        ConfigError: naming the scheme and the forms that are supported.
    """
    backend_for(url)


def served_file(url: str) -> str | None:
    """The file whose writing process serves the other processes, or None where nobody
    serves: the backend lets every process write (``concurrent_writers``), or the store
    has no file (``:memory:``)."""
    backend = backend_for(url)
    return None if backend.concurrent_writers else backend.held_file(url)
