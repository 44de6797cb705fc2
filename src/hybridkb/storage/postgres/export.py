"""The PostgreSQL backend's bulk export: whole collections out, for copies and SQL.

:class:`PostgresExport` streams every document with its chunks and vectors (a copy
between backends), hands the tables to the read-only SQL tool, and gives the counts and
fingerprints that tell whether two stores hold the same rows. Its own module because
these reads walk whole collections, unlike the searches (``reading.py``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..base import ChunkRecord, CollectionRecord, DocumentRecord
from ..boundary import driver_errors
from ..columns import EXPORT_CHUNKS, EXPORT_DOCUMENTS, Table
from ..records import CHUNK_COLUMNS, DOC_COLUMNS, chunk_record, document_record
from .access import PostgresAccess
from .connection import translate
from .rows import parse_binary_vector


@driver_errors(translate)
class PostgresExport(PostgresAccess):
    """Bulk export of the Storage protocol over :class:`PostgresAccess`."""

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
