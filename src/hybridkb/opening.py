"""``connect``: open a knowledge base, or reach the process that holds its file.

Where the backend admits one writing process at a time (its ``concurrent_writers`` is
False: DuckDB), the first process to open the file for writing holds it and serves it
(hybridkb.serve); every other process gets a client of that owner instead of waiting
for the lock. ``:memory:``, read-only opens with no owner and backends that let every
process write (Postgres) open directly.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from .api import KnowledgeBaseAPI
from .errors import DatabaseLocked
from .kb import KnowledgeBase
from .settings import Settings, load_settings, with_overrides
from .storage import open_storage
from .storage.backends import check_store_url, served_file

__all__ = ["connect", "connect_server"]

_POLL_SECONDS = 0.2
_READERS_WAIT_SECONDS = 2.0


def connect_server(settings: Settings, *, read_only: bool) -> KnowledgeBaseAPI:
    """The knowledge base of a long-lived server (``hybridkb mcp``), which offers only
    the tools that read when ``read_only``.

    A DuckDB file held read-only for a server's whole life would lock every writer out
    (a terminal's ``hybridkb add`` would wait out the lock while the assistant runs), so
    a read-only server holds the file for writing wherever this user may write it, and
    serves those writers like any owner; only its tools are read-only. If readers hold
    the file (a read-only opener serves nobody), it reads beside them instead.
    """
    if not read_only:
        return connect(settings=settings)
    if not _may_write(settings):
        return connect(settings=settings, read_only=True)
    try:
        # Readers never serve, so waiting the whole lock timeout for them is no use; a
        # short wait still lets a starting owner publish its endpoint, or a search end.
        waited = min(settings.lock_timeout, _READERS_WAIT_SECONDS)
        return connect(settings=settings, lock_timeout=waited)
    except DatabaseLocked:
        return connect(settings=settings, read_only=True)


def _may_write(settings: Settings) -> bool:
    """A served file (or its folder, for a new one) this user may write; DuckDB writes a
    WAL beside it. Postgres and ``:memory:`` have no one to serve."""
    path = served_file(settings.db)
    if path is None or not settings.serve:
        return False
    file = Path(path)
    return os.access(file.parent, os.W_OK) and (not file.exists() or os.access(file, os.W_OK))


def connect(
    db: str | Path | None = None,
    *,
    workspace: str | None = None,
    settings: Settings | None = None,
    read_only: bool = False,
    **overrides: Any,
) -> KnowledgeBaseAPI:
    """Open (or create) a knowledge base.

    If another process holds the DuckDB file, the knowledge base returned sends every
    call to that process (same results and errors), and takes the file over if that
    process exits. The process that opens the file for writing serves it to others
    (``HYBRIDKB_SERVE=false`` turns that off and brings back waiting for the lock).

    Args:
        db: DuckDB file path, ``":memory:"``, ``duckdb:///path`` or ``postgresql://...``;
            default from ``HYBRIDKB_DB``.
        workspace: workspace name; default from ``HYBRIDKB_WORKSPACE`` (``default``).
        settings: a ready Settings object (else read from the environment and `.env`).
        read_only: open without write access (DuckDB: can run beside other readers).
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
    if path is None or not base.serve:
        return _open(base, base.db, read_only=read_only, lock_timeout=base.lock_timeout)
    from .serve.endpoint import live_endpoint

    deadline = time.monotonic() + base.lock_timeout
    while True:
        endpoint = live_endpoint(path)
        if endpoint is not None:
            # Imported only here and for serving below: the client brings the wire codec
            # and every result type, which a read with no owner (a cold search) never needs.
            from .serve.client import RemoteKnowledgeBase

            return RemoteKnowledgeBase(base, path, endpoint, read_only=read_only)
        try:
            kb = _open(base, path, read_only=read_only, lock_timeout=_POLL_SECONDS)
        except DatabaseLocked as locked:
            # Held, with no endpoint yet (the owner is starting, or does not serve): ask
            # again until the lock timeout, as a plain open would have waited.
            if time.monotonic() > deadline:
                raise locked.after(base.lock_timeout) from None
            continue
        if not read_only:
            from .serve.client import serve_owned

            serve_owned(kb, path)
        return kb


def _open(base: Settings, url: str, *, read_only: bool, lock_timeout: float) -> KnowledgeBase:
    storage = open_storage(
        url, read_only=read_only, lock_timeout=lock_timeout, row_cache_mb=base.row_cache_mb
    )
    return KnowledgeBase(storage, base)
