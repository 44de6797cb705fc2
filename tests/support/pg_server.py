"""A throwaway PostgreSQL 18 + pgvector server for tests and benchmarks.

The server itself is hybridkb's bundled one (``hybridkb.pgserver.server``, the same code as
``hybridkb postgres start``); ``HYBRIDKB_TEST_POSTGRES_URL`` points tests at an existing
server instead.

Example:
    >>> srv = start_server("/tmp/kbpg")          # doctest: +SKIP
    >>> url = create_database(srv.url, "kb1")    # doctest: +SKIP
    >>> hybridkb.connect(url)                    # doctest: +SKIP
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import hybridkb
from hybridkb.pgserver.server import PgServer, create_database, database_url, drop_database
from hybridkb.pgserver.server import start_server as start_bundled

__all__ = [
    "ENV_URL",
    "PgServer",
    "create_database",
    "database_url",
    "drop_database",
    "bundled_env",
    "cli_env",
    "hybridkb_cli",
    "kb_template",
    "server_parent",
    "shared_server",
    "start_server",
]

ENV_URL = "HYBRIDKB_TEST_POSTGRES_URL"
# The account that runs test servers when the tests run as root; None otherwise.
RUN_AS = os.environ.get("HYBRIDKB_TEST_POSTGRES_RUN_AS", "nobody") if os.geteuid() == 0 else None


def start_server(folder: str | Path | None = None, *, keep: bool = False) -> PgServer:
    """The bundled server in ``folder`` (a new temporary one by default), run as
    :data:`RUN_AS` when the tests run as root."""
    return start_bundled(folder, keep=keep, run_as=RUN_AS)


@contextmanager
def server_parent() -> Iterator[Path]:
    """A new folder to hold a server's data folder, deleted afterwards: as root, one that
    :data:`RUN_AS` may enter (0711: not list) below the temp folder (pytest's are 0700);
    else a private temp folder."""
    folder = Path(tempfile.mkdtemp(prefix="hkbpg-parent-"))
    if RUN_AS is not None:
        folder.chmod(0o711)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def bundled_env(parent: Path) -> dict[str, str]:
    """As root, what makes ``hybridkb postgres start`` run the server as :data:`RUN_AS` in
    a data folder below ``parent`` (see :func:`server_parent`); nothing otherwise."""
    if RUN_AS is None:
        return {}
    return {"HYBRIDKB_POSTGRES_RUN_AS": RUN_AS, "HYBRIDKB_POSTGRES_DIR": str(parent / "pg")}


def cli_env(cwd: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``python -m hybridkb`` child: no HYBRIDKB_* of ours, these
    sources, the fake model, a cache in ``cwd``, as root ``HYBRIDKB_POSTGRES_RUN_AS`` =
    :data:`RUN_AS`; ``extra`` adds to that (``HYBRIDKB_DB=...``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDKB_")}
    env.update(HYBRIDKB_MODEL="fake", HYBRIDKB_CACHE_DIR=str(cwd / "cache"), HF_HUB_OFFLINE="1")
    if RUN_AS is not None:
        env["HYBRIDKB_POSTGRES_RUN_AS"] = RUN_AS
    src = str(Path(hybridkb.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def hybridkb_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m hybridkb ARGS`` in :func:`cli_env` (``env`` adds to it)."""
    return subprocess.run(
        [sys.executable, "-m", "hybridkb", *args],
        cwd=cwd,
        env=cli_env(cwd, **(env or {})),
        capture_output=True,
        text=True,
        timeout=180,
    )


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
