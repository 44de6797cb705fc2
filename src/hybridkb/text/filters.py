"""Metadata filters: parse the JSON form once, compile to SQL per dialect.

Accepted forms (keys are built-in chunk fields or user metadata keys)::

    {"key": value}                       equality
    {"key": {"$in": [..]}} / {"$nin": [..]}
    {"key": {"$ne": v}}                  differs or is missing
    {"page": {"$gte": 3, "$lte": 5}}     $gt $gte $lt $lte
    {"$and": [f, ...]}, {"$or": [f, ...]}
    several keys in one object           implicit $and

Values only ever travel as bound parameters; keys are looked up in a fixed column
map or passed as a JSON-pointer parameter, so no user text is spliced into SQL.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidFilter
from ..limits import MAX_FILTER_CHARS, MAX_FILTER_NODES, MAX_JSON_DEPTH, check_value, parse_json

# Built-in chunk fields and their column names in the chunks tables.
BUILTIN_FIELDS: dict[str, str] = {
    "filename": "filename",
    "path": "path",
    "document_id": "document_id",
    "chunk_id": "chunk_id",
    "page": "page",
    "section": "section",
    "chunk_index": "chunk_index",
    "char_start": "char_start",
    "char_end": "char_end",
    "content_hash": "content_hash",
    "added_at": "added_at",
    "language": "language",
}
NUMERIC_FIELDS = {"page", "chunk_index", "char_start", "char_end"}
# The built-in fields a document has (its catalog row's columns, named as in the chunks
# tables): a documents listing filters on these and the metadata, never on a passage's.
DOCUMENT_FIELDS = ("filename", "path", "document_id", "content_hash", "added_at", "language")

# The reference people and agents read (`hybridkb search --help`, the README, the
# search_kb tool): one source, rendered by filter_reference().
OPERATORS: dict[str, str] = {
    "$eq": "equals (the same as a bare value)",
    "$ne": "differs, or the field is missing",
    "$gt": "greater than (numbers; text compares as text)",
    "$gte": "greater than or equal",
    "$lt": "less than",
    "$lte": "less than or equal",
    "$in": "equals one of a list",
    "$nin": "equals none of a list (or the field is missing)",
}
COMBINATORS: dict[str, str] = {
    "$and": "every filter of a list holds (several keys in one object do the same)",
    "$or": "at least one filter of a list holds",
}
FIELDS: dict[str, str] = {
    "filename": 'the file\'s name, e.g. "2023-return.pdf" (null for texts)',
    "path": "the file's absolute path",
    "page": "PDF page, slide or spreadsheet row, from 1 (null where a format has none)",
    "section": 'heading path, e.g. "Guide > Install"; the sheet name for spreadsheet rows',
    "language": 'ISO 639-1 code detected per document, e.g. "en"',
    "added_at": 'when it was added, as text "YYYY-MM-DD HH:MM:SS": compare with a date',
    "document_id": "the id add and search print",
    "chunk_id": "one passage's id",
    "chunk_index": "a passage's position in its document, from 0",
}
FILTER_EXAMPLES: tuple[str, ...] = (
    '{"page": 3}',
    '{"filename": "2023-return.pdf", "page": {"$gte": 2, "$lte": 4}}',
    '{"added_at": {"$gte": "2024-01-01", "$lt": "2025-01-01"}}',
    '{"year": 2024}',
    '{"$or": [{"tag": "hr"}, {"language": {"$in": ["de", "fr"]}}]}',
)
_OPS = set(OPERATORS)
Scalar = str | int | float | bool | None


@dataclass(frozen=True)
class Cmp:
    """One comparison: ``key`` (a built-in field or metadata key) ``op`` (``$eq``, ``$gt``...)
    ``value``."""

    key: str
    op: str
    value: Any


@dataclass(frozen=True)
class And:
    """Every item holds (``$and``, or several keys in one object)."""

    items: tuple[Filter, ...]


@dataclass(frozen=True)
class Or:
    """At least one item holds (``$or``)."""

    items: tuple[Filter, ...]


Filter = Cmp | And | Or


def parse_filter(where: Mapping[str, Any] | str | None) -> Filter | None:
    """Validate a filter (dict or JSON text) and return its tree; None/{} means no filter."""
    if where is None or where == "" or where == {}:
        return None
    if isinstance(where, str):
        where = parse_json(where, what="where", max_chars=MAX_FILTER_CHARS, error=InvalidFilter)
    # Bounded before _parse recurses into it (a filter 1,000 deep is refused, not a crash).
    check_value(
        where,
        what="where",
        max_depth=MAX_JSON_DEPTH,
        max_nodes=MAX_FILTER_NODES,
        error=InvalidFilter,
    )
    return _parse(where, "where")


def _parse(node: Any, at: str) -> Filter:
    if not isinstance(node, Mapping) or not node:
        raise InvalidFilter(f"{at}: expected a non-empty object, got {json.dumps(node)[:80]}")
    parts: list[Filter] = []
    for key, value in node.items():
        if key in ("$and", "$or"):
            if not isinstance(value, list) or not value:
                raise InvalidFilter(f"{at}.{key}: expected a non-empty list of filters")
            items = tuple(_parse(v, f"{at}.{key}[{i}]") for i, v in enumerate(value))
            parts.append(And(items) if key == "$and" else Or(items))
        elif key.startswith("$"):
            raise InvalidFilter(
                f"{at}: unknown operator {key!r}; at this level use $and or $or, and put "
                f'{", ".join(OPERATORS)} inside a field, e.g. {{"page": {{"$gte": 3}}}}'
            )
        else:
            parts.extend(_parse_field(key, value, f"{at}.{key}"))
    return parts[0] if len(parts) == 1 else And(tuple(parts))


def parse_document_filter(where: Mapping[str, Any] | str | None) -> Filter | None:
    """:func:`parse_filter` for a documents listing: a passage's own fields (``page``,
    ``section``, ``chunk_index``...) are refused, as no document has them.

    Raises:
        InvalidFilter: The filter is malformed or names a passage's field.
    """
    node = parse_filter(where)
    passage_only = sorted(named_fields(node) & (set(BUILTIN_FIELDS) - set(DOCUMENT_FIELDS)))
    if passage_only:
        raise InvalidFilter(
            f"where: documents have no field {passage_only[0]!r} (a passage's field; filter "
            f"searches on it); a document's fields: {', '.join(DOCUMENT_FIELDS)} and its metadata"
        )
    return node


def named_fields(node: Filter | None) -> set[str]:
    """The field names a parsed filter compares."""
    if node is None:
        return set()
    if isinstance(node, Cmp):
        return {node.key}
    return set().union(*(named_fields(n) for n in node.items))


def filter_reference(indent: str = "  ") -> str:
    """The filter reference as plain text (one line per operator, field and example)."""
    width = max(len(k) for k in (*OPERATORS, *COMBINATORS, *FIELDS)) + 2
    lines = ['Operators (inside a field: {"page": {"$gte": 3}}):']
    lines += [f"{indent}{op:<{width}}{text}" for op, text in OPERATORS.items()]
    lines.append("Combining filters (at the top level):")
    lines += [f"{indent}{op:<{width}}{text}" for op, text in COMBINATORS.items()]
    lines.append("Built-in fields (every passage has them):")
    lines += [f"{indent}{name:<{width}}{text}" for name, text in FIELDS.items()]
    lines.append(
        "Any other name is a metadata field, given at add time (add --metadata,"
        " add_texts(metadatas=...)); a field no document has is reported as a warning."
    )
    lines.append("Examples:")
    lines += [f"{indent}{example}" for example in FILTER_EXAMPLES]
    return "\n".join(lines)


def _check_scalar(value: Any, at: str) -> Scalar:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise InvalidFilter(f"{at}: values must be strings, numbers, booleans or null")


def _parse_field(key: str, value: Any, at: str) -> list[Filter]:
    if not isinstance(value, Mapping):
        return [Cmp(key, "$eq", _check_scalar(value, at))]
    if not value:
        raise InvalidFilter(f"{at}: empty operator object")
    out: list[Filter] = []
    for op, arg in value.items():
        if op not in _OPS:
            raise InvalidFilter(
                f"{at}: unknown operator {op!r}; use one of {', '.join(sorted(_OPS))}"
            )
        if op in ("$in", "$nin"):
            if not isinstance(arg, list) or not arg:
                raise InvalidFilter(f"{at}.{op}: expected a non-empty list")
            out.append(Cmp(key, op, tuple(_check_scalar(v, f"{at}.{op}") for v in arg)))
        else:
            scalar = _check_scalar(arg, f"{at}.{op}")
            if op in ("$gt", "$gte", "$lt", "$lte") and (
                scalar is None or isinstance(scalar, bool)
            ):
                raise InvalidFilter(f"{at}.{op}: expected a number or a string")
            out.append(Cmp(key, op, scalar))
    return out


# --- SQL compilation -------------------------------------------------------------


@dataclass(frozen=True)
class Dialect:
    """How a SQL backend spells what a filter needs: the placeholder and the JSON and cast
    expressions over the ``metadata`` column."""

    placeholder: str  # "?" (DuckDB) or "%s" (psycopg)
    json_text: Callable[[str], str]  # SQL expr giving a user key's value as text; key is a param
    to_double: Callable[[str], str]
    not_boolean: Callable[[str], str]  # SQL true when the user key's JSON value is not a boolean


def json_pointer(key: str) -> str:
    """A metadata key as a JSON pointer (RFC 6901, ``~`` and ``/`` escaped), bound as a param."""
    return "/" + key.replace("~", "~0").replace("/", "~1")


DUCKDB = Dialect(
    placeholder="?",
    json_text=lambda ph: f"json_extract_string(metadata, {ph})",
    to_double=lambda expr: f"TRY_CAST({expr} AS DOUBLE)",
    not_boolean=lambda ph: f"coalesce(json_type(metadata, {ph}) <> 'BOOLEAN', TRUE)",
)
POSTGRES = Dialect(
    placeholder="%s",
    json_text=lambda ph: f"(metadata #>> {ph}::text[])",
    # `expr` holds a placeholder, so it may appear only once; a strict number
    # pattern keeps text such as "e" or "-" from failing the cast (TRY_CAST's NULL).
    to_double=lambda expr: (
        "(SELECT CASE WHEN v ~ '^\\s*[-+]?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][-+]?[0-9]+)?\\s*$'"
        f" THEN v::double precision END FROM (VALUES ({expr})) AS hkb_num(v))"
    ),
    not_boolean=lambda ph: f"coalesce(jsonb_typeof(metadata #> {ph}::text[]) <> 'boolean', TRUE)",
)

_SQL_OPS = {"$eq": "=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def to_sql(node: Filter, dialect: Dialect = DUCKDB) -> tuple[str, list[Any]]:
    """Compile a filter to a boolean SQL expression over a chunks table + its params."""
    params: list[Any] = []
    sql = _compile(node, dialect, params)
    return sql, params


def _key_param(key: str, dialect: Dialect) -> Any:
    # Postgres #>> takes a text[] path; DuckDB takes a JSON pointer.
    return [key] if dialect is POSTGRES else json_pointer(key)


def _compile(node: Filter, d: Dialect, params: list[Any]) -> str:
    if isinstance(node, And):
        return "(" + " AND ".join(_compile(n, d, params) for n in node.items) + ")"
    if isinstance(node, Or):
        return "(" + " OR ".join(_compile(n, d, params) for n in node.items) + ")"
    if node.op in ("$in", "$nin"):
        ors = (
            "("
            + " OR ".join(_compile(Cmp(node.key, "$eq", v), d, params) for v in node.value)
            + ")"
        )
        # $nin: true when no listed value matches, including a missing key.
        return ors if node.op == "$in" else f"(NOT COALESCE({ors}, FALSE))"
    if node.op == "$ne":
        eq = _compile(Cmp(node.key, "$eq", node.value), d, params)
        return f"(NOT COALESCE({eq}, FALSE))"
    column = BUILTIN_FIELDS.get(node.key)
    if column is not None:
        return _compile_builtin(node, column, d, params)
    return _compile_metadata(node, d, params)


def _compile_builtin(node: Cmp, column: str, d: Dialect, params: list[Any]) -> str:
    """A comparison on a chunk table's own column: a number compares with a number
    column, anything else as text."""
    value = node.value
    if node.key == "added_at":
        column = f"CAST({column} AS VARCHAR)"
    if value is None:
        return f"({column} IS NULL)" if node.op == "$eq" else "FALSE"
    if node.key in NUMERIC_FIELDS and not isinstance(value, (int, float)):
        column = f"CAST({column} AS VARCHAR)"
        value = str(value)
    elif node.key not in NUMERIC_FIELDS and isinstance(value, (int, float)):
        value = str(value)
    params.append(value)
    return f"({column} {_SQL_OPS[node.op]} {d.placeholder})"


def _compile_metadata(node: Cmp, d: Dialect, params: list[Any]) -> str:
    """A comparison on a user metadata key: its JSON value read as text, as a number for
    a number, as JSON true/false for a boolean."""
    value = node.value
    params.append(_key_param(node.key, d))
    expr = d.json_text(d.placeholder)
    if value is None:
        return f"({expr} IS NULL)" if node.op == "$eq" else "FALSE"
    if isinstance(value, bool):
        params.append("true" if value else "false")
        return f"({expr} {_SQL_OPS[node.op]} {d.placeholder})"
    if isinstance(value, (int, float)):
        params.append(float(value))
        return f"({d.to_double(expr)} {_SQL_OPS[node.op]} {d.placeholder})"
    # Strings never match a boolean (JSON true/false would compare as text otherwise).
    params.append(value)
    params.append(_key_param(node.key, d))
    return f"({expr} {_SQL_OPS[node.op]} {d.placeholder} AND {d.not_boolean(d.placeholder)})"


# Only the one comparison asked for is made (text and numbers order alike; a TypeError,
# e.g. a list against a number, is no match).
_ORDERINGS: dict[str, Callable[[Any, Any], Any]] = {
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}


def matches(node: Filter | None, row: Mapping[str, Any]) -> bool:
    """Evaluate a filter against one chunk's fields in Python (reference semantics for tests)."""
    if node is None:
        return True
    if isinstance(node, And):
        return all(matches(n, row) for n in node.items)
    if isinstance(node, Or):
        return any(matches(n, row) for n in node.items)
    # A field stored as null counts as missing (as SQL's NULL does).
    actual = row.get(node.key)
    if node.op == "$in":
        return any(_value_matches("$eq", actual, v) for v in node.value)
    if node.op == "$nin":
        return not any(_value_matches("$eq", actual, v) for v in node.value)
    if node.op == "$ne":
        return not _value_matches("$eq", actual, node.value)
    return _value_matches(node.op, actual, node.value)


def _value_matches(op: str, actual: Any, value: Any) -> bool:
    """One comparison (``$eq``, ``$gt``...) of a field's value, None when missing, with a
    filter's value: a number compares with a number, a boolean only with a boolean."""
    if value is None:
        return op == "$eq" and actual is None
    if actual is None:
        return False
    a, b = actual, value
    if isinstance(b, bool) or isinstance(a, bool):
        # Booleans only ever equal booleans (stored as JSON true/false).
        if not (isinstance(a, bool) and isinstance(b, bool)) or op != "$eq":
            return False
        return a == b
    elif isinstance(b, (int, float)) and not isinstance(a, (int, float)):
        try:
            a = float(a)
        except (TypeError, ValueError):
            return False
    elif isinstance(a, (int, float)) and isinstance(b, str):
        a = str(a)
    if op == "$eq":
        return bool(a == b)
    try:
        return bool(_ORDERINGS[op](a, b))
    except TypeError:
        return False
