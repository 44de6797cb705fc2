"""A collection's sources and file states in DuckDB (two catalog tables, one row each).

Both are keyed by collection id, so they live beside the catalog rather than in a
collection's own tables: a migration creates them once for every collection.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

from ..base import CollectionRecord, FileState, SourceRecord
from ..boundary import driver_errors
from ..records import source_options, source_record
from .bulk import json_payload, json_rows_sql
from .connection import translate
from .engine import Engine
from .rows import SQL_ID_LIST, json_list
from .schema import FILE_STATES, SOURCES


@driver_errors(translate)
class DuckDBSources:
    """The source and file-state methods of the Storage protocol over one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._tables_seen = False
        self._synced_seen = False

    def _has_tables(self) -> bool:
        """False for a file of an older schema opened read-only (not migrated): it has
        no sources yet, and reading them must not fail (``describe`` reads them)."""
        if not self._tables_seen:
            rows = self.engine.query(
                "SELECT 1 FROM duckdb_tables() WHERE table_name = ?", [FILE_STATES]
            )
            self._tables_seen = bool(rows)
        return self._tables_seen

    def _synced_time(self) -> str:
        """The select-list entry of a source's last sync: NULL in a file of an older
        schema opened read-only (its sources table has no such column yet)."""
        if not self._synced_seen:
            rows = self.engine.query(
                "SELECT 1 FROM duckdb_columns() WHERE table_name = ? AND column_name = 'synced_at'",
                [SOURCES],
            )
            self._synced_seen = bool(rows)
        return "synced_at::VARCHAR" if self._synced_seen else "NULL"

    def put_source(self, coll: CollectionRecord, source: SourceRecord) -> None:
        def put(con: duckdb.DuckDBPyConnection) -> None:
            con.execute(
                f"INSERT OR REPLACE INTO {SOURCES} (collection_id, path, options) VALUES (?, ?, ?)",
                [coll.id, source.path, source_options(source)],
            )

        self.engine.transaction(put)

    def list_sources(self, coll: CollectionRecord) -> list[SourceRecord]:
        if not self._has_tables():
            return []
        rows = self.engine.query(
            f"SELECT path, options, added_at::VARCHAR, {self._synced_time()} FROM {SOURCES}"
            " WHERE collection_id = ? ORDER BY path",
            [coll.id],
        )
        return [source_record(*r) for r in rows]

    def mark_synced(self, coll: CollectionRecord, paths: Sequence[str]) -> None:
        if not paths:
            return

        def mark(con: duckdb.DuckDBPyConnection) -> None:
            for path in paths:  # a collection follows a few sources; each path as stored
                con.execute(
                    f"UPDATE {SOURCES} SET synced_at = current_timestamp"
                    " WHERE collection_id = ? AND path = ?",
                    [coll.id, path],
                )

        self.engine.transaction(mark)

    def delete_source(self, coll: CollectionRecord, path: str) -> bool:
        def delete(con: duckdb.DuckDBPyConnection) -> bool:
            found = con.execute(
                f"DELETE FROM {SOURCES} WHERE collection_id = ? AND path = ? RETURNING path",
                [coll.id, path],
            ).fetchall()
            return bool(found)

        return self.engine.transaction(delete)

    def file_states(self, coll: CollectionRecord) -> dict[str, FileState]:
        if not self._has_tables():
            return {}
        rows = self.engine.query(
            f"SELECT document_id, path, size, mtime_ns, content_hash FROM {FILE_STATES}"
            " WHERE collection_id = ?",
            [coll.id],
        )
        return {r[0]: FileState(r[0], r[1], int(r[2]), int(r[3]), r[4]) for r in rows}

    def put_file_states(self, coll: CollectionRecord, states: Sequence[FileState]) -> None:
        if not states:
            return
        payload = json_payload(
            {
                "document_id": [s.document_id for s in states],
                "path": [s.path for s in states],
                "size": [s.size for s in states],
                "mtime_ns": [s.mtime_ns for s in states],
                "content_hash": [s.content_hash for s in states],
            }
        )
        rows = json_rows_sql(
            (("document_id", "VARCHAR"), ("path", "VARCHAR"), ("size", "BIGINT"),
             ("mtime_ns", "BIGINT"), ("content_hash", "VARCHAR"))
        )  # fmt: skip

        def put(con: duckdb.DuckDBPyConnection) -> None:
            # Last state wins for an id given twice (a file seen twice in one call).
            con.execute(
                f"INSERT OR REPLACE INTO {FILE_STATES} SELECT ?, document_id,"
                " last(path), last(size), last(mtime_ns), last(content_hash)"
                f" FROM {rows} GROUP BY document_id",
                [coll.id, payload],
            )

        self.engine.transaction(put)

    def delete_file_states(self, coll: CollectionRecord, document_ids: Sequence[str]) -> None:
        if not document_ids:
            return

        def delete(con: duckdb.DuckDBPyConnection) -> None:
            con.execute(
                f"DELETE FROM {FILE_STATES} WHERE collection_id = ? AND document_id IN"
                f" {SQL_ID_LIST}",
                [coll.id, json_list(document_ids)],
            )

        self.engine.transaction(delete)


def drop_sources(con: duckdb.DuckDBPyConnection, collection_id: int) -> None:
    """Forget a dropped collection's sources and states (inside the drop's transaction)."""
    con.execute(f"DELETE FROM {SOURCES} WHERE collection_id = ?", [collection_id])
    con.execute(f"DELETE FROM {FILE_STATES} WHERE collection_id = ?", [collection_id])
