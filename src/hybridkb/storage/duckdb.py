"""Embedded DuckDB backend: tables are the truth, search runs on derived in-memory indexes.

One process at a time may hold a DuckDB file for writing (DuckDB's own rule). A
second writer waits up to ``lock_timeout`` seconds and then gets
:class:`DatabaseLocked` naming the holder and what to do instead.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ..errors import BackendError, CollectionExists, DatabaseLocked, KBError
from ..filters import Filter, to_sql
from ..index.derived import (
    CollectionIndexes,
    build_indexes,
    drop_snapshot,
    load_snapshot,
    save_snapshot,
)
from .base import (
    Capabilities,
    ChunkRecord,
    CollectionRecord,
    CollectionStats,
    DocumentRecord,
    PutItem,
    Ranked,
    WriteEvent,
    WriteHook,
)
from .duckdb_schema import create_collection_tables, drop_collection_tables, migrate, table_names
from .filter_columns import FilterColumns, field_query
from .row_cache import ROW_OVERHEAD_BYTES, RowCache

# Chunk rows kept in memory per process (storage/row_cache.py); HYBRIDKB_ROW_CACHE_MB.
DEFAULT_ROW_CACHE_BYTES = 256 << 20

_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (.+?) \(PID (\d+)\)")


# A list parameter bound as one JSON text (see _json_list).
SQL_KEY_LIST = "(SELECT unnest(from_json(?, '[\"BIGINT\"]')))"
SQL_ID_LIST = "(SELECT unnest(from_json(?, '[\"VARCHAR\"]')))"


def _json_list(values: Iterable[Any]) -> str:
    """A list bound as one JSON parameter: binding a Python list costs DuckDB an import
    attempt per element (measured 59 ms vs 11 ms for 300 keys)."""
    return json.dumps([v if isinstance(v, str) else int(v) for v in values])


# DuckDB probes an ART index only for a constant IN list (up to index_scan_max_count,
# 2048 by default); a bound list becomes a hash semi-join that scans the table. Keys
# are integers we format ourselves, so inlining them cannot inject SQL. Measured for
# 10 of 1M chunks: 2.5 ms inline vs 22 ms bound (and no parameter binding, which
# costs DuckDB a failed `import pandas` per parameter).
_INLINE_KEYS_MAX = 2048


def key_list_sql(keys: Sequence[int]) -> tuple[str, list[Any]]:
    """``IN`` operand for chunk keys, and its parameters: inline integers when few."""
    if len(keys) <= _INLINE_KEYS_MAX:
        return "(" + ",".join(str(int(k)) for k in keys) + ")", []
    return SQL_KEY_LIST, [_json_list(keys)]


def _ts(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def open_duckdb(path: str, *, read_only: bool, lock_timeout: float) -> duckdb.DuckDBPyConnection:
    """Open a DuckDB file, waiting for another process's lock up to ``lock_timeout``."""
    if path != ":memory:":
        Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + lock_timeout
    delay = 0.05
    while True:
        try:
            con = duckdb.connect(path, read_only=read_only)
            # Its progress bar would land on stdout, inside the CLI's JSON.
            con.execute("SET enable_progress_bar = false")
            return con
        except duckdb.IOException as exc:
            text = str(exc)
            if "lock" not in text.lower():
                raise BackendError(
                    f"{path}: cannot open the database ({text.splitlines()[0]})"
                ) from exc
            if time.monotonic() >= deadline:
                holder = _LOCK_HOLDER.search(text)
                who = (
                    f"process {holder.group(2)} ({holder.group(1)})"
                    if holder
                    else "another process"
                )
                raise DatabaseLocked(
                    f"{path}: the knowledge base is in use by {who}; wait for it to finish, "
                    "send requests through the process that holds it (e.g. the MCP server), "
                    f"or raise HYBRIDKB_LOCK_TIMEOUT (waited {lock_timeout:g}s)"
                ) from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
        except duckdb.Error as exc:
            raise BackendError(f"{path}: cannot open the database ({exc})") from exc


class DuckDBStorage:
    """Storage protocol over one DuckDB file (or ``:memory:``)."""

    def __init__(
        self,
        path: str,
        *,
        read_only: bool = False,
        lock_timeout: float = 10.0,
        row_cache_bytes: int = DEFAULT_ROW_CACHE_BYTES,
    ) -> None:
        self.path = path
        self.read_only = read_only
        self.capabilities = Capabilities(
            name="duckdb", concurrent_writers=False, persistent=path != ":memory:"
        )
        self._con = open_duckdb(path, read_only=read_only, lock_timeout=lock_timeout)
        self._lock = threading.RLock()
        self._indexes: dict[int, CollectionIndexes] = {}
        # The catalog, read once and dropped by every write through this object: DuckDB
        # admits one writer per file and no writer beside readers, so nobody else changes it.
        self._catalog: dict[int, CollectionRecord] | None = None
        self._stats: dict[int, CollectionStats] = {}  # dropped with the catalog
        self._rows = RowCache(row_cache_bytes)
        self._filters: dict[int, FilterColumns] = {}
        self.hooks: list[WriteHook] = []
        if not read_only:
            self.schema_version = migrate(self._con)
            from .duckdb_stream import drop_stale_stages

            drop_stale_stages(self)  # files staged by a streamed add that was killed
        else:
            row = self._con.execute(
                "SELECT value FROM hybridkb_meta WHERE key = 'schema_version'"
            ).fetchone()
            self.schema_version = int(row[0]) if row else 0

    # -- plumbing -------------------------------------------------------------------

    @property
    def snapshot_dir(self) -> Path | None:
        """Where derived indexes are persisted (None for :memory:)."""
        if self.path == ":memory:":
            return None
        return Path(self.path).expanduser().resolve().with_name(Path(self.path).name + ".hkbidx")

    def save_indexes(self) -> None:
        """Persist the in-memory indexes that changed since they were last saved."""
        folder = self.snapshot_dir
        if folder is None or self.read_only:
            return
        with self._lock:
            for cid, idx in self._indexes.items():
                if idx.saved_generation != idx.generation:
                    try:
                        save_snapshot(folder, cid, idx)
                    except (OSError, KBError):
                        pass  # a snapshot is an optimisation; the next open rebuilds

    def reopen(self, between: Any = None) -> None:
        """Close the file, run ``between()`` (e.g. swap in a compacted copy), open it again."""
        self._rows.stop()
        with self._lock:
            self.save_indexes()
            self._con.close()
            if between is not None:
                between()
            self._con = open_duckdb(self.path, read_only=self.read_only, lock_timeout=0)
            self._indexes.clear()
            self._rows.forget()
            self._filters.clear()
            self._forget_catalog()

    # Rewrite the file once this share of the live chunks has been deleted or replaced:
    # DuckDB reuses some freed blocks but never shrinks a file (churn measured 1.8x).
    AUTO_COMPACT_DEAD_RATIO = 0.5

    def _maybe_compact(self) -> None:
        if self.read_only or not self.capabilities.persistent:
            return
        row = self._con.execute(
            "SELECT value FROM hybridkb_meta WHERE key = 'dead_chunks'"
        ).fetchone()
        dead = int(row[0]) if row else 0
        if dead == 0:
            return
        live = 0
        for (cid,) in self._con.execute("SELECT id FROM hybridkb_collections").fetchall():
            live += int(
                self._con.execute(
                    f"SELECT count(*) FROM {table_names(int(cid))['chunks']}"
                ).fetchone()[0]
            )  # type: ignore[index]
        if dead < self.AUTO_COMPACT_DEAD_RATIO * max(live, 1):
            return
        from .duckdb_maintenance import compact_database

        try:
            compact_database(self)
        except KBError:
            return  # compaction is housekeeping; the data is intact either way
        self._con.execute("DELETE FROM hybridkb_meta WHERE key = 'dead_chunks'")

    def close(self) -> None:
        self._rows.stop()  # a warm-up's cursor would keep the file open
        with self._lock:
            self._maybe_compact()
            self.save_indexes()
            self._indexes.clear()
            self._con.close()

    def _emit(self, con: duckdb.DuckDBPyConnection, event: WriteEvent) -> None:
        for hook in self.hooks:
            hook(con, event)

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run a read query under the connection lock (for modules beside the core, e.g. graph)."""
        return self._query(sql, params)

    def transaction(self, fn: Any) -> Any:
        """Run ``fn(con)`` in one transaction under the connection lock."""
        return self._write(fn)

    def _query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._con.execute(sql, params or []).fetchall()

    def _write(self, fn: Any) -> Any:
        """Run ``fn(con)`` in one transaction (all or nothing)."""
        with self._lock:
            self._forget_catalog()
            self._con.execute("BEGIN TRANSACTION")
            try:
                result = fn(self._con)
                self._con.execute("COMMIT")
            except BaseException:
                self._con.execute("ROLLBACK")
                raise
            finally:
                self._forget_catalog()
            return result

    def _forget_catalog(self) -> None:
        self._catalog = None
        self._stats = {}

    # -- catalog --------------------------------------------------------------------

    _CATALOG_COLUMNS = (
        "id, workspace, name, model, dim, chunking, language, created_at, updated_at, generation"
    )

    def _record(self, row: tuple[Any, ...]) -> CollectionRecord:
        return CollectionRecord(
            id=int(row[0]),
            workspace=row[1],
            name=row[2],
            model=row[3],
            dim=int(row[4]),
            chunking=json.loads(row[5]) if row[5] else {},
            language=row[6],
            created_at=_ts(row[7]),
            updated_at=_ts(row[8]),
            generation=int(row[9] or 0),
        )

    def create_collection(
        self,
        workspace: str,
        name: str,
        *,
        model: str,
        dim: int,
        chunking: dict[str, Any],
        language: str,
    ) -> CollectionRecord:
        def create(con: duckdb.DuckDBPyConnection) -> int:
            exists = con.execute(
                "SELECT 1 FROM hybridkb_collections WHERE workspace = ? AND name = ?",
                [workspace, name],
            ).fetchone()
            if exists:
                raise CollectionExists(
                    f"collection {name!r} already exists; use it, or drop it first"
                )
            (new_id,) = con.execute("SELECT nextval('hybridkb_collection_ids')").fetchone()  # type: ignore[misc]
            con.execute(
                "INSERT INTO hybridkb_collections (id, workspace, name, model, dim, chunking, language)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [new_id, workspace, name, model, dim, json.dumps(chunking), language],
            )
            create_collection_tables(con, int(new_id), dim)
            return int(new_id)

        new_id = self._write(create)
        record = self._get_by_id(new_id)
        assert record is not None
        return record

    def _catalog_records(self) -> dict[int, CollectionRecord]:
        with self._lock:
            if self._catalog is None:
                rows = self._con.execute(
                    f"SELECT {self._CATALOG_COLUMNS} FROM hybridkb_collections ORDER BY workspace, name"
                ).fetchall()
                self._catalog = {int(r[0]): self._record(r) for r in rows}
            return self._catalog

    def _get_by_id(self, collection_id: int) -> CollectionRecord | None:
        return self._catalog_records().get(collection_id)

    def get_collection(self, workspace: str, name: str) -> CollectionRecord | None:
        return next(
            (
                r
                for r in self._catalog_records().values()
                if r.workspace == workspace and r.name == name
            ),
            None,
        )

    def list_collections(self, workspace: str) -> list[CollectionRecord]:
        return [r for r in self._catalog_records().values() if r.workspace == workspace]

    def drop_collection(self, coll: CollectionRecord) -> None:
        def drop(con: duckdb.DuckDBPyConnection) -> None:
            self._emit(con, WriteEvent("drop", coll))
            drop_collection_tables(con, coll.id)
            con.execute("DELETE FROM hybridkb_collections WHERE id = ?", [coll.id])

        self._write(drop)
        self.forget_derived(coll.id)
        if self.snapshot_dir is not None:
            drop_snapshot(self.snapshot_dir, coll.id)

    # -- documents ------------------------------------------------------------------

    _DOC_COLUMNS = (
        "document_id, path, filename, source, content_hash, signature, metadata, language, bytes,"
        " chunk_count, added_at"
    )

    @staticmethod
    def _doc(row: tuple[Any, ...]) -> DocumentRecord:
        return DocumentRecord(
            document_id=row[0],
            path=row[1],
            filename=row[2],
            source=row[3],
            content_hash=row[4],
            signature=row[5],
            metadata=json.loads(row[6]) if row[6] else {},
            language=row[7] or "und",
            bytes=int(row[8] or 0),
            chunk_count=int(row[9] or 0),
            added_at=_ts(row[10]),
        )

    def get_document(self, coll: CollectionRecord, document_id: str) -> DocumentRecord | None:
        t = table_names(coll.id)
        rows = self._query(
            f"SELECT {self._DOC_COLUMNS} FROM {t['documents']} WHERE document_id = ?", [document_id]
        )
        return self._doc(rows[0]) if rows else None

    def list_documents(
        self, coll: CollectionRecord, *, limit: int = 100, offset: int = 0
    ) -> list[DocumentRecord]:
        t = table_names(coll.id)
        rows = self._query(
            f"SELECT {self._DOC_COLUMNS} FROM {t['documents']} ORDER BY added_at, document_id"
            " LIMIT ? OFFSET ?",
            [limit, offset],
        )
        return [self._doc(r) for r in rows]

    @staticmethod
    def _arrow_rows(
        coll: CollectionRecord, chunks: Sequence[ChunkRecord], vectors: np.ndarray
    ) -> tuple[pa.Table, pa.Table]:
        """Chunk and vector rows as Arrow tables (bulk inserts cost far less than executemany)."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1, coll.dim)
        if len(vectors) != len(chunks):
            raise ValueError("one vector per chunk is required")
        chunk_table = pa.table(
            {
                "key": pa.array([c.key for c in chunks], pa.int64()),
                "chunk_id": pa.array([c.chunk_id for c in chunks], pa.string()),
                "document_id": pa.array([c.document_id for c in chunks], pa.string()),
                "chunk_index": pa.array([c.chunk_index for c in chunks], pa.int32()),
                "text": pa.array([c.text for c in chunks], pa.string()),
                "page": pa.array([c.page for c in chunks], pa.int32()),
                "section": pa.array([c.section for c in chunks], pa.string()),
                "char_start": pa.array([c.char_start for c in chunks], pa.int32()),
                "char_end": pa.array([c.char_end for c in chunks], pa.int32()),
                "content_hash": pa.array([c.content_hash for c in chunks], pa.string()),
                "language": pa.array([c.language for c in chunks], pa.string()),
                "terms": pa.array([list(c.terms) for c in chunks], pa.list_(pa.string())),
                "metadata": pa.array([json.dumps(c.metadata) for c in chunks], pa.string()),
                "filename": pa.array([c.filename for c in chunks], pa.string()),
                "path": pa.array([c.path for c in chunks], pa.string()),
            }
        )
        vector_table = pa.table(
            {
                "key": pa.array([c.key for c in chunks], pa.int64()),
                "embedding": pa.FixedSizeListArray.from_arrays(
                    pa.array(vectors.reshape(-1)), coll.dim
                ),
            }
        )
        return chunk_table, vector_table

    @staticmethod
    def _insert_registered_rows(con: duckdb.DuckDBPyConnection, t: dict[str, str]) -> None:
        con.execute(
            f"INSERT INTO {t['chunks']} SELECT key, chunk_id, document_id, chunk_index, text, page,"
            " section, char_start, char_end, content_hash, language, terms, metadata::JSON,"
            " filename, path, current_timestamp FROM _hkb_chunks"
        )
        con.execute(f"INSERT INTO {t['vectors']} SELECT key, embedding FROM _hkb_vectors")

    def put_document(
        self,
        coll: CollectionRecord,
        doc: DocumentRecord,
        chunks: Sequence[ChunkRecord],
        vectors: np.ndarray,
    ) -> None:
        self.put_documents(coll, [PutItem(doc, chunks, vectors)])

    def put_documents(self, coll: CollectionRecord, items: Sequence[PutItem]) -> None:
        """Replace several documents in ONE transaction (a commit costs ~3 ms here)."""
        if not items:
            return
        t = table_names(coll.id)
        chunks = [c for item in items for c in item.chunks]
        docs = [item.document for item in items]
        ids = [d.document_id for d in docs]
        if len(set(ids)) != len(ids):
            raise ValueError("put_documents: a document id appears twice in one batch")
        vectors = (
            np.concatenate(
                [np.asarray(i.vectors, dtype=np.float32).reshape(-1, coll.dim) for i in items]
            )
            if chunks
            else np.zeros((0, coll.dim), np.float32)
        )
        chunk_table, vector_table = self._arrow_rows(coll, chunks, vectors)
        doc_table = pa.table(
            {
                "document_id": pa.array(ids, pa.string()),
                "path": pa.array([d.path for d in docs], pa.string()),
                "filename": pa.array([d.filename for d in docs], pa.string()),
                "source": pa.array([d.source for d in docs], pa.string()),
                "content_hash": pa.array([d.content_hash for d in docs], pa.string()),
                "signature": pa.array([d.signature for d in docs], pa.string()),
                "metadata": pa.array([json.dumps(d.metadata) for d in docs], pa.string()),
                "language": pa.array([d.language for d in docs], pa.string()),
                "bytes": pa.array([d.bytes for d in docs], pa.int64()),
                "chunk_count": pa.array([len(i.chunks) for i in items], pa.int32()),
            }
        )

        def put(con: duckdb.DuckDBPyConnection) -> tuple[list[int], int]:
            existing = [
                r[0]
                for r in con.execute(
                    f"SELECT document_id FROM {t['documents']} WHERE document_id IN {SQL_ID_LIST}",
                    [_json_list(ids)],
                ).fetchall()
            ]
            old = self._delete_rows(con, coll, existing) if existing else []
            con.register("_hkb_docs", doc_table)
            con.register("_hkb_chunks", chunk_table)
            con.register("_hkb_vectors", vector_table)
            try:
                con.execute(
                    f"INSERT INTO {t['documents']} SELECT document_id, path, filename, source,"
                    " content_hash, signature, metadata::JSON, language, bytes, chunk_count,"
                    " current_timestamp FROM _hkb_docs"
                )
                self._insert_registered_rows(con, t)
            finally:
                for name in ("_hkb_docs", "_hkb_chunks", "_hkb_vectors"):
                    con.unregister(name)
            if len(items) == 1:
                self._emit(con, WriteEvent("put", coll, ids, items[0].document, items[0].chunks))
            else:  # one event: hooks can write the whole batch with a few statements
                self._emit(con, WriteEvent("put_batch", coll, ids, items=items))
            return old, self._bump(con, coll)

        old_keys, generation = self._write(put)
        self._mirror(
            coll,
            removed=old_keys,
            added_keys=[c.key for c in chunks],
            added_terms=[c.terms for c in chunks],
            added_vectors=vectors,
            generation=generation,
        )

    def put_document_stream(
        self,
        coll: CollectionRecord,
        doc: DocumentRecord,
        batches: Iterable[tuple[Sequence[ChunkRecord], np.ndarray]],
    ) -> int:
        """Replace one (huge) document from a stream of chunk batches, all or nothing.

        Memory stays bounded: batches are staged in a file beside the database, then
        switched in with one transaction; searches see the old version until then, and
        the derived indexes are extended, not rebuilt (storage/duckdb_stream.py).
        """
        from .duckdb_stream import stream_document

        return stream_document(self, coll, doc, batches)

    @staticmethod
    def _delete_rows(
        con: duckdb.DuckDBPyConnection, coll: CollectionRecord, ids: Sequence[str]
    ) -> list[int]:
        """Delete the documents' rows from all three tables; return the chunk keys removed."""
        t = table_names(coll.id)
        keys = [
            int(r[0])
            for r in con.execute(
                f"SELECT key FROM {t['chunks']} WHERE document_id IN {SQL_ID_LIST}",
                [_json_list(list(ids))],
            ).fetchall()
        ]
        if keys:
            in_keys, params = key_list_sql(keys)
            con.execute(f"DELETE FROM {t['vectors']} WHERE key IN {in_keys}", params)
            con.execute(f"DELETE FROM {t['chunks']} WHERE key IN {in_keys}", params)
            # Dead rows keep their space until the file is rewritten: count them (see close()).
            con.execute(
                "INSERT OR REPLACE INTO hybridkb_meta VALUES ('dead_chunks', CAST(? + coalesce("
                "(SELECT CAST(value AS BIGINT) FROM hybridkb_meta WHERE key = 'dead_chunks'), 0) AS VARCHAR))",
                [len(keys)],
            )
        con.execute(
            f"DELETE FROM {t['documents']} WHERE document_id IN {SQL_ID_LIST}",
            [_json_list(list(ids))],
        )
        return keys

    @staticmethod
    def _bump(con: duckdb.DuckDBPyConnection, coll: CollectionRecord) -> int:
        row = con.execute(
            "UPDATE hybridkb_collections SET generation = generation + 1, updated_at = current_timestamp"
            " WHERE id = ? RETURNING generation",
            [coll.id],
        ).fetchone()
        assert row is not None
        return int(row[0])

    def delete_documents(self, coll: CollectionRecord, document_ids: Sequence[str]) -> list[str]:
        t = table_names(coll.id)
        ids = list(dict.fromkeys(document_ids))

        def delete(con: duckdb.DuckDBPyConnection) -> tuple[list[str], list[int], int]:
            found = [
                r[0]
                for r in con.execute(
                    f"SELECT document_id FROM {t['documents']} WHERE document_id IN {SQL_ID_LIST}",
                    [_json_list(ids)],
                ).fetchall()
            ]
            if not found:
                return [], [], coll.generation
            keys = self._delete_rows(con, coll, found)
            self._emit(con, WriteEvent("delete", coll, found))
            return found, keys, self._bump(con, coll)

        found, keys, generation = self._write(delete)
        if found:
            self._mirror(
                coll,
                removed=keys,
                added_keys=[],
                added_terms=[],
                added_vectors=np.zeros((0, coll.dim), np.float32),
                generation=generation,
            )
        order = {d: i for i, d in enumerate(ids)}
        return sorted(found, key=order.__getitem__)

    def stats(self, coll: CollectionRecord) -> CollectionStats:
        return self.stats_many([coll])[coll.id]

    def stats_many(self, colls: Sequence[CollectionRecord]) -> dict[int, CollectionStats]:
        """Statistics, cached per collection until the next write; the missing ones are read
        in ONE statement (a listing of 20 collections ran 100 queries before)."""
        with self._lock:
            missing = {c.id: c for c in colls if c.id not in self._stats}
            if missing:
                rows = self._query(" UNION ALL ".join(self._stats_sql(cid) for cid in missing))
                for cid, docs, chunks, chars, langs in rows:
                    record = self._get_by_id(int(cid))
                    self._stats[int(cid)] = CollectionStats(
                        documents=int(docs),
                        chunks=int(chunks),
                        languages=list(langs or []),
                        # Stored size estimate inside a shared file: text (2 bytes a char) + vectors.
                        bytes=int(chars) * 2 + int(chunks) * missing[int(cid)].dim * 4,
                        updated_at=record.updated_at if record else None,
                    )
            return {
                c.id: dataclasses.replace(
                    self._stats[c.id], languages=list(self._stats[c.id].languages)
                )
                for c in colls
            }

    @staticmethod
    def _stats_sql(collection_id: int) -> str:
        # Chunk offsets stand in for text length: summing strlen(text) reads every text.
        t = table_names(collection_id)
        return f"""SELECT {int(collection_id)},
            (SELECT count(*) FROM {t["documents"]}),
            (SELECT count(*) FROM {t["chunks"]}),
            (SELECT coalesce(sum(char_end - char_start), 0) FROM {t["chunks"]}),
            (SELECT list(language ORDER BY n DESC, language) FROM
                (SELECT language, count(*) AS n FROM {t["documents"]}
                 WHERE language IS NOT NULL AND language <> '' GROUP BY language))"""

    # -- derived indexes ------------------------------------------------------------

    def _load_rows(self, coll: CollectionRecord) -> tuple[np.ndarray, pa.Array, np.ndarray]:
        """Keys, terms (an Arrow list<string> column) and float32 vectors, in key order.

        Columnar on purpose: one Python string per term took 47 s and 13.3 GB at 1M
        chunks; the Arrow column takes ~6 s and goes straight into the keyword index.
        """
        t = table_names(coll.id)
        with self._lock:
            chunks = self._con.execute(
                f"SELECT key, terms FROM {t['chunks']} ORDER BY key"
            ).to_arrow_table()
            vec = self._con.execute(
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
            terms = terms.filter(pa.array(keep_k))
            keys, vectors = keys[keep_k], vectors[keep_v]
        return keys, terms, vectors

    def _indexes_for(self, coll: CollectionRecord) -> CollectionIndexes:
        with self._lock:
            found = self._indexes.get(coll.id)
            if found is not None:
                # This process holds the file (DuckDB admits one writer, and no writer
                # beside readers), so every change since the load was mirrored here.
                return found
            current = self._get_by_id(coll.id)
            generation = current.generation if current else coll.generation
            folder = self.snapshot_dir
            if folder is not None:
                t = table_names(coll.id)
                (chunks,) = self._con.execute(f"SELECT count(*) FROM {t['chunks']}").fetchone()  # type: ignore[misc]
                found = load_snapshot(folder, coll.id, generation=generation, chunks=int(chunks))
            else:
                found = None
            if found is None:
                found = build_indexes(coll.dim, generation, lambda: self._load_rows(coll))
                if folder is not None and not self.read_only:
                    try:
                        save_snapshot(folder, coll.id, found)
                    except (OSError, KBError):
                        pass
            self._indexes[coll.id] = found
            return found

    def _mirror(self, coll: CollectionRecord, **change: Any) -> None:
        with self._lock:
            self._rows.forget_keys(coll.id, change["removed"])
            self._filters.pop(coll.id, None)
            found = self._indexes.get(coll.id)
            if found is not None:
                found.apply(**change)

    def forget_derived(self, collection_id: int) -> None:
        """Drop what memory holds for a collection (indexes, rows) after a bulk rewrite."""
        with self._lock:
            self._indexes.pop(collection_id, None)
            self._rows.forget(collection_id)
            self._filters.pop(collection_id, None)

    def _allowed(self, coll: CollectionRecord, where: Filter | None) -> np.ndarray | None:
        if where is None:
            return None
        t = table_names(coll.id)
        with self._lock:
            columns = self._filters.get(coll.id)
            if columns is None:
                columns = self._filters[coll.id] = FilterColumns(
                    lambda field: self._filter_field(t, field)
                )
            # In memory when the fields allow (storage/filter_columns.py), else SQL.
            keys = columns.allowed(where)
        if keys is not None:
            return keys
        sql, params = to_sql(where)
        rows = self._query(f"SELECT key FROM {t['chunks']} WHERE {sql}", params)
        return np.asarray([r[0] for r in rows], dtype=np.int64)

    def _filter_field(self, t: dict[str, str], field: str) -> tuple[np.ndarray, pa.Array]:
        sql, params = field_query(t["chunks"], field)
        table = self._con.execute(sql, params).to_arrow_table()
        return table.column("key").to_numpy(), table.column("v")

    # -- search ---------------------------------------------------------------------

    # int8 candidates alone matched exact float32 search on SciFact (nDCG +0.0007,
    # recall@10 0.99: bench/vector.py), so exact re-ranking from the table is opt-in.
    rerank_exact = False

    def _reranker(self, coll: CollectionRecord) -> Any:
        if not self.rerank_exact:
            return None
        return lambda keys: self.fetch_vectors(coll, keys)

    def keyword_search(
        self, coll: CollectionRecord, terms: Sequence[str], k: int, where: Filter | None
    ) -> Ranked:
        if not terms:
            return []
        idx = self._indexes_for(coll)
        return idx.keyword.search(list(terms), k, allowed=self._allowed(coll, where))

    def vector_search(
        self, coll: CollectionRecord, query: np.ndarray, k: int, where: Filter | None
    ) -> Ranked:
        idx = self._indexes_for(coll)
        return idx.vector.search(
            query, k, allowed=self._allowed(coll, where), rerank=self._reranker(coll)
        )

    def filter_search(
        self,
        coll: CollectionRecord,
        terms: Sequence[str],
        query: np.ndarray,
        k: int,
        where: Filter | None,
    ) -> Ranked:
        if not terms:
            return []
        idx = self._indexes_for(coll)
        allowed = idx.keyword.matching(list(terms))
        narrowed = self._allowed(coll, where)
        if narrowed is not None:
            allowed = np.intersect1d(allowed, narrowed)
        if len(allowed) == 0:
            return []
        return idx.vector.search(query, k, allowed=allowed, rerank=self._reranker(coll))

    _CHUNK_COLUMNS = (
        "key, chunk_id, document_id, chunk_index, text, page, section, char_start, char_end,"
        " content_hash, language, metadata, filename, path, added_at"
    )

    @staticmethod
    def _chunk(r: tuple[Any, ...]) -> ChunkRecord:
        return ChunkRecord(
            key=int(r[0]),
            chunk_id=r[1],
            document_id=r[2],
            chunk_index=int(r[3]),
            text=r[4],
            page=r[5],
            section=r[6],
            char_start=int(r[7] or 0),
            char_end=int(r[8] or 0),
            content_hash=r[9] or "",
            language=r[10] or "und",
            terms=[],
            metadata=json.loads(r[11]) if r[11] else {},
            filename=r[12],
            path=r[13],
            added_at=_ts(r[14]),
        )

    def fetch_chunks(self, coll: CollectionRecord, keys: Sequence[int]) -> dict[int, ChunkRecord]:
        if not len(keys):
            return {}
        t = table_names(coll.id)

        def some(wanted: Sequence[int]) -> list[ChunkRecord]:
            in_keys, params = key_list_sql(wanted)
            rows = self._query(
                f"SELECT {self._CHUNK_COLUMNS} FROM {t['chunks']} WHERE key IN {in_keys}", params
            )
            return [self._chunk(r) for r in rows]

        def warm(collect: Any) -> None:
            # The read starts under the lock, so its snapshot and the noted generation and
            # epoch agree; rows are published only if neither moved (no write meanwhile).
            record = self._get_by_id(coll.id)
            if record is None:
                return
            generation, epoch = record.generation, self._rows.epoch(coll.id)
            cursor = self._con.cursor()  # a connection of its own, for the thread
            result = cursor.execute(f"SELECT {self._CHUNK_COLUMNS} FROM {t['chunks']}")

            def every() -> Iterator[ChunkRecord]:
                while batch := result.fetchmany(4096):
                    yield from (self._chunk(r) for r in batch)

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
                while not self._lock.acquire(timeout=0.05):
                    if self._rows.stopping:
                        return
                try:
                    current = self._get_by_id(coll.id)
                    if current is not None and current.generation == generation:
                        self._rows.publish(coll.id, rows, epoch)
                finally:
                    self._lock.release()

            self._rows.start(run)

        def estimate() -> int:
            # Offsets are integer columns (cheap to scan); text length would read every row.
            (count, chars) = self._query(
                f"SELECT count(*), coalesce(sum(char_end - char_start), 0) FROM {t['chunks']}"
            )[0]
            return int(chars) + int(count) * ROW_OVERHEAD_BYTES

        # Under the connection lock (warm() starts its read here).
        with self._lock:
            return self._rows.get(coll.id, [int(k) for k in keys], some, warm, estimate)

    def fetch_vectors(self, coll: CollectionRecord, keys: Sequence[int]) -> np.ndarray:
        """Full-precision vectors in the order of ``keys`` (for exact re-ranking)."""
        t = table_names(coll.id)
        key_list = [int(k) for k in np.asarray(keys).tolist()]
        in_keys, params = key_list_sql(key_list)
        with self._lock:
            table = self._con.execute(
                f"SELECT key, embedding FROM {t['vectors']} WHERE key IN {in_keys}", params
            ).fetch_arrow_table()
        got = table.column("key").to_numpy()
        flat = table.column("embedding").combine_chunks().values.to_numpy(zero_copy_only=False)
        mat = np.asarray(flat, dtype=np.float32).reshape(len(got), coll.dim)
        pos = {int(k): i for i, k in enumerate(got)}
        out = np.zeros((len(key_list), coll.dim), dtype=np.float32)
        for i, k in enumerate(key_list):
            j = pos.get(k)
            if j is not None:
                out[i] = mat[j]
        return out
