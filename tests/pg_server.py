"""A throwaway PostgreSQL 18 + pgvector server for tests and benchmarks.

The server itself is hybridkb's bundled one (``hybridkb.pgserver``, the same code as
``hybridkb postgres start``); ``HYBRIDKB_TEST_POSTGRES_URL`` points tests at an existing
server instead.

Example:
    >>> srv = start_server("/tmp/kbpg")          # doctest: +SKIP
    >>> url = create_database(srv.url, "kb1")    # doctest: +SKIP
    >>> hybridkb.connect(url)                    # doctest: +SKIP
"""

from __future__ import annotations

import os
import threading

from hybridkb.pgserver import PgServer, create_database, database_url, drop_database, start_server

__all__ = [
    "ENV_URL",
    "PgServer",
    "create_database",
    "database_url",
    "drop_database",
    "kb_template",
    "shared_server",
    "start_server",
]

ENV_URL = "HYBRIDKB_TEST_POSTGRES_URL"


def kb_template(admin_url: str, name: str = "hkb_template") -> str:
    """A migrated, empty knowledge-base database to copy per test (saves the migration each time)."""
    from hybridkb.storage.postgres import PostgresStorage

    url = create_database(admin_url, name)
    PostgresStorage(url).close()
    return name


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
