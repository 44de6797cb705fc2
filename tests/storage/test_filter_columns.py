"""In-memory filter evaluation agrees with the SQL compilation and the Python reference."""

from __future__ import annotations

import json
from typing import Any

import duckdb
import numpy as np
import pytest
from filter_tables import filter_table, reference_keys, sql_keys
from hypothesis import given, settings
from hypothesis import strategies as st

import hybridkb
from hybridkb.storage.duckdb.filter_columns import MAX_DISTINCT, FilterColumns, field_query
from hybridkb.text.filters import Filter, parse_filter

# Mixed types on purpose: numbers as text, floats, booleans, nulls, missing keys.
NS: list[Any] = [0, 1, 2.5, "3", "x", True, False, None, 7, "7", -1]
ROWS = [
    {
        "key": 1000 - 7 * i,
        "page": (i % 5) or None,
        "filename": f"f{i % 3}.pdf",
        "section": None,
        "meta": {
            **({"n": NS[i % len(NS)]} if i % 6 else {}),
            "tag": ["a", "b", "c"][i % 3],
            "flag": i % 2 == 0,
            "odd key/~": i % 4,
        },
    }
    for i in range(60)
]


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    return filter_table(ROWS)


def _columns(con: duckdb.DuckDBPyConnection) -> FilterColumns:
    def load(field: str) -> tuple[np.ndarray, Any]:
        sql, params = field_query("t", field)
        rows = con.execute(sql, params).fetchall()
        return np.array([r[0] for r in rows], np.int64), [r[1] for r in rows]

    return FilterColumns(load)


def _sql(con: duckdb.DuckDBPyConnection, where: dict[str, Any]) -> set[int]:
    return sql_keys(con, where)


def _py(where: dict[str, Any]) -> set[int]:
    return reference_keys(ROWS, where)


def _tree(where: dict[str, Any]) -> Filter:
    """``where`` parsed; every filter here has a condition (parse_filter({}) is None)."""
    tree = parse_filter(where)
    assert tree is not None, where
    return tree


CASES = [
    {"n": 3},
    {"n": "3"},
    {"n": 7},
    {"n": {"$gt": 1}},
    {"n": {"$lte": "x"}},
    {"n": None},
    {"n": {"$ne": None}},
    {"n": True},
    {"n": {"$nin": [0, "x"]}},
    {"tag": "b"},
    {"flag": True},
    {"flag": {"$ne": False}},
    {"page": 2},
    {"page": "2"},
    {"page": {"$gte": 2, "$lt": 4}},
    {"page": None},
    {"section": None},
    {"tag": {"$in": ["a", "c"]}},
    {"$or": [{"n": 1}, {"filename": "f2.pdf"}]},
    {"$and": [{"tag": "a"}, {"page": {"$gt": 1}}]},
    {"odd key/~": 2},
    {"missing": "x"},
    {"missing": {"$ne": "x"}},
    {"filename": {"$gt": "f0.pdf"}, "flag": False},
]


@pytest.mark.parametrize("where", CASES)
def test_in_memory_filters_agree_with_sql_and_reference(
    con: duckdb.DuckDBPyConnection, where: dict[str, Any]
) -> None:
    got = _columns(con).allowed(_tree(where))
    assert got is not None
    assert list(got) == sorted(got)  # sorted keys, as the vector index wants them
    assert set(got.tolist()) == _sql(con, where) == _py(where)


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(["n", "tag", "page", "flag", "missing", "filename"]),
    st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin"]),
    st.one_of(
        st.integers(-1, 8),
        st.sampled_from(["a", "b", "x", "3", "f1.pdf"]),
        st.booleans(),
        st.none(),
    ),
)
def test_random_comparisons_agree(
    con: duckdb.DuckDBPyConnection, key: str, op: str, value: object
) -> None:
    where: dict[str, Any]
    if op in ("$in", "$nin"):
        where = {key: {op: [value]}}
    elif op in ("$gt", "$gte", "$lt", "$lte") and (value is None or isinstance(value, bool)):
        return  # refused by the parser
    else:
        where = {key: {op: value}}
    got = _columns(con).allowed(_tree(where))
    builtin_corner = key in ("filename", "page") and (
        isinstance(value, bool) or (key == "filename" and isinstance(value, int))
    )
    if builtin_corner:
        assert got is None  # SQL decides this corner (text comparison)
    else:
        assert got is not None and set(got.tolist()) == _sql(con, where)


def test_nested_values_and_added_at_are_left_to_sql() -> None:
    c = duckdb.connect()
    c.execute("CREATE TABLE t (key BIGINT, added_at TIMESTAMPTZ, metadata JSON)")
    c.execute(
        """INSERT INTO t VALUES (1, now(), '{"obj": {"a": 1}}'), (2, now(), '{"obj": "x"}')"""
    )

    def load(field: str) -> tuple[np.ndarray, Any]:
        sql, params = field_query("t", field)
        rows = c.execute(sql, params).fetchall()
        return np.array([r[0] for r in rows], np.int64), [r[1] for r in rows]

    cols = FilterColumns(load)
    assert cols.allowed(_tree({"obj": "x"})) is None
    assert cols.allowed(_tree({"added_at": {"$gt": "2000"}})) is None


def test_high_cardinality_fields_are_left_to_sql() -> None:
    n = MAX_DISTINCT + 10
    keys = np.arange(n, dtype=np.int64)
    cols = FilterColumns(lambda field: (keys, [json.dumps(i) for i in range(n)]))
    assert cols.allowed(_tree({"id": 5})) is None


def test_filtered_search_is_fresh_after_writes(tmp_path: Any, isolated_env: Any) -> None:
    with hybridkb.connect(tmp_path / "kb.duckdb", model="fake") as kb:
        coll = kb.create_collection("Notes")
        coll.add_texts(
            [f"lemur note {i}" for i in range(20)],
            ids=[f"d{i}" for i in range(20)],
            metadatas=[{"group": i % 4} for i in range(20)],
        )
        assert {h.document_id for h in coll.search("lemur", k=20, where={"group": 1})} == {
            "d1",
            "d5",
            "d9",
            "d13",
            "d17",
        }
        coll.add_texts(["lemur note new"], ids=["d99"], metadatas=[{"group": 1}])
        coll.delete("d5")
        got = {h.document_id for h in coll.search("lemur", k=20, where={"group": 1})}
        assert got == {"d1", "d9", "d13", "d17", "d99"}
        for mode in ("keyword", "vector", "hybrid", "filter"):
            assert {
                h.metadata["group"]
                for h in coll.search("lemur note", k=20, mode=mode, where={"group": 2})
            } == {2}
