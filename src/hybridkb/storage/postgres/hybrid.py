"""A whole hybrid search of one collection in ONE statement (``Storage.hybrid``).

Before, a hybrid search on PostgreSQL cost six round trips (the keyword leg, the
collection size, the vector leg, the candidates' vectors as text for the feedback, the
winners' rows) and the fusion in Python: 31 ms where its legs took 5-6 ms. Here both
legs, the fusion, the Rocchio feedback and the winners' rows are one statement:

* ``kw``: BM25 (``search.bm25_ctes``); ``vec``: the exact cosine scan, or HNSW with an
  exact fallback when the index returns fewer than the depth (as ``nearest_rows``);
* the fusion of :mod:`hybridkb.search.fusion` in SQL: z-score (default), min-max or RRF over
  the union of both legs, a keyword leg shorter than the depth counted as complete
  (its floor is 0), ties by first appearance (keyword leg first) as ``fusion.order``;
* the feedback of ``hybridkb.search.hybrid``: every candidate scored by its cosine with the
  query moved ``w`` towards the best first-pass chunk ``u`` (unit vectors), which is
  ``(cos(c, q) + w cos(c, u)) / sqrt(1 + w^2 + 2 w cos(q, u))``: three cosines per
  candidate, no vector arithmetic; rounded to float4 as the core's float32 product is;
* the second fusion, and the top k with the columns a hit needs.

tests/storage/test_postgres_hybrid.py holds it to the core's ranking on the same store.

Tried and measured against it (issue 37, SciFact, bench/postgres.py --only-hybrid): the two
legs at once on two pooled connections, each returning its candidates' vectors and rows,
fused by the core in Python. It cost half again the CPU (12.5 ms against 8.6 ms a search,
19 ms p50 against 13 ms on a loaded 2-core machine): shipping ~200 candidates' rows (their
text detoasted, sent and parsed) costs about what the fusion here does, a thread's start
waits for the scheduler under load, and two legs at once only pay on idle cores.

The exact scan is most of the statement, and it waits on memory, not on arithmetic
(pgvector's cosine is AVX2 FMA code; ``perf annotate`` puts the samples on its loads of each
row's 1.5 kB vector). Tried on SciFact and not taken (server CPU, bench/pg_legs.py figures):
a stored halfvec copy scanned first, then the best 150 re-scored exactly, saved ~0.3 of 2.9
ms; a binary-quantized first pass needs ~1,500 candidates for recall 0.99 at depth 100;
HNSW needs ef_search 200 for recall 1.0 and then saved ~0.9 ms, for an index every write
keeps up to date.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...text.filters import Filter
from ..base import CollectionRecord, FusionSpec, StoreHit
from ..records import chunk_record
from . import search
from .binary import QueryVector
from .rows import clean
from .search import bm25_ctes, where_sql

_OUT = (
    "ch.key, ch.chunk_id, ch.document_id, ch.chunk_index, ch.text, ch.page, ch.section,"
    " ch.char_start, ch.char_end, ch.content_hash, ch.language, ch.metadata, ch.filename,"
    " ch.path, ch.added_at"
)  # records.CHUNK_COLUMNS, qualified


def _vector_leg(
    chunks: str, query: QueryVector, depth: int, where: Filter | None
) -> tuple[str, list[Any]]:
    """CTE ``vec`` (key, s): the depth nearest chunks, exact while the collection is
    small (``st.n``), else HNSW with the exact scan when the index returns too few."""
    predicate, params = where_sql(where)
    depth = int(depth)  # in the text: a generic plan knows its limits (connection.prepare)
    sql = (
        " vh AS MATERIALIZED (SELECT key, embedding <=> %b::vector AS d"
        f" FROM {chunks} WHERE (SELECT n FROM st) > {int(search.EXACT_SCAN_ROWS)} AND {predicate}"
        f" ORDER BY embedding <=> %b::vector LIMIT {depth}),"
        # Ordering on the float4 similarity keeps the planner off the index.
        " vx AS MATERIALIZED (SELECT key, (1 - (embedding <=> %b::vector))::float4 AS s"
        f" FROM {chunks} WHERE (SELECT count(*) FROM vh) < {depth} AND {predicate}"
        f" ORDER BY s DESC, key LIMIT {depth}),"
        " vec AS MATERIALIZED (SELECT key, s FROM vx UNION ALL"
        " SELECT key, (1 - d)::float4 FROM vh WHERE NOT EXISTS (SELECT 1 FROM vx)),"
    )
    return sql, [query, *params, query, query, *params]


def _union(name: str, a: str, b: str) -> str:
    """CTE ``name``: every candidate of legs ``a`` and ``b`` (key, v, r: score and rank)
    once, with both legs' scores and ranks and its position in order of first
    appearance (``a`` first), as ``legs.union``."""
    return (
        f" {name} AS MATERIALIZED (SELECT coalesce(a.key, b.key) AS key, a.v AS av, a.r AS ar,"
        f" b.v AS bv, b.r AS br, coalesce(a.r, (SELECT count(*) FROM {a})"
        " + row_number() OVER (PARTITION BY a.r IS NULL ORDER BY b.r)) AS pos"
        f" FROM {a} a FULL JOIN {b} b ON a.key = b.key),"
    )


def _zscore(leg: str, floor: str) -> str:
    """One leg's weighted share of ``fusion.zscore_scores`` (weight 1/2): ``z`` for a
    hit, the leg's "missing" score otherwise. With a ``floor`` (0, a complete keyword
    leg) the missing candidates count as 0 in the mean and spread, so population stats
    over every candidate are exactly ``fusion._zscores``' padded ones."""
    v, mean, sd, lowest = f"{leg}v", f"{leg}_mean", f"{leg}_sd", f"{leg}_min"
    return (
        f"0.5 * CASE WHEN {leg}_m = 0 THEN 0"
        f" WHEN {sd} = 0 THEN CASE WHEN {v} IS NULL AND {floor} AND size > {leg}_m"
        " THEN -1 ELSE 0 END"
        f" WHEN {v} IS NOT NULL THEN ({v} - {mean}) / {sd}"
        f" WHEN {floor} THEN least((0 - {mean}) / {sd}, ({lowest} - {mean}) / {sd})"
        f" ELSE ({lowest} - {mean}) / {sd} END"
    )


def _minmax(leg: str, floor: str) -> str:
    """One leg's weighted share of ``fusion.weighted_scores`` (weight 1/2)."""
    v, low = f"{leg}v", f"CASE WHEN {floor} THEN least({leg}_min, 0) ELSE {leg}_min END"
    return (
        f"0.5 * CASE WHEN {v} IS NULL THEN 0 WHEN {leg}_max - {low} > 0"
        f" THEN ({v} - {low}) / ({leg}_max - {low}) ELSE 1 END"
    )


def _fused(name: str, source: str, spec: FusionSpec, depth: int) -> tuple[str, list[Any]]:
    """CTE ``name`` over a union: ``raw`` (what ranks), ``shown`` (the reported score)
    and ``tie`` (RRF's best single-leg rank; else 0), as ``spec.method`` fuses. The legs'
    statistics are one aggregate row (``name_s``) joined to every candidate: one pass
    over the union for them, one to score (window aggregates took two more)."""
    # The keyword leg is complete (its floor is 0) when it is shorter than the depth:
    # ``f``, and its mean and spread then count every candidate it lacks as 0.
    full = f"count(av) < {int(depth)}"
    stats = (
        f" {name}_s AS MATERIALIZED (SELECT count(av) AS a_m, count(bv) AS b_m,"
        f" count(*) AS size, {full} AS f, min(av) AS a_min, max(av) AS a_max,"
        f" min(bv) AS b_min, max(bv) AS b_max,"
        f" CASE WHEN {full} THEN avg(coalesce(av, 0)) ELSE avg(av) END AS a_mean,"
        f" CASE WHEN {full} THEN stddev_pop(coalesce(av, 0)) ELSE stddev_pop(av) END AS a_sd,"
        f" avg(bv) AS b_mean, stddev_pop(bv) AS b_sd FROM {source}),"
    )
    params: list[Any] = []
    if spec.method == "rrf":
        raw = "coalesce(1::float8 / (%s + ar), 0) + coalesce(1::float8 / (%s + br), 0)"
        params = [spec.rrf_k, spec.rrf_k]
        shown, tie = "raw", "least(ar, br)"
    elif spec.method == "weighted":
        raw = f"{_minmax('a', 'f')} + {_minmax('b', 'FALSE')}"
        shown, tie = "raw", "0"
    else:
        raw = f"{_zscore('a', 'f')} + {_zscore('b', 'FALSE')}"
        shown, tie = "1 / (1 + exp(-raw))", "0"
    # OFFSET 0 keeps ``raw`` computed once (not copied into ``shown``).
    sql = (
        f"{stats} {name} AS MATERIALIZED (SELECT *, {shown} AS shown, {tie} AS tie FROM"
        f" (SELECT key, av, ar, bv, br, pos, {raw} AS raw FROM {source}"
        f" CROSS JOIN {name}_s OFFSET 0) r),"
    )
    return sql, params


def hybrid_sql(
    t: dict[str, str],
    collection_id: int,
    terms: list[str],
    query: QueryVector,
    *,
    k: int,
    depth: int,
    where: Filter | None,
    spec: FusionSpec,
) -> tuple[str, list[Any]]:
    """The statement and its parameters: rows of key, shown score, keyword (rank, score),
    vector (rank, score) and the chunk columns, best first, at most ``k``."""
    chunks = t["chunks"]
    kw, params = bm25_ctes(t, collection_id, terms, depth, where)
    vec, vec_params = _vector_leg(chunks, query, depth, where)
    params += vec_params
    first, first_params = _fused("f1", "c1", spec, depth)
    sql = (
        f"WITH {kw},{vec}"
        " a1 AS MATERIALIZED (SELECT key, score AS v,"
        " row_number() OVER (ORDER BY score DESC, key) AS r FROM kw),"
        " b1 AS MATERIALIZED (SELECT key, s::float8 AS v,"
        " row_number() OVER (ORDER BY s DESC, key) AS r FROM vec),"
        f"{_union('c1', 'a1', 'b1')}{first}"
    )
    params += first_params
    if spec.feedback > 0:
        w = float(spec.feedback)
        sql += (
            f" u AS MATERIALIZED (SELECT embedding AS e, 1 - (embedding <=> %b::vector) AS qc"
            f" FROM {chunks} WHERE key = (SELECT key FROM f1 ORDER BY raw DESC, tie, pos LIMIT 1)),"
            " fb AS MATERIALIZED (SELECT c.key, (((1 - (ch.embedding <=> %b::vector))"
            " + %s * (1 - (ch.embedding <=> u.e))) / sqrt(1 + %s * %s + 2 * %s * u.qc))"
            "::float4::float8 AS v"
            f" FROM c1 c JOIN {chunks} ch ON ch.key = c.key CROSS JOIN u),"
            " b2 AS MATERIALIZED (SELECT key, v, row_number() OVER (ORDER BY v DESC, key) AS r"
            " FROM fb"
            f" WHERE v <> 'NaN' ORDER BY v DESC, key LIMIT {int(depth)}),"
            f"{_union('c2', 'a1', 'b2')}"
        )
        params += [query, query, w, w, w, w]
        second, second_params = _fused("f2", "c2", spec, depth)
        sql += second
        params += second_params
        last = "f2"
    else:
        last = "f1"
    sql += (
        f" top AS (SELECT * FROM {last} ORDER BY raw DESC, tie, pos LIMIT {int(k)})"
        f" SELECT top.shown, top.ar, top.av, top.br, top.bv, {_OUT}"
        f" FROM top JOIN {chunks} ch ON ch.key = top.key ORDER BY top.raw DESC, top.tie, top.pos"
    )
    return sql, params


Read = Callable[[Callable[[Any], Any], CollectionRecord], Any]


class PostgresHybrid:
    """The :class:`~hybridkb.storage.base.HybridSearch` of a PostgreSQL store.

    Args:
        read: runs ``fn(connection)`` for a collection (the store's read path: pool,
            retry, errors).
        tables: the collection's table names.
        set_ef: sets ``hnsw.ef_search`` on a connection for a depth.
    """

    def __init__(
        self,
        read: Read,
        tables: Callable[[CollectionRecord], dict[str, str]],
        set_ef: Callable[[Any, int], None],
    ) -> None:
        self._read, self._tables, self._set_ef = read, tables, set_ef

    def hybrid_search(
        self,
        coll: CollectionRecord,
        terms: Sequence[str],
        query: np.ndarray,
        *,
        k: int,
        depth: int,
        where: Filter | None,
        fusion: FusionSpec,
    ) -> list[StoreHit]:
        """See :meth:`hybridkb.storage.base.HybridSearch.hybrid_search`."""
        unique = list(dict.fromkeys(clean(x) or "" for x in terms))
        q = QueryVector(query)
        sql, params = hybrid_sql(
            self._tables(coll), coll.id, unique, q, k=k, depth=depth, where=where, spec=fusion
        )

        def run(con: Any) -> list[tuple[Any, ...]]:
            self._set_ef(con, depth)
            return list(con.execute(sql, params).fetchall())

        return [
            StoreHit(
                chunk=chunk_record(row[5:]),
                score=float(row[0]),
                keyword=None if row[1] is None else (int(row[1]), float(row[2])),
                vector=None if row[3] is None else (int(row[3]), float(row[4])),
            )
            for row in self._read(run, coll)
        ]
