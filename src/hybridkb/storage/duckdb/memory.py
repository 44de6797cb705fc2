"""What a DuckDB process keeps in memory beside the file, and how it stays true.

DuckDB admits one writer per file and no writer beside readers, so nobody else can
change an open file: this process may keep the derived search indexes, a
collection's chunk rows and dictionary-encoded filter columns in memory, each
dropped or updated by the writes it could go stale on (all of them go through
:meth:`Derived.mirror` or :meth:`Derived.forget` right after the commit).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import KBError
from ...filters import Filter, to_sql
from ...index.derived import CollectionIndexes, build_indexes, load_snapshot, save_snapshot
from ..base import ChunkRecord, CollectionRecord
from ..records import chunk_record
from .engine import Engine
from .filter_columns import FilterColumns, field_query
from .row_cache import ROW_OVERHEAD_BYTES, RowCache
from .rows import CHUNK_COLUMNS, count, key_list_sql
from .schema import table_names

if TYPE_CHECKING:
    import pyarrow as pa


class Derived:
    """Indexes, cached rows and filter columns of the collections of one open file."""

    def __init__(self, engine: Engine, row_cache_bytes: int) -> None:
        self.engine = engine
        self.indexes: dict[int, CollectionIndexes] = {}
        self.rows = RowCache(row_cache_bytes)
        self.filters: dict[int, FilterColumns] = {}

    # -- lifecycle ------------------------------------------------------------------

    def save(self) -> None:
        """Persist the indexes that changed since they were last saved."""
        folder = self.engine.snapshot_dir
        if folder is None or self.engine.read_only:
            return
        with self.engine.lock:
            for cid, idx in self.indexes.items():
                if idx.saved_generation != idx.generation:
                    with suppress(OSError, KBError):  # an optimisation: the next open rebuilds
                        save_snapshot(folder, cid, idx)

    def clear(self) -> None:
        self.indexes.clear()
        self.rows.forget()
        self.filters.clear()

    def mirror(
        self,
        coll: CollectionRecord,
        *,
        removed: Sequence[int],
        added_keys: Sequence[int] | np.ndarray,
        added_terms: Sequence[Sequence[str]],
        added_vectors: np.ndarray,
        generation: int,
    ) -> None:
        """Bring memory to a committed write (call under the storage lock's protection)."""
        with self.engine.lock:
            self.rows.forget_keys(coll.id, removed)
            self.filters.pop(coll.id, None)
            found = self.indexes.get(coll.id)
            if found is not None:
                found.apply(
                    removed=removed,
                    added_keys=added_keys,  # type: ignore[arg-type]
                    added_terms=added_terms,
                    added_vectors=added_vectors,
                    generation=generation,
                )

    def forget(self, collection_id: int) -> None:
        """Drop what memory holds for a collection (after a bulk rewrite or a drop)."""
        with self.engine.lock:
            self.indexes.pop(collection_id, None)
            self.rows.forget(collection_id)
            self.filters.pop(collection_id, None)

    # -- indexes --------------------------------------------------------------------

    def load_rows(self, coll: CollectionRecord) -> tuple[np.ndarray, pa.Array, np.ndarray]:
        """Keys, terms (an Arrow list<string> column) and float32 vectors, in key order.

        Columnar on purpose: one Python string per term took 47 s and 13.3 GB at 1M
        chunks; the Arrow column takes ~6 s and goes straight into the keyword index.
        """
        t = table_names(coll.id)
        with self.engine.lock:
            con = self.engine.con
            chunks = con.execute(
                f"SELECT key, terms FROM {t['chunks']} ORDER BY key"
            ).to_arrow_table()
            vec = con.execute(
                f"SELECT key, embedding FROM {t['vectors']} ORDER BY key"
            ).to_arrow_table()
        keys = chunks.column("key").to_numpy()
        terms = chunks.column("terms").combine_chunks()
        vkeys = vec.column("key").to_numpy()
        vectors = np.empty((len(vkeys), coll.dim), dtype=np.float32)
        at = 0
        for part in vec.column("embedding").chunks:  # chunk by chunk: no second full copy
            flat = part.flatten().to_numpy(zero_copy_only=False)
            vectors[at : at + len(part)] = np.asarray(flat, dtype=np.float32).reshape(
                len(part), coll.dim
            )
            at += len(part)
        if not np.array_equal(keys, vkeys):
            # Tables disagree (should not happen inside transactions): index only the pairs.
            common = np.intersect1d(keys, vkeys)
            keep_k = np.isin(keys, common)
            keep_v = np.isin(vkeys, common)
            import pyarrow as pa  # only here: a search from a saved snapshot needs no Arrow

            terms = terms.filter(pa.array(keep_k))
            keys, vectors = keys[keep_k], vectors[keep_v]
        return keys, terms, vectors

    def indexes_for(self, coll: CollectionRecord) -> CollectionIndexes:
        storage = self.engine
        with storage.lock:
            found = self.indexes.get(coll.id)
            if found is not None:
                # This process holds the file, so every change since the load was mirrored.
                return found
            current = storage.record_by_id(coll.id)
            generation = current.generation if current else coll.generation
            folder = storage.snapshot_dir
            found = None
            if folder is not None:
                chunks = count(storage.con, table_names(coll.id)["chunks"])
                found = load_snapshot(folder, coll.id, generation=generation, chunks=chunks)
            if found is None:
                found = build_indexes(coll.dim, generation, lambda: self.load_rows(coll))
                if folder is not None and not storage.read_only:
                    with suppress(OSError, KBError):
                        save_snapshot(folder, coll.id, found)
            self.indexes[coll.id] = found
            return found

    # -- filters --------------------------------------------------------------------

    def allowed(self, coll: CollectionRecord, where: Filter | None) -> np.ndarray | None:
        """Keys of the chunks matching ``where`` (None: no filter)."""
        if where is None:
            return None
        t = table_names(coll.id)
        with self.engine.lock:
            columns = self.filters.get(coll.id)
            if columns is None:
                columns = self.filters[coll.id] = FilterColumns(
                    lambda field: self._filter_field(t, field)
                )
            # In memory when the fields allow (filter_columns.py), else SQL.
            keys = columns.allowed(where)
        if keys is not None:
            return keys
        sql, params = to_sql(where)
        rows = self.engine.query(f"SELECT key FROM {t['chunks']} WHERE {sql}", params)
        return np.asarray([r[0] for r in rows], dtype=np.int64)

    def _filter_field(self, t: dict[str, str], field: str) -> tuple[np.ndarray, pa.Array]:
        sql, params = field_query(t["chunks"], field)
        table = self.engine.con.execute(sql, params).to_arrow_table()
        return table.column("key").to_numpy(), table.column("v")

    # -- rows -----------------------------------------------------------------------

    def fetch_chunks(self, coll: CollectionRecord, keys: Sequence[int]) -> dict[int, ChunkRecord]:
        """Hit rows by key: from memory once the collection's rows are cached, else SQL."""
        if not len(keys):
            return {}
        storage = self.engine
        t = table_names(coll.id)

        def some(wanted: Sequence[int]) -> list[ChunkRecord]:
            in_keys, params = key_list_sql(wanted)
            rows = storage.query(
                f"SELECT {CHUNK_COLUMNS} FROM {t['chunks']} WHERE key IN {in_keys}", params
            )
            return [chunk_record(r) for r in rows]

        def warm(collect: Callable[[Iterator[ChunkRecord]], Any]) -> None:
            # The read starts under the lock, so its snapshot and the noted generation and
            # epoch agree; rows are published only if neither moved (no write meanwhile).
            record = storage.record_by_id(coll.id)
            if record is None:
                return
            generation, epoch = record.generation, self.rows.epoch(coll.id)
            cursor = storage.con.cursor()  # a connection of its own, for the thread
            result = cursor.execute(f"SELECT {CHUNK_COLUMNS} FROM {t['chunks']}")

            def every() -> Iterator[ChunkRecord]:
                while batch := result.fetchmany(4096):
                    yield from (chunk_record(r) for r in batch)

            def run() -> None:
                try:
                    rows = collect(every())
                except Exception:  # noqa: BLE001 - housekeeping thread: any failure (e.g. the
                    rows = None  # connection closed under it) just leaves the rows uncached
                finally:
                    with suppress(Exception):
                        cursor.close()
                if rows is None:
                    return
                # stop() may wait for this thread while its caller holds the lock.
                while not storage.lock.acquire(timeout=0.05):
                    if self.rows.stopping:
                        return
                try:
                    current = storage.record_by_id(coll.id)
                    if current is not None and current.generation == generation:
                        self.rows.publish(coll.id, rows, epoch)
                finally:
                    storage.lock.release()

            self.rows.start(run)

        def estimate() -> int:
            # Offsets are integer columns (cheap to scan); text length would read every row.
            (n, chars) = storage.query(
                f"SELECT count(*), coalesce(sum(char_end - char_start), 0) FROM {t['chunks']}"
            )[0]
            return int(chars) + int(n) * ROW_OVERHEAD_BYTES

        # Under the connection lock (warm() starts its read here).
        with storage.lock:
            return self.rows.get(coll.id, [int(k) for k in keys], some, warm, estimate)
