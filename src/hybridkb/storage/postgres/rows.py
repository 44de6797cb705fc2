"""Rows of a collection's PostgreSQL tables: cleaning, COPY rows, and the SQL that
writes, deletes and reads them (shared by the storage class and nothing else needs
more than these names)."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np

from ..base import ChunkRecord, CollectionRecord, DocumentRecord

_SURROGATE = re.compile("[\ud800-\udfff]")


def clean(value: str | None) -> str | None:
    """PostgreSQL text takes neither NUL nor lone surrogates (from undecodable file names)."""
    if value is None:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = _SURROGATE.sub("\ufffd", value)
    return value.replace("\x00", "\ufffd") if "\x00" in value else value


def clean_json(value: Any) -> Any:
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {clean(str(k)): clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v) for v in value]
    return value


def dumps(value: Any) -> str:
    return json.dumps(clean_json(value), ensure_ascii=False)


def vector_text(vec: np.ndarray) -> str:
    """pgvector's text form; Python's float repr round-trips float32 exactly."""
    return "[" + ",".join(map(repr, np.asarray(vec, dtype=np.float32).tolist())) + "]"


def parse_binary_vector(data: bytes) -> np.ndarray:
    """pgvector's binary ``vector`` (a binary-format result: dimension, 0, big-endian
    float4s) as float32."""
    dim = int.from_bytes(data[:2], "big")
    out: np.ndarray = np.frombuffer(data, dtype=">f4", count=dim, offset=4).astype(np.float32)
    return out


def lock_key(collection_id: int, document_id: str) -> int:
    """The advisory lock key of one document of a collection (64 bits of a hash)."""
    raw = f"{collection_id}\x00{document_id}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big", signed=True)


def lock_documents(con: Any, collection_id: int, document_ids: Sequence[str]) -> None:
    """Take the documents' advisory locks until the transaction ends, in one order for
    every writer, so two batches never deadlock (``con``: psycopg connection)."""
    keys = sorted({lock_key(collection_id, i) for i in document_ids})
    # One statement: unnest yields the keys in the array's (sorted) order.
    con.execute("SELECT pg_advisory_xact_lock(k) FROM unnest(%s::bigint[]) AS k", [keys])


def hash32(text: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=4).digest(),
        "big",
        signed=True,
    )


def document_row(doc: DocumentRecord, doc_id: str, chunk_count: int) -> tuple[Any, ...]:
    """A COPY row of the documents table."""
    return (
        doc_id,
        clean(doc.path),
        clean(doc.filename),
        doc.source,
        doc.content_hash,
        doc.signature,
        dumps(doc.metadata),
        doc.language,
        doc.bytes,
        chunk_count,
    )


def chunk_rows(
    coll: CollectionRecord, doc_id: str, chunks: Sequence[ChunkRecord], vectors: np.ndarray
) -> tuple[list[tuple[Any, ...]], int]:
    """Binary COPY rows for chunks (:data:`CHUNK_COPY_TYPES`), and the terms they add to
    the total length (their postings: :func:`postings_copy`)."""
    vecs = np.asarray(vectors, dtype=np.float32).reshape(len(chunks), coll.dim)
    rows: list[tuple[Any, ...]] = []
    length = 0
    for c, vec in zip(chunks, vecs, strict=True):
        rows.append(
            (
                c.key,
                clean(c.chunk_id),
                doc_id,
                c.chunk_index,
                clean(c.text),
                c.page,
                clean(c.section),
                c.char_start,
                c.char_end,
                clean(c.content_hash),
                clean(c.language),
                clean_terms(c.terms),
                dumps(c.metadata),
                clean(c.filename),
                clean(c.path),
                vec,
            )
        )
        length += len(c.terms)
    return rows, length


def clean_terms(terms: Sequence[str]) -> list[str]:
    """Terms PostgreSQL text can hold (checked on the joined text: one pass, not one per term)."""
    terms = list(terms)
    joined = "\x1f".join(terms)
    return terms if clean(joined) is joined else [clean(t) or "" for t in terms]


TEXT, TEXT_ARRAY, JSONB, INT4, INT8 = 25, 1009, 3802, 23, 20  # PostgreSQL type oids
# COPY types of chunk_rows' columns (_CHUNK_COLUMNS), but the vector (its oid differs
# per database; binary.register_dumpers registers the dumpers).
CHUNK_COPY_TYPES = [
    INT8, TEXT, TEXT, INT4, TEXT, INT4, TEXT, INT4, INT4, TEXT, TEXT, TEXT_ARRAY, JSONB,
    TEXT, TEXT,
]  # fmt: skip
_CHUNK_COLUMNS = (
    "key, chunk_id, document_id, chunk_index, text, page, section, char_start, char_end,"
    " content_hash, language, terms, metadata, filename, path, embedding"
)


def copy_rows(
    con: Any,
    t: dict[str, str],
    docs: list[tuple[Any, ...]],
    chunks: list[tuple[Any, ...]],
    vector_oid: int,
) -> None:
    """COPY documents and chunks rows in (chunks in binary: vectors as pgvector's binary
    form), then the new chunks' postings (``con``: psycopg connection)."""
    with con.cursor() as cur:
        if docs:
            with cur.copy(
                f"COPY {t['documents']} (document_id, path, filename, source, content_hash,"
                " signature, metadata, language, bytes, chunk_count) FROM STDIN"
            ) as cp:
                for r in docs:
                    cp.write_row(r)
        if chunks:
            with cur.copy(
                f"COPY {t['chunks']} ({_CHUNK_COLUMNS}) FROM STDIN (FORMAT BINARY)"
            ) as cp:
                cp.set_types([*CHUNK_COPY_TYPES, vector_oid])
                for r in chunks:
                    cp.write_row(r)
                # Built while the server stores the rows already sent (COPY streams).
                postings = postings_copy(chunks)
            with cur.copy(f"COPY {t['postings']} (term, key, tf, dl) FROM STDIN") as cp:
                cp.write(postings)


# COPY's text format gives these a meaning; a term holding one is written escaped.
_COPY_SPECIAL = ("\\", "\t", "\n", "\r")
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def postings_copy(chunks: Sequence[tuple[Any, ...]]) -> bytes:
    """The postings (term, key, tf, dl) of chunk rows (:func:`chunk_rows`: key first,
    cleaned terms at 11) as COPY text, sorted by term then key.

    Derived in the server from the stored terms arrays (INSERT ... SELECT unnest ...
    GROUP BY), the postings were half of a write's server time: one WAL record and one
    executor row per posting. COPY inserts the heap rows in pages (heap_multi_insert),
    and in text form each row is one f-string here (binary rows cost twice as much to
    build); sorted, the rows walk the primary key's pages in order. SciFact, one
    writer: 1,057 -> 1,240 documents/s, the server's CPU 4.1 -> 3.1 s.
    """
    lines: list[str] = []
    every = "".join(chain.from_iterable(r[11] for r in chunks))
    special = any(c in every for c in _COPY_SPECIAL)
    for r in chunks:
        terms = r[11]
        if special:
            terms = [term.translate(_COPY_ESCAPES) for term in terms]
        key, dl = f"\t{int(r[0])}\t", f"\t{len(terms)}"
        lines += [f"{term}{key}{tf}{dl}" for term, tf in Counter(terms).items()]
    lines.sort()
    lines.append("")  # the last row ends with a newline too
    return "\n".join(lines).encode("utf-8")


def delete_rows(con: Any, t: dict[str, str], ids: Sequence[str | None]) -> tuple[int, int]:
    """Delete documents with their chunks and postings, in one statement; return the
    chunks and the terms they held (every write moves the catalog's BM25 totals by them)."""
    # Postings are found through the old chunks' terms, so the (term, key) primary key
    # serves the delete and no second index on key is needed.
    chunks, terms = con.execute(
        f"WITH old AS MATERIALIZED (SELECT key, terms FROM {t['chunks']}"
        " WHERE document_id = ANY(%s)),"
        f" p AS (DELETE FROM {t['postings']} p USING (SELECT DISTINCT u.term, o.key FROM old o,"
        " unnest(o.terms) AS u(term)) x WHERE p.term = x.term AND p.key = x.key),"
        f" c AS (DELETE FROM {t['chunks']} WHERE key IN (SELECT key FROM old)),"
        f" d AS (DELETE FROM {t['documents']} WHERE document_id = ANY(%s))"
        " SELECT count(*), coalesce(sum(cardinality(terms)), 0) FROM old",
        [list(ids), list(ids)],
    ).fetchone()
    return int(chunks), int(terms)
