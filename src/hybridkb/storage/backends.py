"""Which backend a store URL names, and what it declares before anything is opened.

Opening asks a :class:`Backend` questions it must answer before the store is open: may
several processes write at once (``concurrent_writers``), and if not, which file does
the one writing process hold (the file it then serves to the others). Everything that
reads a store URL asks here (opening, the CLI's readers, the folder check, a copy's
destination), never the look of the URL itself.

This module is declarations only and imports no backend: how a store of a backend is
opened is :func:`hybridkb.storage.open_storage`'s, which imports the backend when a
store of it is opened (a backend's modules may use the declarations: the folder check
of DuckDB's files asks :func:`named_file`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..locations import ensure_db_folder
from .urls import SUPPORTED, is_postgres_url, redact_url, url_scheme


@dataclass(frozen=True)
class Backend:
    """A storage backend as opening sees it: the URLs it takes and its declarations.

    Attributes:
        name: the backend's name, as its ``Capabilities.name``; its opener is registered
            under it (:func:`hybridkb.storage.register_backend`).
        accepts: whether a URL names a store of this backend.
        concurrent_writers: many processes may write at once; if False, one process at a
            time holds the store's file for writing and serves it to the others.
        held_file: the file a store URL names (``~`` expanded), which one writing process
            holds where there are no concurrent writers; None where there is no file
            (a database server, ``:memory:``).
        access_by_role: whether writing is up to the role a store is opened as (a
            database server's grants: a role may only read), so known only once open; a
            server that lists its tools before opening (stdio MCP) lists them after.
    """

    name: str
    accepts: Callable[[str], bool]
    concurrent_writers: bool
    held_file: Callable[[str], str | None]
    access_by_role: bool = False


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
    concurrent_writers=True,
    held_file=lambda url: None,
    access_by_role=True,
)
DUCKDB = Backend(
    name="duckdb",
    accepts=_is_duckdb_url,
    concurrent_writers=False,
    held_file=_duckdb_file,
)

# Asked in order: the first backend that accepts a URL opens it.
BACKENDS: list[Backend] = [POSTGRES, DUCKDB]


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


def named_file(url: str) -> str | None:
    """The file a store URL names (``~`` expanded), or None: a database server's URL,
    ``:memory:``, or a URL no backend takes (opening refuses that one)."""
    for backend in BACKENDS:
        if backend.accepts(url):
            return backend.held_file(url)
    return None


def absolute_url(url: str) -> str:
    """The store as every process means it: a file made absolute with its links resolved
    (the process serving it runs in another folder), any other URL as given."""
    file = named_file(url)
    return url if file is None else os.path.realpath(file)


def _file_of(db: str) -> Path | None:
    """The file ``db`` names (its backend's declaration), or None: a database server,
    ``:memory:``."""
    file = named_file(db)
    return None if file is None else Path(file).absolute()


def check_db_folder(db: str, named_by: str = "--db or HYBRIDKB_DB") -> None:
    """``ensure_db_folder`` for a file ``db`` names, before anything else starts (a server
    that cannot open its file should say so at once, not at its first tool call);
    ``named_by`` is where the user typed ``db``, for the fix in the message.

    Raises:
        ConfigError: a DuckDB file in a folder that does not exist.
    """
    if (file := _file_of(db)) is not None:
        ensure_db_folder(str(file), named_by)


def shown_db(db: str) -> str:
    """The knowledge base ``db`` names, for people: a DuckDB file's absolute path, a
    Postgres URL without its password."""
    if not DUCKDB.accepts(db):
        return redact_url(db)
    file = _file_of(db)
    return (
        ":memory: (kept in memory only, gone when the process ends)" if file is None else str(file)
    )
