"""PostgreSQL + pgvector backend: many processes read and write one knowledge base.

One class implements the whole storage protocol (about 670 lines, over our usual
size: the protocol is wide); the SQL it runs lives beside it in ``rows.py`` (writes and
reads of rows), ``search.py`` (BM25 and nearest neighbours), ``schema.py`` (tables and
migrations), ``connection.py`` (connecting, errors) and ``graph.py`` (the graph tables).

Search runs in SQL, so every process sees every committed write at once:

* keyword: BM25 over a postings table (term, key, tf, dl) with the same formula,
  k1 and b as the in-memory index of the DuckDB backend (:mod:`hybridkb.index.keyword`),
  and N / avgdl from the catalog row, which every write updates in its own
  transaction. Ranking therefore matches the DuckDB backend, not ``ts_rank``'s.
* vector: exact cosine scan while a collection is small (``exact_scan_rows``), else the
  HNSW index with pgvector's iterative scan for filters, falling back to an exact
  scan of the filtered rows whenever the index returns fewer than k.

Writers serialise per document on an advisory lock, so concurrent adds of the same
document end with it stored once; readers never wait for writers (MVCC).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

from ...errors import BackendError, CollectionNotFound, MissingDependency
from ...filters import Filter
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
    Ranked,
    Reembedding,
    WriteEvent,
    WriteHook,
)
from ..boundary import driver_errors
from ..columns import EXPORT_CHUNKS, EXPORT_DOCUMENTS, Table
from ..records import (
    CHUNK_COLUMNS,
    DOC_COLUMNS,
    chunk_record,
    collection_record,
    document_record,
    timestamp,
)
from ..shared import (
    OPENED_READ_ONLY,
    STAGING_MARK,
    StorageDefaults,
    collection_exists,
    collection_gone,
    listed,
    refuse_repeated_ids,
)
from . import search as pg_search
from .binary import QueryVector
from .connection import connect, pg_errors, plain_url, prepare, psycopg, reader_role, translate
from .graph import PostgresGraphSQL
from .hybrid import PostgresHybrid
from .maintenance import PostgresMaintenance
from .pool import DEFAULT_SIZE as DEFAULT_POOL_SIZE
from .pool import ConnectionPool
from .rows import (
    chunk_rows,
    clean,
    copy_rows,
    delete_rows,
    document_row,
    dumps,
    hash32,
    lock_documents,
    parse_binary_vector,
)
from .schema import (
    LOCK_WORKSPACE,
    build_vector_index,
    create_collection_tables,
    drop_collection_tables,
    table_names,
    text_config,
    workspace_schema,
)
from .search import EF_MAX, EF_MIN, bm25_sql, nearest_rows, where_sql
from .sources import PostgresSources, drop_sources

T = TypeVar("T")


@driver_errors(translate)
class PostgresStorage(PostgresSources, StorageDefaults):
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
        self.url = plain_url(url)
        self.read_only = read_only
        self.capabilities = Capabilities(
            name="postgres",
            persistent=True,
        )
        self.hooks: list[WriteHook] = []
        self.graph_sql: GraphSQL | None = PostgresGraphSQL()
        self.maintenance: Maintenance | None = PostgresMaintenance(self)
        self.reembedding: Reembedding | None = None  # see maintenance.py: not offered yet
        self.hybrid: HybridSearch | None = PostgresHybrid(self._read, self.tables, self._set_ef)
        self._connect_timeout = connect_timeout
        self._ef: dict[int, int] = {}  # id(connection) -> its hnsw.ef_search
        self._schemas: dict[int, str] = {}  # collection id -> workspace schema
        self._indexed: set[int] = set()  # collections whose HNSW index is known valid
        self.schema_version = 0
        self._vector_oid = 0
        self.reader: str | None = None  # the role, when it may only read (reader_role)
        PostgresSources.__init__(self, self._read, self._write)
        self._pool = ConnectionPool(self._open_connection, pool_size)
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

    # -- plumbing -------------------------------------------------------------------

    def _open_connection(self) -> Any:
        """A new connection, ready (see connection.prepare); the pool calls it."""
        con = connect(self.url, self._connect_timeout)
        try:
            version, self.pgvector_version, self._vector_oid = prepare(
                con, self.url, read_only=self.read_only
            )
        except BaseException:
            con.close()
            raise
        self.schema_version = version
        self._ef[id(con)] = 0
        if not self.read_only:
            self.reader = reader_role(con)
            if self.reader is not None:  # a role that may only read: a read-only store
                self.read_only = True
                con.execute("SET default_transaction_read_only = on")
        return con

    def _has_recipes(self) -> bool:
        return bool(
            self._query(
                "SELECT 1 FROM information_schema.columns WHERE table_schema = 'hybridkb'"
                " AND table_name = 'hybridkb_collections' AND column_name = 'embedding'"
            )
        )

    def close(self) -> None:
        """See :meth:`hybridkb.storage.base.Storage.close`."""
        self._pool.close()

    def write_refusal(self) -> str:
        """See :meth:`hybridkb.storage.base.Storage.write_refusal`: a role that may only
        read is named, with the way to write."""
        if self.reader is None:
            return OPENED_READ_ONLY
        return (
            f"role {self.reader!r} may only read this knowledge base; connect with a writer "
            "role to change it (README: A team server)"
        )

    @contextlib.contextmanager
    def _errors(self, coll: CollectionRecord | None = None) -> Iterator[None]:
        """Translate driver errors at the boundary, keeping the cause."""
        try:
            yield
        except pg_errors.UndefinedTable as exc:
            if coll is not None:
                raise CollectionNotFound(
                    f"collection {coll.name!r} was dropped by another process; create it again"
                ) from exc
            raise BackendError(f"PostgreSQL: {exc}") from exc
        except (pg_errors.ReadOnlySqlTransaction, pg_errors.InsufficientPrivilege) as exc:
            if self.reader is None:
                raise translate(exc) or BackendError(str(exc)) from exc
            raise BackendError(self.write_refusal()) from exc
        except psycopg.Error as exc:
            mapped = translate(exc)
            assert mapped is not None
            raise mapped from exc

    def _read(self, fn: Callable[[Any], T], coll: CollectionRecord | None = None) -> T:
        """Run a read on a pooled connection; one retry on a fresh connection when the
        old one died under it (a server restart), unless inside a transaction."""
        retry = not self._pool.held()
        for attempt in (1, 2):
            with self._pool.connection() as con:
                try:
                    with self._errors(coll):
                        return fn(con)
                except BackendError as exc:
                    lost = isinstance(exc.__cause__, psycopg.OperationalError) and con.broken
                    if attempt == 2 or not (lost and retry):
                        raise
        raise AssertionError("unreachable")

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one statement (``%s`` placeholders) and return its rows (for modules beside the core)."""

        def run(con: Any) -> list[tuple[Any, ...]]:
            cur = con.execute(sql, params)
            return cur.fetchall() if cur.description is not None else []

        return self._read(run)

    def transaction(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn(connection)`` in one transaction; ``connection.execute`` takes ``%s`` params."""
        return self._write(fn)

    def _query(
        self, sql: str, params: Sequence[Any] | None = None, coll: CollectionRecord | None = None
    ) -> list[tuple[Any, ...]]:
        return self._read(lambda con: con.execute(sql, params).fetchall(), coll)

    def _write(self, fn: Callable[[Any], T], coll: CollectionRecord | None = None) -> T:
        with self._pool.connection() as con, self._errors(coll), con.transaction():
            return fn(con)

    def _emit(self, con: Any, event: WriteEvent) -> None:
        for hook in self.hooks:
            hook(con, event)

    def tables(self, coll: CollectionRecord) -> dict[str, str]:
        schema = self._schemas.get(coll.id)
        if schema is None:
            rows = self._query(
                "SELECT workspace_id FROM hybridkb.hybridkb_collections WHERE id = %s", [coll.id]
            )
            if not rows:
                raise CollectionNotFound(
                    f"collection {coll.name!r} was dropped by another process; create it again"
                )
            schema = self._schemas[coll.id] = workspace_schema(int(rows[0][0]))
        return table_names(schema, coll.id)

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

    # -- search ---------------------------------------------------------------------

    def keyword_search(
        self, coll: CollectionRecord, terms: Sequence[str], k: int, where: Filter | None
    ) -> Ranked:
        """See :meth:`hybridkb.storage.base.Storage.keyword_search`."""
        terms = list(dict.fromkeys(clean(x) or "" for x in terms))
        if not terms or k <= 0:
            return []
        sql, params = bm25_sql(self.tables(coll), coll.id, terms, k, where)
        rows = self._query(sql, params, coll)
        return [(int(key), float(score)) for key, score in rows]

    def _set_ef(self, con: Any, k: int) -> None:
        ef = min(EF_MAX, max(EF_MIN, k))
        if ef != self._ef.get(id(con)):
            con.execute(f"SET hnsw.ef_search = {int(ef)}")
            self._ef[id(con)] = ef

    def _nearest(
        self, coll: CollectionRecord, query: np.ndarray, k: int, predicate: str, params: list[Any]
    ) -> Ranked:
        if k <= 0:
            return []
        t = self.tables(coll)
        q = QueryVector(query)
        rows = self._read(
            lambda con: nearest_rows(con, t, coll.id, q, k, predicate, params, self._set_ef),
            coll,
        )
        return [(int(key), float(score)) for key, score in rows]

    def vector_search(
        self, coll: CollectionRecord, query: np.ndarray, k: int, where: Filter | None
    ) -> Ranked:
        """See :meth:`hybridkb.storage.base.Storage.vector_search`."""
        predicate, params = where_sql(where)
        return self._nearest(coll, query, k, predicate, params)

    def filter_search(
        self,
        coll: CollectionRecord,
        terms: Sequence[str],
        query: np.ndarray,
        k: int,
        where: Filter | None,
    ) -> Ranked:
        """See :meth:`hybridkb.storage.base.Storage.filter_search`."""
        terms = list(dict.fromkeys(clean(x) or "" for x in terms))
        if not terms:
            return []
        t = self.tables(coll)
        predicate, params = where_sql(where)
        predicate = f"key IN (SELECT key FROM {t['postings']} WHERE term = ANY(%s)) AND {predicate}"
        return self._nearest(coll, query, k, predicate, [terms, *params])

    def fetch_chunks(self, coll: CollectionRecord, keys: Sequence[int]) -> dict[int, ChunkRecord]:
        """See :meth:`hybridkb.storage.base.Storage.fetch_chunks`."""
        if not len(keys):
            return {}
        t = self.tables(coll)
        rows = self._query(
            f"SELECT {CHUNK_COLUMNS} FROM {t['chunks']} WHERE key = ANY(%s)",
            [[int(k) for k in keys]],
            coll,
        )
        return {int(r[0]): chunk_record(r) for r in rows}

    def vector_directions(self, coll: CollectionRecord, keys: Sequence[int]) -> np.ndarray:
        """See :meth:`hybridkb.storage.base.Storage.vector_directions`."""
        return self.fetch_vectors(coll, keys)  # the server holds no faster copy

    def fetch_vectors(self, coll: CollectionRecord, keys: Sequence[int]) -> np.ndarray:
        """Full-precision vectors in the order of ``keys`` (zeros for unknown keys)."""
        t = self.tables(coll)
        key_list = [int(k) for k in np.asarray(keys).reshape(-1).tolist()]
        out = np.zeros((len(key_list), coll.dim), dtype=np.float32)
        if not key_list:
            return out
        rows = self._read(
            lambda con: con.execute(
                f"SELECT key, embedding FROM {t['chunks']} WHERE key = ANY(%s)",
                [key_list],
                binary=True,  # pgvector's binary form: no text to print and parse
            ).fetchall(),
            coll,
        )
        pos = {int(k): parse_binary_vector(v) for k, v in rows}
        for i, k in enumerate(key_list):
            vec = pos.get(k)
            if vec is not None:
                out[i] = vec
        return out

    # -- bulk export (copy between backends) ------------------------------------------

    def export_documents(
        self, coll: CollectionRecord, *, batch: int = 200
    ) -> Iterator[tuple[DocumentRecord, list[ChunkRecord], np.ndarray]]:
        """Every document with its chunks (terms included) and vectors, in batches of
        documents by id (each batch one index range: no OFFSET rescanning what came before;
        vectors in binary)."""
        t = self.tables(coll)
        after: str | None = None
        while True:
            docs = [
                document_record(r)
                for r in self._query(
                    f"SELECT {DOC_COLUMNS} FROM {t['documents']}"
                    + ("" if after is None else " WHERE document_id > %s")
                    + " ORDER BY document_id LIMIT %s",
                    [batch] if after is None else [after, batch],
                    coll,
                )
            ]
            if not docs:
                return
            after = docs[-1].document_id
            ids = [d.document_id for d in docs]

            def chunks_of(con: Any, ids: list[str] = ids) -> list[tuple[Any, ...]]:
                return list(
                    con.execute(
                        f"SELECT {CHUNK_COLUMNS}, terms, embedding FROM {t['chunks']}"
                        " WHERE document_id = ANY(%s) ORDER BY document_id, chunk_index",
                        [ids],
                        binary=True,
                    ).fetchall()
                )

            rows = self._read(chunks_of, coll)
            by_doc: dict[str, list[tuple[Any, ...]]] = {}
            for r in rows:
                by_doc.setdefault(r[2], []).append(r)
            for d in docs:
                mine = by_doc.get(d.document_id, [])
                chunks = [chunk_record(r, list(r[15] or [])) for r in mine]
                vecs = (
                    np.stack([parse_binary_vector(r[16]) for r in mine])
                    if mine
                    else np.zeros((0, coll.dim), np.float32)
                )
                yield d, chunks, vecs

    def consistency(self, coll: CollectionRecord) -> dict[str, int]:
        """Counts that must agree after any mix of concurrent writes (used by tests and copy)."""
        t = self.tables(coll)
        row = self._query(
            f"SELECT (SELECT count(*) FROM {t['documents']}),"
            f" (SELECT coalesce(sum(chunk_count), 0) FROM {t['documents']}),"
            f" (SELECT count(*) FROM {t['chunks']}),"
            f" (SELECT count(DISTINCT chunk_id) FROM {t['chunks']}),"
            f" (SELECT coalesce(sum(cardinality(terms)), 0) FROM {t['chunks']}),"
            f" (SELECT count(*) FROM {t['postings']}),"
            f" (SELECT count(*) FROM (SELECT DISTINCT u.term, c.key FROM {t['chunks']} c,"
            " unnest(c.terms) u(term)) x),"
            " n_chunks, total_len FROM hybridkb.hybridkb_collections WHERE id = %s",
            [coll.id],
            coll,
        )[0]
        names = (
            "documents",
            "document_chunk_count",
            "chunks",
            "distinct_chunk_ids",
            "terms",
            "postings",
            "expected_postings",
            "stat_chunks",
            "stat_total_len",
        )
        return {n: int(v) for n, v in zip(names, row, strict=True)}

    def export_tables(
        self, coll: CollectionRecord, document_ids: Sequence[str] | None = None
    ) -> tuple[Table, Table]:
        """The collection's rows for read-only SQL (see Storage.export_tables)."""
        t = self.tables(coll)
        text = {"metadata": "metadata::text", "added_at": "added_at::text"}
        doc_cols = ", ".join(text.get(name, name) for name, _ in EXPORT_DOCUMENTS)
        chunk_cols = ", ".join(text.get(name, name) for name, _ in EXPORT_CHUNKS)
        where, params = "", []
        if document_ids is not None:
            where, params = " WHERE document_id = ANY(%s)", [list(document_ids)]

        def run(con: Any) -> tuple[Table, Table]:
            docs = con.execute(
                f"SELECT {doc_cols} FROM {t['documents']}{where} ORDER BY added_at, document_id",
                params,
            ).fetchall()
            chunks = con.execute(
                f"SELECT {chunk_cols} FROM {t['chunks']}{where} ORDER BY document_id, chunk_index",
                params,
            ).fetchall()
            return Table.from_rows(EXPORT_DOCUMENTS, docs), Table.from_rows(EXPORT_CHUNKS, chunks)

        return self._read(run, coll)

    def document_fingerprints(self, coll: CollectionRecord) -> dict[str, str]:
        """See :meth:`hybridkb.storage.base.Storage.document_fingerprints`."""
        sql = _fingerprints_sql(self.tables(coll)["documents"])
        rows = self._read(lambda con: con.execute(sql).fetchall(), coll)
        return {str(doc_id): str(digest) for doc_id, digest in rows}

    def count_vectors(self, coll: CollectionRecord) -> int:
        """See :meth:`hybridkb.storage.base.Storage.count_vectors`."""
        return int(self.consistency(coll)["chunks"])  # vectors live in the chunk rows (NOT NULL)


def _fingerprints_sql(documents: str) -> str:
    """SQL of each document's id and an md5 of its catalog row (document_fingerprints):
    every field length-prefixed, so no two different rows read the same."""
    fields = (
        "content_hash", "signature", "CAST(metadata AS VARCHAR)", "path", "filename",
        "source", "language", "CAST(bytes AS VARCHAR)", "CAST(chunk_count AS VARCHAR)",
        "CAST(added_at AS VARCHAR)",
    )  # fmt: skip
    row = " || '|' || ".join(
        f"CAST(length(coalesce({f}, '')) AS VARCHAR) || ':' || coalesce({f}, '')" for f in fields
    )
    return f"SELECT document_id, md5({row}) FROM {documents}"
