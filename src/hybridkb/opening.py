"""``connect``: open a knowledge base, or reach the process that holds its file.

Where the backend admits one writing process at a time (its declared
``concurrent_writers`` is False: DuckDB), a process that finds the file held by an
owner gets a client of that owner instead of waiting for the lock. The process that
opens the file for writing serves it to the others only when it asks to
(``serve=True``: the CLI, ``hybridkb mcp`` and ``watch``, which own their process and
its signals); a library's ``connect`` opens no socket, starts no thread and installs
no signal handler. ``HYBRIDKB_SERVE`` overrides both ways (``false`` also turns off
reaching an owner: others wait for the lock). ``:memory:``, read-only opens with no
owner and backends that let every process write (Postgres) open directly.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from .errors import DatabaseLocked
from .kb import KnowledgeBase
from .local import LocalEngine
from .settings import Settings, load_settings, with_overrides
from .storage import open_storage
from .storage.backends import check_store_url, served_file

__all__ = ["connect", "connect_server"]

_POLL_SECONDS = 0.2
_READERS_WAIT_SECONDS = 2.0


def connect_server(settings: Settings, *, read_only: bool) -> KnowledgeBase:
    """The knowledge base of a long-lived server (``hybridkb mcp``), which serves its file
    and offers only the tools that read when ``read_only``.

    A DuckDB file held read-only for a server's whole life would lock every writer out
    (a terminal's ``hybridkb add`` would wait out the lock while the assistant runs), so
    a read-only server holds the file for writing wherever this user may write it, and
    serves those writers like any owner; only its tools are read-only. If readers hold
    the file (a read-only opener serves nobody), it reads beside them instead.
    """
    if not read_only:
        return connect(settings=settings, serve=True)
    if not _may_write(settings):
        return connect(settings=settings, read_only=True, serve=True)
    try:
        # Readers never serve, so waiting the whole lock timeout for them is no use; a
        # short wait still lets a starting owner publish its endpoint, or a search end.
        waited = min(settings.lock_timeout, _READERS_WAIT_SECONDS)
        return connect(settings=settings, lock_timeout=waited, serve=True)
    except DatabaseLocked:
        return connect(settings=settings, read_only=True, serve=True)


def _may_write(settings: Settings) -> bool:
    """A served file (or its folder, for a new one) this user may write; DuckDB writes a
    WAL beside it. Postgres and ``:memory:`` have no one to serve."""
    path = served_file(settings.db)
    if path is None or settings.serve is False:
        return False
    file = Path(path)
    return os.access(file.parent, os.W_OK) and (not file.exists() or os.access(file, os.W_OK))


def connect(
    db: str | Path | None = None,
    *,
    workspace: str | None = None,
    settings: Settings | None = None,
    read_only: bool = False,
    serve: bool = False,
    **overrides: Any,
) -> KnowledgeBase:
    """Open (or create) a knowledge base.

    If another process holds the DuckDB file and serves it, the knowledge base returned
    sends every call to that process (same results and errors), and takes the file over
    if that process exits.

    Args:
        db: DuckDB file path, ``":memory:"``, ``duckdb:///path`` or ``postgresql://...``;
            default from ``HYBRIDKB_DB``.
        workspace: workspace name; default from ``HYBRIDKB_WORKSPACE`` (``default``).
        settings: a ready Settings object (else read from the environment and `.env`).
        read_only: open without write access (DuckDB: can run beside other readers).
        serve: while this process holds the DuckDB file for writing, serve it to other
            processes (a listening socket and its thread until ``close``, and a SIGTERM
            handler that removes the endpoint where the program has none). For programs
            that own their process (the CLI and ``hybridkb mcp`` ask); ``HYBRIDKB_SERVE``
            overrides it.
        **overrides: any Settings field, e.g. ``model="fake"`` (an unknown name or a bad
            value raises ConfigError, also when given with ``settings=``).
    """
    if settings is None:
        base = load_settings(**overrides)
    else:
        base = with_overrides(settings, **overrides) if overrides else settings
    if db is not None or workspace is not None:
        base = with_overrides(base, db=None if db is None else str(db), workspace=workspace)
    check_store_url(base.db)  # before the endpoint lookup makes anything
    path = served_file(base.db)  # None: every process opens the store itself
    if path is None or base.serve is False:
        return KnowledgeBase(_open(base, base.db, read_only=read_only, timeout=base.lock_timeout))
    serving = serve if base.serve is None else base.serve
    from .serve.endpoint import live_endpoint

    deadline = time.monotonic() + base.lock_timeout
    while True:
        endpoint = live_endpoint(path)
        if endpoint is not None:
            # Imported only here: the owner engine brings the wire codec and every result
            # type, which a read with no owner (a cold search) never needs.
            from .serve.owner import OwnerEngine

            door = OwnerEngine(base, path, endpoint, read_only=read_only, serve=serving)
            return KnowledgeBase(door)
        try:
            engine = _open(base, path, read_only=read_only, timeout=_POLL_SECONDS)
        except DatabaseLocked as locked:
            # Held, with no endpoint yet (the owner is starting, or does not serve): ask
            # again until the lock timeout, as a plain open would have waited.
            if time.monotonic() > deadline:
                raise locked.after(base.lock_timeout) from None
            continue
        if serving and not read_only:
            from .serve.server import serve_owned

            serve_owned(engine, path)  # closes the engine if it cannot serve
        return KnowledgeBase(engine)


def _open(base: Settings, url: str, *, read_only: bool, timeout: float) -> LocalEngine:
    storage = open_storage(
        url,
        read_only=read_only,
        lock_timeout=timeout,
        row_cache_mb=base.row_cache_mb,
        pool_size=base.pg_pool_size,
    )
    return LocalEngine(storage, base)
