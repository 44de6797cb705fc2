"""The SQL of search on PostgreSQL: BM25 over the postings table, pgvector nearest.

* keyword: BM25 with the same formula, k1 and b as the in-memory index of the DuckDB
  backend (:mod:`hybridkb.index.keyword`), N / avgdl from the catalog row, which every
  write updates in its own transaction; so ranking matches the DuckDB backend.
* vector: an exact cosine scan while a collection is small (``EXACT_SCAN_ROWS``), else
  the HNSW index with pgvector's iterative scan for filters, falling back to an exact
  scan of the filtered rows whenever the index returns fewer than k.
"""

from __future__ import annotations

from typing import Any

from ...filters import POSTGRES, Filter, to_sql
from ...index.keyword import DEFAULT_B, DEFAULT_K1

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


def bm25_sql(
    t: dict[str, str], collection_id: int, terms: list[str], k: int, where: Filter | None
) -> tuple[str, list[Any]]:
    """The BM25 top-k statement and its parameters (same arithmetic as KeywordIndex)."""
    k1, b = DEFAULT_K1, DEFAULT_B
    allowed, params = where_sql(where)
    restrict = (
        "" if where is None else f" AND p.key IN (SELECT key FROM {t['chunks']} WHERE {allowed})"
    )
    # Lucene idf times (k1 + 1), float64.
    sql = (
        "WITH st AS (SELECT n_chunks::float8 AS n, total_len::float8 / greatest(n_chunks, 1)"
        " AS avgdl FROM hybridkb.hybridkb_collections WHERE id = %s),"
        f" hit AS (SELECT p.term, p.key, p.tf, p.dl FROM {t['postings']} p"
        " WHERE p.term = ANY(%s)),"
        " w AS (SELECT h.term, ln(1 + (st.n - count(*) + 0.5) / (count(*)::float8 + 0.5))"
        " * (%s + 1) AS weight FROM hit h, st GROUP BY h.term, st.n)"
        " SELECT p.key, sum(w.weight * p.tf / (p.tf + %s * (1 - %s + %s * p.dl / st.avgdl)))"
        f" AS score FROM hit p JOIN w ON w.term = p.term CROSS JOIN st WHERE TRUE{restrict}"
        " GROUP BY p.key ORDER BY score DESC, p.key LIMIT %s"
    )
    return sql, [collection_id, terms, k1, k1, b, b, *params, k]


def nearest_rows(
    con: Any,
    t: dict[str, str],
    collection_id: int,
    q: str,
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
            f"WITH c AS MATERIALIZED (SELECT key, embedding <=> %s::vector AS d"
            f" FROM {t['chunks']} WHERE {predicate} ORDER BY embedding <=> %s::vector LIMIT %s)"
            " SELECT key, (1 - d)::float4 AS s FROM c ORDER BY s DESC, key",
            [q, *params, q, k],
        ).fetchall()
    if len(rows) < k:
        # Exact. Ordering on the float4 similarity keeps the planner off the index
        # (nothing is skipped) and breaks ties by key as the DuckDB backend does.
        rows = con.execute(
            f"SELECT key, s FROM (SELECT key, (1 - (embedding <=> %s::vector))::float4 AS s"
            f" FROM {t['chunks']} WHERE {predicate}) x ORDER BY s DESC, key LIMIT %s",
            [q, *params, k],
        ).fetchall()
    return list(rows)
