"""PostgreSQL + pgvector backend: many processes read and write one knowledge base.

One class implements the whole storage protocol, in parts: this module holds the
catalog and the document writes; it inherits the plumbing (pool, driver errors, read
and write runs: ``access.py``), the searches and fetches (``reading.py``), the bulk
export (``export.py``) and the sources (``sources.py``). The SQL they run lives beside
them in ``rows.py`` (writes and reads of rows), ``search.py`` (BM25 and nearest
neighbours), ``schema.py`` (tables and migrations), ``connection.py`` (connecting,
errors) and ``graph.py`` (the graph tables).

Search runs in SQL, so every process sees every committed write at once:

* keyword: BM25 over a postings table (term, key, tf, dl) with the same formula,
  k1 and b as the in-memory index of the DuckDB backend (:mod:`hybridkb.index.keywords`),
  and N / avgdl from the catalog row, which every write updates in its own
  transaction. Ranking therefore matches the DuckDB backend, not ``ts_rank``'s.
* vector: exact cosine scan while a collection is small (``exact_scan_rows``), else the
  HNSW index with pgvector's iterative scan for filters, falling back to an exact
  scan of the filtered rows whenever the index returns fewer than k.

Writers serialise per document on an advisory lock, so concurrent adds of the same
document end with it stored once; readers never wait for writers (MVCC).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np

from ...errors import BackendError, CollectionNotFound, MissingDependency
from ...text.filters import Filter
from ..base import (
    Capabilities,
    ChunkRecord,
    CollectionRecord,
    CollectionStats,
    DocumentRecord,
    GraphSQL,
    HybridSearch,
    Maintenance,
    PutItem,
    Reembedding,
    WriteEvent,
    WriteHook,
)
from ..boundary import driver_errors
from ..records import (
    DOC_COLUMNS,
    collection_record,
    document_record,
    timestamp,
)
from ..shared import (
    STAGING_MARK,
    StorageDefaults,
    collection_exists,
    collection_gone,
    listed,
    refuse_repeated_ids,
)
from . import search as pg_search
from .access import PostgresAccess
from .connection import pg_errors, plain_url, psycopg, translate
from .export import PostgresExport
from .graph import PostgresGraphSQL
from .hybrid import PostgresHybrid
from .maintenance import PostgresMaintenance
from .pool import DEFAULT_SIZE as DEFAULT_POOL_SIZE
from .reading import PostgresReads
from .rows import (
    chunk_rows,
    clean,
    copy_rows,
    delete_rows,
    document_row,
    dumps,
    hash32,
    lock_documents,
)
from .schema import (
    LOCK_WORKSPACE,
    build_vector_index,
    create_collection_tables,
    drop_collection_tables,
    text_config,
    workspace_schema,
)
from .search import where_sql
from .sources import PostgresSources, drop_sources

T = TypeVar("T")


@driver_errors(translate)
class PostgresStorage(PostgresSources, PostgresReads, PostgresExport, StorageDefaults):
    """Storage protocol over one PostgreSQL database (pgvector required)."""

    def __init__(
        self,
        url: str,
        *,
        read_only: bool = False,
        connect_timeout: float = 10.0,
        pool_size: int = DEFAULT_POOL_SIZE,
    ) -> None:
        if psycopg is None:
            raise MissingDependency(
                "psycopg is not installed; run: pip install 'hybridkb[postgres]'"
            )
        self.capabilities = Capabilities(
            name="postgres",
            persistent=True,
        )
        self.hooks: list[WriteHook] = []
        self.graph_sql: GraphSQL | None = PostgresGraphSQL()
        self.maintenance: Maintenance | None = PostgresMaintenance(self)
        self.reembedding: Reembedding | None = None  # see maintenance.py: not offered yet
        self.hybrid: HybridSearch | None = PostgresHybrid(self._read, self.tables, self._set_ef)
        self._indexed: set[int] = set()  # collections whose HNSW index is known valid
        PostgresSources.__init__(self, self._read, self._write)
        PostgresAccess.__init__(
            self,
            plain_url(url),
            read_only=read_only,
            connect_timeout=connect_timeout,
            pool_size=pool_size,
        )
        try:
            with self._pool.connection():  # the first one now: a bad URL or server says so here
                pass
            if self.read_only and not self._has_recipes():
                # Schema 1-2, not migrated (read-only): every collection was embedded
                # the way a missing recipe (NULL) means.
                self._CATALOG_COLUMNS = self._CATALOG_COLUMNS.replace(
                    ", embedding", ", NULL::jsonb AS embedding"
                )
        except BaseException:
            self._pool.close()
            raise

    # -- write hooks ----------------------------------------------------------------

    def _emit(self, con: Any, event: WriteEvent) -> None:
        for hook in self.hooks:
            hook(con, event)

    # -- catalog --------------------------------------------------------------------

    _CATALOG_COLUMNS = (
        "id, workspace, name, model, dim, chunking, language, created_at, updated_at, generation,"
        " workspace_id, embedding"
    )

    def _record(self, row: tuple[Any, ...]) -> CollectionRecord:
        self._schemas[int(row[0])] = workspace_schema(int(row[10]))
        return collection_record((*row[:10], row[11]))  # all but workspace_id

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
        if not isinstance(dim, int) or not 0 < dim <= 16_000:
            raise BackendError(f"dimension {dim!r} is outside pgvector's range (1..16000)")
        config = text_config(language)

        def create(con: Any) -> tuple[Any, ...]:
            con.execute("SELECT pg_advisory_xact_lock(%s, %s)", [LOCK_WORKSPACE, hash32(workspace)])
            if con.execute(
                "SELECT 1 FROM hybridkb.hybridkb_collections WHERE workspace = %s AND name = %s",
                [workspace, name],
            ).fetchone():
                raise collection_exists(name)
            con.execute(
                "INSERT INTO hybridkb.hybridkb_workspaces (name) VALUES (%s) ON CONFLICT (name) DO NOTHING",
                [workspace],
            )
            (ws_id,) = con.execute(
                "SELECT id FROM hybridkb.hybridkb_workspaces WHERE name = %s", [workspace]
            ).fetchone()
            schema = workspace_schema(int(ws_id))
            try:
                with con.transaction():  # a savepoint: a racing creator may have just made it
                    con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            except (pg_errors.UniqueViolation, pg_errors.DuplicateSchema):
                pass
            row = con.execute(
                "INSERT INTO hybridkb.hybridkb_collections"
                " (workspace, workspace_id, name, model, dim, chunking, language, text_config,"
                " embedding) VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s::jsonb)"
                f" RETURNING {self._CATALOG_COLUMNS}",
                [
                    workspace,
                    ws_id,
                    name,
                    model,
                    dim,
                    dumps(chunking),
                    language,
                    config,
                    dumps(recipe) if recipe else None,
                ],
            ).fetchone()
            create_collection_tables(con, schema, int(row[0]), dim, config)
            return tuple(row)

        return self._record(self._write_named(create, name))

    def _write_named(self, fn: Callable[[Any], T], name: str) -> T:
        """``_write`` a catalog row named ``name``: the catalog's unique constraint (a
        racing writer took the name) becomes CollectionExists."""
        try:
            return self._write(fn)
        except BackendError as exc:
            if isinstance(exc.__cause__, pg_errors.UniqueViolation):
                raise collection_exists(name) from exc
            raise

    def get_collection(self, workspace: str, name: str) -> CollectionRecord | None:
        """See :meth:`hybridkb.storage.base.Storage.get_collection`."""
        rows = self._query(
            f"SELECT {self._CATALOG_COLUMNS} FROM hybridkb.hybridkb_collections"
            " WHERE workspace = %s AND name = %s",
            [workspace, name],
        )
        return self._record(rows[0]) if rows else None

    def list_collections(self, workspace: str, *, staged: bool = False) -> list[CollectionRecord]:
        """See :meth:`hybridkb.storage.base.Storage.list_collections`."""
        rows = self._query(
            f"SELECT {self._CATALOG_COLUMNS} FROM hybridkb.hybridkb_collections WHERE workspace = %s"
            " ORDER BY name",
            [workspace],
        )
        return listed((self._record(r) for r in rows), staged=staged)

    def list_workspaces(self) -> list[str]:
        """Workspaces that hold at least one (complete) collection."""
        return [
            r[0]
            for r in self._query(
                "SELECT DISTINCT workspace FROM hybridkb.hybridkb_collections"
                " WHERE strpos(name, %s) = 0 ORDER BY workspace",
                [STAGING_MARK],
            )
        ]

    def rename_collection(self, coll: CollectionRecord, name: str) -> CollectionRecord:
        """See :meth:`hybridkb.storage.base.Storage.rename_collection`."""

        def rename(con: Any) -> tuple[Any, ...] | None:
            row = con.execute(
                "UPDATE hybridkb.hybridkb_collections SET name = %s, updated_at = now()"
                f" WHERE id = %s RETURNING {self._CATALOG_COLUMNS}",
                [name, coll.id],
            ).fetchone()
            return None if row is None else tuple(row)

        row = self._write_named(rename, name)
        if row is None:
            raise collection_gone(coll.name)
        return self._record(row)

    def drop_collection(self, coll: CollectionRecord) -> None:
        t = self.tables(coll)
        schema = t["documents"].split(".")[0]

        def drop(con: Any) -> None:
            self._emit(con, WriteEvent("drop", coll))
            drop_collection_tables(con, schema, coll.id)
            drop_sources(con, coll.id)
            con.execute("DELETE FROM hybridkb.hybridkb_collections WHERE id = %s", [coll.id])

        self._write(drop, coll)
        self._schemas.pop(coll.id, None)

    # -- documents ------------------------------------------------------------------

    def get_document(self, coll: CollectionRecord, document_id: str) -> DocumentRecord | None:
        """See :meth:`hybridkb.storage.base.Storage.get_document`."""
        t = self.tables(coll)
        rows = self._query(
            f"SELECT {DOC_COLUMNS} FROM {t['documents']} WHERE document_id = %s",
            [clean(document_id)],
            coll,
        )
        return document_record(rows[0]) if rows else None

    def list_documents(
        self,
        coll: CollectionRecord,
        *,
        limit: int = 100,
        offset: int = 0,
        where: Filter | None = None,
    ) -> list[DocumentRecord]:
        """See :meth:`hybridkb.storage.base.Storage.list_documents`."""
        t = self.tables(coll)
        matching, params = where_sql(where)
        rows = self._query(
            f"SELECT {DOC_COLUMNS} FROM {t['documents']} WHERE {matching}"
            " ORDER BY added_at, document_id LIMIT %s OFFSET %s",
            [*params, limit, offset],
            coll,
        )
        return [document_record(r) for r in rows]

    def put_documents(self, coll: CollectionRecord, items: Sequence[PutItem]) -> None:
        """Replace several documents in ONE transaction (all or none)."""
        if not items:
            return
        t = self.tables(coll)
        ids = [clean(item.document.document_id) or "" for item in items]
        refuse_repeated_ids(ids)
        doc_rows: list[tuple[Any, ...]] = []
        new_chunks: list[tuple[Any, ...]] = []
        n_chunks = new_len = 0
        for item, doc_id in zip(items, ids, strict=True):
            doc_rows.append(document_row(item.document, doc_id, len(item.chunks)))
            rows, length = chunk_rows(coll, doc_id, item.chunks, item.vectors)
            new_chunks += rows
            new_len += length
            n_chunks += len(item.chunks)

        def put(con: Any) -> int:
            lock_documents(con, coll.id, ids)
            old_n, old_len = delete_rows(con, t, ids)
            copy_rows(con, t, doc_rows, new_chunks, self._vector_oid)
            for item in items:
                self._emit(
                    con,
                    WriteEvent(
                        "put", coll, [item.document.document_id], item.document, item.chunks
                    ),
                )
            return self._bump(con, coll, n_chunks - old_n, new_len - old_len)

        self._index_when_large(coll, self._write(put, coll))

    def put_document_stream(
        self,
        coll: CollectionRecord,
        doc: DocumentRecord,
        batches: Iterable[tuple[Sequence[ChunkRecord], np.ndarray]],
    ) -> int:
        """Replace one (huge) document from a stream of chunk batches, in ONE transaction.

        Memory stays bounded by a batch; the graph hook gets the document without chunks.
        """
        t = self.tables(coll)
        doc_id = clean(doc.document_id) or ""

        def put(con: Any) -> tuple[int, int]:
            lock_documents(con, coll.id, [doc_id])
            old_n, old_len = delete_rows(con, t, [doc_id])
            count = total = 0
            for chunks, vectors in batches:
                if not chunks:
                    continue
                rows, length = chunk_rows(coll, doc_id, chunks, vectors)
                copy_rows(con, t, [], rows, self._vector_oid)
                count += len(chunks)
                total += length
            copy_rows(con, t, [document_row(doc, doc_id, count)], [], self._vector_oid)
            self._emit(con, WriteEvent("put", coll, [doc.document_id], doc, []))
            return count, self._bump(con, coll, count - old_n, total - old_len)

        count, n_chunks = self._write(put, coll)
        self._index_when_large(coll, n_chunks)
        return int(count)

    @staticmethod
    def _bump(con: Any, coll: CollectionRecord, d_chunks: int, d_len: int) -> int:
        """Move the catalog's generation and BM25 totals; the collection's chunks now."""
        # Last statement of a write: the catalog row lock is held only until commit.
        row = con.execute(
            "UPDATE hybridkb.hybridkb_collections SET generation = generation + 1, updated_at = now(),"
            " n_chunks = n_chunks + %s, total_len = total_len + %s WHERE id = %s RETURNING n_chunks",
            [d_chunks, d_len, coll.id],
        ).fetchone()
        if row is None:
            raise CollectionNotFound(f"collection {coll.name!r} was dropped by another process")
        return int(row[0])

    def _index_when_large(self, coll: CollectionRecord, n_chunks: int) -> None:
        """Past the exact-scan size, the collection gets its HNSW index (once, after the
        write committed; schema.build_vector_index)."""
        if n_chunks <= pg_search.EXACT_SCAN_ROWS or coll.id in self._indexed:
            return
        schema = self.tables(coll)["chunks"].split(".")[0]
        try:
            built = self._read(lambda con: build_vector_index(con, schema, coll.id), coll)
        except BackendError as exc:
            if not isinstance(exc.__cause__, pg_errors.InsufficientPrivilege):
                raise
            built = True  # not the table's owner: its owner's writes build it
        if built:
            self._indexed.add(coll.id)

    def delete_documents(self, coll: CollectionRecord, document_ids: Sequence[str]) -> list[str]:
        """See :meth:`hybridkb.storage.base.Storage.delete_documents`."""
        t = self.tables(coll)
        ids = list(dict.fromkeys(document_ids))
        cleaned = [clean(i) for i in ids]

        def delete(con: Any) -> list[str]:
            lock_documents(con, coll.id, [i or "" for i in cleaned])
            found = [
                r[0]
                for r in con.execute(
                    f"SELECT document_id FROM {t['documents']} WHERE document_id = ANY(%s)",
                    [cleaned],
                ).fetchall()
            ]
            if not found:
                return []
            n, total = delete_rows(con, t, found)
            self._emit(con, WriteEvent("delete", coll, found))
            self._bump(con, coll, -n, -total)
            return found

        found = set(self._write(delete, coll))
        return [i for i, c in zip(ids, cleaned, strict=True) if c in found]

    def stats_many(self, colls: Sequence[CollectionRecord]) -> dict[int, CollectionStats]:
        """See :meth:`hybridkb.storage.base.Storage.stats_many`."""
        return {c.id: self.stats(c) for c in colls}

    def prepare(self, coll: CollectionRecord) -> None:
        """See :meth:`hybridkb.storage.base.Storage.prepare`."""
        return None  # the indexes live in the server; nothing to load here

    def stats(self, coll: CollectionRecord) -> CollectionStats:
        """See :meth:`hybridkb.storage.base.Storage.stats`."""
        t = self.tables(coll)
        rows = self._query(
            f"SELECT (SELECT count(*) FROM {t['documents']}),"
            f" (SELECT count(*) FROM {t['chunks']}),"
            " (SELECT coalesce(sum(pg_total_relation_size(r)), 0) FROM unnest(%s::regclass[]) r),"
            " (SELECT updated_at FROM hybridkb.hybridkb_collections WHERE id = %s)",
            [list(t.values()), coll.id],
            coll,
        )
        docs, chunks, nbytes, updated = rows[0]
        langs = [
            r[0]
            for r in self._query(
                f"SELECT language FROM {t['documents']} WHERE language IS NOT NULL"
                " GROUP BY language ORDER BY count(*) DESC, language",
                None,
                coll,
            )
        ]
        return CollectionStats(
            documents=int(docs),
            chunks=int(chunks),
            languages=langs,
            bytes=int(nbytes),
            updated_at=timestamp(updated),
        )
