"""Rows and a DuckDB table to check filters against: the reference and the SQL keys they match."""

from __future__ import annotations

from typing import Any

import duckdb

from hybridkb.text.filters import matches, parse_filter, to_sql

ROWS = [
    {
        "key": i,
        "page": (i % 5) or None,
        "filename": f"f{i % 3}.pdf",
        "section": None,
        "meta": {"n": i, "tag": ["a", "b", "c"][i % 3], "flag": i % 2 == 0, "odd key/~": i % 4},
    }
    for i in range(30)
]


def filter_table(rows: list[dict[str, Any]]) -> duckdb.DuckDBPyConnection:
    """An in-memory table ``t`` shaped like a chunks table, holding ``rows``."""
    import json

    c = duckdb.connect()
    c.execute(
        "CREATE TABLE t (key BIGINT, page INT, filename VARCHAR, section VARCHAR, metadata JSON)"
    )
    for r in rows:
        c.execute(
            "INSERT INTO t VALUES (?, ?, ?, ?, ?)",
            [r["key"], r["page"], r["filename"], r["section"], json.dumps(r["meta"])],
        )
    return c


def reference_keys(rows: list[dict[str, Any]], where: dict[str, Any]) -> set[int]:
    """Keys of ``rows`` that pass ``where`` under the Python reference semantics."""
    tree = parse_filter(where)
    return {
        r["key"]
        for r in rows
        if matches(
            tree,
            {**r["meta"], "page": r["page"], "filename": r["filename"], "section": r["section"]},
        )
    }


def sql_keys(con: duckdb.DuckDBPyConnection, where: dict[str, Any]) -> set[int]:
    """Keys of table ``t`` that pass ``where`` compiled to SQL."""
    tree = parse_filter(where)
    assert tree is not None
    sql, params = to_sql(tree)
    return {r[0] for r in con.execute(f"SELECT key FROM t WHERE {sql}", params).fetchall()}
