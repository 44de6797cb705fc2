"""The open DuckDB file: its connection, the lock that serialises it, and the catalog cache.

Every module of this package works through one :class:`Engine`: the storage class,
the in-memory derived state (``memory.py``), the streamed writer (``stream.py``) and
maintenance (``maintenance.py``). The catalog is read once and dropped by every
transaction: DuckDB admits one writer per file and no writer beside readers, so
nobody else changes it while it is open here.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from ...locations import hold_file_mode
from ..base import CollectionRecord, CollectionStats, WriteEvent, WriteHook
from ..records import collection_record
from .beside import SNAPSHOTS, beside, made_beside
from .connection import checked_spill, open_duckdb, rollback
from .rows import TEXT_TIME

T = TypeVar("T")

_CATALOG_BASE = (  # records.collection_record's order; times as text (see rows.TEXT_TIME)
    f"id, workspace, name, model, dim, chunking, language, {TEXT_TIME.format('created_at')},"
    f" {TEXT_TIME.format('updated_at')}, generation"
)
CATALOG_COLUMNS = f"{_CATALOG_BASE}, embedding"
# A file of schema 1-3 opened read-only (so not migrated) has no embedding column: every
# collection in it was embedded the way a missing recipe (NULL) means.
CATALOG_COLUMNS_BEFORE_RECIPES = f"{_CATALOG_BASE}, NULL AS embedding"


def _nothing_to_release() -> None:
    """What a read-only engine releases: it held no file mode (it creates no file)."""


class Engine:
    """One open DuckDB file; ``con`` is used only under ``lock``."""

    def __init__(self, path: str, *, read_only: bool, lock_timeout: float) -> None:
        self.path = path
        self.read_only = read_only
        self.persistent = path != ":memory:"
        # DuckDB makes the file, and the WAL after each checkpoint, as the umask allows.
        self._release_mode: Callable[[], None] = (
            _nothing_to_release if read_only else hold_file_mode(path)
        )
        try:
            self.spill, remove_spill = checked_spill(path)
        except BaseException:
            self._release_mode()
            raise
        # Removed at close, or when the engine is collected (or the process exits) unclosed.
        self._spill_done = weakref.finalize(self, remove_spill)
        try:
            self.con = open_duckdb(
                path, read_only=read_only, lock_timeout=lock_timeout, temp_directory=self.spill
            )
            self.settle()
        except BaseException:
            self._spill_done()
            self._release_mode()
            raise
        self.lock = threading.RLock()
        self.closed = False
        self.hooks: list[WriteHook] = []
        self._catalog: dict[int, CollectionRecord] | None = None
        self._catalog_columns: str | None = None if read_only else CATALOG_COLUMNS
        self.stats: dict[int, CollectionStats] = {}  # dropped with the catalog

    @property
    def snapshot_dir(self) -> Path | None:
        """Where derived indexes are persisted (None for :memory:); made by
        :meth:`snapshot_folder`."""
        return beside(self.path, SNAPSHOTS)

    def snapshot_folder(self) -> Path:
        """The snapshot folder, made private where missing (see ``beside.py``).

        Raises:
            NotPrivate: it, or a folder above it, does not pass.
        """
        return made_beside(self.path, SNAPSHOTS)

    def reopen(self, between: Callable[[], object] | None = None) -> None:
        """Close the file, run ``between()`` (e.g. swap in a compacted copy), open it again
        (also when ``between()`` fails: the file is then as it was)."""
        with self.lock:
            self.con.close()
            try:
                if between is not None:
                    between()
            finally:
                if self.persistent:  # the same folders as at the first open, checked again
                    checked_spill(self.path)
                self.con = open_duckdb(
                    self.path, read_only=self.read_only, lock_timeout=0, temp_directory=self.spill
                )
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

    def _read_columns(self) -> str:
        """The catalog's columns in a file opened read-only, of whichever schema version
        (a writer migrates the file when it opens it: storage/duckdb/upgrade.py)."""
        found = self.con.execute(
            "SELECT count(*) FROM duckdb_columns()"
            " WHERE table_name = 'hybridkb_collections' AND column_name = 'embedding'"
        ).fetchone()
        return CATALOG_COLUMNS if found and found[0] else CATALOG_COLUMNS_BEFORE_RECIPES

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.con.close()
            self._spill_done()
            self._release_mode()

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
            except BaseException as exc:
                rollback(self.con, exc)
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
                if self._catalog_columns is None:
                    self._catalog_columns = self._read_columns()
                rows = self.con.execute(
                    f"SELECT {self._catalog_columns} FROM hybridkb_collections"
                    " ORDER BY workspace, name"
                ).fetchall()
                self._catalog = {int(r[0]): collection_record(r) for r in rows}
            return self._catalog

    def record_by_id(self, collection_id: int) -> CollectionRecord | None:
        return self.catalog().get(collection_id)
