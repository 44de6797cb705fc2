"""Both legs of a hybrid search of one collection at once, with everything the core needs
of their candidates (``Storage.hybrid``, issue 37).

A hybrid search on PostgreSQL first cost six round trips (each leg, the collection
size, the candidates' vectors for the feedback, the winners' rows) and the fusion in
Python: 31 ms where its legs took 5-6 ms. Then it was one statement that ran the legs one
after the other and fused them in SQL: 11 ms, 1.8x its slower leg, the fusion's
window aggregates and per-candidate expressions costing as much server time as the
legs. Now each leg is one statement, and the two run at the same time on two pooled
connections (the vector leg, with the query's embedding, in a thread of its own:
``access.PostgresAccess._read_both``):

* keyword: BM25 of the terms (``search.bm25_ctes``), ``depth`` deep;
* vector: the exact cosine scan, or HNSW with an exact fallback when the index returns
  fewer than the depth (as ``search.nearest_rows``), ``depth`` deep;

each returning, with its keys and scores, its candidates' vectors (pgvector's binary
form) and chunk rows. Every candidate's vector and row is then at hand: the core fuses
the legs and runs the vector feedback with its own functions (``hybridkb.search``), so
the ranking is the core's by construction, and no follow-up query fetches vectors or
rows. When no second connection is free at once, or the caller is inside a
transaction, the two statements run one after the other on one connection.
tests/storage/test_postgres_hybrid.py holds the result to the core's own legs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from ...text.filters import Filter
from ..base import ChunkRecord, CollectionRecord, HybridCandidates
from ..records import chunk_record
from . import search
from .binary import QueryVector
from .rows import clean
from .search import bm25_ctes, where_sql

A = TypeVar("A")
B = TypeVar("B")

# What a candidate brings back beside its key and score: its vector, then
# records.CHUNK_COLUMNS (qualified). The metadata comes as JSON text, decoded only for
# the rows a search reads (psycopg decoding every candidate's JSONB cost a third of a
# millisecond per leg).
_CANDIDATE = (
    "ch.embedding, ch.key, ch.chunk_id, ch.document_id, ch.chunk_index, ch.text, ch.page,"
    " ch.section, ch.char_start, ch.char_end, ch.content_hash, ch.language, ch.metadata::text,"
    " ch.filename, ch.path, ch.added_at"
)


def keyword_leg_sql(
    t: dict[str, str], collection_id: int, terms: list[str], depth: int, where: Filter | None
) -> tuple[str, list[Any]]:
    """The keyword leg (as ``keyword_search`` ranks) with its candidates' vectors and rows:
    key, score, then ``_CANDIDATE``, best first."""
    ctes, params = bm25_ctes(t, collection_id, terms, depth, where)
    return (
        f"WITH {ctes} SELECT kw.key, kw.score, {_CANDIDATE} FROM kw"
        f" JOIN {t['chunks']} ch ON ch.key = kw.key ORDER BY kw.score DESC, kw.key",
        params,
    )


def vector_leg_sql(
    t: dict[str, str], collection_id: int, query: QueryVector, depth: int, where: Filter | None
) -> tuple[str, list[Any]]:
    """The vector leg (as ``vector_search`` ranks) with its candidates' vectors and rows:
    key, similarity (as text: the float4 reads as the core's leg reads it), then
    ``_CANDIDATE``, best first. Exact while the collection is small
    (``search.EXACT_SCAN_ROWS``), else HNSW with the exact scan when the index returns
    fewer than the depth."""
    chunks = t["chunks"]
    predicate, params = where_sql(where)
    depth = int(depth)  # in the text: a generic plan knows its limits (connection.prepare)
    sql = (
        "WITH st AS MATERIALIZED (SELECT n_chunks AS n FROM hybridkb.hybridkb_collections"
        " WHERE id = %s),"
        " vh AS MATERIALIZED (SELECT key, embedding <=> %b::vector AS d"
        f" FROM {chunks} WHERE (SELECT n FROM st) > {int(search.EXACT_SCAN_ROWS)} AND {predicate}"
        f" ORDER BY embedding <=> %b::vector LIMIT {depth}),"
        # Ordering on the float4 similarity keeps the planner off the index.
        " vx AS MATERIALIZED (SELECT key, (1 - (embedding <=> %b::vector))::float4 AS s"
        f" FROM {chunks} WHERE (SELECT count(*) FROM vh) < {depth} AND {predicate}"
        f" ORDER BY s DESC, key LIMIT {depth}),"
        " vec AS MATERIALIZED (SELECT key, s FROM vx UNION ALL"
        " SELECT key, (1 - d)::float4 FROM vh WHERE NOT EXISTS (SELECT 1 FROM vx))"
        f" SELECT vec.key, vec.s::text, {_CANDIDATE} FROM vec"
        f" JOIN {chunks} ch ON ch.key = vec.key ORDER BY vec.s DESC, vec.key"
    )
    return sql, [collection_id, query, *params, query, query, *params]


ReadBoth = Callable[[Callable[[Any], A], Callable[[Any], B], CollectionRecord], tuple[A, B]]
Read = Callable[[Callable[[Any], A], CollectionRecord], A]


class PostgresHybrid:
    """The :class:`~hybridkb.storage.base.HybridSearch` of a PostgreSQL store.

    Args:
        read: runs ``fn(connection)`` for a collection (the store's read path: pool,
            retry, errors).
        read_both: runs two such reads at once where it can (``_read_both``).
        tables: the collection's table names.
        set_ef: sets ``hnsw.ef_search`` on a connection for a depth.
    """

    def __init__(
        self,
        read: Read[Any],
        read_both: ReadBoth[Any, Any],
        tables: Callable[[CollectionRecord], dict[str, str]],
        set_ef: Callable[[Any, int], None],
    ) -> None:
        self._read, self._read_both = read, read_both
        self._tables, self._set_ef = tables, set_ef

    def hybrid_candidates(
        self,
        coll: CollectionRecord,
        terms: Sequence[str],
        embed: Callable[[], np.ndarray],
        *,
        depth: int,
        where: Filter | None,
    ) -> HybridCandidates:
        """See :meth:`hybridkb.storage.base.HybridSearch.hybrid_candidates`."""
        t = self._tables(coll)
        unique = list(dict.fromkeys(clean(x) or "" for x in terms))
        made: list[np.ndarray] = []  # the query's vector, once (a retried leg reuses it)

        def vector(con: Any) -> list[tuple[Any, ...]]:
            if not made:
                made.append(embed())
            self._set_ef(con, depth)
            sql, params = vector_leg_sql(t, coll.id, QueryVector(made[0]), depth, where)
            return list(con.execute(sql, params, binary=True).fetchall())

        if not unique:  # as keyword_search: no terms, no keyword leg
            kw_rows: list[tuple[Any, ...]] = []
            vec_rows = self._read(vector, coll)
        else:
            kw_sql, kw_params = keyword_leg_sql(t, coll.id, unique, depth, where)

            def keyword(con: Any) -> list[tuple[Any, ...]]:
                return list(con.execute(kw_sql, kw_params, binary=True).fetchall())

            kw_rows, vec_rows = self._read_both(keyword, vector, coll)
        return _candidates(kw_rows, vec_rows, made[0])


def _candidates(
    kw_rows: list[tuple[Any, ...]], vec_rows: list[tuple[Any, ...]], query: np.ndarray
) -> HybridCandidates:
    """The legs' rows (key, score, then ``_CANDIDATE``) as the core takes them."""
    raw: dict[int, tuple[Any, ...]] = {}
    for row in (*kw_rows, *vec_rows):
        raw.setdefault(row[0], row)
    at = {key: i for i, key in enumerate(raw)}
    vectors = binary_vectors([row[2] for row in raw.values()])

    def directions(keys: list[int]) -> np.ndarray:
        found: np.ndarray = vectors[[at[key] for key in keys]]
        return found

    return HybridCandidates(
        keyword=[(int(r[0]), float(r[1])) for r in kw_rows],
        vector=[(int(r[0]), float(r[1])) for r in vec_rows],
        query=query,
        directions=directions,
        rows=_Rows(raw),
    )


def binary_vectors(blobs: list[bytes]) -> np.ndarray:
    """pgvector's binary vectors of one dimension (each a 4-byte head, then big-endian
    float4s: ``rows.parse_binary_vector``) as one float32 matrix, in one pass."""
    if not blobs:
        return np.empty((0, 0), np.float32)
    words = np.frombuffer(b"".join(blobs), dtype=">f4").reshape(len(blobs), -1)
    out: np.ndarray = words[:, 1:].astype(np.float32)
    return out


class _Rows(Mapping[int, ChunkRecord]):
    """The candidates' chunk rows by key, each built when read: a search reads only its
    winners' (building all of them cost a millisecond per search)."""

    def __init__(self, raw: dict[int, tuple[Any, ...]]) -> None:
        self._raw = raw

    def __getitem__(self, key: int) -> ChunkRecord:
        return chunk_record(self._raw[key][3:])

    def __iter__(self) -> Iterator[int]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)
