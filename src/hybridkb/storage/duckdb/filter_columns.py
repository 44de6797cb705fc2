"""Metadata filters evaluated in memory over dictionary-encoded columns.

A filter compiled to SQL scans every chunk row and parses its JSON metadata: 13 ms
at 100k chunks, and a hybrid search runs it once per leg. Here each field a filter
names is read once into (sorted keys, int32 codes, distinct values); a comparison is
decided once per distinct value with :func:`hybridkb.text.filters.matches` (the reference
semantics) and spread over the rows with a lookup table, so a filter costs a few
numpy operations. Fields with too many distinct values, non-scalar JSON values or
``added_at`` (whose text form differs from SQL's) are left to SQL: ``allowed``
returns None for them. Columns are derived data: the backend drops them on every
write to the collection.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...text.filters import (
    BUILTIN_FIELDS,
    NUMERIC_FIELDS,
    And,
    Cmp,
    Filter,
    Or,
    json_pointer,
    matches,
)

# Above this many distinct values, deciding each one in Python costs more than SQL.
MAX_DISTINCT = 4096
# Fields kept per collection (each is an int32 per chunk plus its distinct values).
MAX_FIELDS = 16
_MISSING = object()
_SQL_ONLY = frozenset({"added_at"})


@dataclass
class Column:
    codes: np.ndarray  # int32 per chunk, aligned with FilterColumns.keys
    values: list[Any]  # decoded value per code; _MISSING for absent/NULL


class _Unsupported(Exception):
    """The filter needs SQL (reason in the message, for debugging)."""


# A loader gives (keys, raw values) for one field: JSON text for user metadata keys,
# the column's value for built-in fields; None where the chunk has no value.
FieldLoader = Callable[[str], "tuple[np.ndarray, Sequence[Any]]"]


def field_query(table: str, field: str) -> tuple[str, list[Any]]:
    """SQL (and params) reading ``key`` and one field's raw value ``v`` from a chunks table."""
    if field in BUILTIN_FIELDS:
        return f"SELECT key, {BUILTIN_FIELDS[field]} AS v FROM {table}", []
    return f"SELECT key, CAST(json_extract(metadata, ?) AS VARCHAR) AS v FROM {table}", [
        json_pointer(field)
    ]


class FilterColumns:
    """The filterable fields of one collection, loaded on first use."""

    def __init__(self, load: FieldLoader) -> None:
        self._load = load
        self.keys: np.ndarray | None = None  # sorted chunk keys
        self._columns: dict[str, Column | None] = {}  # None: field needs SQL
        self._lock = threading.Lock()

    def allowed(self, node: Filter) -> np.ndarray | None:
        """Sorted keys of the chunks that pass ``node``, or None when SQL must decide."""
        try:
            mask = self._mask(node)
        except _Unsupported:
            return None
        assert self.keys is not None
        return np.asarray(self.keys[mask])

    def _mask(self, node: Filter) -> np.ndarray:
        if isinstance(node, And):
            masks = [self._mask(n) for n in node.items]
            return np.logical_and.reduce(masks) if len(masks) > 1 else masks[0]
        if isinstance(node, Or):
            masks = [self._mask(n) for n in node.items]
            return np.logical_or.reduce(masks) if len(masks) > 1 else masks[0]
        return self._compare(node)

    def _compare(self, cmp: Cmp) -> np.ndarray:
        if cmp.key in BUILTIN_FIELDS:
            values = cmp.value if isinstance(cmp.value, tuple) else (cmp.value,)
            text = cmp.key not in NUMERIC_FIELDS
            if any(isinstance(v, bool) or (text and isinstance(v, (int, float))) for v in values):
                # SQL compares a built-in column with a boolean, or a text column with a
                # number, in its own way (matches() does not); keep SQL's answer there.
                raise _Unsupported(cmp.key)
        column = self._column(cmp.key)
        lut = np.fromiter(
            (matches(cmp, {} if v is _MISSING else {cmp.key: v}) for v in column.values),
            dtype=bool,
            count=len(column.values),
        )
        return np.asarray(lut[column.codes])

    def _column(self, field: str) -> Column:
        if field in _SQL_ONLY:
            raise _Unsupported(field)
        with self._lock:
            if field not in self._columns:
                if len(self._columns) >= MAX_FIELDS:
                    self._columns.pop(next(iter(self._columns)))
                self._columns[field] = self._read(field)
            column = self._columns[field]
        if column is None:
            raise _Unsupported(field)
        return column

    def _read(self, field: str) -> Column | None:
        keys, raw = self._load(field)
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        if self.keys is None:
            self.keys = keys
        elif not np.array_equal(self.keys, keys):
            # The rows changed under us (the backend drops this object on writes): give up.
            return None
        # Dictionary-encode: one dict lookup per chunk (a few ms at 100k chunks).
        code_of: dict[Any, int] = {}
        raw_codes = np.fromiter(
            (-1 if v is None else code_of.setdefault(v, len(code_of)) for v in raw),
            dtype=np.int32,
            count=len(raw),
        )
        if len(code_of) > MAX_DISTINCT:
            return None
        dictionary = list(code_of)
        builtin = field in BUILTIN_FIELDS
        values = [_decode(v, builtin) for v in dictionary] + [_MISSING]
        if any(v is not _MISSING and not isinstance(v, (str, int, float, bool)) for v in values):
            return None  # nested JSON: SQL compares its text, matches() does not
        raw_codes[raw_codes < 0] = len(dictionary)  # absent: the _MISSING slot
        codes = raw_codes[order]
        return Column(codes, values)


def _decode(raw: Any, builtin: bool) -> Any:
    if raw is None:
        return _MISSING
    if builtin:
        return raw
    value = json.loads(raw)
    return _MISSING if value is None else value
