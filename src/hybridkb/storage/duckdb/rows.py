"""Rows of a collection's DuckDB tables: the SQL that writes, deletes and reads them.

Functions here take the connection of the caller's transaction, so the storage class,
the streamed writer (``stream.py``) and maintenance (``maintenance.py``) share one
definition of every statement.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np

from ..base import ChunkRecord, CollectionRecord, DocumentRecord
from ..records import CHUNK_COLUMNS as CHUNK_COLUMN_NAMES
from ..records import DOC_COLUMNS
from .bulk import TERMS_SQL, insert_vectors, joined_terms, json_payload, json_rows_sql
from .schema import table_names

# A list parameter bound as one JSON text (see json_list).
SQL_KEY_LIST = "(SELECT unnest(from_json(?, '[\"BIGINT\"]')))"
SQL_ID_LIST = "(SELECT unnest(from_json(?, '[\"VARCHAR\"]')))"

# Timestamps are read as DuckDB's text and turned into ISO 8601 by records.timestamp():
# a TIMESTAMPTZ value made DuckDB look its time zone up with pytz, whose first lookup in
# a process opens ~600 zone files (25-100 ms of a cold search, for the catalog alone).
TEXT_TIME = "CAST({0} AS VARCHAR) AS {0}_text"
# Select lists in the orders of records.DOC_COLUMNS and records.CHUNK_COLUMNS.
DOC_SELECT = DOC_COLUMNS.removesuffix("added_at") + TEXT_TIME.format("added_at")
CHUNK_COLUMNS = CHUNK_COLUMN_NAMES.removesuffix("added_at") + TEXT_TIME.format("added_at")

# DuckDB probes an ART index only for a constant IN list (up to index_scan_max_count,
# 2048 by default); a bound list becomes a hash semi-join that scans the table. Keys
# are integers we format ourselves, so inlining them cannot inject SQL. Measured for
# 10 of 1M chunks: 2.5 ms inline vs 22 ms bound (and no parameter binding, which
# costs DuckDB a failed `import pandas` per parameter).
INLINE_KEYS_MAX = 2048


def json_list(values: Iterable[Any]) -> str:
    """A list bound as one JSON parameter: binding a Python list costs DuckDB an import
    attempt per element (measured 59 ms vs 11 ms for 300 keys)."""
    return json.dumps([v if isinstance(v, str) else int(v) for v in values])


def key_list_sql(keys: Sequence[int]) -> tuple[str, list[Any]]:
    """``IN`` operand for chunk keys, and its parameters: inline integers when few."""
    if len(keys) <= INLINE_KEYS_MAX:
        return "(" + ",".join(str(int(k)) for k in keys) + ")", []
    return SQL_KEY_LIST, [json_list(keys)]


# The chunk columns a write sends (json_rows_sql), in the chunks table's order.
CHUNK_PAYLOAD = (
    ("key", "BIGINT"), ("chunk_id", "VARCHAR"), ("document_id", "VARCHAR"),
    ("chunk_index", "INTEGER"), ("text", "VARCHAR"), ("page", "INTEGER"),
    ("section", "VARCHAR"), ("char_start", "INTEGER"), ("char_end", "INTEGER"),
    ("content_hash", "VARCHAR"), ("language", "VARCHAR"), ("terms", "VARCHAR"),
    ("metadata", "VARCHAR"), ("filename", "VARCHAR"), ("path", "VARCHAR"),
)  # fmt: skip
DOC_PAYLOAD = (
    ("document_id", "VARCHAR"), ("path", "VARCHAR"), ("filename", "VARCHAR"),
    ("source", "VARCHAR"), ("content_hash", "VARCHAR"), ("signature", "VARCHAR"),
    ("metadata", "VARCHAR"), ("language", "VARCHAR"), ("bytes", "BIGINT"),
    ("chunk_count", "INTEGER"),
)  # fmt: skip
# The chunk columns of the chunks table from CHUNK_PAYLOAD rows (terms and metadata decoded).
CHUNK_VALUES = (
    "key, chunk_id, document_id, chunk_index, text, page, section, char_start, char_end,"
    f" content_hash, language, {TERMS_SQL.format('terms')} AS terms, metadata::JSON AS metadata,"
    " filename, path"
)


@dataclass(frozen=True)
class ChunkRows:
    """Chunks ready for one bulk insert: their scalar columns as the JSON parameter of
    ``json_rows_sql(CHUNK_PAYLOAD)``, their keys and their float32 vectors (row i, chunk i)."""

    payload: str
    keys: np.ndarray
    vectors: np.ndarray


def chunk_rows(
    coll: CollectionRecord, chunks: Sequence[ChunkRecord], vectors: np.ndarray
) -> ChunkRows:
    """Chunk rows for a bulk insert (far cheaper than executemany)."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1, coll.dim)
    if len(vectors) != len(chunks):
        raise ValueError("one vector per chunk is required")
    keys = [c.key for c in chunks]
    payload = json_payload(
        {
            "key": keys,
            "chunk_id": [c.chunk_id for c in chunks],
            "document_id": [c.document_id for c in chunks],
            "chunk_index": [c.chunk_index for c in chunks],
            "text": [c.text for c in chunks],
            "page": [c.page for c in chunks],
            "section": [c.section for c in chunks],
            "char_start": [c.char_start for c in chunks],
            "char_end": [c.char_end for c in chunks],
            "content_hash": [c.content_hash for c in chunks],
            "language": [c.language for c in chunks],
            "terms": [joined_terms(c.terms) for c in chunks],
            "metadata": [json.dumps(c.metadata) for c in chunks],
            "filename": [c.filename for c in chunks],
            "path": [c.path for c in chunks],
        }
    )
    return ChunkRows(payload, np.asarray(keys, dtype=np.int64), vectors)


def document_rows(docs: Sequence[DocumentRecord], chunk_counts: Sequence[int]) -> str:
    """Document rows as the JSON parameter of ``json_rows_sql(DOC_PAYLOAD)``."""
    return json_payload(
        {
            "document_id": [d.document_id for d in docs],
            "path": [d.path for d in docs],
            "filename": [d.filename for d in docs],
            "source": [d.source for d in docs],
            "content_hash": [d.content_hash for d in docs],
            "signature": [d.signature for d in docs],
            "metadata": [json.dumps(d.metadata) for d in docs],
            "language": [d.language for d in docs],
            "bytes": [d.bytes for d in docs],
            "chunk_count": list(chunk_counts),
        }
    )


def insert_rows(
    con: duckdb.DuckDBPyConnection, coll: CollectionRecord, docs: str, chunks: ChunkRows
) -> None:
    """Insert document, chunk and vector rows (see chunk_rows, document_rows)."""
    t = table_names(coll.id)
    con.execute(
        f"INSERT INTO {t['documents']} SELECT document_id, path, filename, source,"
        " content_hash, signature, metadata::JSON, language, bytes, chunk_count,"
        f" current_timestamp FROM {json_rows_sql(DOC_PAYLOAD)}",
        [docs],
    )
    if len(chunks.keys):
        con.execute(
            f"INSERT INTO {t['chunks']} SELECT {CHUNK_VALUES}, current_timestamp"
            f" FROM {json_rows_sql(CHUNK_PAYLOAD)}",
            [chunks.payload],
        )
        insert_vectors(con, t["vectors"], chunks.keys, chunks.vectors)


def existing_documents(
    con: duckdb.DuckDBPyConnection, coll: CollectionRecord, ids: Sequence[str]
) -> list[str]:
    t = table_names(coll.id)
    return [
        r[0]
        for r in con.execute(
            f"SELECT document_id FROM {t['documents']} WHERE document_id IN {SQL_ID_LIST}",
            [json_list(ids)],
        ).fetchall()
    ]


def delete_rows(
    con: duckdb.DuckDBPyConnection, coll: CollectionRecord, ids: Sequence[str]
) -> list[int]:
    """Delete the documents' rows from all three tables; return the chunk keys removed."""
    t = table_names(coll.id)
    keys = [
        int(r[0])
        for r in con.execute(
            f"SELECT key FROM {t['chunks']} WHERE document_id IN {SQL_ID_LIST}",
            [json_list(list(ids))],
        ).fetchall()
    ]
    if keys:
        in_keys, params = key_list_sql(keys)
        con.execute(f"DELETE FROM {t['vectors']} WHERE key IN {in_keys}", params)
        con.execute(f"DELETE FROM {t['chunks']} WHERE key IN {in_keys}", params)
        # Dead rows keep their space until the file is rewritten: count them (see close()).
        con.execute(
            "INSERT OR REPLACE INTO hybridkb_meta VALUES ('dead_chunks', CAST(? + coalesce("
            "(SELECT CAST(value AS BIGINT) FROM hybridkb_meta WHERE key = 'dead_chunks'), 0)"
            " AS VARCHAR))",
            [len(keys)],
        )
    con.execute(
        f"DELETE FROM {t['documents']} WHERE document_id IN {SQL_ID_LIST}",
        [json_list(list(ids))],
    )
    return keys


def bump_generation(con: duckdb.DuckDBPyConnection, coll: CollectionRecord) -> int:
    """Every write bumps its collection's generation in the same transaction."""
    row = con.execute(
        "UPDATE hybridkb_collections SET generation = generation + 1,"
        " updated_at = current_timestamp WHERE id = ? RETURNING generation",
        [coll.id],
    ).fetchone()
    assert row is not None
    return int(row[0])


def stats_sql(collection_id: int) -> str:
    """(id, documents, chunks, characters, languages by frequency) of one collection."""
    # Chunk offsets stand in for text length: summing strlen(text) reads every text.
    t = table_names(collection_id)
    return f"""SELECT {int(collection_id)},
        (SELECT count(*) FROM {t["documents"]}),
        (SELECT count(*) FROM {t["chunks"]}),
        (SELECT coalesce(sum(char_end - char_start), 0) FROM {t["chunks"]}),
        (SELECT list(language ORDER BY n DESC, language) FROM
            (SELECT language, count(*) AS n FROM {t["documents"]}
             WHERE language IS NOT NULL AND language <> '' GROUP BY language))"""


def count(con: duckdb.DuckDBPyConnection, table: str) -> int:
    row = con.execute(f"SELECT count(*) FROM {table}").fetchone()
    return int(row[0]) if row else 0
