"""Rows passed between the core and a backend as plain columns (no Arrow needed).

The storage protocol returns whole tables in a few places (the agent SQL's rows, the
graph's rows): a :class:`Table` is their backend-neutral form, named columns of Python
values with a declared SQL type each (DuckDB's type names: the SQL tool's engine is
DuckDB). Timestamps travel as text DuckDB can cast (``2024-05-01 12:00:00.5+00``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

# (column name, SQL type) pairs, in SELECT order.
Schema = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Table:
    """Named, typed columns of equal length (column ``i`` is ``columns[i]``)."""

    schema: Schema
    columns: tuple[list[Any], ...]

    @classmethod
    def from_rows(cls, schema: Schema, rows: Iterable[Sequence[Any]]) -> Table:
        """A table of ``schema`` from fetched rows (values in the schema's column order)."""
        rows = list(rows)
        if rows and len(rows[0]) != len(schema):
            raise ValueError(f"rows have {len(rows[0])} values, the schema {len(schema)} columns")
        columns = tuple(list(col) for col in zip(*rows, strict=True)) if rows else ()
        return cls(schema, columns or tuple([] for _ in schema))

    @property
    def column_names(self) -> list[str]:
        """The column names, in order."""
        return [name for name, _ in self.schema]

    @property
    def num_rows(self) -> int:
        """How many rows the table holds."""
        return len(self.columns[0]) if self.columns else 0

    def column(self, name: str) -> list[Any]:
        """The values of one column."""
        return self.columns[self.column_names.index(name)]

    def to_pylist(self) -> list[dict[str, Any]]:
        """One dict (column name -> value) per row."""
        names = self.column_names
        return [dict(zip(names, row, strict=True)) for row in zip(*self.columns, strict=True)]


_S, _I32, _I64, _TS = "VARCHAR", "INTEGER", "BIGINT", "TIMESTAMPTZ"

# Storage.export_tables: the rows the agent SQL reads, the same on every backend.
EXPORT_DOCUMENTS: Schema = (
    ("document_id", _S), ("filename", _S), ("path", _S), ("source", _S), ("metadata", _S),
    ("language", _S), ("bytes", _I64), ("chunk_count", _I32), ("added_at", _TS),
)  # fmt: skip
EXPORT_CHUNKS: Schema = (
    ("document_id", _S), ("chunk_id", _S), ("chunk_index", _I32), ("text", _S), ("page", _I32),
    ("section", _S), ("char_start", _I32), ("char_end", _I32), ("language", _S),
    ("filename", _S), ("path", _S), ("metadata", _S), ("added_at", _TS),
)  # fmt: skip

# GraphSQL.load (a workspace's graph) and GraphSQL.rows_of_collection (for copying).
GRAPH_NODES: Schema = (
    ("id", _S), ("type", _S), ("properties", _S), ("collection_id", _I64), ("document_id", _S),
)  # fmt: skip
GRAPH_EDGES: Schema = (
    ("source", _S), ("target", _S), ("type", _S), ("weight", "DOUBLE"), ("properties", _S),
    ("collection_id", _I64), ("document_id", _S),
)  # fmt: skip
COLLECTION_NODES: Schema = (
    ("id", _S), ("type", _S), ("properties", _S), ("document_id", _S), ("chunk_id", _S),
)  # fmt: skip
COLLECTION_EDGES: Schema = (
    ("source", _S), ("target", _S), ("type", _S), ("weight", "DOUBLE"), ("properties", _S),
    ("document_id", _S), ("chunk_id", _S),
)  # fmt: skip
