"""The SQL of search on PostgreSQL: BM25 over the postings table, pgvector nearest.

* keyword: BM25 with the same formula, k1 and b as the in-memory index of the DuckDB
  backend (:mod:`hybridkb.index.keywords`), N / avgdl from the catalog row, which every
  write updates in its own transaction; so ranking matches the DuckDB backend.
* vector: an exact cosine scan while a collection is small (``EXACT_SCAN_ROWS``), else
  the HNSW index with pgvector's iterative scan for filters, falling back to an exact
  scan of the filtered rows whenever the index returns fewer than k.
"""

from __future__ import annotations

from typing import Any

from ...index.keywords import DEFAULT_B, DEFAULT_K1
from ...text.filters import POSTGRES, Filter, to_sql
from .binary import QueryVector

# Below this many chunks an exact scan is as fast as the graph and exact (the
# DuckDB backend's flat/HNSW threshold is the same number).
EXACT_SCAN_ROWS = 20_000
# pgvector caps hnsw.ef_search at 1000; iterative scans continue past it.
EF_MIN, EF_MAX = 100, 1000


def where_sql(where: Filter | None) -> tuple[str, list[Any]]:
    """A filter as a SQL predicate on the chunks table, with its parameters."""
    if where is None:
        return "TRUE", []
    sql, params = to_sql(where, POSTGRES)
    return sql, params


def bm25_ctes(
    t: dict[str, str], collection_id: int, terms: list[str], k: int, where: Filter | None
) -> tuple[str, list[Any]]:
    """CTEs ``st`` (N and b / avgdl), ``w`` (each query term's weight) and ``kw`` (key,
    score: the BM25 top k, as KeywordIndex scores), without the WITH, and their
    parameters."""
    k1, b = float(DEFAULT_K1), float(DEFAULT_B)
    allowed, params = where_sql(where)
    restrict = (
        "" if where is None else f" AND p.key IN (SELECT key FROM {t['chunks']} WHERE {allowed})"
    )
    # The expression runs once per posting (thousands per query), each operator a function
    # call: so each term's weight (Lucene idf times k1 + 1, from its document frequency)
    # is computed once in ``w``, b / avgdl once in ``st``, and k1 and b are literals a
    # generic plan folds (bound, ``1 - b`` was computed again for every posting). The
    # leg took a third less server time on SciFact. float64 throughout.
    sql = (
        f"st AS (SELECT n_chunks::float8 AS n, {b!r}::float8"
        " / (total_len::float8 / greatest(n_chunks, 1)) AS c"
        " FROM hybridkb.hybridkb_collections WHERE id = %s),"
        " w AS MATERIALIZED (SELECT q.term, ln(1 + (st.n - d.df + 0.5) / (d.df::float8 + 0.5))"
        f" * {k1 + 1!r}::float8 AS weight FROM (SELECT DISTINCT unnest(%s::text[]) AS term) q"
        f" CROSS JOIN st CROSS JOIN LATERAL (SELECT count(*) AS df FROM {t['postings']} h"
        " WHERE h.term = q.term) d WHERE d.df > 0),"
        " kw AS MATERIALIZED (SELECT p.key,"
        f" sum(w.weight * p.tf / (p.tf + {k1!r}::float8 * ({1 - b!r}::float8 + p.dl * st.c)))"
        f" AS score FROM w JOIN {t['postings']} p ON p.term = w.term CROSS JOIN st"
        f" WHERE TRUE{restrict} GROUP BY p.key ORDER BY score DESC, p.key LIMIT {int(k)})"
    )
    return sql, [collection_id, terms, *params]


def bm25_sql(
    t: dict[str, str], collection_id: int, terms: list[str], k: int, where: Filter | None
) -> tuple[str, list[Any]]:
    """The BM25 top-k statement and its parameters."""
    ctes, params = bm25_ctes(t, collection_id, terms, k, where)
    return f"WITH {ctes} SELECT key, score FROM kw ORDER BY score DESC, key", params


# Limits are written into the statements (whole numbers only), not bound: a generic plan
# (connection.prepare) then knows how many rows an ORDER BY ... LIMIT wants, which decides
# between the HNSW index and a scan.


def nearest_rows(
    con: Any,
    t: dict[str, str],
    collection_id: int,
    q: QueryVector,
    k: int,
    predicate: str,
    params: list[Any],
    set_ef: Any,
) -> list[tuple[Any, ...]]:
    """k nearest chunks satisfying ``predicate``: exactly min(k, matches) of them."""
    (n,) = con.execute(
        "SELECT n_chunks FROM hybridkb.hybridkb_collections WHERE id = %s", [collection_id]
    ).fetchone() or (0,)
    rows: list[tuple[Any, ...]] = []
    if int(n) > EXACT_SCAN_ROWS:
        # HNSW; a filter walks on with the iterative scan (relaxed order, re-sorted here).
        set_ef(con, k)
        rows = con.execute(
            f"WITH c AS MATERIALIZED (SELECT key, embedding <=> %b::vector AS d"
            f" FROM {t['chunks']} WHERE {predicate} ORDER BY embedding <=> %b::vector"
            f" LIMIT {int(k)}) SELECT key, (1 - d)::float4 AS s FROM c ORDER BY s DESC, key",
            [q, *params, q],
        ).fetchall()
    if len(rows) < k:
        # Exact. Ordering on the float4 similarity keeps the planner off the index
        # (nothing is skipped) and breaks ties by key as the DuckDB backend does.
        rows = con.execute(
            f"SELECT key, s FROM (SELECT key, (1 - (embedding <=> %b::vector))::float4 AS s"
            f" FROM {t['chunks']} WHERE {predicate}) x ORDER BY s DESC, key LIMIT {int(k)}",
            [q, *params],
        ).fetchall()
    return list(rows)
