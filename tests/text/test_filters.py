"""Filter parsing and compilation: SQL and the Python reference agree."""

from __future__ import annotations

from typing import Any

import duckdb
import pytest
from filter_tables import ROWS, filter_table, reference_keys, sql_keys
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridkb.errors import InvalidFilter
from hybridkb.text.filters import parse_filter


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    return filter_table(ROWS)


def _py(where: dict[str, Any]) -> set[int]:
    return reference_keys(ROWS, where)


def _sql(con: duckdb.DuckDBPyConnection, where: dict[str, Any]) -> set[int]:
    return sql_keys(con, where)


CASES = [
    {"n": 3},
    {"tag": "b"},
    {"flag": True},
    {"page": 2},
    {"page": {"$gte": 2, "$lt": 4}},
    {"page": None},
    {"tag": {"$in": ["a", "c"]}},
    {"tag": {"$nin": ["a"]}},
    {"n": {"$ne": 4}},
    {"$or": [{"n": 1}, {"filename": "f2.pdf"}]},
    {"$and": [{"tag": "a"}, {"n": {"$gt": 10}}]},
    {"odd key/~": 2},
    {"missing": "x"},
    {"missing": {"$ne": "x"}},
    {"filename": "f1.pdf", "n": {"$lte": 10}},
]


@pytest.mark.parametrize("where", CASES)
def test_sql_agrees_with_python_reference(
    con: duckdb.DuckDBPyConnection, where: dict[str, Any]
) -> None:
    assert _sql(con, where) == _py(where)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["n", "tag", "page", "flag", "missing"]),
    st.sampled_from(["$eq", "$ne", "$gt", "$lte", "$in"]),
    st.one_of(st.integers(-1, 30), st.sampled_from(["a", "b", "zz"])),
)
def test_random_comparisons_agree(
    con: duckdb.DuckDBPyConnection, key: str, op: str, value: object
) -> None:
    arg = [value] if op == "$in" else value
    where = {key: {op: arg}}
    assert _sql(con, where) == _py(where)


@pytest.mark.parametrize(
    "bad",
    [
        {"a": {"$regex": "x"}},
        {"$not": {}},
        {"$and": []},
        {"a": {"$in": []}},
        {"a": [1]},
        {"a": {"$gt": None}},
        [],
        "{x",
    ],
)
def test_malformed_filters_raise_invalid_filter(bad: object) -> None:
    with pytest.raises(InvalidFilter):
        parse_filter(bad)  # type: ignore[arg-type]


def test_empty_filter_means_no_filter() -> None:
    assert parse_filter(None) is None and parse_filter({}) is None and parse_filter("") is None
