"""Rows of a collection's PostgreSQL tables: cleaning, COPY rows, and the SQL that
writes, deletes and reads them (shared by the storage class and nothing else needs
more than these names)."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Sequence
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


def parse_vector(text: str) -> np.ndarray:
    return np.array(text[1:-1].split(","), dtype=np.float32)


def lock_key(collection_id: int, document_id: str) -> int:
    """The advisory lock key of one document of a collection (64 bits of a hash)."""
    raw = f"{collection_id}\x00{document_id}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big", signed=True)


def lock_documents(con: Any, collection_id: int, document_ids: Sequence[str]) -> None:
    """Take the documents' advisory locks until the transaction ends, in one order for
    every writer, so two batches never deadlock (``con``: psycopg connection)."""
    for key in sorted({lock_key(collection_id, i) for i in document_ids}):
        con.execute("SELECT pg_advisory_xact_lock(%s)", [key])


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
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], int]:
    """COPY rows for chunks and their postings, plus the terms they add to the total length."""
    vecs = np.asarray(vectors, dtype=np.float32).reshape(len(chunks), coll.dim)
    rows: list[tuple[Any, ...]] = []
    postings: list[tuple[Any, ...]] = []
    length = 0
    for c, vec in zip(chunks, vecs, strict=True):
        terms = [clean(term) or "" for term in c.terms]
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
                terms,
                dumps(c.metadata),
                clean(c.filename),
                clean(c.path),
                vector_text(vec),
            )
        )
        postings.extend((term, c.key, tf, len(terms)) for term, tf in Counter(terms).items())
        length += len(terms)
    return rows, postings, length


def copy_rows(
    con: Any,
    t: dict[str, str],
    docs: list[tuple[Any, ...]],
    chunks: list[tuple[Any, ...]],
    postings: list[tuple[Any, ...]],
) -> None:
    """COPY documents, chunks and postings rows in (``con``: psycopg connection)."""
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
                f"COPY {t['chunks']} (key, chunk_id, document_id, chunk_index, text, page, section,"
                " char_start, char_end, content_hash, language, terms, metadata, filename, path,"
                " embedding) FROM STDIN"
            ) as cp:
                for r in chunks:
                    cp.write_row(r)
        if postings:
            with cur.copy(f"COPY {t['postings']} (term, key, tf, dl) FROM STDIN") as cp:
                for p in postings:
                    cp.write_row(p)


def delete_rows(con: Any, t: dict[str, str], ids: Sequence[str | None]) -> tuple[int, int]:
    """Delete documents with their chunks and postings; return the chunks and the terms
    they held (every write moves the catalog's BM25 totals by them)."""
    chunks, terms = con.execute(
        f"SELECT count(*), coalesce(sum(cardinality(terms)), 0) FROM {t['chunks']}"
        " WHERE document_id = ANY(%s)",
        [list(ids)],
    ).fetchone()
    # Postings are found through the old chunks' terms, so the (term, key)
    # primary key serves the delete and no second index on key is needed.
    con.execute(
        f"DELETE FROM {t['postings']} p USING (SELECT DISTINCT u.term, c.key FROM {t['chunks']}"
        " c, unnest(c.terms) AS u(term) WHERE c.document_id = ANY(%s)) o"
        " WHERE p.term = o.term AND p.key = o.key",
        [list(ids)],
    )
    con.execute(f"DELETE FROM {t['chunks']} WHERE document_id = ANY(%s)", [list(ids)])
    con.execute(f"DELETE FROM {t['documents']} WHERE document_id = ANY(%s)", [list(ids)])
    return int(chunks), int(terms)
