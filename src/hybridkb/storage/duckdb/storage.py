"""Embedded DuckDB backend: tables are the truth, search runs on derived in-memory indexes.

The modules of this package share one open file through :class:`DuckDBStorage`'s
public ``con`` and ``lock`` (package-internal: a caller outside ``storage.duckdb``
goes through the :class:`~hybridkb.storage.base.Storage` protocol only):

* this module: the catalog and the writes of :class:`DuckDBStorage`, which inherits
  its reads (document rows, searches, fetches, exports) from ``reading.py`` and its
  sources from ``sources.py``;
* ``connection.py`` opens the file and translates DuckDB's errors;
* ``rows.py`` holds the SQL of a collection's rows (write, delete, read);
* ``memory.py`` what the single-writer rule lets a process keep in memory;
* ``stream.py`` one huge document in bounded memory; ``maintenance.py`` doctor,
  re-embed, compact; ``graph.py`` the graph's tables; ``schema.py`` names and migrations.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import numpy as np

from ...errors import KBError
from ..base import (
    Capabilities,
    ChunkRecord,
    CollectionRecord,
    CollectionStats,
    DocumentRecord,
    GraphSQL,
    Maintenance,
    PutItem,
    Reembedding,
    WriteEvent,
    WriteHook,
)
from ..boundary import driver_errors
from ..shared import (
    StorageDefaults,
    collection_exists,
    collection_gone,
    listed,
    refuse_repeated_ids,
)
from .connection import translate
from .engine import Engine
from .graph import DuckDBGraphSQL
from .maintenance import DuckDBMaintenance
from .memory import Derived
from .reading import DuckDBReads
from .rows import (
    bump_generation,
    chunk_rows,
    count,
    delete_rows,
    document_rows,
    existing_documents,
    insert_rows,
    stats_sql,
)
from .schema import create_collection_tables, drop_collection_tables, table_names
from .sources import DuckDBSources, drop_sources
from .stream import drop_stale_stages, stream_document
from .upgrade import stored_version, upgrade

T = TypeVar("T")

# Chunk rows kept in memory per process (row_cache.py); HYBRIDKB_ROW_CACHE_MB.
DEFAULT_ROW_CACHE_BYTES = 256 << 20


@driver_errors(translate)
class DuckDBStorage(DuckDBSources, DuckDBReads, StorageDefaults):
    """Storage protocol over one DuckDB file (or ``:memory:``)."""

    # Rewrite the file once this share of the live chunks has been deleted or replaced:
    # DuckDB reuses some freed blocks but never shrinks a file (churn measured 1.8x).
    AUTO_COMPACT_DEAD_RATIO = 0.5

    def __init__(
        self,
        path: str,
        *,
        read_only: bool = False,
        lock_timeout: float = 10.0,
        row_cache_bytes: int = DEFAULT_ROW_CACHE_BYTES,
    ) -> None:
        self.engine = Engine(path, read_only=read_only, lock_timeout=lock_timeout)
        DuckDBSources.__init__(self, self.engine)
        self.path = path
        self.read_only = read_only
        self.capabilities = Capabilities(
            name="duckdb",
            persistent=self.engine.persistent,
        )
        self.hooks: list[WriteHook] = self.engine.hooks
        DuckDBReads.__init__(self, self.engine, Derived(self.engine, row_cache_bytes))
        self.graph_sql: GraphSQL | None = DuckDBGraphSQL()
        self.tools = DuckDBMaintenance(self.engine, self.derived)
        self.maintenance: Maintenance | None = self.tools
        self.reembedding: Reembedding | None = self.tools
        try:
            if not read_only:
                self.schema_version = upgrade(self.engine)
                drop_stale_stages(self.engine)  # files staged by a streamed add that was killed
            else:
                self.schema_version = stored_version(self.engine.con)
        except BaseException:
            self.engine.close()  # the file is not left open (and locked) by a failed open
            raise

    # -- plumbing -------------------------------------------------------------------

    @property
    def snapshot_dir(self) -> Path | None:
        """Where derived indexes are persisted (None for :memory:)."""
        return self.engine.snapshot_dir

    def save_indexes(self) -> None:
        """Persist the in-memory indexes that changed since they were last saved."""
        self.derived.save()

    def _compact_if_mostly_deleted(self) -> None:
        if self.read_only or not self.capabilities.persistent:
            return
        con = self.engine.con
        row = con.execute("SELECT value FROM hybridkb_meta WHERE key = 'dead_chunks'").fetchone()
        dead = int(row[0]) if row else 0
        if dead == 0:
            return
        live = sum(count(con, table_names(cid)["chunks"]) for cid in self.engine.catalog())
        if dead < self.AUTO_COMPACT_DEAD_RATIO * max(live, 1):
            return
        try:
            self.tools.compact()
        except KBError:
            return  # compaction is housekeeping; the data is intact either way
        self.engine.con.execute("DELETE FROM hybridkb_meta WHERE key = 'dead_chunks'")

    def close(self) -> None:
        """Save what changed and release the file; closing again does nothing."""
        if self.engine.closed:
            return
        self.derived.rows.stop()  # a warm-up's cursor would keep the file open
        with self.engine.lock:
            self._compact_if_mostly_deleted()
            self.derived.save()
            self.derived.clear()  # stops the graphs' background inserts too
            self.engine.close()

    def transaction(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """Run ``fn(con)`` in one transaction (all or nothing) under the connection lock."""
        return self.engine.transaction(fn)

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one read statement (``?`` placeholders): for tests and diagnostics, outside
        the protocol (the Postgres backend's twin takes ``%s``)."""
        return self.engine.query(sql, params)

    # -- catalog --------------------------------------------------------------------

    def create_collection(
        self,
        workspace: str,
        name: str,
        *,
        model: str,
        dim: int,
        chunking: dict[str, Any],
        language: str,
        recipe: dict[str, Any] | None = None,
    ) -> CollectionRecord:
        """See :meth:`hybridkb.storage.base.Storage.create_collection`."""

        def create(con: duckdb.DuckDBPyConnection) -> int:
            exists = con.execute(
                "SELECT 1 FROM hybridkb_collections WHERE workspace = ? AND name = ?",
                [workspace, name],
            ).fetchone()
            if exists:
                raise collection_exists(name)
            (new_id,) = con.execute("SELECT nextval('hybridkb_collection_ids')").fetchone()  # type: ignore[misc]
            con.execute(
                "INSERT INTO hybridkb_collections"
                " (id, workspace, name, model, dim, chunking, language, embedding)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    new_id,
                    workspace,
                    name,
                    model,
                    dim,
                    json.dumps(chunking),
                    language,
                    json.dumps(recipe) if recipe else None,
                ],
            )
            create_collection_tables(con, int(new_id), dim)
            return int(new_id)

        new_id = self.engine.transaction(create)
        record = self.record_by_id(new_id)
        assert record is not None
        return record

    def record_by_id(self, collection_id: int) -> CollectionRecord | None:
        """The catalog record of a collection id (cached until the next write)."""
        return self.engine.record_by_id(collection_id)

    def get_collection(self, workspace: str, name: str) -> CollectionRecord | None:
        """See :meth:`hybridkb.storage.base.Storage.get_collection`."""
        records = self.engine.catalog().values()
        return next((r for r in records if r.workspace == workspace and r.name == name), None)

    def list_collections(self, workspace: str, *, staged: bool = False) -> list[CollectionRecord]:
        """See :meth:`hybridkb.storage.base.Storage.list_collections`."""
        records = self.engine.catalog().values()
        return listed((r for r in records if r.workspace == workspace), staged=staged)

    def list_workspaces(self) -> list[str]:
        """See :meth:`hybridkb.storage.base.Storage.list_workspaces`."""
        return sorted({r.workspace for r in listed(self.engine.catalog().values(), staged=False)})

    def rename_collection(self, coll: CollectionRecord, name: str) -> CollectionRecord:
        """See :meth:`hybridkb.storage.base.Storage.rename_collection`."""

        def rename(con: duckdb.DuckDBPyConnection) -> None:
            taken = con.execute(
                "SELECT 1 FROM hybridkb_collections WHERE workspace = ? AND name = ?",
                [coll.workspace, name],
            ).fetchone()
            if taken:
                raise collection_exists(name)
            con.execute(
                "UPDATE hybridkb_collections SET name = ?, updated_at = current_timestamp"
                " WHERE id = ?",
                [name, coll.id],
            )

        self.engine.transaction(rename)
        record = self.record_by_id(coll.id)
        if record is None:
            raise collection_gone(coll.name)
        return record

    def drop_collection(self, coll: CollectionRecord) -> None:
        def drop(con: duckdb.DuckDBPyConnection) -> None:
            self.engine.emit(con, WriteEvent("drop", coll))
            drop_collection_tables(con, coll.id)
            drop_sources(con, coll.id)
            con.execute("DELETE FROM hybridkb_collections WHERE id = ?", [coll.id])

        self.engine.transaction(drop)
        self.derived.discard(coll)  # memory, the snapshot and the rows file

    # -- document writes ------------------------------------------------------------

    def put_documents(self, coll: CollectionRecord, items: Sequence[PutItem]) -> None:
        """Replace several documents in ONE transaction (a commit costs ~3 ms here)."""
        if not items:
            return
        chunks = [c for item in items for c in item.chunks]
        docs = [item.document for item in items]
        ids = [d.document_id for d in docs]
        refuse_repeated_ids(ids)
        vectors = (
            np.concatenate(
                [np.asarray(i.vectors, dtype=np.float32).reshape(-1, coll.dim) for i in items]
            )
            if chunks
            else np.zeros((0, coll.dim), np.float32)
        )
        chunk_table = chunk_rows(coll, chunks, vectors)
        doc_table = document_rows(docs, [len(i.chunks) for i in items])

        def put(con: duckdb.DuckDBPyConnection) -> tuple[list[int], int]:
            existing = existing_documents(con, coll, ids)
            old = delete_rows(con, coll, existing) if existing else []
            insert_rows(con, coll, doc_table, chunk_table)
            fresh = frozenset(ids).difference(existing)
            if len(items) == 1:
                one = items[0]
                self.engine.emit(
                    con, WriteEvent("put", coll, ids, one.document, one.chunks, fresh=fresh)
                )
            else:  # one event: hooks can write the whole batch with a few statements
                self.engine.emit(con, WriteEvent("put_batch", coll, ids, items=items, fresh=fresh))
            return old, bump_generation(con, coll)

        with self.engine.lock:  # commit and mirror as one step for other threads
            self.derived.before_write(coll)
            with self.derived.committing(coll):
                old_keys, generation = self.engine.transaction(put)
                self.derived.mirror(
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
        the derived indexes are extended, not rebuilt (stream.py).
        """
        return stream_document(self.engine, self.derived, coll, doc, batches)

    def delete_documents(self, coll: CollectionRecord, document_ids: Sequence[str]) -> list[str]:
        """See :meth:`hybridkb.storage.base.Storage.delete_documents`."""
        ids = list(dict.fromkeys(document_ids))

        def delete(con: duckdb.DuckDBPyConnection) -> tuple[list[str], list[int], int]:
            found = existing_documents(con, coll, ids)
            if not found:
                return [], [], coll.generation
            keys = delete_rows(con, coll, found)
            self.engine.emit(con, WriteEvent("delete", coll, found))
            return found, keys, bump_generation(con, coll)

        with self.engine.lock:
            self.derived.before_write(coll)
            with self.derived.committing(coll):
                found, keys, generation = self.engine.transaction(delete)
                if found:
                    self.derived.mirror(
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
        """See :meth:`hybridkb.storage.base.Storage.stats`."""
        return self.stats_many([coll])[coll.id]

    def stats_many(self, colls: Sequence[CollectionRecord]) -> dict[int, CollectionStats]:
        """Statistics, cached per collection until the next write; the missing ones are read
        in ONE statement (a listing of 20 collections ran 100 queries before)."""
        with self.engine.lock:
            missing = {c.id: c for c in colls if c.id not in self.engine.stats}
            if missing:
                rows = self.engine.query(" UNION ALL ".join(stats_sql(cid) for cid in missing))
                for cid, docs, chunks, chars, langs in rows:
                    record = self.record_by_id(int(cid))
                    self.engine.stats[int(cid)] = CollectionStats(
                        documents=int(docs),
                        chunks=int(chunks),
                        languages=list(langs or []),
                        # Stored size estimate in a shared file: text (2 bytes a char) + vectors.
                        bytes=int(chars) * 2 + int(chunks) * missing[int(cid)].dim * 4,
                        updated_at=record.updated_at if record else None,
                    )
            return {
                c.id: dataclasses.replace(
                    self.engine.stats[c.id], languages=list(self.engine.stats[c.id].languages)
                )
                for c in colls
            }
