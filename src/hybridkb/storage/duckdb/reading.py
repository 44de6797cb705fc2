"""The DuckDB backend's read side: document rows, searches, fetches and exports.

:class:`DuckDBReads` answers the protocol's reads of a collection: document rows from
the tables, the searches from the derived in-memory indexes (``memory.py``), chunk rows
and vectors by key, and the bulk export for copies and the SQL tool. Its own module
because these reads share only the engine and the derived indexes with the writes and
the catalog of ``storage.py``, which inherits them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import numpy as np

from ...text.filters import Filter, to_sql
from ..base import ChunkRecord, CollectionRecord, DocumentRecord, Exported, Ranked
from ..boundary import driver_errors
from ..columns import EXPORT_CHUNKS, EXPORT_DOCUMENTS, Table
from ..records import chunk_record, document_record
from .bulk import fetch_vectors_sql
from .connection import translate
from .engine import Engine
from .memory import Derived
from .rows import CHUNK_COLUMNS, DOC_SELECT, SQL_ID_LIST, TEXT_TIME, count, json_list, key_list_sql
from .schema import table_names

# Document ids inlined into SQL as literals: letters, digits and a few marks only (no
# quote, backslash or control character can reach the statement).
SAFE_LITERAL = re.compile(r"[A-Za-z0-9._:@+-]{1,200}")


@driver_errors(translate)
class DuckDBReads:
    """The reads of the Storage protocol over one open file (``engine``) and its derived
    indexes (``derived``)."""

    def __init__(self, engine: Engine, derived: Derived) -> None:
        self.engine = engine
        self.derived = derived

    # -- documents ------------------------------------------------------------------

    def get_document(self, coll: CollectionRecord, document_id: str) -> DocumentRecord | None:
        """See :meth:`hybridkb.storage.base.Storage.get_document`."""
        t = table_names(coll.id)
        if SAFE_LITERAL.fullmatch(document_id):
            # Inlined: binding a parameter costs DuckDB ~0.5 ms (a failed pandas import),
            # as much as the query, and add_texts asks once per text.
            where, params = f"document_id = '{document_id}'", []
        else:
            where, params = "document_id = ?", [document_id]
        rows = self.engine.query(f"SELECT {DOC_SELECT} FROM {t['documents']} WHERE {where}", params)
        return document_record(rows[0]) if rows else None

    def get_documents(
        self, coll: CollectionRecord, document_ids: Sequence[str]
    ) -> dict[str, DocumentRecord]:
        """See :meth:`hybridkb.storage.base.Storage.get_documents`: one statement (a point
        lookup costs ~0.4 ms of CPU, the most of adding a short text)."""
        if not document_ids:
            return {}
        rows = self.engine.query(
            f"SELECT {DOC_SELECT} FROM {table_names(coll.id)['documents']}"
            f" WHERE document_id IN {SQL_ID_LIST}",
            [json_list(document_ids)],
        )
        return {str(r[0]): document_record(r) for r in rows}

    def list_documents(
        self,
        coll: CollectionRecord,
        *,
        limit: int = 100,
        offset: int = 0,
        where: Filter | None = None,
    ) -> list[DocumentRecord]:
        """See :meth:`hybridkb.storage.base.Storage.list_documents`."""
        t = table_names(coll.id)
        matching, params = to_sql(where) if where is not None else ("TRUE", [])
        # The page is picked first and only its rows' times turned into text: DuckDB
        # casts a TIMESTAMPTZ through the time zone, 2 µs a row, and cast every row
        # before the LIMIT (20 ms of a 51-document page of 10k documents).
        rows = self.engine.query(
            f"SELECT {DOC_SELECT} FROM (SELECT * FROM {t['documents']} WHERE {matching}"
            " ORDER BY added_at, document_id LIMIT ? OFFSET ?) ORDER BY added_at, document_id",
            [*params, limit, offset],
        )
        return [document_record(r) for r in rows]

    # -- search ---------------------------------------------------------------------
    # int8 candidates alone matched exact float32 search on SciFact (nDCG +0.0007,
    # recall@10 0.99: bench/vector.py), so no exact re-ranking from the table.

    def keyword_search(
        self, coll: CollectionRecord, terms: Sequence[str], k: int, where: Filter | None
    ) -> Ranked:
        """See :meth:`hybridkb.storage.base.Storage.keyword_search`."""
        if not terms:
            return []
        idx = self.derived.indexes_for(coll)
        return idx.keyword.search(list(terms), k, allowed=self.derived.allowed(coll, where))

    def prepare(self, coll: CollectionRecord) -> None:
        """See :meth:`hybridkb.storage.base.Storage.prepare`."""
        self.derived.indexes_for(coll)  # the snapshot, or a build from the tables

    def vector_search(
        self, coll: CollectionRecord, query: np.ndarray, k: int, where: Filter | None
    ) -> Ranked:
        """See :meth:`hybridkb.storage.base.Storage.vector_search`."""
        idx = self.derived.indexes_for(coll)
        return idx.vector.search(query, k, allowed=self.derived.allowed(coll, where))

    def filter_search(
        self,
        coll: CollectionRecord,
        terms: Sequence[str],
        query: np.ndarray,
        k: int,
        where: Filter | None,
    ) -> Ranked:
        """See :meth:`hybridkb.storage.base.Storage.filter_search`."""
        if not terms:
            return []
        idx = self.derived.indexes_for(coll)
        allowed = idx.keyword.matching(list(terms))
        narrowed = self.derived.allowed(coll, where)
        if narrowed is not None:
            allowed = np.intersect1d(allowed, narrowed)
        if len(allowed) == 0:
            return []
        return idx.vector.search(query, k, allowed=allowed)

    def fetch_chunks(self, coll: CollectionRecord, keys: Sequence[int]) -> dict[int, ChunkRecord]:
        """See :meth:`hybridkb.storage.base.Storage.fetch_chunks`."""
        return self.derived.fetch_chunks(coll, keys)

    def vector_directions(self, coll: CollectionRecord, keys: Sequence[int]) -> np.ndarray:
        # From the loaded index (SciFact: 0.02 ms instead of a 1 ms query).
        """See :meth:`hybridkb.storage.base.Storage.vector_directions`."""
        found = self.derived.indexes_for(coll).vector.directions(np.asarray(keys, np.int64))
        return found if found is not None else self.fetch_vectors(coll, keys)

    def fetch_vectors(self, coll: CollectionRecord, keys: Sequence[int]) -> np.ndarray:
        """Full-precision vectors in the order of ``keys`` (for exact re-ranking)."""
        t = table_names(coll.id)
        key_list = [int(k) for k in np.asarray(keys).tolist()]
        in_keys, params = key_list_sql(key_list)
        with self.engine.lock:
            got, mat = fetch_vectors_sql(
                self.engine.con,
                f"SELECT key, embedding FROM {t['vectors']} WHERE key IN {in_keys}",
                coll.dim,
                params,
            )
        pos = {int(k): i for i, k in enumerate(got)}
        out = np.zeros((len(key_list), coll.dim), dtype=np.float32)
        for i, k in enumerate(key_list):
            j = pos.get(k)
            if j is not None:
                out[i] = mat[j]
        return out

    # -- export ---------------------------------------------------------------------

    def export_documents(self, coll: CollectionRecord, *, batch: int = 200) -> Iterator[Exported]:
        """See :meth:`hybridkb.storage.base.Storage.export_documents`."""
        t = table_names(coll.id)
        offset = 0
        while True:
            docs = self.list_documents(coll, limit=batch, offset=offset)
            if not docs:
                return
            offset += len(docs)
            rows = self.engine.query(
                f"SELECT {CHUNK_COLUMNS}, terms FROM {t['chunks']}"
                f" WHERE document_id IN {SQL_ID_LIST} ORDER BY document_id, chunk_index",
                [json_list(d.document_id for d in docs)],
            )
            by_doc: dict[str, list[ChunkRecord]] = {}
            for r in rows:
                by_doc.setdefault(r[2], []).append(chunk_record(r, r[15] or ()))
            # The page's vectors in one query: one per document was two thirds of an
            # export (a copy to PostgreSQL ran at half the ingest rate).
            keys = [c.key for d in docs for c in by_doc.get(d.document_id, [])]
            vectors = self.fetch_vectors(coll, keys)
            at = 0
            for d in docs:
                chunks = by_doc.get(d.document_id, [])
                yield d, chunks, vectors[at : at + len(chunks)]
                at += len(chunks)

    def export_tables(
        self, coll: CollectionRecord, document_ids: Sequence[str] | None = None
    ) -> tuple[Table, Table]:
        """The collection's rows for read-only SQL (see Storage.export_tables)."""
        t = table_names(coll.id)
        where, params = "", []
        if document_ids is not None:
            where, params = f" WHERE document_id IN {SQL_ID_LIST}", [json_list(document_ids)]
        with self.engine.lock:
            docs = self.engine.con.execute(
                "SELECT document_id, filename, path, source, metadata::VARCHAR AS metadata,"
                f" language, bytes, chunk_count, {TEXT_TIME.format('added_at')}"
                f" FROM {t['documents']}{where} ORDER BY added_at, document_id",
                params,
            ).fetchall()
            chunks = self.engine.con.execute(
                "SELECT document_id, chunk_id, chunk_index, text, page, section, char_start,"
                " char_end, language, filename, path, metadata::VARCHAR AS metadata,"
                f" {TEXT_TIME.format('added_at')} FROM {t['chunks']}{where}"
                " ORDER BY document_id, chunk_index",
                params,
            ).fetchall()
        return Table.from_rows(EXPORT_DOCUMENTS, docs), Table.from_rows(EXPORT_CHUNKS, chunks)

    def document_fingerprints(self, coll: CollectionRecord) -> dict[str, str]:
        """See :meth:`hybridkb.storage.base.Storage.document_fingerprints`: DuckDB's own
        64-bit hash of the row (a twentieth of the CPU of the md5 Postgres uses)."""
        rows = self.engine.query(
            "SELECT document_id, hash(content_hash, signature, metadata, path, filename,"
            " source, language, bytes, chunk_count, added_at)"
            f" FROM {table_names(coll.id)['documents']}"
        )
        return {str(doc_id): str(digest) for doc_id, digest in rows}

    def count_vectors(self, coll: CollectionRecord) -> int:
        """See :meth:`hybridkb.storage.base.Storage.count_vectors`."""
        with self.engine.lock:
            return count(self.engine.con, table_names(coll.id)["vectors"])
