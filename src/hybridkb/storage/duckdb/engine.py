"""The open DuckDB file: its connection, the lock that serialises it, and the catalog cache.

Every module of this package works through one :class:`Engine`: the storage class,
the in-memory derived state (``memory.py``), the streamed writer (``stream.py``) and
maintenance (``maintenance.py``). The catalog is read once and dropped by every
transaction: DuckDB admits one writer per file and no writer beside readers, so
nobody else changes it while it is open here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from ..base import CollectionRecord, CollectionStats, WriteEvent, WriteHook
from ..records import collection_record
from .connection import open_duckdb
from .rows import TEXT_TIME

T = TypeVar("T")

CATALOG_COLUMNS = (  # records.collection_record's order; times as text (see rows.TEXT_TIME)
    f"id, workspace, name, model, dim, chunking, language, {TEXT_TIME.format('created_at')},"
    f" {TEXT_TIME.format('updated_at')}, generation, embedding"
)


class Engine:
    """One open DuckDB file; ``con`` is used only under ``lock``."""

    def __init__(self, path: str, *, read_only: bool, lock_timeout: float) -> None:
        self.path = path
        self.read_only = read_only
        self.persistent = path != ":memory:"
        self.con = open_duckdb(path, read_only=read_only, lock_timeout=lock_timeout)
        self.settle()
        self.lock = threading.RLock()
        self.closed = False
        self.hooks: list[WriteHook] = []
        self._catalog: dict[int, CollectionRecord] | None = None
        self.stats: dict[int, CollectionStats] = {}  # dropped with the catalog

    @property
    def snapshot_dir(self) -> Path | None:
        """Where derived indexes are persisted (None for :memory:)."""
        if not self.persistent:
            return None
        return Path(self.path).expanduser().resolve().with_name(Path(self.path).name + ".hkbidx")

    def reopen(self, between: Callable[[], object] | None = None) -> None:
        """Close the file, run ``between()`` (e.g. swap in a compacted copy), open it again."""
        with self.lock:
            self.con.close()
            if between is not None:
                between()
            self.con = open_duckdb(self.path, read_only=self.read_only, lock_timeout=0)
            self.settle()
            self.forget_catalog()

    def settle(self) -> None:
        """Write what a dead writer left in the WAL into the file, through bound indexes.

        Opening replays the WAL into the key indexes lazily; if nothing touches them
        before the checkpoint DuckDB 1.5.5 runs at close, that checkpoint writes them
        without the replayed rows (duckdb/duckdb#23848), and the next delete of those
        rows fails FATAL and invalidates the database. An explicit CHECKPOINT binds every
        index first; on a file that was closed cleanly it costs ~0.5 ms.
        """
        if self.persistent and not self.read_only:
            self.con.execute("CHECKPOINT")

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.con.close()

    # -- statements -----------------------------------------------------------------

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run a read statement under the lock."""
        with self.lock:
            return self.con.execute(sql, params or []).fetchall()

    def transaction(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """Run ``fn(con)`` in one transaction (all or nothing) under the lock."""
        with self.lock:
            self.forget_catalog()
            self.con.execute("BEGIN TRANSACTION")
            try:
                result = fn(self.con)
                self.con.execute("COMMIT")
            except BaseException:
                self.con.execute("ROLLBACK")
                raise
            finally:
                self.forget_catalog()
            return result

    def emit(self, con: duckdb.DuckDBPyConnection, event: WriteEvent) -> None:
        """Run the write hooks inside the writing transaction."""
        for hook in self.hooks:
            hook(con, event)

    # -- catalog --------------------------------------------------------------------

    def forget_catalog(self) -> None:
        self._catalog = None
        self.stats = {}

    def catalog(self) -> dict[int, CollectionRecord]:
        """Every collection by id (cached until the next transaction)."""
        with self.lock:
            if self._catalog is None:
                rows = self.con.execute(
                    f"SELECT {CATALOG_COLUMNS} FROM hybridkb_collections ORDER BY workspace, name"
                ).fetchall()
                self._catalog = {int(r[0]): collection_record(r) for r in rows}
            return self._catalog

    def record_by_id(self, collection_id: int) -> CollectionRecord | None:
        return self.catalog().get(collection_id)
