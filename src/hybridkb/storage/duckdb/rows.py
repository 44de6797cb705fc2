"""Rows of a collection's DuckDB tables: the SQL that writes, deletes and reads them.

Functions here take the connection of the caller's transaction, so the storage class,
the streamed writer (``stream.py``) and maintenance (``maintenance.py``) share one
definition of every statement.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np

from ..base import ChunkRecord, CollectionRecord, DocumentRecord
from ..records import CHUNK_COLUMNS as CHUNK_COLUMN_NAMES
from ..records import DOC_COLUMNS
from .schema import table_names

# Arrow is imported by the functions that build Arrow tables: a process that only
# searches (a cold CLI search) then never pays its import.
if TYPE_CHECKING:
    import pyarrow as pa

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


def arrow_rows(
    coll: CollectionRecord, chunks: Sequence[ChunkRecord], vectors: np.ndarray
) -> tuple[pa.Table, pa.Table]:
    """Chunk and vector rows as Arrow tables (bulk inserts cost far less than executemany)."""
    import pyarrow as pa

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
            "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), coll.dim),
        }
    )
    return chunk_table, vector_table


def document_table(docs: Sequence[DocumentRecord], chunk_counts: Sequence[int]) -> pa.Table:
    import pyarrow as pa

    return pa.table(
        {
            "document_id": pa.array([d.document_id for d in docs], pa.string()),
            "path": pa.array([d.path for d in docs], pa.string()),
            "filename": pa.array([d.filename for d in docs], pa.string()),
            "source": pa.array([d.source for d in docs], pa.string()),
            "content_hash": pa.array([d.content_hash for d in docs], pa.string()),
            "signature": pa.array([d.signature for d in docs], pa.string()),
            "metadata": pa.array([json.dumps(d.metadata) for d in docs], pa.string()),
            "language": pa.array([d.language for d in docs], pa.string()),
            "bytes": pa.array([d.bytes for d in docs], pa.int64()),
            "chunk_count": pa.array(list(chunk_counts), pa.int32()),
        }
    )


def insert_rows(
    con: duckdb.DuckDBPyConnection,
    coll: CollectionRecord,
    docs: pa.Table,
    chunks: pa.Table,
    vectors: pa.Table,
) -> None:
    """Insert Arrow document, chunk and vector rows (see arrow_rows, document_table)."""
    t = table_names(coll.id)
    con.register("_hkb_docs", docs)
    con.register("_hkb_chunks", chunks)
    con.register("_hkb_vectors", vectors)
    try:
        con.execute(
            f"INSERT INTO {t['documents']} SELECT document_id, path, filename, source,"
            " content_hash, signature, metadata::JSON, language, bytes, chunk_count,"
            " current_timestamp FROM _hkb_docs"
        )
        con.execute(
            f"INSERT INTO {t['chunks']} SELECT key, chunk_id, document_id, chunk_index, text, page,"
            " section, char_start, char_end, content_hash, language, terms, metadata::JSON,"
            " filename, path, current_timestamp FROM _hkb_chunks"
        )
        con.execute(f"INSERT INTO {t['vectors']} SELECT key, embedding FROM _hkb_vectors")
    finally:
        for name in ("_hkb_docs", "_hkb_chunks", "_hkb_vectors"):
            con.unregister(name)


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
