"""The rows of search hits for the embedded backend: from the row cache, a rows file, or SQL.

A collection searched twice has its rows read once in a background thread: into memory
(row_cache.py, packed_rows.py) while they fit the row-cache budget, else into a rows
file beside the indexes (row_file.py), which later processes open at once while it
vouches for the tables. Until then, and for rows written since, hits are read through
SQL by key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import suppress
from typing import Any

from ...errors import KBError
from ..base import ChunkRecord, CollectionRecord
from ..records import chunk_record
from .block_cache import trim_table_blocks
from .engine import Engine
from .packed_rows import PackedRows
from .row_cache import PACKED_ROW_OVERHEAD_BYTES, RowCache
from .row_file import RowFile, available, row_file_path, write_row_file
from .rows import CHUNK_COLUMNS, count, key_list_sql
from .schema import table_names

# DuckDB's cached table blocks kept after a rows file was written from them.
KEEP_TABLE_BLOCKS = 16 << 20

# What a warm-up hands every row to (rows of CHUNK_COLUMNS, as DuckDB returns them).
Collect = Callable[[Iterator[Sequence[Any]]], "PackedRows | RowFile | None"]


class HitRows:
    """Hit rows of one open file's collections (``rows``: its row cache)."""

    def __init__(self, engine: Engine, rows: RowCache) -> None:
        self.engine = engine
        self.rows = rows

    def fetch_chunks(self, coll: CollectionRecord, keys: Sequence[int]) -> dict[int, ChunkRecord]:
        """Hit rows by key: from memory or the rows file once warm, else SQL."""
        if not len(keys):
            return {}
        t = table_names(coll.id)
        # Under the connection lock (a warm-up starts its read here).
        with self.engine.lock:
            return self.rows.get(
                coll.id,
                [int(k) for k in keys],
                lambda wanted: self._chunks_by_key(t, wanted),
                lambda collect: self._warm_rows(
                    coll, t, lambda rows: collect(chunk_record(r) for r in rows)
                ),
                lambda: self._rows_bytes(t),
                lambda: self._warm_file(coll, t),
            )

    def _chunks_by_key(self, t: dict[str, str], wanted: Sequence[int]) -> list[ChunkRecord]:
        in_keys, params = key_list_sql(wanted)
        rows = self.engine.query(
            f"SELECT {CHUNK_COLUMNS} FROM {t['chunks']} WHERE key IN {in_keys}", params
        )
        return [chunk_record(r) for r in rows]

    def _warm_file(self, coll: CollectionRecord, t: dict[str, str]) -> None:
        """Rows too many for memory: the collection's rows file if it vouches for the
        tables as they are, else one written by a warm-up (never by a read-only process)."""
        engine = self.engine
        folder = engine.snapshot_dir
        record = engine.record_by_id(coll.id)
        if folder is None or record is None or not available():
            return
        chunks = count(engine.con, t["chunks"])
        path = row_file_path(folder, coll.id)
        found = RowFile.open(path, generation=record.generation, chunks=chunks)
        if found is not None:
            self.rows.publish(coll.id, found, self.rows.epoch(coll.id))
            return
        if engine.read_only:
            return
        try:
            folder = engine.snapshot_folder()
        except (OSError, KBError):  # not private: the hits stay read through SQL
            return

        def collect(rows: Iterator[Sequence[Any]]) -> RowFile | None:
            return write_row_file(
                folder,
                coll.id,
                rows,
                generation=record.generation,
                chunks=chunks,
                stopped=lambda: self.rows.stopping,
            )

        self._warm_rows(coll, t, collect)

    def _warm_rows(self, coll: CollectionRecord, t: dict[str, str], collect: Collect) -> None:
        """Read every chunk row in a background thread and publish them to the row cache.

        The read starts under the lock, so its snapshot and the noted generation and
        epoch agree; rows are published only if neither moved (no write meanwhile)."""
        storage = self.engine
        record = storage.record_by_id(coll.id)
        if record is None:
            return
        generation, epoch = record.generation, self.rows.epoch(coll.id)
        cursor = storage.con.cursor()  # a connection of its own, for the thread
        result = cursor.execute(f"SELECT {CHUNK_COLUMNS} FROM {t['chunks']}")

        def every() -> Iterator[Sequence[Any]]:
            while batch := result.fetchmany(4096):
                yield from batch

        def run() -> None:
            try:
                rows = collect(every())
            except Exception:  # noqa: BLE001 - housekeeping thread: any failure (e.g. the
                rows = None  # connection closed under it) just leaves the rows uncached
            finally:
                with suppress(Exception):
                    cursor.close()
            if rows is not None:
                self._publish_unless_written(coll.id, rows, generation, epoch)

        self.rows.start(run)

    def _publish_unless_written(
        self, collection_id: int, rows: PackedRows | RowFile, generation: int, epoch: int
    ) -> None:
        """Install warmed rows if the collection is still at ``generation``; after a rows
        file, drop the table blocks its writing left in DuckDB's cache."""
        storage = self.engine
        # stop() may wait for this thread while its caller holds the lock.
        while not storage.lock.acquire(timeout=0.05):
            if self.rows.stopping:
                return
        try:
            current = storage.record_by_id(collection_id)
            if current is not None and current.generation == generation:
                self.rows.publish(collection_id, rows, epoch)
            if isinstance(rows, RowFile) and not storage.closed:
                with suppress(Exception):  # an optimisation: the cache stays as it was
                    trim_table_blocks(storage.con, KEEP_TABLE_BLOCKS)
        finally:
            storage.lock.release()

    def _rows_bytes(self, t: dict[str, str]) -> int:
        """Estimated bytes of the collection's rows in the cache: offsets are integer
        columns (cheap to scan); text length would read every row."""
        (n, chars) = self.engine.query(
            f"SELECT count(*), coalesce(sum(char_end - char_start), 0) FROM {t['chunks']}"
        )[0]
        return int(chars) + int(n) * PACKED_ROW_OVERHEAD_BYTES
