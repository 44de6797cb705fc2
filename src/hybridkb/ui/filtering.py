"""The filter builder of the search and collection pages: rows of (field, operator,
value) turned into the engine's ``where`` filter, the fields a collection has, and a
documents page filtered by metadata.

Nothing here evaluates a filter of its own: a search and a documents listing pass
``where`` to the engine, which checks it and has the database run it.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..agents.filter_check import filter_warnings
from ..errors import InvalidFilter
from ..text.filters import BUILTIN_FIELDS, DOCUMENT_FIELDS, OPERATORS, named_fields, parse_filter

if TYPE_CHECKING:
    from .. import CollectionAPI, KnowledgeBaseAPI

__all__ = [
    "BUILDER_ROWS",
    "OPERATOR_LABELS",
    "DocumentsPage",
    "FilterRow",
    "build_where",
    "checked_where",
    "filtered_documents",
    "metadata_keys",
    "rows_from",
]

BUILDER_ROWS = 2  # rows the form shows; more are added by the page's script
OPERATOR_LABELS: dict[str, str] = {
    "$eq": "=",
    "$ne": "≠",
    "$gt": ">",
    "$gte": "≥",
    "$lt": "<",
    "$lte": "≤",
    "$in": "one of (a, b)",
}
FIELDS_SCANNED = 1000  # documents read to list metadata fields


@dataclass(frozen=True)
class FilterRow:
    """One condition of the builder, as the form sent it."""

    field: str
    op: str
    value: str


def rows_from(params: Mapping[str, str], count: int = 12) -> list[FilterRow]:
    """The builder's rows from a query (``f0``/``o0``/``v0``, ``f1``...), empty ones left out."""
    rows = []
    for i in range(count):
        field = params.get(f"f{i}", "").strip()
        if field:
            rows.append(FilterRow(field, params.get(f"o{i}", "$eq"), params.get(f"v{i}", "")))
    return rows


def _value(text: str) -> Any:
    """A typed value: a number, true/false/null as JSON reads them, else the text."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, int | float | bool) or value is None else text


def build_where(rows: Iterable[FilterRow], raw: str = "") -> dict[str, Any] | None:
    """The ``where`` filter of the builder's rows (all must hold) and of the raw JSON
    box, or None when both are empty.

    Raises:
        InvalidFilter: An unknown operator, or raw text that is not a JSON filter.
    """
    parts: list[dict[str, Any]] = []
    for row in rows:
        if row.op not in OPERATOR_LABELS:
            raise InvalidFilter(
                f"where: unknown operator {row.op!r}; use one of {', '.join(OPERATOR_LABELS)}"
            )
        if row.op == "$in":
            value: Any = [_value(v.strip()) for v in row.value.split(",") if v.strip()]
        else:
            value = _value(row.value)
        parts.append({row.field: value if row.op == "$eq" else {row.op: value}})
    if raw.strip():
        parsed = parse_filter(raw)  # InvalidFilter names what is wrong
        if parsed is not None:
            parts.append(json.loads(raw))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else {"$and": parts}


def checked_where(
    kb: KnowledgeBaseAPI,
    where: dict[str, Any] | None,
    collections: list[str] | None,
    known: Iterable[str] = (),
) -> list[str]:
    """The filter checked (InvalidFilter when malformed) and the warnings the other doors
    give for it: a field no document has, named with the fields there are. Fields in
    ``known`` (built-in, or seen by :func:`metadata_keys`) need no scan."""
    if where is None:
        return []
    named = named_fields(parse_filter(where))
    if named <= set(BUILTIN_FIELDS) | set(known):
        return []
    return filter_warnings(kb, where, collections)


_KEYS_CACHED = 64
_keys: OrderedDict[tuple[str, str, str, int, int], list[str]] = OrderedDict()
_keys_lock = threading.Lock()


def metadata_keys(coll: CollectionAPI) -> list[str]:
    """The metadata keys of the collection's first documents, sorted: the fields the
    builder offers beside the built-in ones (a key only later documents have can still
    be typed in the JSON box). Kept per write generation of the collection, so a page
    reads its documents once between writes, never a stale list after one."""
    record = coll.record
    key = (coll.kb.settings.db, coll.kb.workspace, coll.name, record.id, record.generation)
    with _keys_lock:
        if key in _keys:
            _keys.move_to_end(key)
            return _keys[key]
    found: set[str] = set()
    for doc in coll.documents(limit=FIELDS_SCANNED):
        found.update(doc.metadata)
    keys = sorted(found - set(BUILTIN_FIELDS) - set(DOCUMENT_FIELDS))
    with _keys_lock:
        _keys[key] = keys
        while len(_keys) > _KEYS_CACHED:
            _keys.popitem(last=False)
    return keys


@dataclass
class DocumentsPage:
    """One page of a collection's documents, filtered or not."""

    documents: list[Any]
    offset: int
    next_offset: int | None


def filtered_documents(
    coll: CollectionAPI, where: dict[str, Any] | None, *, offset: int, limit: int
) -> DocumentsPage:
    """``limit`` documents from ``offset`` that match ``where`` (in the collection's
    order), the engine's filtered listing: the database decides, and ``offset``
    counts matching documents."""
    docs = coll.documents(limit=limit + 1, offset=offset, where=where)
    more = len(docs) > limit
    return DocumentsPage(docs[:limit], offset, offset + limit if more else None)


def operator_help() -> dict[str, str]:
    """What each operator means (the filters module's own reference)."""
    return {op: OPERATORS.get(op, "") for op in OPERATOR_LABELS}
